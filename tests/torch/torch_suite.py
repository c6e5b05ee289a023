# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
shipped in torch's wheel) against the papccl backend.

usage: WORLD_SIZE=N torch_suite.py [unittest options, e.g. -k PATTERN]

Declares papccl a plugin backend with DDP and subgroup support to the suite (DistTestCases)
and runs the suite's test class with papccl as BACKEND: each test spawns N ranks through file:// init.
Tests for GPUs, for other backends, or for features the suite reserves to gloo and NCCL
skip with the suite's own reason.
"""
import os
import sys

# The suite reads these at import; spawned ranks inherit them.
os.environ.setdefault("BACKEND", "papccl")
os.environ.setdefault("WORLD_SIZE", "2")
# With CI set in the environment, torch's test runner writes JUnit XML through the
# unittest-xml-reporting module, which torch does not pull in; this suite reports through
# meson, so run it as on a developer's machine wherever it runs.
os.environ.pop("CI", None)

import papccl.torch  # noqa: E402,F401  (registers "papccl" in every spawned rank too)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

DistTestCases.backend_feature["plugin"].add("papccl")
DistTestCases.backend_feature["ddp"].add("papccl")
DistTestCases.backend_feature["subgroup"].add("papccl")

import logging  # noqa: E402
import unittest  # noqa: E402

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

# The suite logs every process start at INFO; keep the verbose result lines readable.
logging.getLogger().setLevel(logging.WARNING)


class TestPapcclBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    if os.environ["BACKEND"] == "papccl":
        # DDP's logger records ProcessGroup::getBackendName(), which for every plugin
        # backend (c10d BackendType::CUSTOM) is "custom", while dist.get_backend() says
        # "papccl"; the test compares the two. Nothing a backend can change.
        @unittest.skip("torch's DDP logger names every plugin backend 'custom'")
        def test_ddp_logging_data_cpu(self):
            pass


if __name__ == "__main__":
    run_tests()
