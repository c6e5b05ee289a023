# SPDX-License-Identifier: Apache-2.0
"""papccl as a torch.distributed backend.

    import torch.distributed as dist
    import papccl.torch  # registers the backend "papccl"

    dist.init_process_group("papccl", init_method="env://")  # or tcp://, file://
    dist.all_reduce(t)
    print(papccl.torch.pap_stats())

Every rank makes its communicator from a unique id that rank 0 creates and publishes in the
group's c10d store (the store ``init_process_group`` or ``new_group`` gives the backend); the
key carries the group's name and how many papccl groups of that name this process has made,
so a re-initialised group never reads an old id.
"""
import collections
import datetime
import math
import os
import socket
import threading

import torch  # noqa: F401  (the real torch: this module's name is papccl.torch)
import torch.distributed as dist

from . import _papccl_torch as _C

BACKEND = "papccl"
ProcessGroupPapccl = _C.ProcessGroupPapccl

_generation = collections.Counter()
_generation_lock = threading.Lock()


def _timeout_ms(timeout):
    if timeout is None:
        timeout = datetime.timedelta(minutes=30)
    if isinstance(timeout, datetime.timedelta):
        ms = int(timeout.total_seconds() * 1000)
    else:
        ms = int(float(timeout) * 1000)
    if ms <= 0:
        raise ValueError("papccl: the group timeout must be positive, got %r" % (timeout,))
    return ms


