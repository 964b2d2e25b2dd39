/*
 * src/numeric/tally.c: the rounding tally (DESIGN.md section 1, numeric
 * formats): exact counts of what storing FP32 results into a dtype did
 * (flushed to zero, made subnormal, overflowed, inf, NaN, zeros, max |x|, a
 * histogram of floor(log2 |x|)). A tally is an object its owner creates and
 * binds to the thread that drives the kernels (ampc_tally_bind); the kernels
 * read the calling thread's tally once and hand it to their OpenMP workers
 * (ampc_tally_adopt), and count only when it is not NULL. Inside a tally each
 * thread adds to its own slot, claimed on its first count into that tally
 * (64 of them; further threads share a spill slot under a lock), so no
 * atomics run per value; ampc_tally_drain sums and clears the slots from
 * the owning thread between parallel regions (the barrier at the end of each
 * region orders the workers' writes before it). The counting loops below are the
 * portable ones; calls of 16 values or more are counted by tally_avx512.c on
 * CPUs with AVX-512 F/BW/VL and by tally_avx2.c on CPUs with AVX2 only (or
 * AMPC_ISA=avx2): the same counts (tests/test_tally.c). The diagnosis layer
 * (src/diag/telemetry.c) owns a tally per collector and attributes its
 * counts to branches; nothing here knows about branches.
 */
#include "ampc/tally.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numeric/convert_impl.h"
#include "numeric/numeric.h"
#include "numeric/tally_impl.h"

_Thread_local ampc_tally *ampc_tally_tls;

enum { TM_MAX_SLOTS = 64 };

/* A thread's counts. The histogram is kept four times over, value i going to
 * copy i % 4, so that runs of values with the same exponent (the usual case)
 * do not serialise on one counter's store-to-load latency; drain sums them. */
typedef struct tm_slot {
  ampc_tm_stats s; /* everything but the histogram */
  uint64_t h4[4][AMPC_TM_BINS];
} tm_slot;

/* Slot i belongs to the thread whose id is owner[i] (0: free), claimed by
 * the thread's first count into this tally; threads beyond TM_MAX_SLOTS (a
 * process can make more over its life than are alive at once: each thread
 * that starts OpenMP work gets its own team of workers) share the spill slot
 * under a lock. serial tells tallies apart for the threads' cached slot
 * numbers (a freed tally's address can come back). */
struct ampc_tally {
  uint64_t serial;
  _Atomic uint64_t owner[TM_MAX_SLOTS];
  atomic_flag spill_lock;
  tm_slot slot[TM_MAX_SLOTS + 1]; /* the last: the spill slot */
};

static atomic_uint_fast64_t g_thread_ids, g_serials;
static _Thread_local uint64_t tls_id;     /* this thread's id, 0 until drawn */
static _Thread_local uint64_t tls_serial; /* the tally tls_ix is a slot of */
static _Thread_local int tls_ix;

/* the calling thread's slot of t, claimed on first use; the spill slot is
 * returned locked (slot_leave unlocks it) */
static tm_slot *slot_enter(ampc_tally *t) {
  if (tls_serial != t->serial) {
    if (tls_id == 0)
      tls_id = (uint64_t)atomic_fetch_add(&g_thread_ids, 1) + 1;
    int ix = TM_MAX_SLOTS;
    for (int i = 0; i < TM_MAX_SLOTS && ix == TM_MAX_SLOTS; i++) {
      uint64_t o = atomic_load(&t->owner[i]);
      if (o == tls_id || (o == 0 && atomic_compare_exchange_strong(&t->owner[i], &o, tls_id)))
        ix = i;
    }
    tls_serial = t->serial, tls_ix = ix;
  }
  if (tls_ix == TM_MAX_SLOTS)
    while (atomic_flag_test_and_set_explicit(&t->spill_lock, memory_order_acquire))
      ;
  return &t->slot[tls_ix];
}

static void slot_leave(ampc_tally *t, const tm_slot *slot) {
  if (slot == &t->slot[TM_MAX_SLOTS])
    atomic_flag_clear_explicit(&t->spill_lock, memory_order_release);
}

ampc_tally *ampc_tally_create(void) {
  ampc_tally *t = calloc(1, sizeof(ampc_tally));
  if (!t)
    return NULL;
  t->serial = (uint64_t)atomic_fetch_add(&g_serials, 1) + 1;
  for (int i = 0; i < TM_MAX_SLOTS; i++)
    atomic_init(&t->owner[i], 0);
  atomic_flag_clear(&t->spill_lock);
  return t;
}

void ampc_tally_free(ampc_tally *t) {
  if (t && ampc_tally_tls == t)
    ampc_tally_tls = NULL;
  free(t);
}

ampc_tally *ampc_tally_bind(ampc_tally *t) {
  ampc_tally *was = ampc_tally_tls;
  ampc_tally_tls = t;
  return was;
}

