/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL 2.32's per-collective configuration (nccl<Coll>Config) over papccl's
 * (papccl<Coll>Config): the config is checked, `algSelection` becomes papccl's plan choice,
 * and the fields that steer NVIDIA's kernels are named once in an INFO line. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "dropin.h"
#include "log.h"

/* The algorithm names an algSelection may hold: NCCL's (those papccl has a plan for map onto
 * it; "tree" onto rhd, papccl's latency-bound classic allreduce) and papccl's own. */
struct algName {
  const char* name;
  int algo; /* papcclPapAlgo_t; papcclPapAlgoNone: papccl has no such plan */
};
static const struct algName algNames[] = {
    {"ring", papcclPapAlgoRing},
    {"tree", papcclPapAlgoRhd},
    {"rhd", papcclPapAlgoRhd},
    {"ac2s", papcclPapAlgoAc2s},
    {"chain", papcclPapAlgoChain},
    {"small", papcclPapAlgoSmall},
    {"pap", papcclPapAlgoPap},
    {"collnet", papcclPapAlgoNone},
    {"collnetdirect", papcclPapAlgoNone},
    {"collnetchain", papcclPapAlgoNone},
    {"nvls", papcclPapAlgoNone},
    {"nvlstree", papcclPapAlgoNone},
    {"pat", papcclPapAlgoNone},
};

enum {
  C_ALLREDUCE,
  C_BROADCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_ONEPLAN
};

/* Which algo values a collective takes (as papccl.h lists them; AlltoAll, Gather and
 * Scatter have one plan: C_ONEPLAN). */
static int takes(int coll, int algo) {
  if (coll == C_ALLREDUCE) return algo != papcclPapAlgoNone;
  if (coll != C_ONEPLAN) return algo == papcclPapAlgoRing || algo == papcclPapAlgoPap;
  return 0;
}

/* The first algorithm of a comma list `sel` that papccl can run for `coll`: *algo, or
 * papcclPapAlgoNone with *why set. An exclusion list ("^nvls,collnet") that names none of
 * papccl's algorithms leaves papccl's own choice; one that does is refused (say which to
 * use instead). */
static int pick(const char* sel, int coll, int* algo, const char** why) {
  *algo = papcclPapAlgoNone;
  int exclude = sel[0] == '^';
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", sel + exclude);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ')
      tok++;
    const struct algName* a = NULL;
    for (size_t i = 0; i < sizeof(algNames) / sizeof(algNames[0]); i++)
      if (strcasecmp(tok, algNames[i].name) == 0) a = &algNames[i];
    if (a == NULL) {
      *why = "names an algorithm NCCL and papccl do not know";
      return 0;
    }
    if (exclude && a->algo != papcclPapAlgoNone) {
      *why = "excludes one of papccl's plans (name the ones to use instead)";
      return 0;
    }
    if (!exclude && *algo == papcclPapAlgoNone && takes(coll, a->algo)) *algo = a->algo;
  }
  if (exclude || *algo != papcclPapAlgoNone) return 1;
  *why = "names no plan papccl has for this collective";
  return 0;
}

/* Logs once per process the fields papccl accepts and leaves to NVIDIA's kernels. */
static void noteIgnored(const ncclCollConfig_t* c) {
  static int said;
  size_t n = c->size;
#define SET_INT(f) \
  (n >= offsetof(ncclCollConfig_t, f) + sizeof(int) && c->f != NCCL_CONFIG_UNDEF_INT)
  int any = SET_INT(minCTAs) || SET_INT(maxCTAs) || SET_INT(nvlsCTAs) || SET_INT(cgaClusterSize) ||
            SET_INT(CTAPolicy) ||
            (n >= offsetof(ncclCollConfig_t, userProfilerTag) + 8 && c->userProfilerTag != 0) ||
            (n >= sizeof(ncclCollConfig_t) && c->launchCompletionEvent != NULL) ||
            (n >= offsetof(ncclCollConfig_t, minCTAs) && c->ext != NULL);
#undef SET_INT
  if (any && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    PAP_INFO(PAP_LOG_COLL,
             "ncclCollConfig_t: CTA counts, CTA policy, cluster size, profiler tag, launch event "
             "and vendor extensions concern NVIDIA's kernels; papccl accepts and ignores them");
}

/* ncclCollConfig_t (NULL: defaults) as papccl's config, or an error naming the field. */
static ncclResult_t convert(const char* fn, int coll, const ncclCollConfig_t* c,
                            papcclCollConfig_t* out, const papcclCollConfig_t** use) {
  papcclCollConfig_t init = PAPCCL_COLLCONFIG_INITIALIZER;
  *out = init;
  *use = NULL;
  if (c == NULL) return ncclSuccess;
  size_t need = offsetof(ncclCollConfig_t, forceAlgSelection) + sizeof(int);
  if (c->magic != NCCL_API_MAGIC || c->size < need) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: config (size %zu, magic %#x) was not made with NCCL_COLLCONFIG_INITIALIZER", fn,
             c->size, c->magic);
    return ncclInvalidArgument;
  }
  noteIgnored(c);
  const char* sel = c->algSelection;
  if (sel == NULL || sel[0] == '\0' || strcasecmp(sel, "undef") == 0) return ncclSuccess;
  const char* why = NULL;
  if (!pick(sel, coll, &out->algo, &why)) {
    papLogSetContext(-1, NULL, 0);
    if (c->forceAlgSelection) {
      PAP_WARN("%s: algSelection \"%.64s\" %s; papccl's plans: docs/NCCL-DROPIN.md", fn, sel, why);
      return ncclInvalidArgument;
    }
    PAP_INFO(PAP_LOG_COLL, "%s: algSelection \"%.64s\" %s; papccl chooses (forceAlgSelection 0)",
             fn, sel, why);
    out->algo = papcclPapAlgoNone;
  }
  *use = out;
  return ncclSuccess;
}

