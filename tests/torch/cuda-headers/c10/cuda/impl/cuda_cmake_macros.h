/* SPDX-License-Identifier: Apache-2.0 */
/* Build check only. A CUDA build of torch generates this header next to c10/cuda's; Debian's
 * CPU build ships c10/cuda's headers without it. With it, the backend's CUDA-tensor path
 * (PAPCCL_TORCH_CUDA) compiles here against torch's and the CUDA toolkit's headers
 * (python/papccl/meson.build); it is linked and run only against a CUDA build of torch. */
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
