/* SPDX-License-Identifier: Apache-2.0 */
/* Compiled twice: with NCCL_ABI_NVIDIA against NVIDIA's nccl.h, without it against
 * papccl's. Each object defines the functions of its side only. */
#include <nccl.h>

#define NCCL_ABI_FACTS_BODY
#include "abi_facts.h"

#ifdef NCCL_ABI_NVIDIA
NCCL_ABI_FACTS_DEFINE(ncclAbiFactsNvidia, ncclAbiVersionNvidia)
#else
NCCL_ABI_FACTS_DEFINE(ncclAbiFactsPapccl, ncclAbiVersionPapccl)
#endif
