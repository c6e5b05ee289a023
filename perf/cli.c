/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: the command line, nccl-tests' options and defaults. */
#include <getopt.h>
#include <stdlib.h>

#include "driver.h"

static double parseSize(const char* text) {
  char* end;
  double v = strtod(text, &end);
  if (end == text) return -1.0;
  while (*end == ' ' || *end == '\t')
    end++;
  switch (*end) {
  case '\0':
    return v;
  case 'G':
  case 'g':
    return v * 1024 * 1024 * 1024;
  case 'M':
  case 'm':
    return v * 1024 * 1024;
  case 'K':
  case 'k':
    return v * 1024;
  default:
    return -1.0;
  }
}

static void usage(const char* prog) {
  printf(
      "USAGE: %s \n"
      "\t[-t,--nthreads <num threads>] \n"
      "\t[-g,--ngpus <gpus per thread>] (must be 1: buffers are host memory)\n"
      "\t[-b,--minbytes <min size in bytes>] \n"
      "\t[-e,--maxbytes <max size in bytes>] \n"
      "\t[-i,--stepbytes <increment size>] \n"
      "\t[-f,--stepfactor <increment factor>] \n"
      "\t[-n,--iters <iteration count>] \n"
      "\t[-m,--agg_iters <aggregated iteration count>] \n"
      "\t[-w,--warmup_iters <warmup iteration count>] \n"
      "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n"
      "\t[-p,--parallel_init <0/1>] \n"
      "\t[-c,--check <check iteration count>] \n"
      "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n"
      "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/"
      "f8e4m3/f8e5m2/all>] \n"
      "\t[-r,--root <root>] \n"
      "\t[-z,--blocking <0/1/2/3>] \n"
      "\t[-y,--stream_null <0/1>] (ignored: host buffers need no stream)\n"
      "\t[-T,--timeout <time in seconds>] \n"
      "\t[-G,--cudagraph <num graph launches>] (ignored: no CUDA graphs on host buffers)\n"
      "\t[-C,--report_cputime <0/1>] \n"
      "\t[-S,--report_timestamps <0/1> report timestamps (default 0)] \n"
      "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n"
      "\t[-R,--local_register <0/1/2>] (ignored)\n"
      "\t[-x,--cta_policy <0/1/2>] (passed in the config, no effect on host buffers)\n"
      "\t[-J,--output_file,--json <file>] write every cell and its parameters as JSON\n"
      "\t[-u,--unalign <num elements>] \n"
      "\t[-h,--help]\n"
      "papccl extensions (process arrival patterns):\n"
      "\t[--arrival <balanced|late|late:R|late-k:K|staircase|uniform|normal|trace:FILE>]\n"
      "\t    which ranks arrive late at each timed call (after a barrier):\n"
      "\t    late:R: rank R (late: the last rank) waits --skew us before each call;\n"
      "\t    late-k:K: the last K ranks wait --skew us; staircase: rank r waits\n"
      "\t    r*skew/(nranks-1) us; uniform: U[0,skew] per rank and call; normal:\n"
      "\t    N(skew/2, skew/6) clipped to [0,skew]; trace:FILE: one line per call of\n"
      "\t    per-rank offsets in us (calls cycle through the lines). Adds the columns\n"
      "\t    tail (last completion - last arrival), inColl (mean time in the call) and\n"
      "\t    skew (last - first arrival), medians over the timed calls. The time column is\n"
      "\t    then each rank's time inside the call (injected delay excluded), reduced per -a.\n"
      "\t[--skew <usec>] the delay for --arrival (default 0: no delay; alone: late)\n",
      prog);
}

static int parseType(const char* s) {
  if (strcmp(s, "all") == 0) return -1;
  for (int t = 0; t < papcclNumTypes; t++) {
    if (strcmp(s, papPerfTypeName((papcclDataType_t)t)) == 0) return t;
  }
  printf("invalid type %s, defaulting to %s .. \n", s, papPerfTypeName(papcclFloat32));
  return papcclFloat32;
}

static int parseOp(const char* s) {
  if (strcmp(s, "all") == 0) return -1;
  for (int op = 0; op < PAP_PERF_NUM_OPS; op++) {
    if (strcmp(s, papPerfOpName(op)) == 0) return op;
  }
  printf("invalid op %s, defaulting to %s .. \n", s, papPerfOpName(papcclSum));
  return papcclSum;
}

