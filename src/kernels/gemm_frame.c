/*
 * src/kernels/gemm_frame.c: the blocked GEMM's framework (FP32 accumulation
 * for F16/BF16/F32 operands): the task grid, the cache blocking, the loops,
 * the threads and the workspace, around a registered micro-kernel and its
 * packing and output kernels (gemm_impl.h: ampc_gemm_ukernel,
 * ampc_gemm_packer). Portable C: it names no instruction set; everything
 * vector is behind those descriptors.
 *
 * Structure (Goto & van de Geijn 2008; BLIS's frame): C is cut into tasks of
 * up to MT x NC (MT = TASK_BLOCKS * MC rows, per batch matrix), spread over
 * OpenMP threads; a task owns an FP32 block Cs of partial sums (L2/L3). For
 * each KC slice of K the task packs its KC x NC panel of op(B) once, as
 * NR-column micro-panels; then for each MC block of its rows packs MC x KC of
 * op(A) into MR-row micro-panels (L2) and runs the MR x NR micro-kernel over
 * every (B micro-panel, A micro-panel) pair, the B micro-panel staying in L1
 * down the A block. Packing widens F16 and BF16 to FP32 exactly, so the
 * micro-kernel is a plain FP32 FMA kernel that reads half the bytes from the
 * caller's matrices. After the last slice the output kernel forms alpha*Cs +
 * beta*C in FP32 and rounds once into C's dtype (or a fused micro-kernel does
 * so on the last slice). Edge tiles are packed with zero padding, computed at
 * full size into the padded Cs, and never stored beyond M x N.
 */
#include "internal.h"

#include <omp.h>
#include <stdlib.h>

#include "kernels/gemm_impl.h"

/* TASK_BLOCKS: a task covers up to this many MC blocks of rows, so that the B
 * panel it packs is reused over TASK_BLOCKS * MC rows. The micro-tile (MR x
 * NR) comes from the micro-kernel descriptor. SLACK: the floats past a packed
 * panel that a packing kernel may write (ampc_gemm_packer). */
enum { SLACK = 16, TASK_BLOCKS = 4 };

typedef struct {
  int64_t mr, nr;                       /* the micro-tile */
  int64_t mt, mc, kc, nc, ldcs, tm, tn; /* task rows, A block rows, ..., task grid */
  size_t ap_floats, bp_floats, cs_floats;
} plan;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Estimated time of one thread's share when the tasks of a tm x tn grid (per
 * batch matrix) of an m x n product run on nthreads (<= GRID_THREADS)
 * threads: each task costs its padded rows x columns (the multiply-adds per
 * unit of K) plus PACK_W per packed row and column (each task packs its own
 * A rows and B columns), and the tasks are dealt largest first to the least
 * loaded thread (LPT, a model of the dynamic schedule). */
enum { PACK_W = 8, GRID_THREADS = 8, GRID_TASKS_PER_THREAD = 4 };
static double grid_makespan(int64_t m, int64_t n, int64_t batch, int64_t mt, int64_t nc, int64_t mr,
                            int64_t nr, int nthreads) {
  double load[GRID_THREADS] = {0};
  const int64_t tm = ceil_div(m, mt), tn = ceil_div(n, nc);
  /* task sizes: full, last row, last column, corner (counts of each) */
  const int64_t rl = round_up(m - (tm - 1) * mt, mr), cl = round_up(n - (tn - 1) * nc, nr);
  const int64_t rows[2] = {mt, rl}, cols[2] = {nc, cl};
  const int64_t cnt_r[2] = {tm - 1, 1}, cnt_c[2] = {tn - 1, 1};
  double cost[4];
  int64_t count[4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      cost[i * 2 + j] = (double)rows[i] * (double)cols[j] + PACK_W * (double)(rows[i] + cols[j]);
      count[i * 2 + j] = batch * cnt_r[i] * cnt_c[j];
    }
  for (int rep = 0; rep < 4; rep++) { /* largest first */
    int best = -1;
    for (int q = 0; q < 4; q++)
      if (count[q] > 0 && (best < 0 || cost[q] > cost[best]))
        best = q;
    if (best < 0)
      break;
    for (int64_t t = 0; t < count[best]; t++) {
      int lo = 0;
      for (int i = 1; i < nthreads; i++)
        if (load[i] < load[lo])
          lo = i;
      load[lo] += cost[best];
    }
    count[best] = 0;
  }
  double mk = 0;
  for (int i = 0; i < nthreads; i++)
    mk = load[i] > mk ? load[i] : mk;
  return mk;
}

