/*
 * tests/test_convert_arrays.c: the array kernels and ampc_convert.
 *  - AVX2 kernels == scalar reference for every length 0..67 (all tails), at
 *    every misalignment 0..7 elements, on random bit patterns and on edge
 *    values (NaNs, infs, ties, subnormals, overflow boundaries), with guard
 *    elements after the end that must stay untouched;
 *  - the same on arrays large enough for the non-temporal store path;
 *  - ampc_convert for all 25 dtype pairs == the scalar composition.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "numeric/convert_impl.h"
#include "numeric/numeric.h"
#include "test_util.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd32(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (uint32_t)((g_rng * 0x2545F4914F6CDD1Du) >> 32);
}

static const uint32_t k_edges[] = {
    0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
    0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBFE000u, 0x477FE000u,
    0x477FEFFFu, 0x477FF000u, 0xC77FF000u, 0x33000000u, 0x33000001u, 0x33400000u,
    0x3F801000u, 0x3F801001u, 0x3F808000u, 0x3F818000u, 0x7F7F7FFFu, 0x7F7F8000u,
    0xFF7F8000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x387FC000u, 0x38800000u,
    0x43E80000u, 0x43E80001u, 0x47700000u, 0x476FFFFFu, 0x3F800000u, 0x322BCC77u,
};
enum { NEDGE = sizeof k_edges / sizeof k_edges[0] };

static uint32_t pick(int i, int edges) {
  return edges ? k_edges[(uint32_t)i % NEDGE] ^ ((rnd32() & 1u) << 31) : rnd32();
}

static void fill_src(float *src, size_t n, int edges) {
  for (size_t i = 0; i < n; i++)
    src[i] = t_f32(pick((int)i + (int)rnd32() % 7, edges));
}

static void check_kernels_once(const ampc_convert_kernels *k, size_t n, size_t off, int edges) {
  enum { GUARD = 8 };
  float *src = malloc((n + off + GUARD) * sizeof *src);
  uint16_t *h = malloc((n + off + GUARD) * sizeof *h);
  float *back = malloc((n + off + GUARD) * sizeof *back);
  assert_non_null(src);
  assert_non_null(h);
  assert_non_null(back);
  fill_src(src + off, n, edges);
  uint16_t *hs = malloc((n + 1) * sizeof *hs);
  assert_non_null(hs);
  /* f32 -> f16 / bf16 */
  for (int bf = 0; bf < 2; bf++) {
    for (size_t i = 0; i < n + off + GUARD; i++)
      h[i] = 0xA5A5;
    if (bf)
      k->f32_to_bf16(h + off, src + off, n);
    else
      k->f32_to_f16(h + off, src + off, n);
    for (size_t i = 0; i < n; i++) {
      uint32_t x = t_bits(src[off + i]);
      uint16_t want = bf ? ampc_f32bits_to_bf16bits(x) : ampc_f32bits_to_f16bits(x);
      if (h[off + i] != want)
        fail_msg("%s %s n=%zu off=%zu i=%zu x=0x%08x: got 0x%04x want 0x%04x", k->isa,
                 bf ? "f32->bf16" : "f32->f16", n, off, i, x, h[off + i], want);
      hs[i] = h[off + i];
    }
    for (size_t i = 0; i < off; i++)
      assert_int_equal(h[i], 0xA5A5);
    for (size_t i = 0; i < GUARD; i++)
      assert_int_equal(h[off + n + i], 0xA5A5);
    /* f16 / bf16 -> f32 on random 16-bit patterns too */
    for (size_t i = 0; i < n; i++)
      h[off + i] = (i & 1) ? (uint16_t)rnd32() : hs[i];
    for (size_t i = 0; i < n + off + GUARD; i++)
      back[i] = t_f32(0xDEADBEEFu);
    if (bf)
      k->bf16_to_f32(back + off, h + off, n);
    else
      k->f16_to_f32(back + off, h + off, n);
    for (size_t i = 0; i < n; i++) {
      uint16_t v = h[off + i];
      uint32_t want = bf ? ampc_bf16bits_to_f32bits(v) : ampc_f16bits_to_f32bits(v);
      if (t_bits(back[off + i]) != want)
        fail_msg("%s %s n=%zu off=%zu i=%zu v=0x%04x: got 0x%08x want 0x%08x", k->isa,
                 bf ? "bf16->f32" : "f16->f32", n, off, i, v, t_bits(back[off + i]), want);
    }
    for (size_t i = 0; i < GUARD; i++)
      assert_int_equal(t_bits(back[off + n + i]), 0xDEADBEEFu);
  }
  free(hs);
  free(src);
  free(h);
  free(back);
}