ampc_tally *ampc_tally_current(void) { return ampc_tally_tls; }

/* The FP32 side of one value: zeros, histogram, max |x| (as bits: for finite
 * non-negative floats the integer order is the float order). */
#define TM_SRC(ax)                                                                                 \
  do {                                                                                             \
    if ((ax) < 0x7F800000u) {                                                                      \
      if ((ax) == 0)                                                                               \
        zeros++;                                                                                   \
      else                                                                                         \
        h4[i & 3][(ax) >> 23]++;                                                                   \
      maxbits = (ax) > maxbits ? (ax) : maxbits;                                                   \
    }                                                                                              \
  } while (0)

/* binary16 and bfloat16 share the layout sign | exponent | mantissa with an
 * all-ones exponent for inf/NaN; emask/mmask select the fields. */
static void count16(tm_slot *slot, const float *src, const uint16_t *dst, size_t n, uint32_t emask,
                    uint32_t inf_bits) {
  ampc_tm_stats *s = &slot->s;
  uint64_t(*h4)[AMPC_TM_BINS] = slot->h4;
  /* the rounding counts: branch-free, so the compiler vectorises them */
  uint32_t under = 0, sub = 0, over = 0, inf = 0, nan = 0;
  const uint32_t *x32 = (const uint32_t *)(const void *)src;
  for (size_t i = 0; i < n; i++) {
    const uint32_t ax = x32[i] & 0x7FFFFFFFu;
    const uint32_t h = dst[i] & 0x7FFFu;
    const uint32_t finite_in = ax < 0x7F800000u;
    under += finite_in & (ax != 0) & (h == 0);
    sub += (h != 0) & ((h & emask) == 0);
    inf += h == inf_bits;
    nan += h > inf_bits;
    over += finite_in & (h >= inf_bits);
  }
  /* the FP32 side: histogram, zeros, max |x| */
  uint64_t zeros = 0;
  uint32_t maxbits = ampc_f32_bits(s->r.max_abs);
  for (size_t i = 0; i < n; i++) {
    const uint32_t ax = x32[i] & 0x7FFFFFFFu;
    TM_SRC(ax);
  }
  s->r.underflow += under, s->r.subnormal += sub, s->r.overflow += over;
  s->r.inf += inf, s->r.nan += nan, s->zeros += zeros;
  s->r.max_abs = ampc_bits_f32(maxbits);
}

static void count32(tm_slot *slot, const float *src, size_t n) {
  ampc_tm_stats *s = &slot->s;
  uint64_t(*h4)[AMPC_TM_BINS] = slot->h4;
  uint64_t sub = 0, inf = 0, nan = 0, zeros = 0;
  uint32_t maxbits = ampc_f32_bits(s->r.max_abs);
  for (size_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, &src[i], 4);
    const uint32_t ax = x & 0x7FFFFFFFu;
    sub += (ax != 0) & (ax < 0x00800000u);
    inf += ax == 0x7F800000u;
    nan += ax > 0x7F800000u;
    TM_SRC(ax);
  }
  s->r.subnormal += sub, s->r.inf += inf, s->r.nan += nan, s->zeros += zeros;
  s->r.max_abs = ampc_bits_f32(maxbits);
}

/* the vector loops' counts into the slot */
static void acc_into(tm_slot *slot, const ampc_tally_acc *a) {
  ampc_tm_stats *s = &slot->s;
  s->r.underflow += a->under, s->r.subnormal += a->sub, s->r.overflow += a->over;
  s->r.inf += a->inf, s->r.nan += a->nan, s->zeros += a->zeros;
  s->r.max_abs = ampc_bits_f32(a->maxbits);
}

/* Below this many values the portable loops win (the vector loops end with
 * reductions); the single-value stores of ampc_elem_store are the common case. */
enum { TM_VECTOR_MIN = 16 };

