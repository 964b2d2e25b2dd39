/*
 * tests/exhaustive.h: run a check over all 2^32 FP32 bit patterns on every
 * core (OpenMP), counting mismatches and keeping the first few for the report.
 * cmocka assertions are not thread-safe, so the check only counts; the test
 * asserts on the total afterwards.
 */
#ifndef AMPC_TEST_EXHAUSTIVE_H
#define AMPC_TEST_EXHAUSTIVE_H

#include <omp.h>
#include <stdint.h>
#include <stdio.h>

/* check(block_start, n, first_bad) checks patterns block_start .. +n-1 and
 * returns the number of mismatches, storing the first one in *first_bad. */
typedef uint64_t (*t_block_check)(uint64_t start, uint32_t n, uint32_t *first_bad);

static uint64_t t_run_all_f32(const char *what, t_block_check check) {
  const uint32_t block = 1u << 16;
  const int64_t nblocks = (int64_t)((UINT64_C(1) << 32) / block);
  uint64_t bad = 0;
  int shown = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : bad)
  for (int64_t b = 0; b < nblocks; b++) {
    uint32_t first = 0;
    uint64_t nb = check((uint64_t)b * block, block, &first);
    if (nb) {
      bad += nb;
#pragma omp critical
      {
        if (shown < 8) {
          fprintf(stderr, "%s: mismatch at FP32 0x%08x (%llu in its block)\n", what, first,
                  (unsigned long long)nb);
          shown++;
        }
      }
    }
  }
  fprintf(stderr, "%s: %llu mismatches over 2^32 inputs\n", what, (unsigned long long)bad);
  return bad;
}

#endif