/* Block sizes for this problem: the configured ones, shrunk to the matrix.
 * When there are few tasks for the threads, the task grid (task height MT,
 * width NC) is re-cut: on up to GRID_THREADS threads to the grid of at most
 * GRID_TASKS_PER_THREAD tasks a thread with the least estimated time
 * (grid_makespan), e.g. a 128 x 128 product on 2 threads in two 128 x 64
 * tasks rather than 72 and 56 rows (a search of at most 64 grids of at most
 * 32 tasks); on more threads to the first grid whose task count the threads
 * divide. The grid only partitions C: the bits do not depend on it. */
static plan make_plan(const ampc_gemm_args *g, const ampc_gemm_config *cfg, int nthreads,
                      const ampc_gemm_ukernel *uk) {
  plan P;
  const int64_t MR = uk->mr, NR = uk->nr;
  P.mr = MR, P.nr = NR;
  /* KC is the configured one whatever the micro-tile: it fixes where each
   * element's FP32 sum is split, so every micro-kernel gives the same bits */
  P.kc = min64(g->k, cfg->kc);
  P.mc = min64(round_up(g->m, MR), round_up(cfg->mc, MR));
  P.mt = min64(round_up(g->m, MR), round_up(cfg->mc, MR) * TASK_BLOCKS);
  P.nc = min64(round_up(g->n, NR), round_up(cfg->nc, NR));
  P.tm = ceil_div(g->m, P.mt);
  P.tn = ceil_div(g->n, P.nc);
  const int64_t ntasks = g->batch * P.tm * P.tn;
  if (nthreads > 1 && nthreads <= GRID_THREADS && ntasks < GRID_TASKS_PER_THREAD * nthreads) {
    double best = grid_makespan(g->m, g->n, g->batch, P.mt, P.nc, MR, NR, nthreads);
    const int64_t tm_max = min64(ceil_div(g->m, MR), P.tm * 8);
    const int64_t tn_max = min64(ceil_div(g->n, NR), P.tn * 8);
    for (int64_t tm = P.tm; tm <= tm_max; tm++)
      for (int64_t tn = P.tn; tn <= tn_max; tn++) {
        const int64_t mt = round_up(ceil_div(g->m, tm), MR), nc = round_up(ceil_div(g->n, tn), NR);
        if (g->batch * ceil_div(g->m, mt) * ceil_div(g->n, nc) > GRID_TASKS_PER_THREAD * nthreads)
          continue;
        const double t = grid_makespan(g->m, g->n, g->batch, mt, nc, MR, NR, nthreads);
        if (t < best * 0.999) /* strictly better: fewer tasks win ties */
          best = t, P.mt = mt, P.nc = nc;
      }
    P.tm = ceil_div(g->m, P.mt);
    P.tn = ceil_div(g->n, P.nc);
  } else if (nthreads > 1 && ntasks % nthreads != 0 && ntasks < 16 * nthreads) {
    int done = 0;
    for (int64_t tm = P.tm + 1; !done && tm <= ceil_div(g->m, MR); tm++) {
      int64_t mt = round_up(ceil_div(g->m, tm), MR), tm2 = ceil_div(g->m, mt);
      if ((g->batch * tm2 * P.tn) % nthreads == 0)
        P.mt = mt, P.tm = tm2, done = 1;
    }
    for (int64_t tn = P.tn + 1; !done && tn <= ceil_div(g->n, NR); tn++) {
      int64_t nc = round_up(ceil_div(g->n, tn), NR), tn2 = ceil_div(g->n, nc);
      if ((g->batch * P.tm * tn2) % nthreads == 0)
        P.nc = nc, P.tn = tn2, done = 1;
    }
  }
  P.mc = min64(P.mc, P.mt);
  P.ldcs = P.nc + 16; /* avoid power-of-two row strides in the C block */
  P.ap_floats = (size_t)(P.mc * P.kc + SLACK);
  P.bp_floats = (size_t)(P.kc * P.nc + SLACK);
  P.cs_floats = (size_t)(P.mt * P.ldcs);
  return P;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ampc_gemm_epi's colsum for the packed A block of one K slice: s[i] +=
 * op(A)[i][p] for the rows i < mcur of the block and its p < kc in order
 * (one FP32 addition each, the widened operand); ap holds MR-row micro-panels
 * of floats (dst[p*MR + r]) or, for the pairs kernel, of bfloat16 pairs
 * (element 2q in the high half of word q, 2q + 1 in the low half). The slices
 * come in order, so each s[i] is summed over the whole of K in order. */
enum { COLSUM_LANES = 32 }; /* the widest micro-tile's MR */
static inline __attribute__((always_inline)) void
add_colsum_mr(float *s, const float *ap, const int MR, int64_t mcur, int64_t kc, int pairs) {
  for (int64_t ir = 0; ir < mcur; ir += MR) {
    const int rv = (int)min64(mcur - ir, MR);
    float acc[COLSUM_LANES] = {0}; /* every lane of the panel (those past rv are 0 and unused) */
    for (int r = 0; r < rv; r++)
      acc[r] = s[ir + r];
    if (!pairs) {
      const float *pan = ap + ir * kc;
      for (int64_t p = 0; p < kc; p++)
        for (int r = 0; r < MR; r++)
          acc[r] += pan[p * MR + r];
    } else {
      const uint32_t *pan = (const uint32_t *)(ap + ir * kc);
      for (int64_t q = 0; 2 * q + 1 < kc; q++)
        for (int r = 0; r < MR; r++) {
          const uint32_t w = pan[q * MR + r];
          acc[r] += ampc_bits_f32(w & 0xFFFF0000u);
          acc[r] += ampc_bits_f32(w << 16);
        }
      if (kc % 2) /* the last pair's high half only */
        for (int r = 0; r < MR; r++)
          acc[r] += ampc_bits_f32(pan[(kc / 2) * MR + r] & 0xFFFF0000u);
    }
    for (int r = 0; r < rv; r++)
      s[ir + r] = acc[r];
  }
}
/* one copy per micro-tile height, so that the lane loops have a constant trip count */
static void add_colsum(float *s, const float *ap, int MR, int64_t mcur, int64_t kc, int pairs) {
  if (MR == 12)
    add_colsum_mr(s, ap, 12, mcur, kc, pairs);
  else if (MR == 6)
    add_colsum_mr(s, ap, 6, mcur, kc, pairs);
  else
    add_colsum_mr(s, ap, MR, mcur, kc, pairs);
}

/* One task: its rows it .. it+mtcur-1 and columns jc .. jc+ncur-1 of one
 * batch matrix, slice by slice of K; ap, bp, cs: the calling thread's packed
 * A block, packed B panel and FP32 block of sums. */
static void run_task(const ampc_gemm_args *g, const plan *P, const ampc_gemm_ukernel *uk,
                     int64_t task, float *ap, float *bp, float *cs) {
  const int MR = (int)P->mr, NR = (int)P->nr;
  /* with telemetry on, the stores go through the output kernel, which counts them */
  const int fuse = uk->fn_out != NULL && !ampc_tally_tls;
  const int64_t es = (int64_t)ampc_gemm_esz(g->cdt);
  const int64_t per = P->tm * P->tn;
  const int64_t t = task / per, ti = (task % per) / P->tn, tj = task % P->tn;
  const float *bias = g->epi ? g->epi->bias : NULL;
  const int post = g->epi && g->epi->post;
  float *colsum = g->epi ? g->epi->colsum : NULL;
  const void *a = ampc_gemm_at(g->a, g->adt, t * g->stride_a);
  const void *b = ampc_gemm_at(g->b, g->bdt, t * g->stride_b);
  void *c = (char *)g->c + t * g->stride_c * (int64_t)ampc_gemm_esz(g->cdt);
  const int64_t it = ti * P->mt, jc = tj * P->nc;
  const int64_t mtcur = min64(g->m - it, P->mt), ncur = min64(g->n - jc, P->nc);
  for (int64_t pc = 0; pc < g->k; pc += P->kc) {
    const int64_t kcur = min64(g->k - pc, P->kc);
    const void *bsl = ampc_gemm_at(b, g->bdt, pc * g->rs_b + jc * g->cs_b);
    /* the pairs kernel while every operand packed so far in this slice is in
     * its range; else this slice (from the first A block that is not, B
     * re-packed) on the FP32 kernel: each slice's sums start from +0 and are
     * added in order, so mixing the two kernels keeps the bits */
    const ampc_gemm_ukernel *k = uk;
    if (!uk->bf16_pairs ||
        !uk->pack->b_pairs((uint32_t *)bp, NR, ncur, bsl, kcur, g->cs_b, g->rs_b)) {
      k = uk->bf16_pairs ? uk->fallback : uk;
      k->pack->b(bp, NR, ncur, bsl, g->bdt, g->n - jc, kcur, g->cs_b, g->rs_b);
    }
    for (int64_t ic = it; ic < it + mtcur; ic += P->mc) {
      const int64_t mcur = min64(it + mtcur - ic, P->mc);
      int pairs = k->bf16_pairs;
      for (int64_t ir = 0; pairs && ir < mcur; ir += MR)
        pairs = uk->pack->pairs((uint32_t *)(ap + ir * kcur), MR,
                                ampc_gemm_at(a, g->adt, (ic + ir) * g->rs_a + pc * g->cs_a),
                                (int)min64(mcur - ir, MR), kcur, g->rs_a, g->cs_a);
      if (k->bf16_pairs && !pairs) {
        k = uk->fallback;
        k->pack->b(bp, NR, ncur, bsl, g->bdt, g->n - jc, kcur, g->cs_b, g->rs_b);
      }
      if (!k->bf16_pairs)
        for (int64_t ir = 0; ir < mcur; ir += MR)
          k->pack->a(ap + ir * kcur, MR,
                     ampc_gemm_at(a, g->adt, (ic + ir) * g->rs_a + pc * g->cs_a), g->adt,
                     (int)min64(mcur - ir, MR), g->m - ic - ir, kcur, g->rs_a, g->cs_a);
      if (colsum && tj == 0)
        add_colsum(colsum + ic, ap, MR, mcur, kcur, k->bf16_pairs);
      float *cblk = cs + (ic - it) * P->ldcs;
      if (fuse && pc + kcur >= g->k) { /* the last slice, straight into C */
        for (int64_t jr = 0; jr < ncur; jr += NR)
          for (int64_t ir = 0; ir < mcur; ir += MR) {
            const ampc_gemm_out o = {(char *)c + ((ic + ir) * g->ldc + jc + jr) * es,
                                     g->ldc,
                                     g->cdt,
                                     g->alpha,
                                     g->beta,
                                     (int)min64(MR, mcur - ir),
                                     (int)min64(NR, ncur - jr),
                                     bias ? bias + jc + jr : NULL};
            k->fn_out(kcur, ap + ir * kcur, bp + jr * kcur, cblk + ir * P->ldcs + jr, P->ldcs,
                      pc > 0, &o);
          }
        if (post) /* this block of C is final */
          g->epi->post(g->epi->user, ic, mcur, jc, ncur);
      } else {
        for (int64_t jr = 0; jr < ncur; jr += NR)
          for (int64_t ir = 0; ir < mcur; ir += MR)
            k->fn(kcur, ap + ir * kcur, bp + jr * kcur, cblk + ir * P->ldcs + jr, P->ldcs, pc > 0);
      }
    }
  }
  if (!fuse) {
    uk->pack->out(g, c, it, jc, mtcur, ncur, cs, P->ldcs);
    if (post)
      g->epi->post(g->epi->user, it, mtcur, jc, ncur);
  }
}

/* Workspaces up to this many floats live on the stack when one thread runs
 * the whole GEMM (the small per-head products of attention: no malloc). */
enum { STACK_WS = 8192 };

ampc_status ampc_gemm_blocked(const ampc_gemm_args *g, const ampc_gemm_config *cfg, int nthreads,
                              const ampc_gemm_ukernel *uk) {
  /* called from inside a parallel region that cannot nest (attention's
   * per-sample loop): plan for the one thread that will run it */
  if (omp_in_parallel() && omp_get_active_level() >= omp_get_max_active_levels())
    nthreads = 1;
  if (uk->bf16_pairs && (g->adt != AMPC_BF16 || g->bdt != AMPC_BF16))
    uk = uk->fallback;
  const plan P = make_plan(g, cfg, nthreads, uk);
  const int64_t ntasks = g->batch * P.tm * P.tn;
  if (nthreads > ntasks)
    nthreads = (int)ntasks;
  const size_t per_thread = round16(P.ap_floats) + round16(P.bp_floats) + round16(P.cs_floats);
  if (nthreads == 1 && per_thread <= STACK_WS) { /* no workspace allocation, no thread team */
    _Alignas(64) float ws[STACK_WS];
    for (int64_t task = 0; task < ntasks; task++)
      run_task(g, &P, uk, task, ws, ws + round16(P.ap_floats),
               ws + round16(P.ap_floats) + round16(P.bp_floats));
    return AMPC_OK;
  }
  const size_t bytes = (size_t)nthreads * per_thread * sizeof(float);
  float *ws = ampc_gemm_workspace(bytes);
  if (!ws)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm: cannot allocate %zu bytes of workspace", bytes);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    ampc_tally_adopt(tally);
    float *ap = ws + (size_t)omp_get_thread_num() * per_thread;
    float *bp = ap + round16(P.ap_floats);
    float *cs = bp + round16(P.bp_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; task++)
      run_task(g, &P, uk, task, ap, bp, cs);
  }
  return AMPC_OK;
}