static void count_slot(tm_slot *slot, const float *src, const void *dst, ampc_dtype dt, size_t n,
                       int path) {
  ampc_tm_stats *s = &slot->s;
  if (path != AMPC_TALLY_PORTABLE && n >= TM_VECTOR_MIN &&
      (dt == AMPC_F16 || dt == AMPC_BF16 || dt == AMPC_F32)) {
    /* a short tail past the last block (64 values, AVX2: 32) costs less
     * value by value */
    const size_t block = path == AMPC_TALLY_AVX512 ? 64 : 32;
    const size_t tail = n % block < TM_VECTOR_MIN / 2 ? n % block : 0;
    if (tail) {
      count_slot(slot, src + (n - tail), (const char *)dst + (n - tail) * (dt == AMPC_F32 ? 4 : 2),
                 dt, tail, AMPC_TALLY_PORTABLE);
      n -= tail;
    }
    ampc_tally_acc a = {.maxbits = ampc_f32_bits(s->r.max_abs)};
    const uint16_t bits = dt == AMPC_F16 ? 0x7C00u : 0x7F80u; /* exponent mask = |inf| */
    if (path == AMPC_TALLY_AVX512) {
      if (dt == AMPC_F32)
        ampc_tally_count32_avx512(&a, slot->h4[0], src, n);
      else
        ampc_tally_count16_avx512(&a, slot->h4[0], src, dst, n, bits, bits);
    } else {
      if (dt == AMPC_F32)
        ampc_tally_count32_avx2(&a, slot->h4[0], src, n);
      else
        ampc_tally_count16_avx2(&a, slot->h4[0], src, dst, n, bits, bits);
    }
    acc_into(slot, &a);
    s->r.count += n;
    return;
  }
  switch (dt) {
  case AMPC_F16: count16(slot, src, dst, n, 0x7C00u, 0x7C00u); break;
  case AMPC_BF16: count16(slot, src, dst, n, 0x7F80u, 0x7F80u); break;
  case AMPC_F32: count32(slot, src, n); break;
  default: { /* FP8: rare, through the generic classification */
    uint64_t(*h4)[AMPC_TM_BINS] = slot->h4;
    const unsigned char *p = dst;
    uint64_t zeros = 0;
    uint32_t maxbits = ampc_f32_bits(s->r.max_abs);
    for (size_t i = 0; i < n; i++) {
      const uint32_t ax = ampc_f32_bits(src[i]) & 0x7FFFFFFFu;
      const ampc_fpclass cls = ampc_classify(dt, p[i]);
      const int finite_in = ax < 0x7F800000u;
      s->r.underflow += finite_in && ax != 0 && cls == AMPC_CLASS_ZERO;
      s->r.subnormal += cls == AMPC_CLASS_SUBNORMAL;
      s->r.overflow += finite_in && (cls == AMPC_CLASS_INF || cls == AMPC_CLASS_NAN);
      s->r.inf += cls == AMPC_CLASS_INF;
      s->r.nan += cls == AMPC_CLASS_NAN;
      TM_SRC(ax);
    }
    s->zeros += zeros;
    s->r.max_abs = ampc_bits_f32(maxbits);
  } break;
  }
  s->r.count += n;
}

int ampc_tally_path(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    v = ampc_use_avx512() ? AMPC_TALLY_AVX512
        : ampc_use_avx2() ? AMPC_TALLY_AVX2
                          : AMPC_TALLY_PORTABLE;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

void ampc_tally_count(ampc_tally *t, const float *src, const void *dst, ampc_dtype dt, size_t n) {
  tm_slot *slot = slot_enter(t);
  count_slot(slot, src, dst, dt, n, ampc_tally_path());
  slot_leave(t, slot);
}

int ampc_tally_count_path(ampc_tally *t, const float *src, const void *dst, ampc_dtype dt, size_t n,
                          int path) {
  if ((path == AMPC_TALLY_AVX512 && !ampc_use_avx512()) ||
      (path == AMPC_TALLY_AVX2 && !ampc_use_avx2()) ||
      (path != AMPC_TALLY_AVX512 && path != AMPC_TALLY_AVX2))
    path = AMPC_TALLY_PORTABLE;
  tm_slot *slot = slot_enter(t);
  count_slot(slot, src, dst, dt, n, path);
  slot_leave(t, slot);
  return path;
}

void ampc_tally_add(ampc_tally *t, const ampc_tm_stats *s) {
  if (!t || !s)
    return;
  tm_slot *slot = slot_enter(t);
  ampc_round_stats_merge(&slot->s.r, &s->r);
  slot->s.zeros += s->zeros;
  for (int b = 0; b < AMPC_TM_BINS; b++)
    slot->h4[0][b] += s->hist[b];
  slot_leave(t, slot);
}

void ampc_tm_stats_merge(ampc_tm_stats *into, const ampc_tm_stats *from) {
  ampc_round_stats_merge(&into->r, &from->r);
  into->zeros += from->zeros;
  for (int i = 0; i < AMPC_TM_BINS; i++)
    into->hist[i] += from->hist[i];
}

int ampc_tm_bin_of_log2(int e) { return e + 127 < 0 ? 0 : e + 127 > 255 ? 255 : e + 127; }

void ampc_tally_drain(ampc_tally *tally, ampc_tm_stats *out) {
  memset(out, 0, sizeof *out);
  if (!tally)
    return;
  for (int i = 0; i <= TM_MAX_SLOTS; i++) {
    tm_slot *t = &tally->slot[i];
    if (t->s.r.count) {
      for (int k = 0; k < 4; k++)
        for (int b = 0; b < AMPC_TM_BINS; b++)
          t->s.hist[b] += t->h4[k][b];
      ampc_tm_stats_merge(out, &t->s);
      memset(t, 0, sizeof *t);
    }
  }
}
