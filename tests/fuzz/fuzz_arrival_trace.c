/* SPDX-License-Identifier: Apache-2.0 */
/* The perf tools' --arrival option. The first byte picks:
 *   0  the option text for papPerfArrivalParse (trace:FILE excluded: it names a file);
 *   1  the contents of a trace:FILE, read by papPerfArrivalParseTrace from memory.
 * What parses is then used as the drivers use it: described, and asked for every rank's
 * delay on a few calls (for a trace, every row and column up to 64 of each). */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "perf/arrival.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  return 0;
}

static void use(const struct papPerfArrival* a, int nranks, long calls) {
  char desc[256];
  papPerfArrivalDescribe(a, nranks, desc, sizeof(desc));
  for (long it = 0; it < calls; it++) {
    for (int r = 0; r < nranks; r++) {
      double d = papPerfArrivalDelayUs(a, r, nranks, it);
      FUZZ_ASSERT(d >= 0 && d <= 60e6 + 1);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  struct papPerfArrival a;
  char err[256];
  memset(&a, 0, sizeof(a));
  a.skewUs = 1000;
  if (data[0] % 2 == 0) {
    char* text = malloc(size); /* the rest, NUL-terminated */
    if (text == NULL) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (strncmp(text, "trace:", 6) != 0) {
      err[0] = '\0';
      if (papPerfArrivalParse(text, &a, err, sizeof(err)) == 0)
        use(&a, 8, 4);
      else
        FUZZ_ASSERT(err[0] != '\0');
    }
    free(text);
  } else if (size > 1) {
    FILE* f = fmemopen((void*)(data + 1), size - 1, "r");
    if (f == NULL) return 0;
    a.kind = PAP_PERF_ARRIVAL_TRACE;
    err[0] = '\0';
    if (papPerfArrivalParseTrace(f, "fuzz", &a, err, sizeof(err)) == 0) {
      FUZZ_ASSERT(a.traceRows > 0 && a.traceCols > 0 && a.trace != NULL);
      use(&a, a.traceCols < 64 ? a.traceCols + 1 : 64, a.traceRows < 64 ? a.traceRows + 1 : 64);
    } else {
      FUZZ_ASSERT(err[0] != '\0' && a.trace == NULL);
    }
    fclose(f);
  }
  papPerfArrivalFree(&a);
  return 0;
}
