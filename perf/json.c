/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: the JSON file (-J), in nccl-tests' layout. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

extern char** environ;

static void jsonSep(struct perfProc* p) {
  if (p->jsonAfterKey) {
    p->jsonAfterKey = 0;
  } else if (p->jsonDepth > 0) {
    if (!p->jsonFirst[p->jsonDepth]) fputc(',', p->json);
    p->jsonFirst[p->jsonDepth] = 0;
  }
}
static void jsonRaw(struct perfProc* p, const char* s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\' || c == '/')
      fprintf(p->json, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", p->json);
    else if (c == '\t')
      fputs("\\t", p->json);
    else if (c < 0x20)
      fprintf(p->json, "\\u%04x", c);
    else
      fputc(c, p->json);
  }
}
void papPerfJsonStr(struct perfProc* p, const char* s) {
  if (!p->json) return;
  jsonSep(p);
  fputc('"', p->json);
  jsonRaw(p, s);
  fputc('"', p->json);
}
void papPerfJsonKey(struct perfProc* p, const char* k) {
  if (!p->json) return;
  papPerfJsonStr(p, k);
  fputc(':', p->json);
  p->jsonAfterKey = 1;
}
void papPerfJsonOpen(struct perfProc* p, char c) {
  if (!p->json) return;
  jsonSep(p);
  fputc(c, p->json);
  p->jsonFirst[++p->jsonDepth] = 1;
}
void papPerfJsonClose(struct perfProc* p, char c) {
  if (!p->json) return;
  fputc(c, p->json);
  p->jsonDepth--;
}
void papPerfJsonLong(struct perfProc* p, long long v) {
  if (!p->json) return;
  jsonSep(p);
  fprintf(p->json, "%lld", v);
}
void papPerfJsonDouble(struct perfProc* p, double v) {
  if (!p->json) return;
  if (v != v) {
    papPerfJsonStr(p, "nan");
    return;
  }
  jsonSep(p);
  fprintf(p->json, "%lf", v);
}
void papPerfJsonNull(struct perfProc* p) {
  if (!p->json) return;
  jsonSep(p);
  fputs("null", p->json);
}
void papPerfJsonNow(struct perfProc* p) {
  char buf[64];
  time_t now = time(NULL);
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", localtime(&now));
  papPerfJsonStr(p, buf);
}

void papPerfJsonBegin(struct perfProc* p, int argc, char** argv) {
  char* path = strdup(p->o.jsonPath);
  int tries = 0;
  while (path && !(p->json = fopen(path, "wx"))) {
    if (errno != EEXIST) {
      printf("# skipping json output; %s not accessible\n", path);
      free(path);
      return;
    }
    free(path);
    size_t len = strlen(p->o.jsonPath) + 16;
    path = malloc(len);
    if (path) snprintf(path, len, "%s.%d", p->o.jsonPath, tries++);
  }
  if (!path) return;
  printf("# Writing JSON output to %s\n", path);
  free(path);
  papPerfJsonOpen(p, '{');
  papPerfJsonKey(p, "version");
  papPerfJsonLong(p, 3);
  papPerfJsonKey(p, "start_time");
  papPerfJsonNow(p);
  papPerfJsonKey(p, "args");
  papPerfJsonOpen(p, '[');
  for (int i = 0; i < argc; i++)
    papPerfJsonStr(p, argv[i]);
  papPerfJsonClose(p, ']');
  papPerfJsonKey(p, "env");
  papPerfJsonOpen(p, '[');
  for (char** e = environ; e && *e; e++)
    papPerfJsonStr(p, *e);
  papPerfJsonClose(p, ']');
  papPerfJsonKey(p, "nccl_version");
  papPerfJsonLong(p, p->version);
}