/* Returns -1 to go on, otherwise the exit code. */
int papPerfParseArgs(int argc, char** argv, struct perfOpts* o) {
  enum {
    OPT_ARRIVAL = 256,
    OPT_SKEW
  };
  static const struct option longopts[] = {{"nthreads", required_argument, 0, 't'},
                                           {"ngpus", required_argument, 0, 'g'},
                                           {"minbytes", required_argument, 0, 'b'},
                                           {"maxbytes", required_argument, 0, 'e'},
                                           {"stepbytes", required_argument, 0, 'i'},
                                           {"stepfactor", required_argument, 0, 'f'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"agg_iters", required_argument, 0, 'm'},
                                           {"warmup_iters", required_argument, 0, 'w'},
                                           {"run_cycles", required_argument, 0, 'N'},
                                           {"parallel_init", required_argument, 0, 'p'},
                                           {"check", required_argument, 0, 'c'},
                                           {"op", required_argument, 0, 'o'},
                                           {"datatype", required_argument, 0, 'd'},
                                           {"root", required_argument, 0, 'r'},
                                           {"blocking", required_argument, 0, 'z'},
                                           {"stream_null", required_argument, 0, 'y'},
                                           {"timeout", required_argument, 0, 'T'},
                                           {"cudagraph", required_argument, 0, 'G'},
                                           {"report_cputime", required_argument, 0, 'C'},
                                           {"report_timestamps", required_argument, 0, 'S'},
                                           {"output_file", required_argument, 0, 'J'},
                                           {"json", required_argument, 0, 'J'},
                                           {"average", required_argument, 0, 'a'},
                                           {"local_register", required_argument, 0, 'R'},
                                           {"cta_policy", required_argument, 0, 'x'},
                                           {"device_implementation", required_argument, 0, 'D'},
                                           {"device_cta_count", required_argument, 0, 'V'},
                                           {"memory", required_argument, 0, 'M'},
                                           {"unalign", required_argument, 0, 'u'},
                                           {"per_iter_timing", required_argument, 0, 'I'},
                                           {"per_iter_skip", required_argument, 0, 'K'},
                                           {"help", no_argument, 0, 'h'},
                                           {"arrival", required_argument, 0, OPT_ARRIVAL},
                                           {"skew", required_argument, 0, OPT_SKEW},
                                           {0, 0, 0, 0}};
  const char* prog = baseName(argv[0]);
  double parsed;
  char errText[256];
  for (;;) {
    int idx, c = getopt_long(
                 argc, argv,
                 "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", longopts, &idx);
    if (c == -1) break;
    switch (c) {
    case 't':
      o->nThreads = (int)strtol(optarg, NULL, 0);
      break;
    case 'g':
      o->nGpus = (int)strtol(optarg, NULL, 0);
      break;
    case 'b':
    case 'e':
      parsed = parseSize(optarg);
      if (parsed < 0) {
        fprintf(stderr, "invalid size specified for '%s'\n", c == 'b' ? "minbytes" : "maxbytes");
        return PAP_PERF_BAD_SIZE;
      }
      *(c == 'b' ? &o->minBytes : &o->maxBytes) = (size_t)parsed;
      break;
    case 'i':
      o->stepBytes = (size_t)strtol(optarg, NULL, 0);
      break;
    case 'f':
      o->stepFactor = (size_t)strtol(optarg, NULL, 0);
      break;
    case 'n':
      o->iters = (int)strtol(optarg, NULL, 0);
      break;
    case 'm':
      o->aggIters = (int)strtol(optarg, NULL, 0);
      break;
    case 'w':
      o->warmupIters = (int)strtol(optarg, NULL, 0);
      break;
    case 'N':
      o->runCycles = (int)strtol(optarg, NULL, 0);
      break;
    case 'p':
      o->parallelInit = (int)strtol(optarg, NULL, 0);
      break;
    case 'c':
      o->check = (int)strtol(optarg, NULL, 0);
      break;
    case 'o':
      o->op = parseOp(optarg);
      break;
    case 'd':
      o->type = parseType(optarg);
      break;
    case 'r':
      o->root = (int)strtol(optarg, NULL, 0);
      break;
    case 'z':
      o->blocking = (int)strtol(optarg, NULL, 0);
      break;
    case 'y':
      o->streamNull = (int)strtol(optarg, NULL, 0);
      break;
    case 'T':
      o->timeout = (int)strtol(optarg, NULL, 0);
      break;
    case 'G':
      o->graph = (int)strtol(optarg, NULL, 0);
      break;
    case 'C':
      o->reportCpu = (int)strtol(optarg, NULL, 0);
      break;
    case 'S':
      o->reportTs = (int)strtol(optarg, NULL, 0);
      break;
    case 'J':
      o->jsonPath = optarg;
      break;
    case 'a':
      o->average = (int)strtol(optarg, NULL, 0);
      break;
    case 'R':
      o->localRegister = (int)strtol(optarg, NULL, 0);
      break;
    case 'x':
      o->ctaPolicy = (int)strtol(optarg, NULL, 0);
      break;
    case 'D':
      o->devImpl = (int)strtol(optarg, NULL, 0);
      break;
    case 'V':
      o->devCtas = (int)strtol(optarg, NULL, 0);
      break;
    case 'M':
      o->memReport = (int)strtol(optarg, NULL, 0);
      break;
    case 'u':
      o->unalign = (int)strtol(optarg, NULL, 0);
      break;
    case 'I':
      o->perIter = (int)strtol(optarg, NULL, 0);
      break;
    case 'K':
      o->perIterSkip = (int)strtol(optarg, NULL, 0);
      break;
    case OPT_ARRIVAL:
      if (papPerfArrivalParse(optarg, &o->arrival, errText, sizeof(errText)) != 0) {
        fprintf(stderr, "invalid --arrival: %s\n", errText);
        return PAP_PERF_INVALID_USAGE;
      }
      o->arrivalSet = 1;
      break;
    case OPT_SKEW:
      o->arrival.skewUs = strtod(optarg, NULL);
      break;
    case 'h':
    default:
      if (c != 'h') printf("invalid option '%c'\n", c);
      usage(prog);
      return PAP_PERF_OK;
    }
  }
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
            (unsigned long long)o->minBytes, (unsigned long long)o->maxBytes);
    return PAP_PERF_BAD_SIZE;
  }
  if (o->arrival.skewUs > 0 && !o->arrivalSet) o->arrival.kind = PAP_PERF_ARRIVAL_LATE;
  if (o->devImpl > 0) {
    fprintf(stderr, "-D needs the NCCL device API, which papccl does not provide\n");
    return PAP_PERF_BAD_SIZE;
  }
  if (o->nThreads < 1 || o->nThreads > PERF_MAX_THREADS || o->iters < 1 || o->aggIters < 1 ||
      o->warmupIters < 0 || o->check < 0 || o->unalign < 0 || o->runCycles < 0) {
    fprintf(stderr, "invalid -t/-n/-m/-w/-c/-u/-N value\n");
    return PAP_PERF_INVALID_USAGE;
  }
  return -1;
}
