/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the communicator tests: wraps log, param and bootstrap internals in plain C. */
#include "shim_comm.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "arrival_int.h"
#include "bootstrap.h"
#include "comm.h"
#include "fault.h"
#include "kernels.h"
#include "log.h"
#include "param.h"

void papTestCommSetWarnHook(void (*fn)(const char* msg, void* arg), void* arg) {
  papLogSetWarnHook(fn, arg);
}

void papTestCommParamReset(void) {
  papParamReset();
}

int64_t papTestCommParamTimeoutS(void) {
  return papParamTimeoutS();
}

int64_t papTestCommParamChunkSize(void) {
  return papParamChunkSize();
}

int64_t papTestCommParamRhdMaxBytes(void) {
  return papParamRhdMaxBytes();
}

int64_t papTestCommParamRdMaxBytes(void) {
  return papParamRdMaxBytes();
}

int papTestCommActiveRoots(void) {
  return papBootstrapActiveRoots();
}

size_t papTestCommTypeSize(int datatype) {
  return papKernTypeSize((papcclDataType_t)datatype);
}

int64_t papTestCommHierOps(void* comm) {
  struct papComm* c = (struct papComm*)comm;
  if (c->hierLocal == NULL) return -1;
  return (int64_t)atomic_load(&c->hierOps);
}

int64_t papTestCommHierRailOps(void* comm) {
  struct papComm* c = (struct papComm*)comm;
  if (c->hierLocal == NULL) return -1;
  return (int64_t)atomic_load(&c->hierRailOps);
}

uint64_t papTestCommEngineBytes(void* comm) {
  const struct papEngine* e = &((struct papComm*)comm)->engine;
  uint64_t b = e->steps != NULL && e->cap > 0 ? (uint64_t)e->cap * sizeof(struct papStep) : 0;
  for (int i = 0; i < e->nscratch; i++)
    b += e->scratch[i].bytes;
  return b;
}

int64_t papTestCommShmSegBytes(void* comm) {
  const struct papComm* c = (const struct papComm*)comm;
  char name[96];
  int o = snprintf(name, sizeof(name), "/dev/shm/papccl-");
  for (int i = 0; i < 16; i++)
    o += snprintf(name + o, sizeof(name) - (size_t)o, "%02x", c->key[i]);
  snprintf(name + o, sizeof(name) - (size_t)o, "-%d-%d", (int)getpid(), c->rank);
  /* The segment's file is unlinked once the peers mapped it: its mapping here still names it. */
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  char line[512];
  int64_t bytes = -1;
  size_t nl = strlen(name);
  while (fgets(line, sizeof(line), f) != NULL) {
    char* at = strstr(line, name);
    if (at == NULL || (at[nl] != ' ' && at[nl] != '\n' && at[nl] != '\0')) continue;
    unsigned long lo = 0, hi = 0;
    /* Ranks as threads map each other's segments: one mapping is the size. */
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) bytes = (int64_t)(hi - lo);
  }
  fclose(f);
  return bytes;
}

int papTestParamIntCount(void) {
  return papParamIntCount();
}

int papTestParamIntAt(int i, const char** env, int64_t* def, int64_t* min, int64_t* max) {
  const struct papParamIntInfo* p = papParamIntAt(i);
  if (p == NULL) return 0;
  *env = p->env;
  *def = p->def;
  *min = p->min;
  *max = p->max;
  return 1;
}

int64_t papTestParamIntGet(int i) {
  const struct papParamIntInfo* p = papParamIntAt(i);
  return p ? p->get() : 0;
}

int papTestFaultHookBuilt(void) {
  return papFaultHookBuilt();
}

int papTestFaultParse(const char* spec) {
  return papFaultParseCount(spec);
}

void papTestCommPapState(void* comm, uint64_t* selSamplesOut, uint64_t* predictSamplesOut) {
  const struct papArrivalState* ps = ((struct papComm*)comm)->arrival;
  uint64_t sel = 0, pred = 0;
  for (int c = 0; c < PAP_SEL_COLLS; c++)
    for (int b = 0; b < PAP_SEL_BUCKETS; b++)
      sel += ps->buckets[c][b].samples;
  for (int k = 0; k < PAP_PREDICT_CONTEXTS; k++)
    pred += ps->waitSamples[k];
  *selSamplesOut = sel;
  *predictSamplesOut = pred;
}

int papTestCommOversubscribed(void* comm) {
  return ((struct papComm*)comm)->oversubscribed;
}
