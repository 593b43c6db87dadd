/* Replay driver for the libFuzzer harnesses, for compilers without libFuzzer (the gcc
 * build): runs LLVMFuzzerTestOneInput once on every file named on the command line, or on
 * every file in a named directory. Used by the fuzz_replay_* regression tests on the seed
 * corpus and on every input that once crashed (tests/fuzz/crashes/<harness>/).
 *   <harness>_replay FILE|DIR...   exit 0 when every input ran, 2 on a usage error */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      return -1;
    }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  fclose(f);
  /* An exact-size copy, so ASan catches a harness reading one byte past the input. */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int ran = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) continue; /* an absent crashes/ folder: nothing to replay */
    if (!S_ISDIR(st.st_mode)) {
      bad |= run_file(argv[i]) != 0;
      ran++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) continue;
    char **names = NULL;
    size_t nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
      char **nn2 = realloc(names, (nn + 1) * sizeof *names);
      if (!nn2) break;
      names = nn2;
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[nn] = malloc(len);
      if (!names[nn]) break;
      snprintf(names[nn++], len, "%s/%s", argv[i], e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp);
    for (size_t k = 0; k < nn; k++) {
      bad |= run_file(names[k]) != 0;
      ran++;
      free(names[k]);
    }
    free(names);
  }
  printf("replay: %d input(s) ran without a crash\n", ran);
  return bad ? 1 : 0;
}
