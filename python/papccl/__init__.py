# SPDX-License-Identifier: Apache-2.0
"""papccl from Python.

``import papccl.torch`` registers papccl as the torch.distributed backend "papccl"; see
``papccl.torch`` for its telemetry (``pap_stats``).
"""

__all__ = ["torch"]
