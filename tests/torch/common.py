# SPDX-License-Identifier: Apache-2.0
"""Helpers for the rank scripts of tests/torch (run by launch.py)."""
import os
import sys
import traceback

import torch
import torch.distributed as dist

import papccl.torch  # noqa: F401  (registers "papccl")

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))

_failures = []
_checks = [0]


def check(cond, what):
    _checks[0] += 1
    if not cond:
        _failures.append(what)
        print("FAIL rank %d: %s" % (RANK, what), flush=True)


def expect_error(fn, words, what):
    """fn() must raise an exception whose text holds every word of `words`."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        text = str(e)
        missing = [w for w in words if w not in text]
        check(not missing, "%s: error lacks %s: %s" % (what, missing, text.splitlines()[0]))
        return text
    check(False, "%s: no error raised" % what)
    return ""


def run(tests):
    """Runs each test(rank, world) in order; a raised exception is a failure of that test.
    Then destroys the default group (if any), as a program should before it exits, and exits
    with the result."""
    for t in tests:
        try:
            t()
        except Exception:  # noqa: BLE001
            _failures.append(t.__name__)
            print("FAIL rank %d: %s raised\n%s" % (RANK, t.__name__, traceback.format_exc()),
                  flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    print("rank %d: %d checks, %d failures" % (RANK, _checks[0], len(_failures)), flush=True)
    sys.exit(1 if _failures else 0)


def init(**kw):
    dist.init_process_group("papccl", init_method="env://", rank=RANK, world_size=WORLD, **kw)


def sgd_weight_sum(lr, momentum, steps):
    """How much one step's gradient moves the parameters after `steps` steps of SGD with
    momentum, summed over the steps: step k's gradient enters every later update with weight
    lr * momentum**j. A bound on what an error of e in every step's gradient does: e times it."""
    return lr * sum((1 - momentum ** (steps - k)) / (1 - momentum) for k in range(steps))
