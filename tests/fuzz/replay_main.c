/* SPDX-License-Identifier: Apache-2.0 */
/* Runs a fuzz target over saved inputs without libFuzzer: every file named on the command
 * line, or found in a directory named there (not recursive), once, in name order. Exits 1
 * when an argument cannot be read or a directory holds no input. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

static int runFile(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t* buf = malloc(cap);
  for (;;) {
    if (buf == NULL) break;
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    uint8_t* nb = realloc(buf, cap * 2);
    if (nb == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int bad = ferror(f) || buf == NULL;
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    free(buf);
    return -1;
  }
  /* An exact-size copy, so that a read past the input is caught as libFuzzer would. */
  uint8_t* exact = malloc(n ? n : 1);
  if (exact == NULL) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int cmpName(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

static int runDir(const char* dir, int* countOut) {
  DIR* d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "replay: cannot open directory %s\n", dir);
    return -1;
  }
  char** names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char** nn = realloc(names, cap * sizeof(*names));
      if (nn == NULL) {
        rc = -1;
        break;
      }
      names = nn;
    }
    names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
    if (names[n] == NULL) {
      rc = -1;
      break;
    }
    sprintf(names[n], "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (n > 1) qsort(names, n, sizeof(*names), cmpName);
  for (size_t i = 0; i < n; i++) {
    struct stat sb;
    if (rc == 0 && stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
      if (runFile(names[i]) != 0)
        rc = -1;
      else
        (*countOut)++;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    int count = 0;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      failed = 1;
    } else if (S_ISDIR(sb.st_mode)) {
      if (runDir(argv[i], &count) != 0) failed = 1;
      if (count == 0) {
        fprintf(stderr, "replay: no inputs in %s\n", argv[i]);
        failed = 1;
      }
      printf("replay: %d inputs from %s\n", count, argv[i]);
    } else if (runFile(argv[i]) != 0) {
      failed = 1;
    } else {
      printf("replay: %s\n", argv[i]);
    }
  }
  return failed;
}
