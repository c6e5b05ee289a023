# SPDX-License-Identifier: Apache-2.0
"""Prints what the build needs of this interpreter's torch: the C++11 ABI flag (0/1), the
library folder, and the include folders separated by ';'. Exits 1 (with a reason on stderr)
when torch's C++ headers are missing."""
import os
import sys

import torch

root = os.path.dirname(torch.__file__)
incs = [os.path.join(root, "include"), os.path.join(root, "include", "torch", "csrc", "api", "include")]
probe = os.path.join(incs[0], "torch", "csrc", "distributed", "c10d", "ProcessGroup.hpp")
if not os.path.exists(probe):
    sys.stderr.write("torch %s has no C++ headers at %s (Debian: install libtorch-dev)\n"
                     % (torch.__version__, probe))
    sys.exit(1)
print(1 if torch._C._GLIBCXX_USE_CXX11_ABI else 0)
print(os.path.join(root, "lib"))
print(";".join(incs))