#define CONFIG_BEGIN(name, coll) \
  papcclCollConfig_t pc; \
  const papcclCollConfig_t* use; \
  ncclResult_t r_ = convert(name, coll, config, &pc, &use); \
  if (r_ != ncclSuccess) return r_;

NCCL_EXPORT ncclResult_t pncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t op,
                                              ncclComm_t comm, cudaStream_t stream,
                                              const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclAllReduceConfig", C_ALLREDUCE)
  return RES(papcclAllReduceConfig(sendbuff, recvbuff, count, DT(datatype), OP(op), COMM(comm),
                                   STREAM(stream), use));
}
NCCL_ALIAS(ncclAllReduceConfig);

NCCL_EXPORT ncclResult_t pncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, int root, ncclComm_t comm,
                                              cudaStream_t stream, const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclBroadcastConfig", C_BROADCAST)
  return RES(papcclBroadcastConfig(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm),
                                   STREAM(stream), use));
}
NCCL_ALIAS(ncclBroadcastConfig);

NCCL_EXPORT ncclResult_t pncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, ncclRedOp_t op, int root,
                                           ncclComm_t comm, cudaStream_t stream,
                                           const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclReduceConfig", C_REDUCE)
  return RES(papcclReduceConfig(sendbuff, recvbuff, count, DT(datatype), OP(op), root, COMM(comm),
                                STREAM(stream), use));
}
NCCL_ALIAS(ncclReduceConfig);

NCCL_EXPORT ncclResult_t pncclAllGatherConfig(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, ncclDataType_t datatype,
                                              ncclComm_t comm, cudaStream_t stream,
                                              const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclAllGatherConfig", C_ALLGATHER)
  return RES(papcclAllGatherConfig(sendbuff, recvbuff, sendcount, DT(datatype), COMM(comm),
                                   STREAM(stream), use));
}
NCCL_ALIAS(ncclAllGatherConfig);

NCCL_EXPORT ncclResult_t pncclReduceScatterConfig(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, ncclDataType_t datatype,
                                                  ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream,
                                                  const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclReduceScatterConfig", C_REDUCESCATTER)
  return RES(papcclReduceScatterConfig(sendbuff, recvbuff, recvcount, DT(datatype), OP(op),
                                       COMM(comm), STREAM(stream), use));
}
NCCL_ALIAS(ncclReduceScatterConfig);

NCCL_EXPORT ncclResult_t pncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclComm_t comm,
                                             cudaStream_t stream, const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclAlltoAllConfig", C_ONEPLAN)
  return RES(papcclAlltoAllConfig(sendbuff, recvbuff, count, DT(datatype), COMM(comm),
                                  STREAM(stream), use));
}
NCCL_ALIAS(ncclAlltoAllConfig);

NCCL_EXPORT ncclResult_t pncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, int root, ncclComm_t comm,
                                           cudaStream_t stream, const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclGatherConfig", C_ONEPLAN)
  return RES(papcclGatherConfig(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm),
                                STREAM(stream), use));
}
NCCL_ALIAS(ncclGatherConfig);

NCCL_EXPORT ncclResult_t pncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, int root, ncclComm_t comm,
                                            cudaStream_t stream, const ncclCollConfig_t* config) {
  CONFIG_BEGIN("ncclScatterConfig", C_ONEPLAN)
  return RES(papcclScatterConfig(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm),
                                 STREAM(stream), use));
}
NCCL_ALIAS(ncclScatterConfig);
