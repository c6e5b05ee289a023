# SPDX-License-Identifier: Apache-2.0
"""papccl as the communication backend of torchft (PyTorch's per-step fault-tolerant
training): a reconfigurable process group that torchft's Manager rebuilds whenever its
quorum changes (a replica died, a replica joined).

    from papccl.torchft import ProcessGroupPapccl
    manager = torchft.Manager(pg=ProcessGroupPapccl(), ...)

On every new quorum the Manager calls ``configure(store_addr, ...)``: the old communicator is
aborted (its running operations fail) and a new one is made from a unique id that the new
group's rank 0 publishes in the quorum's store (torchft gives every quorum its own store
prefix). Needs the ``torchft`` package (PyPI's torchft 0.2).

Errors reach torchft as they do from its NCCL group: asynchronously. A failed operation (a
dead peer, a timeout) does not raise from ``wait()``; its future carries the error, and
``errored()`` returns it until the next ``configure``, so the Manager discards the step and
reconfigures. (torchft's DDP hook reads the work's future after ``wait()``; an exception
from ``wait()`` would leave that future unset and fail its assertion.)
"""
import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torch.distributed.distributed_c10d import Work

from torchft.process_group import ProcessGroupWrapper

from . import torch as _papccl_torch


class _AsyncErrorWork(Work):
    """A papccl work whose failure is reported to its group and through its future,
    never raised from wait()."""

    def __init__(self, group, work):
        super().__init__()
        self._group, self._work = group, work

    def wait(self, timeout=None):
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception as e:  # noqa: BLE001: any failure is the group's error
            self._group._record_error(e)
            return False

    def get_future(self):
        return self._work.get_future()

    def is_completed(self):
        return self._work.is_completed()


class ProcessGroupPapccl(ProcessGroupWrapper):
    """A reconfigurable papccl group for torchft (CPU tensors; CUDA tensors where the
    backend was built with CUDA)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._errored = None

    def _record_error(self, e):
        if self._errored is None:
            self._errored = e

    def errored(self):
        return self._errored

    def _wrap_work(self, work, opts):
        return _AsyncErrorWork(self, work)

    def abort(self, errored=True):
        if errored and self._errored is None:
            self._errored = RuntimeError("papccl torchft group aborted")
        super().abort(errored)

    def _create_pg(self, store, rank, world_size):
        self._errored = None
        backend = _papccl_torch.new_backend(store, rank, world_size, self._timeout,
                                            key="torchft")
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        devices = [torch.device("cpu")]
        if _papccl_torch._C.cuda and torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        for dev in devices:
            pg._register_backend(dev, BaseProcessGroup.BackendType.CUSTOM, backend)
        return pg

    def getBackendName(self):
        return "torchft-papccl"
