/*
 * src/numeric/tally_avx512.c: the rounding tally's counting loops (tally.c)
 * on AVX-512 F/BW/VL, 64 values at a time. Compiled with -mavx512f -mavx512bw
 * -mavx512vl; tally.c calls it only when ampc_use_avx512() said yes, and
 * the counts are the portable loops' exactly (tests/test_tally.c compares
 * the two on random and edge-case data).
 *
 * The class counts (flushed, subnormal, overflow, inf, NaN, zeros) are lane
 * masks and their population counts. The histogram of FP32 exponents avoids
 * one memory increment per value: the 64 exponents of a block go into the
 * 64 bytes of one register, and each of the SWEEP bins from the block's
 * largest exponent down gets the population count of one byte compare.
 * A block of a tensor spans few binades (about 8 bins in the training runs
 * measured, rarely more than 16), so this is a fixed few instructions per
 * block; the values below those bins are counted one by one. The tail of n
 * (n mod 64) goes through the same code with its lanes masked.
 */
#include <immintrin.h>

#include "numeric/tally_impl.h"

/* bins counted by byte compares in each block, from its largest exponent
 * down (the blocks of a training run span about 8) */
enum { SWEEP = 16 };

/* the 16 exponent fields as bytes: the 16-bit mask's lanes (finite, non-zero)
 * keep theirs, the others get 255 */
static inline __m128i exp_bytes(__m512i ax, __mmask16 valid) {
  const __m512i e = _mm512_mask_srli_epi32(_mm512_set1_epi32(255), valid, ax, 23);
  return _mm512_cvtepi32_epi8(e);
}

/* The FP32 side of a block of 64 values whose |x| bits are a[0..3] (lanes
 * outside `live` ignored): *zeros, max |x| among the finite, histogram. */
static inline void fp32_side(uint64_t *zeros, uint64_t *hist, __m512i *vmax, const __m512i a[4],
                             __mmask64 live, __mmask64 *fin_out, __mmask64 *valid_out) {
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  __mmask16 fin[4], nz[4];
  __m512i bmax = _mm512_setzero_si512(); /* the block's largest finite |x| bits */
  for (int q = 0; q < 4; q++) {
    const __mmask16 l = (__mmask16)(live >> (16 * q));
    fin[q] = _mm512_mask_cmplt_epu32_mask(l, a[q], inf);
    nz[q] = _mm512_test_epi32_mask(a[q], a[q]);
    bmax = _mm512_mask_max_epu32(bmax, fin[q], bmax, a[q]);
  }
  *vmax = _mm512_max_epu32(*vmax, bmax);
  const __mmask64 FIN = ((uint64_t)fin[3] << 48) | ((uint64_t)fin[2] << 32) |
                        ((uint64_t)fin[1] << 16) | (uint64_t)fin[0];
  const __mmask64 NZ =
      ((uint64_t)nz[3] << 48) | ((uint64_t)nz[2] << 32) | ((uint64_t)nz[1] << 16) | (uint64_t)nz[0];
  const uint64_t valid = FIN & NZ;
  *zeros += (uint64_t)_mm_popcnt_u64(FIN & ~NZ);
  *fin_out = FIN, *valid_out = valid;
  if (!valid)
    return;
  /* the exponent bytes of the block (255 in the lanes not counted) */
  __m512i E = _mm512_castsi128_si512(exp_bytes(a[0], (__mmask16)valid));
  E = _mm512_inserti32x4(E, exp_bytes(a[1], (__mmask16)(valid >> 16)), 1);
  E = _mm512_inserti32x4(E, exp_bytes(a[2], (__mmask16)(valid >> 32)), 2);
  E = _mm512_inserti32x4(E, exp_bytes(a[3], (__mmask16)(valid >> 48)), 3);
  /* the largest exponent of the counted lanes (a zero among them has the
   * smallest, 0), and the SWEEP bins from it down: one byte compare each,
   * a fixed count (no branch on the data); lanes below them one by one */
  const unsigned emax = (unsigned)_mm512_reduce_max_epu32(bmax) >> 23;
  uint64_t rest = valid;
  if (emax >= SWEEP - 1) {
    const __m512i D = _mm512_sub_epi8(_mm512_set1_epi8((char)emax), E);
    uint64_t *h = hist + emax;
    _Pragma("GCC unroll 16") for (int j = 0; j < SWEEP; j++) h[-j] +=
        (uint64_t)_mm_popcnt_u64(_mm512_mask_cmpeq_epi8_mask(valid, D, _mm512_set1_epi8((char)j)));
    rest &= ~(uint64_t)_mm512_cmplt_epu8_mask(D, _mm512_set1_epi8(SWEEP));
  }
  if (rest) {
    _Alignas(64) uint8_t eb[64];
    _mm512_store_si512((void *)eb, E);
    do {
      hist[eb[__builtin_ctzll(rest)]]++;
      rest &= rest - 1;
    } while (rest);
  }
}