static void test_tails(void **state) {
  (void)state;
  const ampc_convert_kernels *ks[2] = {&ampc_convert_portable, &ampc_convert_avx2};
  const int nk = ampc_cpu_has_avx2_f16c() ? 2 : 1;
  if (nk == 1)
    print_message("no AVX2/F16C: only the portable kernels are checked\n");
  for (int ki = 0; ki < nk; ki++)
    for (size_t n = 0; n <= 67; n++)
      for (size_t off = 0; off < 8; off++)
        for (int edges = 0; edges < 2; edges++)
          for (int rep = 0; rep < 4; rep++)
            check_kernels_once(ks[ki], n, off, edges);
}

static void test_large_streaming(void **state) {
  (void)state;
  if (!ampc_cpu_has_avx2_f16c())
    skip();
  /* > 4 MiB destinations take the non-temporal path; odd sizes and offsets
   * exercise its alignment head and scalar tail. */
  const size_t sizes[] = {(size_t)3 << 20, ((size_t)3 << 20) + 13};
  for (int s = 0; s < 2; s++)
    for (size_t off = 0; off < 3; off++)
      check_kernels_once(&ampc_convert_avx2, sizes[s], off, s);
}

/* FP32 -> dt with the scalar reference, as stored bits */
static uint32_t enc(ampc_dtype dt, uint32_t x, int sat) {
  switch (dt) {
  case AMPC_F16: return ampc_f32bits_to_f16bits(x);
  case AMPC_BF16: return ampc_f32bits_to_bf16bits(x);
  case AMPC_F8_E4M3: return ampc_f32bits_to_e4m3bits(x, sat);
  case AMPC_F8_E5M2: return ampc_f32bits_to_e5m2bits(x, sat);
  default: return x;
  }
}
static uint32_t dec(ampc_dtype dt, uint32_t b) {
  switch (dt) {
  case AMPC_F16: return ampc_f16bits_to_f32bits((uint16_t)b);
  case AMPC_BF16: return ampc_bf16bits_to_f32bits((uint16_t)b);
  case AMPC_F8_E4M3: return ampc_e4m3bits_to_f32bits((uint8_t)b);
  case AMPC_F8_E5M2: return ampc_e5m2bits_to_f32bits((uint8_t)b);
  default: return b;
  }
}
static uint32_t load(ampc_dtype dt, const void *p, size_t i) {
  switch (ampc_dtype_size(dt)) {
  case 4: return ((const uint32_t *)p)[i];
  case 2: return ((const uint16_t *)p)[i];
  default: return ((const uint8_t *)p)[i];
  }
}
static void store(ampc_dtype dt, void *p, size_t i, uint32_t v) {
  switch (ampc_dtype_size(dt)) {
  case 4: ((uint32_t *)p)[i] = v; break;
  case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
  default: ((uint8_t *)p)[i] = (uint8_t)v; break;
  }
}

static void test_all_pairs(void **state) {
  (void)state;
  enum { N = 3000 }; /* crosses the 1024-element chunk of the two-step path */
  static uint32_t src[N], dst[N];
  for (int s = 0; s < AMPC_DTYPE_COUNT; s++) {
    for (int d = 0; d < AMPC_DTYPE_COUNT; d++) {
      for (int sat = 0; sat < 2; sat++) {
        for (size_t i = 0; i < N; i++)
          store((ampc_dtype)s, src, i, i % 3 ? rnd32() : enc((ampc_dtype)s, pick((int)i, 1), 0));
        memset(dst, 0, sizeof dst);
        assert_int_equal(ampc_convert_ex(dst, (ampc_dtype)d, src, (ampc_dtype)s, N,
                                         sat ? AMPC_CONVERT_SATURATE : 0),
                         AMPC_OK);
        for (size_t i = 0; i < N; i++) {
          uint32_t v = load((ampc_dtype)s, src, i);
          uint32_t want = s == d ? v : enc((ampc_dtype)d, dec((ampc_dtype)s, v), sat);
          if (load((ampc_dtype)d, dst, i) != want)
            fail_msg("%s -> %s sat=%d i=%zu src=0x%x: got 0x%x want 0x%x",
                     ampc_dtype_name((ampc_dtype)s), ampc_dtype_name((ampc_dtype)d), sat, i, v,
                     load((ampc_dtype)d, dst, i), want);
        }
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tails),
      cmocka_unit_test(test_large_streaming),
      cmocka_unit_test(test_all_pairs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
