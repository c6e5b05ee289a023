# SPDX-License-Identifier: Apache-2.0
"""Prints what the build needs of this interpreter's torch: the C++11 ABI flag (0/1), the
library folder, the include folders separated by ';', and where under PREFIX (argument 1)
this interpreter finds packages (the install folder, relative to PREFIX), whether this torch
was built with CUDA (0/1), and whether it extends c10d through c10d::Backend (torch 2.x: 0/1).
Exits 1 (with a
reason on stderr) when torch's C++ headers are missing."""
import os
import sys
import sysconfig

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


def site_dir(prefix):
    """The nearest folder of sys.path under prefix that holds packages (Debian: for /usr/local
    lib/python3.X/dist-packages, for /usr lib/python3/dist-packages), else the standard
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
# torch 1.13 has a c10d::Backend header too, but its process groups extend ProcessGroup.
print(1 if int(torch.__version__.split(".")[0]) >= 2 else 0)
