# SPDX-License-Identifier: Apache-2.0
"""A default group bound to a device (init_process_group(device_id=...)): torch then makes
every new_group by splitting the default group's papccl communicator (split_from, and
perform_nocolor_split on the ranks outside the new group), and split_group splits it too.
Also: c10d's sequence numbers count the collectives only, as NCCL's process group does.

Run by launch.py with 2 and 4 ranks.
"""
import torch
import torch.distributed as dist

from common import RANK, WORLD, check, init, run


def test_new_group_by_split():
    init(device_id=torch.device("cpu", 0))
    check(dist.group.WORLD.bound_device_id == torch.device("cpu", 0), "default group bound to cpu")
    evens = list(range(0, WORLD, 2))
    g = dist.new_group(evens)  # every rank takes part: the odd ones split without a color
    t = torch.full((9,), float(RANK + 1))
    if RANK in evens:
        dist.all_reduce(t, group=g)
        check(torch.equal(t, torch.full((9,), float(sum(r + 1 for r in evens)))),
              "allreduce on new_group(evens) made by split")
        check(dist.get_group_rank(g, RANK) == RANK // 2, "group rank in the split group")
    else:
        check(g == dist.GroupMember.NON_GROUP_MEMBER, "non-member gets NON_GROUP_MEMBER")
    # A second group after the first: the parent's communicator is still in step.
    g2 = dist.new_group(list(range(WORLD)))
    t = torch.full((3,), float(RANK))
    dist.all_reduce(t, group=g2)
    check(torch.equal(t, torch.full((3,), float(sum(range(WORLD))))), "allreduce on a second split")
    # split_group: each rank in exactly one part.
    halves = [list(range(0, WORLD // 2)), list(range(WORLD // 2, WORLD))] if WORLD >= 2 else [[0]]
    part = dist.split_group(split_ranks=halves)
    mine = halves[0] if RANK in halves[0] else halves[1]
    t = torch.full((4,), float(RANK))
    dist.all_reduce(t, group=part)
    check(torch.equal(t, torch.full((4,), float(sum(mine)))), "allreduce on split_group part")
    dist.all_reduce(t)
    # Each rank now holds its part's sum; over the world: each part's sum, once per member.
    expect = sum(len(h) * sum(h) for h in halves)
    check(torch.equal(t, torch.full((4,), float(expect))),
          "default group still works after the splits")


def test_sequence_numbers():
    pg = dist.group.WORLD
    s0 = pg._get_sequence_number_for_group()
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    check(pg._get_sequence_number_for_group() == s0 + 2, "two collectives advance the sequence by 2")
    if WORLD > 1:
        if RANK == 0:
            dist.send(t, 1)
        elif RANK == 1:
            dist.recv(t, 0)
        check(pg._get_sequence_number_for_group() == s0 + 2, "send and recv do not count")
    dist.barrier()


run([test_new_group_by_split, test_sequence_numbers])
