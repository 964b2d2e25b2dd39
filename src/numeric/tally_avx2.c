/*
 * src/numeric/tally_avx2.c: the rounding tally's counting loops (tally.c) on
 * AVX2, 32 values at a time: the method of tally_avx512.c with 256-bit
 * registers and movemask bit masks instead of mask registers. Compiled with
 * -mavx2 -mfma -mf16c -mpopcnt; tally.c calls it only when ampc_use_avx2()
 * said yes (every AVX2 CPU has POPCNT), and the counts are the portable
 * loops' exactly (tests/test_tally.c compares the two on random and
 * edge-case data).
 *
 * The class counts are population counts of movemask bit masks: the four
 * 8-lane FP32 compares of a block give 8 bits each, the two 16-lane compares
 * of the stored halves are packed to bytes (one VPACKSSWB) first. That pack
 * works per 128-bit half, so the 32 bits come in the order values 0-7, 16-23,
 * 8-15, 24-31, and the FP32 side's masks are put together in the same order.
 * The histogram of FP32 exponents: the 32 exponents of a block are packed into
 * the 32 bytes of one register, the lanes not counted (zero, inf, NaN, past
 * the end) made 255; each of the SWEEP bins from the block's largest exponent
 * down gets the population count of one byte compare, and the values below
 * those bins are counted one by one. The last partial block is copied into a
 * padded block whose extra lanes are NaN stored as +0, which no count but
 * count32's NaN count selects (that one is corrected).
 */
#include <immintrin.h>
#include <string.h>

#include "numeric/tally_impl.h"

/* bins counted by byte compares in each block, from its largest exponent
 * down (the blocks of a training run span about 8) */
enum { SWEEP = 16, BLOCK = 32 };

/* the 32-bit movemasks of the four 8-lane registers in the pack order */
static inline uint32_t order32(const __m256i m[4]) {
  return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m[0])) |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m[2])) << 8 |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m[1])) << 16 |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m[3])) << 24;
}

/* two 16-lane compare results (values 0-15, 16-31) as 32 bits in the pack order */
static inline uint32_t order16(__m256i m0, __m256i m1) {
  return (uint32_t)_mm256_movemask_epi8(_mm256_packs_epi16(m0, m1));
}

static inline uint32_t hmax_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  return (uint32_t)_mm_cvtsi128_si32(m);
}

static inline unsigned popcnt(uint32_t m) { return (unsigned)_mm_popcnt_u32(m); }

/* The FP32 side of a block of 32 values whose |x| bits are a[0..3]: *zeros,
 * max |x| among the finite (*vmax), histogram; returns the finite lanes'
 * mask and *valid the finite non-zero ones' (pack order) */
static inline uint32_t fp32_side(uint64_t *zeros, uint64_t *hist, __m256i *vmax, const __m256i a[4],
                                 uint32_t *valid_out) {
  const __m256i inf = _mm256_set1_epi32(0x7F800000), zero = _mm256_setzero_si256();
  __m256i fin[4], z[4], e[4];
  __m256i bmax = zero; /* the block's largest finite |x| bits, per lane */
  for (int q = 0; q < 4; q++) {
    /* |x| < 2^31: the signed compares are the unsigned ones */
    fin[q] = _mm256_cmpgt_epi32(inf, a[q]);
    z[q] = _mm256_cmpeq_epi32(a[q], zero);
    bmax = _mm256_max_epu32(bmax, _mm256_and_si256(a[q], fin[q]));
    /* the exponent; zeros get 511, inf and NaN have 255 (both 255 as bytes) */
    e[q] = _mm256_srli_epi32(_mm256_or_si256(a[q], z[q]), 23);
  }
  *vmax = _mm256_max_epu32(*vmax, bmax);
  const uint32_t FIN = order32(fin), Z = order32(z);
  *zeros += popcnt(Z);
  const uint32_t valid = FIN & ~Z;
  *valid_out = valid;
  if (!valid)
    return FIN;
  /* the exponent bytes (in an order of their own: the lanes not counted are
   * told apart by their 255, not by the masks) */
  const __m256i E =
      _mm256_packus_epi16(_mm256_packus_epi32(e[0], e[1]), _mm256_packus_epi32(e[2], e[3]));
  /* the largest exponent of the block's finite lanes (a zero among them
   * has the smallest, 0), and the SWEEP bins from it down: one byte compare
   * each, a fixed count (no branch on the data); lanes below them one by one */
  const unsigned emax = hmax_epu32(bmax) >> 23;
  uint32_t rest;
  const __m256i not_counted = _mm256_cmpeq_epi8(E, _mm256_set1_epi8((char)-1));
  if (emax >= SWEEP - 1) {
    /* emax <= 254, so a 255 lane's difference is emax + 1 >= SWEEP */
    const __m256i D = _mm256_sub_epi8(_mm256_set1_epi8((char)emax), E);
    uint64_t *h = hist + emax;
    _Pragma("GCC unroll 16") for (int j = 0; j < SWEEP; j++) h[-j] +=
        popcnt((uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(D, _mm256_set1_epi8((char)j))));
    const __m256i swept = _mm256_cmpeq_epi8(_mm256_min_epu8(D, _mm256_set1_epi8(SWEEP - 1)), D);
    rest = ~(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(swept, not_counted));
  } else {
    rest = ~(uint32_t)_mm256_movemask_epi8(not_counted);
  }
  if (rest) {
    _Alignas(32) uint8_t eb[32];
    _mm256_store_si256((__m256i *)(void *)eb, E);
    do {
      hist[eb[__builtin_ctz(rest)]]++;
      rest &= rest - 1;
    } while (rest);
  }
  return FIN;
}

