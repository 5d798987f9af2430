/* A command-line driver for an external copy of Pisinger's combo (Martello, Pisinger, Toth 1999),
 * for bench/knapsack_classes.py --combo only. No code of combo is here: this file is compiled
 * together with a combo.c / combo.h obtained outside this repository (see
 * bench/results/knapsack_classes/README.md for the source, its licence and the build command):
 *
 *     gcc -O3 -I COMBO_DIR bench/cpp/combo_main.c COMBO_DIR/combo.c -lm -o combo_bench
 *
 * It expects a combo.h that declares `item` with fields p, w, x, the integer types itype and
 * stype, and combo(first, last, c, lb, ub, def, relx).
 *
 * Input (a file named on the command line): "n c" and then n lines "p w", all integers >= 0.
 * Output: one JSON line {"value", "seconds", "cpu_seconds", "weight", "verified",
 * "peak_rss_bytes", ...}. combo requires every weight in (0, c] and a total weight above c, so
 * items heavier than c are dropped, items of weight 0 are taken, items of profit 0 are dropped,
 * and combo is not called when what is left fits whole. The timed part is that preparation and the
 * call to combo, with def = 1 (the solution vector is defined) and relx = 0 (combo may run its
 * surrogate relaxation); the solution vector is then checked against the capacity and the value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "combo.h"

/* combo's relx argument; 0 as in ordinary use (the surrogate relaxation may run). Building with
 * -DCOMBO_RELX=1 switches that relaxation off, for diagnosis only. */
#ifndef COMBO_RELX
#define COMBO_RELX 0
#endif

static double now(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The process's peak resident set (VmHWM), in bytes; -1 where /proc is not there. Unlike
 * ru_maxrss, it does not start from the parent's peak at exec. */
static long long peak_rss_bytes(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kib = atoll(line + 6);
      break;
    }
  }
  fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s INSTANCE.txt\n", argv[0]);
    return 2;
  }
  FILE* in = fopen(argv[1], "r");
  if (!in) {
    perror(argv[1]);
    return 2;
  }
  long long n, c;
  if (fscanf(in, "%lld %lld", &n, &c) != 2 || n < 0 || c < 0) {
    fprintf(stderr, "bad header\n");
    return 2;
  }
  long long* p = malloc(sizeof(long long) * (size_t)(n + 1));
  long long* w = malloc(sizeof(long long) * (size_t)(n + 1));
  item* items = malloc(sizeof(item) * (size_t)(n + 1));
  for (long long i = 0; i < n; ++i) {
    if (fscanf(in, "%lld %lld", &p[i], &w[i]) != 2 || p[i] < 0 || w[i] < 0) {
      fprintf(stderr, "bad item %lld\n", i);
      return 2;
    }
  }
  fclose(in);

  const double wall0 = now(CLOCK_MONOTONIC), cpu0 = now(CLOCK_PROCESS_CPUTIME_ID);
  long long fixed_p = 0, fixed_w = 0, rest_w = 0, rest_p = 0, m = 0;
  for (long long i = 0; i < n; ++i) {
    if (w[i] == 0) {
      fixed_p += p[i];
    } else if (w[i] <= c && p[i] > 0) {
      items[m].p = (itype)p[i];
      items[m].w = (itype)w[i];
      items[m].x = 0;
      rest_w += w[i];
      rest_p += p[i];
      ++m;
    }
  }
  long long value;
  int called = 0;
  if (m == 0) {
    value = fixed_p;
  } else if (rest_w <= c) {
    for (long long i = 0; i < m; ++i) items[i].x = 1;
    value = fixed_p + rest_p;
  } else {
    value = fixed_p + (long long)combo(&items[0], &items[m - 1], (stype)c, 0, 0, 1, COMBO_RELX);
    called = 1;
  }
  const double wall1 = now(CLOCK_MONOTONIC), cpu1 = now(CLOCK_PROCESS_CPUTIME_ID);

  long long sum_p = fixed_p, sum_w = fixed_w;
  for (long long i = 0; i < m; ++i) {
    if (items[i].x) {
      sum_p += items[i].p;
      sum_w += items[i].w;
    }
  }
  const int verified = sum_w <= c && sum_p == value;
  printf(
      "{\"value\": %lld, \"seconds\": %.9f, \"cpu_seconds\": %.9f, \"weight\": %lld, "
      "\"capacity\": %lld, \"items\": %lld, \"combo_items\": %lld, \"combo_called\": %s, "
      "\"verified\": %s, \"peak_rss_bytes\": %lld}\n",
      value, wall1 - wall0, cpu1 - cpu0, sum_w, c, n, m, called ? "true" : "false",
      verified ? "true" : "false", peak_rss_bytes());
  free(p);
  free(w);
  free(items);
  return verified ? 0 : 3;
}
