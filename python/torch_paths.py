# SPDX-License-Identifier: Apache-2.0
"""Prints what the build needs of this interpreter's torch, one item a line: the C++11 ABI
flag (0/1), the library folder, the include folders separated by ';' (torch's own, which hold
the pybind11 that torch was built with), where under PREFIX (argument 1) this interpreter finds
packages (relative to PREFIX), whether this torch was built with CUDA (0/1), the C++ standard
its headers want, and its version. Exits 1 (with a reason on stderr) when this torch is older
than 2.4 or lacks its C++ headers."""
import os
import sys
import sysconfig

import torch

major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if (major, minor) < (2, 4):
    sys.stderr.write("torch %s is too old: the papccl backend needs torch 2.4 or newer "
                     "(scripts/setup-venv.sh installs the tested one)\n" % torch.__version__)
    sys.exit(1)
root = os.path.dirname(torch.__file__)
incs = [os.path.join(root, "include"), os.path.join(root, "include", "torch", "csrc", "api", "include")]
probe = os.path.join(incs[0], "torch", "csrc", "distributed", "c10d", "Backend.hpp")
if not os.path.exists(probe) or not os.path.exists(os.path.join(incs[0], "pybind11")):
    sys.stderr.write("torch %s has no C++ headers (or no bundled pybind11) under %s\n"
                     % (torch.__version__, incs[0]))
    sys.exit(1)
print(1 if torch._C._GLIBCXX_USE_CXX11_ABI else 0)
print(os.path.join(root, "lib"))
print(";".join(incs))


def site_dir(prefix):
    """The nearest folder of sys.path under prefix that holds packages, else the standard
    scheme's."""
    prefix = os.path.abspath(prefix)
    found = [os.path.relpath(p, prefix) for p in sys.path
             if p.startswith(prefix + os.sep) and os.path.basename(p) in ("dist-packages", "site-packages")]
    if found:
        return min(found, key=lambda r: r.count(os.sep))
    path = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
    return os.path.relpath(path, prefix)


print(site_dir(sys.argv[1] if len(sys.argv) > 1 else sys.prefix))
print(1 if torch.version.cuda else 0)
# torch 2.13 and later need C++20 in their headers; C++20 serves every 2.x.
print("c++20")
print(torch.__version__)