/* the counts of count16 */
typedef struct c16 {
  uint64_t under, sub, over, inf, nan, zeros;
} c16;

static inline void block16(c16 *c, uint64_t *hist, __m256i *vmax, const float *src,
                           const uint16_t *dst, uint16_t emask, uint16_t inf_bits) {
  const __m256i abs32 = _mm256_set1_epi32(0x7FFFFFFF), abs16 = _mm256_set1_epi16(0x7FFF);
  const __m256i em = _mm256_set1_epi16((short)emask), infh = _mm256_set1_epi16((short)inf_bits);
  const __m256i zero = _mm256_setzero_si256();
  __m256i a[4];
  for (int q = 0; q < 4; q++)
    a[q] =
        _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * q)), abs32);
  uint32_t valid;
  const uint32_t fin = fp32_side(&c->zeros, hist, vmax, a, &valid);
  __m256i h[2], hz[2], e0[2], hi[2], hn[2];
  for (int q = 0; q < 2; q++) {
    /* |h| < 2^15: the signed compares are the unsigned ones */
    h[q] =
        _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(dst + 16 * q)), abs16);
    hz[q] = _mm256_cmpeq_epi16(h[q], zero);
    e0[q] = _mm256_cmpeq_epi16(_mm256_and_si256(h[q], em), zero);
    hi[q] = _mm256_cmpeq_epi16(h[q], infh);
    hn[q] = _mm256_cmpgt_epi16(h[q], infh);
  }
  const uint32_t HZ = order16(hz[0], hz[1]), E0 = order16(e0[0], e0[1]);
  const uint32_t HI = order16(hi[0], hi[1]), HN = order16(hn[0], hn[1]);
  /* flushed: a finite non-zero value stored as zero */
  c->under += popcnt(valid & HZ);
  c->sub += popcnt(E0 & ~HZ);
  c->inf += popcnt(HI);
  c->nan += popcnt(HN);
  c->over += popcnt(fin & (HI | HN));
}

/* a last partial block of r < 32 values, padded: NaN read, +0 stored */
static void pad_block(float *src_pad, uint16_t *dst_pad, const float *src, const uint16_t *dst,
                      size_t r) {
  const uint32_t qnan = 0x7FFFFFFFu;
  for (size_t i = r; i < BLOCK; i++)
    memcpy(&src_pad[i], &qnan, 4);
  memcpy(src_pad, src, r * sizeof *src);
  if (dst_pad) {
    memset(dst_pad, 0, BLOCK * sizeof *dst_pad);
    memcpy(dst_pad, dst, r * sizeof *dst);
  }
}

void ampc_tally_count16_avx2(ampc_tally_acc *acc, uint64_t *hist, const float *src,
                             const uint16_t *dst, size_t n, uint16_t emask, uint16_t inf_bits) {
  __m256i vmax = _mm256_set1_epi32((int)acc->maxbits);
  c16 c = {0};
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    block16(&c, hist, &vmax, src + i, dst + i, emask, inf_bits);
  if (i < n) {
    float sp[BLOCK];
    uint16_t dp[BLOCK];
    pad_block(sp, dp, src + i, dst + i, n - i);
    block16(&c, hist, &vmax, sp, dp, emask, inf_bits);
  }
  acc->under += c.under, acc->sub += c.sub, acc->over += c.over, acc->inf += c.inf;
  acc->nan += c.nan, acc->zeros += c.zeros;
  acc->maxbits = hmax_epu32(vmax);
}

static inline void block32(uint64_t cnt[4], uint64_t *hist, __m256i *vmax, const float *src) {
  const __m256i abs32 = _mm256_set1_epi32(0x7FFFFFFF), zero = _mm256_setzero_si256();
  const __m256i infb = _mm256_set1_epi32(0x7F800000), minn = _mm256_set1_epi32(0x00800000);
  __m256i a[4];
  uint32_t sub = 0, inf = 0, nan = 0;
  for (int q = 0; q < 4; q++) {
    a[q] =
        _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * q)), abs32);
    const __m256i s =
        _mm256_andnot_si256(_mm256_cmpeq_epi32(a[q], zero), _mm256_cmpgt_epi32(minn, a[q]));
    sub += popcnt((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(s)));
    inf +=
        popcnt((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[q], infb))));
    nan +=
        popcnt((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a[q], infb))));
  }
  cnt[0] += sub, cnt[1] += inf, cnt[2] += nan;
  uint32_t valid;
  (void)fp32_side(&cnt[3], hist, vmax, a, &valid);
}

void ampc_tally_count32_avx2(ampc_tally_acc *acc, uint64_t *hist, const float *src, size_t n) {
  __m256i vmax = _mm256_set1_epi32((int)acc->maxbits);
  uint64_t cnt[4] = {0}; /* sub, inf, nan, zeros */
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    block32(cnt, hist, &vmax, src + i);
  if (i < n) {
    float sp[BLOCK];
    pad_block(sp, NULL, src + i, NULL, n - i);
    block32(cnt, hist, &vmax, sp);
    cnt[2] -= BLOCK - (n - i); /* the padding's NaNs */
  }
  acc->sub += cnt[0], acc->inf += cnt[1], acc->nan += cnt[2], acc->zeros += cnt[3];
  acc->maxbits = hmax_epu32(vmax);
}