def _create(opts, pg_options=None):
    """The backend's creator (torch.distributed's extended API): store, rank, size, timeout
    and the group's name come in ``opts``."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    # A new_group of a default group bound to a device (init_process_group(device_id=...)):
    # torch passes the parent as split_from and has the ranks outside the new group call the
    # parent's perform_nocolor_split, so the members split the parent too (papcclCommSplit
    # needs every rank of the parent; the ranks are the default group's, which are global).
    split_from = getattr(opts, "split_from", None)
    if isinstance(split_from, ProcessGroupPapccl):
        timeout_ms = _timeout_ms(opts.timeout)
        _default_papccl_timeout(timeout_ms)
        return split_from._split([int(r) for r in opts.global_ranks_in_group], timeout_ms)
    name = opts.group_id or "default"
    with _generation_lock:
        _generation[name] += 1
        key = "%s/%d" % (name, _generation[name])
    return new_backend(store, rank, size, opts.timeout, key)


def _default_papccl_timeout(timeout_ms):
    # papccl reads its own timeout (communicator creation, every wait) once per process:
    # unless the user chose one, it is the first group's. The watchdog of each group
    # bounds that group's operations by its own timeout.
    if not os.environ.get("PAPCCL_TIMEOUT_S"):
        os.environ["PAPCCL_TIMEOUT_S"] = str(max(1, math.ceil(timeout_ms / 1000)))


def new_backend(store, rank, size, timeout=None, key="default"):
    """A papccl backend (ProcessGroupPapccl) of ``size`` ranks whose communicator's unique id
    rank 0 publishes in ``store`` (a c10d Store) under ``key``, which every rank passes the
    same and no earlier group of that store used: what a runtime that builds its own process
    groups calls (papccl.torchft's reconfigurable group does). ``timeout``: a timedelta or
    seconds, bounding every operation (the group's watchdog aborts the communicator)."""
    if not isinstance(rank, int) or not isinstance(size, int) or not 0 <= rank < size:
        raise ValueError("papccl: rank %r is not in [0, size %r)" % (rank, size))
    timeout_ms = _timeout_ms(timeout)
    _default_papccl_timeout(timeout_ms)
    key = "papccl/uid/" + key
    if rank == 0:
        uid = _C.unique_id()
        store.set(key, uid)
    else:
        store.wait([key], datetime.timedelta(milliseconds=timeout_ms))
        uid = store.get(key)
    return ProcessGroupPapccl(bytes(uid), rank, size, timeout_ms)


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    # Per device type: "papccl" and "cpu:papccl,cuda:papccl" both reach this backend.
    devices = ["cpu", "cuda"] if _C.cuda else ["cpu"]
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=devices)


_register()


def _papccl_group(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupPapccl) and hasattr(pg, "_get_backend"):
        try:  # torch 2.x: the process group holds the backend per device
            pg = pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            pass
    if not isinstance(pg, ProcessGroupPapccl):
        raise TypeError("papccl: %r is not a papccl process group" % (pg,))
    return pg


def _store_reachable(store, timeout_s=1.0):
    """False when the group's store is a TCPStore whose server no longer answers (its host,
    usually rank 0, died); True otherwise."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    if not isinstance(store, dist.TCPStore):
        return True
    try:
        socket.create_connection((store.host, store.port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def pap_stats(group=None, last=100):
    """What papccl saw of the ranks' arrivals at this group's collectives, on this rank.

    Returns a dict:
      ``last``: the last collective: ``seq``, ``op``, ``algo`` (the plan papccl ran),
        ``order`` (group ranks in arrival order), ``lateness_us`` (per rank: its arrival
        minus the first one), ``skew_us`` (last minus first arrival), ``tail_us`` (this
        rank's completion minus the last arrival), ``late_rank``, ``complete`` (every
        arrival was seen), ``time_in_coll_us``, ``plan_wait_us``; None before any.
      ``window``: the last ``last`` collectives: ``ops``, per rank ``late_count`` (times
        last), ``mean_lateness_us`` and ``max_lateness_us``, the ``straggler`` (a rank last
        in more than half of them, else -1), ``mean_skew_us``, ``mean_tail_us``.
      ``total``: since the group was made (papcclCommGetPapStats): ``ops``, ``pap_ops``,
        ``late_count``, ``avg_lateness_us``, ``avg_skew_us``, ``max_skew_us``,
        ``avg_tail_us``, ``habitual_late_rank``, ``path_ops`` (ops by the path papccl
        chose: ``local``, ``board``, ``flat``, ``arena``, ``hier``, ``p2p``), ``last_path``
        and ``last_path_why`` (the last op's path and the reason), ...
      ``history``: the window's records (dicts as ``last``), oldest first.
    """
    pg = _papccl_group(group)
    if last < 1:
        raise ValueError("papccl pap_stats: last must be >= 1, got %r" % (last,))
    total = pg._pap_stats()
    hist = pg._arrival_history(int(last))
    n = total["nranks"]
    late = [0] * n
    lat_sum = [0.0] * n
    lat_max = [0.0] * n
    complete = [h for h in hist if h["complete"]]
    for h in complete:
        if 0 <= h["late_rank"] < n:
            late[h["late_rank"]] += 1
        for r, v in enumerate(h["lateness_us"][:n]):
            lat_sum[r] += v
            lat_max[r] = max(lat_max[r], v)
    k = len(complete)
    straggler = -1
    if k:
        top = max(range(n), key=lambda r: late[r])
        if late[top] * 2 > k:
            straggler = top
    window = {
        "ops": len(hist),
        "complete_ops": k,
        "late_count": late,
        "mean_lateness_us": [s / k if k else 0.0 for s in lat_sum],
        "max_lateness_us": lat_max,
        "straggler": straggler,
        "mean_skew_us": sum(h["skew_us"] for h in complete) / k if k else 0.0,
        "mean_tail_us": sum(h["tail_us"] for h in complete) / k if k else 0.0,
    }
    return {"last": hist[-1] if hist else None, "window": window, "total": total,
            "history": hist}


def abort(group=None, why="aborted by the user"):
    """Aborts the group's communicator: running and later operations of the group raise."""
    _papccl_group(group)._abort(why)



def shrink(group=None, exclude=(), abort=True):
    """A new group of this group's ranks that are not in ``exclude`` (ranks of ``group``),
    in their order: torch.distributed's ``shrink_group`` over papcclCommShrink, through the
    group's own communicator, with no store and no rendezvous (the store may have died with
    rank 0). Every rank not excluded calls it with the same list; excluded ranks do not.

    ``abort=True`` (SHRINK_ABORT, after a failure): this group's running and queued
    operations end with an error, and the group takes no more work. ``abort=False``
    (SHRINK_DEFAULT) on a healthy group: its queued work runs first.

    As with ``shrink_group``, shrinking the default group makes the new group the default
    (ranks renumbered 0..n-1) and destroys the other groups; the old group is released."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    _papccl_group(pg)
    try:
        exclude = sorted(set(int(r) for r in exclude))
    except (TypeError, ValueError):
        raise TypeError("papccl shrink: exclude must be a list of ranks, got %r" % (exclude,))
    me, n = pg.rank(), pg.size()
    if not exclude:
        raise ValueError("papccl shrink on rank %d: exclude is empty; name the ranks to leave out"
                         % me)
    bad = [r for r in exclude if not 0 <= r < n]
    if bad:
        raise ValueError("papccl shrink on rank %d: excluded rank %d is not in [0, %d)"
                         % (me, bad[0], n))
    if me in exclude:
        raise RuntimeError("papccl shrink on rank %d: this rank is in the exclusion list "
                           "(excluded ranks do not call shrink)" % me)
    c10d = dist.distributed_c10d
    flags = c10d.SHRINK_ABORT if abort else c10d.SHRINK_DEFAULT
    # torch's shrink_group gives the new group a clone of the old group's store, which
    # connects to the store's server: when that died with its host, the clone would wait
    # for the whole store timeout and fail after papccl had shrunk. The new group then gets
    # a store of this process's own (its collectives need none; new_group on it would need
    # a new store, which papccl cannot conjure).
    name, store = c10d._world.pg_map[pg]
    if not _store_reachable(store):
        c10d._world.pg_map[pg] = (name, dist.HashStore())
    return dist.shrink_group(exclude, group=group, shrink_flags=flags)


def grow_id(group=None):
    """The id of a grow of ``group`` (default: the default group), as bytes: NCCL 2.29's
    ``ncclCommGetUniqueId``. One rank of the group, the grow's root, calls it and hands the
    bytes to the new processes by any means (a file, the launcher, a store of their own);
    then every rank calls :func:`grow`. Each id serves one grow."""
    return bytes(_papccl_group(group)._grow_id())


def grow(size, uid=None, rank=None, timeout=None):
    """Grows the default group to ``size`` ranks (NCCL 2.29's ``ncclCommGrow``) and makes
    the grown group the default: the existing ranks keep their ranks, new ones come after.

    On an existing rank: ``grow(size, uid)`` on the grow's root (``uid`` from
    :func:`grow_id`), ``grow(size)`` on the others; the old default group's queued work
    finishes first, then it and every other group are destroyed (as torch's
    ``shrink_group`` does with the default group). In a new process, without
    ``init_process_group``: ``grow(size, uid, rank=r)`` with ``r`` from the old size to
    ``size - 1``. No store is needed (the new group gets one of this process's own, as
    after a shrink without its store's host). ``timeout`` (a timedelta or seconds): the new
    group's, by default the old one's (new ranks: 30 minutes). Returns the new group."""
    c10d = dist.distributed_c10d
    size = int(size)
    if uid is not None:
        uid = bytes(uid)
    if rank is None:
        if not dist.is_initialized():
            raise RuntimeError("papccl grow: this process has no default group; a new process "
                               "passes rank= (its rank in the grown group) and the id")
        pg = c10d._get_default_group()
        backend = _papccl_group(pg)
        ms = backend.timeout_ms if timeout is None else _timeout_ms(timeout)
        new = backend._grow(size, uid or b"", ms)
        name, store = c10d._world.pg_map[pg]
        c10d._destroy_all_other_groups(exclude_group=pg)
        c10d._cleanup_original_group(pg, True)
        del backend
    else:
        if dist.is_initialized():
            raise RuntimeError("papccl grow: rank= is for a new process, but this one has a "
                               "default group already (existing ranks pass no rank)")
        if uid is None:
            raise ValueError("papccl grow on new rank %d: a new rank needs the id (grow_id)"
                             % int(rank))
        new = _C.grow_new_rank(uid, int(rank), size, _timeout_ms(timeout))
        store = None
    return _default_group_of(new, size, store)


def _default_group_of(backend, size, store):
    """A torch ProcessGroup over ``backend``, registered as the default group."""
    c10d = dist.distributed_c10d
    if store is None or not _store_reachable(store):
        store = dist.HashStore()
    name = c10d._process_group_name(list(range(size)), use_hashed_name=True)
    pg = c10d.ProcessGroup(c10d.PrefixStore(name + "/", store), backend.rank(), size)
    kind = c10d.ProcessGroup.BackendType.CUSTOM
    for device in (["cpu", "cuda"] if _C.cuda else ["cpu"]):
        pg._register_backend(torch.device(device), kind, backend)
    pg._set_default_backend(kind)
    pg._set_group_name(name)
    pg._set_group_desc("default:grown")
    c10d._update_default_pg(pg)
    c10d._register_pg_in_world(pg=pg, backend_name=BACKEND, store=store, group_name=name,
                               backend_config=BACKEND,
                               rank_mapping={r: r for r in range(size)})
    return pg


def save_trace(path, group=None, last=4096, op="allreduce", since_seq=-1):
    """Writes the arrival pattern of this group's last ``last`` collectives of kind ``op``
    (those whose every arrival this rank saw, and whose sequence number is above
    ``since_seq``) as an arrival trace: one line per collective, each rank's arrival minus
    the first one, in microseconds. The perf binaries replay it with
    ``--arrival trace:PATH``. Returns the number of lines written."""
    hist = pap_stats(group, last)["history"]
    rows = [h for h in hist if h["complete"] and h["seq"] > since_seq and (op is None or h["op"] == op)]
    if not rows:
        raise ValueError("papccl save_trace: no complete %s in the last %d collectives"
                         % (op or "collective", last))
    n = len(rows[0]["lateness_us"])
    with open(path, "w") as f:
        f.write("# papccl arrival trace: %d %s calls of %d ranks; per rank: arrival minus "
                "the first arrival, us\n" % (len(rows), op or "collective", n))
        for h in rows:
            f.write(" ".join("%.1f" % v for v in h["lateness_us"][:n]) + "\n")
    return len(rows)
