# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
shipped with python3-torch) against the papccl backend.

usage: WORLD_SIZE=N torch_suite.py [unittest options, e.g. -k PATTERN]

Declares papccl a plugin backend with DDP support to the suite (DistTestCases), names what
papccl does not implement (receive from any source, allgather_coalesced), and runs the
suite's test class with papccl as BACKEND: each test spawns N ranks through file:// init.
Tests for GPUs, for other backends, or for features the suite reserves to gloo and NCCL
skip with the suite's own reason.
"""
import os
import sys

# The suite reads these at import; spawned ranks inherit them.
os.environ.setdefault("BACKEND", "papccl")
os.environ.setdefault("WORLD_SIZE", "2")
# With CI set in the environment, torch's test runner writes JUnit XML through the
# unittest-xml-reporting module, which Debian's python3-torch does not pull in; this suite
# reports through meson, so run it as on a developer's machine wherever it runs.
os.environ.pop("CI", None)

import papccl.torch  # noqa: E402,F401  (registers "papccl" in every spawned rank too)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

DistTestCases.backend_feature["plugin"].add("papccl")
DistTestCases.backend_feature["ddp"].add("papccl")
DistTestCases.backend_feature["subgroup"].add("papccl")
DistTestCases.skip_collective["sendrecv anysource"].add("papccl")
DistTestCases.skip_collective["allgather_coalesced"].add("papccl")

import logging  # noqa: E402

from torch.nn.parallel import _replicated_tensor_ddp_utils  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


# The suite turns on DDP's ReplicatedTensor mode in every rank; its module
# (torch.distributed._shard) fails to import on Python 3.11 in torch 1.13 (a dataclass field
# with a mutable default), so every DDP test then fails on any backend (gloo too). Leave the
# mode off: DDP runs as users run it.
_set_replicated = _replicated_tensor_ddp_utils._set_ddp_with_replicated_tensor
_replicated_tensor_ddp_utils._set_ddp_with_replicated_tensor = lambda value: _set_replicated(False)

# The suite logs every process start at INFO; keep the verbose result lines readable.
logging.getLogger().setLevel(logging.WARNING)


class TestPapcclBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