static inline uint32_t reduce_max(__m512i v) { return (uint32_t)_mm512_reduce_max_epu32(v); }

static inline __mmask64 tail_mask(size_t r) {
  return r >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << r) - 1);
}

void ampc_tally_count16_avx512(ampc_tally_acc *acc, uint64_t *hist, const float *src,
                               const uint16_t *dst, size_t n, uint16_t emask, uint16_t inf_bits) {
  const __m512i abs32 = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i abs16 = _mm512_set1_epi16(0x7FFF), em = _mm512_set1_epi16((short)emask);
  const __m512i infh = _mm512_set1_epi16((short)inf_bits);
  __m512i vmax = _mm512_set1_epi32((int)acc->maxbits);
  uint64_t under = 0, sub = 0, over = 0, inf = 0, nan = 0, zeros = 0;
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 live = tail_mask(n - i);
    __m512i a[4];
    for (int q = 0; q < 4; q++)
      a[q] = _mm512_and_si512(
          _mm512_maskz_loadu_epi32((__mmask16)(live >> (16 * q)), src + i + 16 * q), abs32);
    __mmask64 fin, valid;
    fp32_side(&zeros, hist, &vmax, a, live, &fin, &valid);
    /* the stored side: 2 x 32 halves (masked-off lanes read as +0, which
     * none of these masks but "zero" selects, and that only with `valid`) */
    uint64_t hz = 0, e0 = 0, hi = 0, hn = 0;
    for (int q = 0; q < 2; q++) {
      const __mmask32 l = (__mmask32)(live >> (32 * q));
      const __m512i h = _mm512_and_si512(_mm512_maskz_loadu_epi16(l, dst + i + 32 * q), abs16);
      hz |= (uint64_t)_mm512_testn_epi16_mask(h, h) << (32 * q);
      e0 |= (uint64_t)_mm512_testn_epi16_mask(h, em) << (32 * q);
      hi |= (uint64_t)_mm512_cmpeq_epi16_mask(h, infh) << (32 * q);
      hn |= (uint64_t)_mm512_cmpgt_epu16_mask(h, infh) << (32 * q);
    }
    under += (uint64_t)_mm_popcnt_u64(valid & hz);
    sub += (uint64_t)_mm_popcnt_u64(e0 & ~hz);
    inf += (uint64_t)_mm_popcnt_u64(hi);
    nan += (uint64_t)_mm_popcnt_u64(hn);
    over += (uint64_t)_mm_popcnt_u64(fin & (hi | hn));
  }
  acc->under += under, acc->sub += sub, acc->over += over, acc->inf += inf, acc->nan += nan;
  acc->zeros += zeros;
  acc->maxbits = reduce_max(vmax);
}

void ampc_tally_count32_avx512(ampc_tally_acc *acc, uint64_t *hist, const float *src, size_t n) {
  const __m512i abs32 = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i infb = _mm512_set1_epi32(0x7F800000), minn = _mm512_set1_epi32(0x00800000);
  __m512i vmax = _mm512_set1_epi32((int)acc->maxbits);
  uint64_t sub = 0, inf = 0, nan = 0, zeros = 0;
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 live = tail_mask(n - i);
    __m512i a[4];
    for (int q = 0; q < 4; q++) {
      const __mmask16 l = (__mmask16)(live >> (16 * q));
      a[q] = _mm512_and_si512(_mm512_maskz_loadu_epi32(l, src + i + 16 * q), abs32);
      const __mmask16 nz = _mm512_test_epi32_mask(a[q], a[q]);
      sub += (unsigned)_mm_popcnt_u32(_mm512_mask_cmplt_epu32_mask(nz, a[q], minn));
      inf += (unsigned)_mm_popcnt_u32(_mm512_cmpeq_epi32_mask(a[q], infb));
      nan += (unsigned)_mm_popcnt_u32(_mm512_cmpgt_epu32_mask(a[q], infb));
    }
    __mmask64 fin, valid;
    fp32_side(&zeros, hist, &vmax, a, live, &fin, &valid);
  }
  acc->sub += sub, acc->inf += inf, acc->nan += nan, acc->zeros += zeros;
  acc->maxbits = reduce_max(vmax);
}
