/*
 * src/dist/dist.c: the data-parallel group over MPI (include/ampc/dist.h):
 * start and end, and the collectives of ampc_comm that the run calls (the
 * gradient sums, the loss sums, the telemetry reductions, the replica
 * checks). Without AMPC_HAVE_MPI every group is one process.
 */
#include "ampc/dist.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/nccl.h"
#include "internal.h"

#ifdef AMPC_HAVE_MPI
#include <mpi.h>
#endif

struct ampc_dist {
  int rank, size;
  bool mpi_started; /* we called MPI_Init_thread */
  ampc_comm comm;
  uint64_t sent; /* payload bytes passed to sending calls */
  float *tmp;    /* one chunk of the chain sum */
  float *own;    /* one chunk of this rank's values, widened (the scatter from 16 bits) */
  /* the device sums (src/dist/nccl.c): the group, made at their first call;
   * one_rank: AMPC_NCCL_ONE_RANK=1, a group of one gets the communicator too
   * when the device sums are on (the GPU check runs them with one GPU) */
  ampc_nccl *nccl;
  bool one_rank;
  char path[384]; /* ampc_dist_use_device's answer */
#ifdef AMPC_HAVE_MPI
  /* the overlapped chain (ovl_*): its own communicator (its messages and
   * broadcasts never meet the blocking calls' on MPI_COMM_WORLD), the sum x
   * [ovl_n], the running sums received [ovl_cap] (one FP32 buffer of the
   * table's size), the pieces started in order and two cursors: the first
   * piece not yet added and sent on, the first not yet broadcast */
  MPI_Comm ovl_comm;
  bool ovl_have_comm;
  float *ovl_x, *ovl_tmp;
  int64_t ovl_n, ovl_cap;
  struct ovl_piece *ovl;
  MPI_Request *ovl_req; /* [cap_ovl] each piece's request in flight (or MPI_REQUEST_NULL) */
  int *ovl_idx;         /* [cap_ovl] MPI_Testsome's indices */
  int n_ovl, cap_ovl, ovl_send, ovl_bcast, ovl_done;
#endif
};

bool ampc_dist_have_mpi(void) {
#ifdef AMPC_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int ampc_dist_rank(const ampc_dist *d) { return d ? d->rank : 0; }
int ampc_dist_size(const ampc_dist *d) { return d ? d->size : 1; }

#ifdef AMPC_HAVE_MPI

enum { CHAIN_CHUNK = 1 << 18 }; /* floats per message of the chain: 1 MiB */
enum { TAG_CHAIN = 7301, TAG_SCATTER = 7302, TAG_SCATTER_FROM = 8192, TAG_SPAN = 8192 };
enum { GATHER_CHUNK = 1 << 26 }; /* elements per rank per round of gather_shards */

static int launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static ampc_status mpi_fail(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "error %d", rc);
  return ampc_fail(AMPC_ERR_IO, "MPI: %s: %s", what, msg);
}
#define MPI_TRY(call, what)                                                                        \
  do {                                                                                             \
    const int rc_ = (call);                                                                        \
    if (rc_ != MPI_SUCCESS)                                                                        \
      return mpi_fail(rc_, what);                                                                  \
  } while (0)

/* the chain: rank r receives the running sum of ranks 0..r-1, adds its own
 * values (running + own, in that order) and passes it on; the last rank
 * ends with the total */
static ampc_status chain(ampc_dist *d, float *x, int64_t n) {
  const int r = d->rank, last = d->size - 1;
  for (int64_t i0 = 0; i0 < n; i0 += CHAIN_CHUNK) {
    const int len = (int)(n - i0 < CHAIN_CHUNK ? n - i0 : CHAIN_CHUNK);
    if (r > 0) {
      MPI_TRY(MPI_Recv(d->tmp, len, MPI_FLOAT, r - 1, TAG_CHAIN, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "the gradient chain (receive)");
      for (int i = 0; i < len; i++)
        x[i0 + i] = d->tmp[i] + x[i0 + i];
    }
    if (r < last) {
      MPI_TRY(MPI_Send(x + i0, len, MPI_FLOAT, r + 1, TAG_CHAIN, MPI_COMM_WORLD),
              "the gradient chain (send)");
      d->sent += (uint64_t)len * sizeof(float);
    }
  }
  return AMPC_OK;
}

/* the chain, then a broadcast of the total from the last rank */
static ampc_status sum_f32_ordered(void *user, float *x, int64_t n) {
  ampc_dist *d = user;
  const int r = d->rank, last = d->size - 1;
  AMPC_TRY(chain(d, x, n));
  for (int64_t i0 = 0; i0 < n; i0 += CHAIN_CHUNK) {
    const int len = (int)(n - i0 < CHAIN_CHUNK ? n - i0 : CHAIN_CHUNK);
    MPI_TRY(MPI_Bcast(x + i0, len, MPI_FLOAT, last, MPI_COMM_WORLD), "the gradient broadcast");
    if (r == last)
      d->sent += (uint64_t)len * sizeof(float);
  }
  return AMPC_OK;
}

/* a + b in binary16 / bfloat16 with one rounding: both widened (exact),
 * added in FP32, rounded to nearest even */
static void add16(void *in, void *inout, int *len, ampc_dtype dt) {
  enum { CH = 512 };
  float a[CH], b[CH];
  uint16_t *x = in, *y = inout;
  for (int i0 = 0; i0 < *len; i0 += CH) {
    const int n = *len - i0 < CH ? *len - i0 : CH;
    ampc_convert(a, AMPC_F32, x + i0, dt, (size_t)n);
    ampc_convert(b, AMPC_F32, y + i0, dt, (size_t)n);
    for (int i = 0; i < n; i++)
      b[i] = a[i] + b[i];
    ampc_convert(y + i0, dt, b, AMPC_F32, (size_t)n);
  }
}
static void add_f16(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  add16(in, inout, len, AMPC_F16);
}
static void add_bf16(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  add16(in, inout, len, AMPC_BF16);
}

static ampc_status sum_working(void *user, void *x, ampc_dtype dt, int64_t n) {
  ampc_dist *d = user;
  const size_t es = ampc_dtype_size(dt);
  MPI_Op op = MPI_SUM;
  MPI_Datatype t = MPI_FLOAT;
  if (dt == AMPC_F16 || dt == AMPC_BF16) {
    MPI_TRY(MPI_Op_create(dt == AMPC_F16 ? add_f16 : add_bf16, 1, &op), "MPI_Op_create");
    t = MPI_UINT16_T;
  } else if (dt != AMPC_F32) {
    return ampc_fail(AMPC_ERR_INVALID_ARG, "sum_working: dtype %s is not f32, f16 or bf16",
                     ampc_dtype_name(dt));
  }
  ampc_status st = AMPC_OK;
  for (int64_t i0 = 0; i0 < n && st == AMPC_OK; i0 += CHAIN_CHUNK) {
    const int len = (int)(n - i0 < CHAIN_CHUNK ? n - i0 : CHAIN_CHUNK);
    const int rc =
        MPI_Allreduce(MPI_IN_PLACE, (char *)x + (size_t)i0 * es, len, t, op, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      st = mpi_fail(rc, "the gradient all-reduce");
    d->sent += (uint64_t)len * es;
  }
  if (op != MPI_SUM)
    MPI_Op_free(&op);
  return st;
}

static ampc_status sum_u64(void *user, uint64_t *x, int64_t n) {
  ampc_dist *d = user;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD),
          "a count all-reduce");
  d->sent += (uint64_t)n * sizeof *x;
  return AMPC_OK;
}

static ampc_status max_f64(void *user, double *x, int64_t n) {
  ampc_dist *d = user;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
          "a maximum all-reduce");
  d->sent += (uint64_t)n * sizeof *x;
  return AMPC_OK;
}

/* FNV-1a, 64-bit: equal inputs give equal hashes; the ranks compare the
 * hash and its complement by their maxima (max h == h and max ~h == ~h on
 * every rank only when all hashes are equal) */
static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static ampc_status check_same(void *user, const void *bytes, size_t n, const char *what) {
  ampc_dist *d = user;
  const uint64_t h = fnv1a(bytes, n) ^ (uint64_t)n;
  uint64_t v[2] = {h, ~h};
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
          "the replica check");
  d->sent += sizeof v;
  if (v[0] != h || v[1] != ~h)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the %d ranks disagree on %s (rank %d's copy differs from another's): the "
                     "replicas have drifted apart",
                     d->size, what ? what : "their state", d->rank);
  return AMPC_OK;
}

static ampc_status allgather(void *user, const void *x, size_t bytes, void *y) {
  ampc_dist *d = user;
  if (bytes > (size_t)INT32_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "allgather: %zu bytes per rank is too many", bytes);
  MPI_TRY(MPI_Allgather(x, (int)bytes, MPI_BYTE, y, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
          "the embeddings' all-gather");
  d->sent += bytes;
  return AMPC_OK;
}

/* ZeRO-1's reduce-scatter: the chain of sum_f32_ordered (ending on the last
 * rank, which then holds the whole sum), after which the last rank sends
 * each rank its shard instead of broadcasting everything */
static ampc_status sum_f32_ordered_scatter(void *user, float *x, const int64_t *bounds) {
  ampc_dist *d = user;
  const int r = d->rank, last = d->size - 1;
  AMPC_TRY(chain(d, x, bounds[d->size]));
  for (int q = 0; q < last; q++) /* the shards of ranks 0 .. last - 1 */
    for (int64_t i0 = bounds[q]; i0 < bounds[q + 1]; i0 += CHAIN_CHUNK) {
      const int len = (int)(bounds[q + 1] - i0 < CHAIN_CHUNK ? bounds[q + 1] - i0 : CHAIN_CHUNK);
      if (r == last) {
        MPI_TRY(MPI_Send(x + i0, len, MPI_FLOAT, q, TAG_SCATTER, MPI_COMM_WORLD),
                "the gradient scatter (send)");
        d->sent += (uint64_t)len * sizeof(float);
      } else if (r == q) {
        MPI_TRY(
            MPI_Recv(x + i0, len, MPI_FLOAT, last, TAG_SCATTER, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "the gradient scatter (receive)");
      }
    }
  return AMPC_OK;
}

/* The same reduce-scatter without an FP32 copy of the whole gradient: each
 * rank widens its own values from g (gdt) a chunk at a time as the chain
 * reaches it, and the last rank sends each finished chunk's parts to their
 * owners, which posted their receives before the chain began (so the last
 * rank's sends complete while the owners are still in the chain). */
static ampc_status sum_f32_ordered_scatter_from(void *user, const void *g, ampc_dtype gdt,
                                                float *mine, const int64_t *bounds) {
  ampc_dist *d = user;
  const int r = d->rank, last = d->size - 1;
  const int64_t n = bounds[d->size], lo = bounds[r], hi = bounds[r + 1];
  const size_t es = ampc_dtype_size(gdt);
  if (gdt != AMPC_F32 && gdt != AMPC_F16 && gdt != AMPC_BF16)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "sum_f32_ordered_scatter_from: dtype %s",
                     ampc_dtype_name(gdt));
  if (!d->own && !(d->own = malloc(CHAIN_CHUNK * sizeof *d->own)))
    return ampc_fail(AMPC_ERR_NOMEM, "the gradient chain: out of memory");
  /* this rank's receives of its shard, chunk by chunk */
  const int64_t first = lo / CHAIN_CHUNK,
                nrecv = r == last || hi <= lo ? 0 : (hi - 1) / CHAIN_CHUNK - first + 1;
  MPI_Request *req = nrecv ? malloc((size_t)nrecv * sizeof *req) : NULL;
  if (nrecv && !req)
    return ampc_fail(AMPC_ERR_NOMEM, "the gradient scatter: out of memory");
  for (int64_t k = 0; k < nrecv; k++) {
    const int64_t c0 = (first + k) * CHAIN_CHUNK, a = c0 > lo ? c0 : lo,
                  b = c0 + CHAIN_CHUNK < hi ? c0 + CHAIN_CHUNK : hi;
    const int rc =
        MPI_Irecv(mine + (a - lo), (int)(b - a), MPI_FLOAT, last,
                  TAG_SCATTER_FROM + (int)((first + k) % TAG_SPAN), MPI_COMM_WORLD, &req[k]);
    if (rc != MPI_SUCCESS) {
      free(req);
      return mpi_fail(rc, "the gradient scatter (post)");
    }
  }
  ampc_status st = AMPC_OK;
  for (int64_t i0 = 0; i0 < n && st == AMPC_OK; i0 += CHAIN_CHUNK) {
    const int len = (int)(n - i0 < CHAIN_CHUNK ? n - i0 : CHAIN_CHUNK);
    float *own = d->own;
    ampc_convert(own, AMPC_F32, (const char *)g + (size_t)i0 * es, gdt, (size_t)len);
    if (r > 0) {
      int rc =
          MPI_Recv(d->tmp, len, MPI_FLOAT, r - 1, TAG_CHAIN, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "the gradient chain (receive)");
        break;
      }
      for (int i = 0; i < len; i++) /* the running sum + this rank's values */
        own[i] = d->tmp[i] + own[i];
    }
    if (r < last) {
      const int rc = MPI_Send(own, len, MPI_FLOAT, r + 1, TAG_CHAIN, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS)
        st = mpi_fail(rc, "the gradient chain (send)");
      d->sent += (uint64_t)len * sizeof(float);
      continue;
    }
    for (int q = 0; q <= last && st == AMPC_OK; q++) { /* the last rank: the owners' parts */
      const int64_t a = i0 > bounds[q] ? i0 : bounds[q],
                    b = i0 + len < bounds[q + 1] ? i0 + len : bounds[q + 1];
      if (b <= a)
        continue;
      if (q == last) {
        memcpy(mine + (a - lo), own + (a - i0), (size_t)(b - a) * sizeof *own);
        continue;
      }
      const int rc =
          MPI_Send(own + (a - i0), (int)(b - a), MPI_FLOAT, q,
                   TAG_SCATTER_FROM + (int)((i0 / CHAIN_CHUNK) % TAG_SPAN), MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS)
        st = mpi_fail(rc, "the gradient scatter (send)");
      d->sent += (uint64_t)(b - a) * sizeof(float);
    }
  }
  if (nrecv) {
    const int rc = MPI_Waitall((int)nrecv, req, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS && st == AMPC_OK)
      st = mpi_fail(rc, "the gradient scatter (receive)");
  }
  free(req);
  return st;
}

/* the shards gathered in rounds of at most GATHER_CHUNK elements per rank
 * (MPI's counts and displacements are ints), in a datatype of elem bytes */
static ampc_status gather_shards(void *user, const void *mine, void *all, size_t elem,
                                 const int64_t *bounds, int root) {
  ampc_dist *d = user;
  const int size = d->size, r = d->rank;
  if (bounds[size] > (int64_t)INT32_MAX || elem == 0 || root >= size)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "gather_shards: %lld elements of %zu bytes (root %d)",
                     (long long)bounds[size], elem, root);
  const bool receives = root < 0 || root == r;
  int *cnt = malloc(2 * (size_t)size * sizeof *cnt);
  if (!cnt)
    return ampc_fail(AMPC_ERR_NOMEM, "gather_shards: out of memory");
  int *dsp = cnt + size;
  MPI_Datatype t;
  MPI_Type_contiguous((int)elem, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  const char *own = mine;
  const bool in_place = receives && own == (const char *)all + (size_t)bounds[r] * elem;
  int64_t most = 0;
  for (int q = 0; q < size; q++)
    most = bounds[q + 1] - bounds[q] > most ? bounds[q + 1] - bounds[q] : most;
  ampc_status st = AMPC_OK;
  for (int64_t j = 0; j < most && st == AMPC_OK; j += GATHER_CHUNK) {
    for (int q = 0; q < size; q++) {
      const int64_t len = bounds[q + 1] - bounds[q] - j;
      cnt[q] = (int)(len <= 0 ? 0 : (len < GATHER_CHUNK ? len : GATHER_CHUNK));
      dsp[q] = (int)(bounds[q] + j);
    }
    const void *send = in_place ? MPI_IN_PLACE : (const void *)(own + (size_t)j * elem);
    const int rc = root < 0 ? MPI_Allgatherv(send, cnt[r], t, all, cnt, dsp, t, MPI_COMM_WORLD)
                            : MPI_Gatherv(send, cnt[r], t, all, cnt, dsp, t, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      st = mpi_fail(rc, "the shards' gather");
    d->sent += (uint64_t)cnt[r] * elem;
  }
  MPI_Type_free(&t);
  free(cnt);
  return st;
}

/* ---- the overlapped chain ---------------------------------------------------------- */

/* The chain of sum_f32_ordered on ranges of x started while the backward
 * pass still runs (PyTorch DDP's buckets, with llm.c's fixed order): each
 * range is cut into pieces of at most CHAIN_CHUNK floats, and each piece
 * goes through
 *   RECV  (rank > 0: MPI_Irecv of the running sum from rank - 1 into
 *         ovl_tmp at the piece's offset, posted when the range starts)
 *   ADD   (received: x = running + own, as sum_f32_ordered adds)
 *   SEND  (rank < last: MPI_Isend of x to rank + 1 in flight)
 *   SENT  (x may be overwritten: ready for the broadcast)
 *   BCAST (MPI_Ibcast of x from the last rank in flight)
 *   DONE
 * The adds and sends, and the broadcasts, are posted strictly in the order
 * the pieces were started (the two cursors), so every rank posts the same
 * collectives in the same order; the bits are sum_f32_ordered's. MPI moves
 * the data only inside MPI calls: ovl_progress tests what is in flight. */
enum { P_RECV, P_ADD, P_SEND, P_SENT, P_BCAST, P_DONE };
struct ovl_piece {
  int64_t lo;
  int len, state;
};

static ampc_status ovl_begin(void *user, float *x, int64_t n) {
  ampc_dist *d = user;
  if (!x || n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ovl_begin: bad buffer (n %lld)", (long long)n);
  if (d->ovl_done < d->n_ovl)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ovl_begin: %d pieces of the last overlapped sum are still in flight",
                     d->n_ovl - d->ovl_done);
  if (!d->ovl_have_comm) { /* collective: every rank begins at the same point */
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &d->ovl_comm), "the overlapped sum's communicator");
    d->ovl_have_comm = true;
  }
  if (d->rank > 0 && n > d->ovl_cap) {
    float *t = realloc(d->ovl_tmp, (size_t)n * sizeof *t);
    if (!t)
      return ampc_fail(AMPC_ERR_NOMEM, "ovl_begin: out of memory for %lld floats", (long long)n);
    d->ovl_tmp = t, d->ovl_cap = n;
  }
  d->ovl_x = x, d->ovl_n = n;
  d->n_ovl = d->ovl_send = d->ovl_bcast = d->ovl_done = 0;
  return AMPC_OK;
}

/* the requests in flight tested (one MPI_Testsome: one turn of MPI's
 * progress) or, block, waited for until at least one completes; then, in
 * order, the adds and sends and the broadcasts that may start */
static ampc_status ovl_advance(ampc_dist *d, bool block) {
  const int r = d->rank, last = d->size - 1;
  int out = 0;
  MPI_Request *req = d->ovl_req + d->ovl_done;
  const int m = d->n_ovl - d->ovl_done;
  if (m > 0)
    MPI_TRY(block ? MPI_Waitsome(m, req, &out, d->ovl_idx, MPI_STATUSES_IGNORE)
                  : MPI_Testsome(m, req, &out, d->ovl_idx, MPI_STATUSES_IGNORE),
            "the overlapped gradient sum (test)");
  for (int j = 0; m > 0 && out != MPI_UNDEFINED && j < out; j++) {
    struct ovl_piece *p = &d->ovl[d->ovl_done + d->ovl_idx[j]];
    p->state = p->state == P_RECV ? P_ADD : p->state == P_SEND ? P_SENT : P_DONE;
  }
  for (; d->ovl_send < d->n_ovl && d->ovl[d->ovl_send].state == P_ADD; d->ovl_send++) {
    struct ovl_piece *p = &d->ovl[d->ovl_send];
    float *x = d->ovl_x + p->lo;
    if (r > 0) {
      const float *run = d->ovl_tmp + p->lo;
      for (int i = 0; i < p->len; i++)
        x[i] = run[i] + x[i];
    }
    if (r < last) {
      MPI_TRY(
          MPI_Isend(x, p->len, MPI_FLOAT, r + 1, TAG_CHAIN, d->ovl_comm, &d->ovl_req[d->ovl_send]),
          "the overlapped gradient chain (send)");
      d->sent += (uint64_t)p->len * sizeof(float);
      p->state = P_SEND;
    } else {
      p->state = P_SENT;
    }
  }
  for (; d->ovl_bcast < d->ovl_send && d->ovl[d->ovl_bcast].state == P_SENT; d->ovl_bcast++) {
    struct ovl_piece *p = &d->ovl[d->ovl_bcast];
    MPI_TRY(MPI_Ibcast(d->ovl_x + p->lo, p->len, MPI_FLOAT, last, d->ovl_comm,
                       &d->ovl_req[d->ovl_bcast]),
            "the overlapped gradient broadcast");
    if (r == last)
      d->sent += (uint64_t)p->len * sizeof(float);
    p->state = P_BCAST;
  }
  while (d->ovl_done < d->n_ovl && d->ovl[d->ovl_done].state == P_DONE)
    d->ovl_done++;
  return AMPC_OK;
}

static ampc_status ovl_range(void *user, int64_t lo, int64_t hi) {
  ampc_dist *d = user;
  if (!d->ovl_x || lo < 0 || hi > d->ovl_n || lo > hi)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ovl_range: [%lld, %lld) outside the sum of %lld",
                     (long long)lo, (long long)hi, (long long)d->ovl_n);
  for (int64_t i0 = lo; i0 < hi; i0 += CHAIN_CHUNK) {
    if (d->n_ovl == d->cap_ovl) {
      const int cap = d->cap_ovl ? 2 * d->cap_ovl : 64;
      struct ovl_piece *q = realloc(d->ovl, (size_t)cap * sizeof *q);
      if (q)
        d->ovl = q;
      MPI_Request *rq = q ? realloc(d->ovl_req, (size_t)cap * sizeof *rq) : NULL;
      if (rq)
        d->ovl_req = rq;
      int *ix = rq ? realloc(d->ovl_idx, (size_t)cap * sizeof *ix) : NULL;
      if (!ix)
        return ampc_fail(AMPC_ERR_NOMEM, "ovl_range: out of memory");
      d->ovl_idx = ix, d->cap_ovl = cap;
    }
    struct ovl_piece *p = &d->ovl[d->n_ovl];
    p->lo = i0;
    p->len = (int)(hi - i0 < CHAIN_CHUNK ? hi - i0 : CHAIN_CHUNK);
    p->state = P_ADD; /* rank 0 starts the chain with its own values */
    d->ovl_req[d->n_ovl] = MPI_REQUEST_NULL;
    if (d->rank > 0) {
      MPI_TRY(MPI_Irecv(d->ovl_tmp + i0, p->len, MPI_FLOAT, d->rank - 1, TAG_CHAIN, d->ovl_comm,
                        &d->ovl_req[d->n_ovl]),
              "the overlapped gradient chain (receive)");
      p->state = P_RECV;
    }
    d->n_ovl++;
  }
  return ovl_advance(d, false);
}

static ampc_status ovl_progress(void *user) {
  ampc_dist *d = user;
  return d->ovl_done < d->n_ovl ? ovl_advance(d, false) : AMPC_OK;
}

/* blocks until some request in flight completes and advances, until every
 * piece is done (after an advance the oldest piece not done always has a
 * request in flight: its predecessors are done, so the cursors reached it) */
static ampc_status ovl_wait(void *user) {
  ampc_dist *d = user;
  AMPC_TRY(ovl_advance(d, false));
  while (d->ovl_done < d->n_ovl) {
    const int s = d->ovl[d->ovl_done].state;
    if (s != P_RECV && s != P_SEND && s != P_BCAST)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "ovl_wait: piece %d stuck in state %d", d->ovl_done,
                       s);
    AMPC_TRY(ovl_advance(d, true));
  }
  d->ovl_x = NULL;
  return AMPC_OK;
}

static uint64_t bytes_sent(void *user) { return ((ampc_dist *)user)->sent; }

/* the NCCL group's unique id, from rank 0 to every rank */
static ampc_status bcast_id(void *user, void *bytes, size_t n) {
  (void)user;
  MPI_TRY(MPI_Bcast(bytes, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD), "the NCCL id's broadcast");
  return AMPC_OK;
}

#endif /* AMPC_HAVE_MPI */

/* the device sums through NCCL: the group is made at the first call (every
 * rank makes it there, on the device its run bound), its id broadcast from
 * rank 0 over MPI */
static ampc_status nccl_group(ampc_dist *d) {
  if (d->nccl)
    return AMPC_OK;
#ifdef AMPC_HAVE_MPI
  ampc_nccl_bcast_fn bcast = d->mpi_started ? bcast_id : NULL;
#else
  ampc_nccl_bcast_fn bcast = NULL; /* a group of one */
#endif
  return ampc_nccl_create(d->rank, d->size, 0, bcast, d, &d->nccl);
}
static ampc_status sum_device_f32_ordered(void *user, float *dx, int64_t n) {
  ampc_dist *d = user;
  AMPC_TRY(nccl_group(d));
  return ampc_nccl_sum_f32_ordered(d->nccl, dx, n, &d->sent);
}
static ampc_status sum_device_working(void *user, void *dx, ampc_dtype dt, int64_t n) {
  ampc_dist *d = user;
  AMPC_TRY(nccl_group(d));
  return ampc_nccl_sum_working(d->nccl, dx, dt, n, &d->sent);
}

/* the host collectives of a process alone (AMPC_NCCL_ONE_RANK without a
 * launcher): every sum and maximum over one rank is its own value */
static ampc_status one_sum_f32(void *user, float *x, int64_t n) {
  (void)user, (void)x, (void)n;
  return AMPC_OK;
}
static ampc_status one_sum_working(void *user, void *x, ampc_dtype dt, int64_t n) {
  (void)user, (void)x, (void)dt, (void)n;
  return AMPC_OK;
}
static ampc_status one_sum_u64(void *user, uint64_t *x, int64_t n) {
  (void)user, (void)x, (void)n;
  return AMPC_OK;
}
static ampc_status one_max_f64(void *user, double *x, int64_t n) {
  (void)user, (void)x, (void)n;
  return AMPC_OK;
}
static ampc_status one_allgather(void *user, const void *x, size_t bytes, void *y) {
  (void)user;
  if (bytes)
    memmove(y, x, bytes);
  return AMPC_OK;
}
static ampc_status one_check_same(void *user, const void *bytes, size_t n, const char *what) {
  (void)user, (void)bytes, (void)n, (void)what;
  return AMPC_OK;
}
static uint64_t one_bytes_sent(void *user) { return ((ampc_dist *)user)->sent; }

ampc_status ampc_dist_init(int *argc, char ***argv, ampc_dist **out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dist_init: out is NULL");
  ampc_dist *d = calloc(1, sizeof *d);
  if (!d)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_dist_init: out of memory");
  d->size = 1;
#ifdef AMPC_HAVE_MPI
  if (launched_by_mpi()) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    d->mpi_started = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->tmp = malloc(CHAIN_CHUNK * sizeof *d->tmp);
    if (!d->tmp) {
      MPI_Abort(MPI_COMM_WORLD, 1);
      return AMPC_ERR_NOMEM;
    }
    d->comm = (ampc_comm){.user = d,
                          .rank = d->rank,
                          .size = d->size,
                          .sum_f32_ordered = sum_f32_ordered,
                          .sum_working = sum_working,
                          .sum_u64 = sum_u64,
                          .max_f64 = max_f64,
                          .allgather = allgather,
                          .check_same = check_same,
                          .bytes_sent = bytes_sent,
                          .sum_f32_ordered_scatter = sum_f32_ordered_scatter,
                          .sum_f32_ordered_scatter_from = sum_f32_ordered_scatter_from,
                          .gather_shards = gather_shards,
                          .ovl_begin = ovl_begin,
                          .ovl_range = ovl_range,
                          .ovl_progress = ovl_progress,
                          .ovl_wait = ovl_wait};
  }
#else
  (void)argc, (void)argv;
#endif
  *out = d;
  return AMPC_OK;
}

const ampc_comm *ampc_dist_comm(ampc_dist *d) {
  return d && (d->size > 1 || (d->one_rank && d->comm.sum_device_f32_ordered)) ? &d->comm : NULL;
}

const char *ampc_dist_use_device(ampc_dist *d, ampc_device dev) {
  if (!d)
    return "none (one process)";
  d->comm.sum_device_f32_ordered = NULL, d->comm.sum_device_working = NULL;
  const char *one = getenv("AMPC_NCCL_ONE_RANK");
  d->one_rank = d->size == 1 && one && !strcmp(one, "1");
  if (d->size == 1 && !d->one_rank) /* nothing to sum: NCCL is not even loaded */
    return "none (one process)";
  char why[320] = "";
  int ok = 0;
  if (dev == AMPC_DEVICE_CUDA) { /* else host buffers: MPI, nothing to explain */
    ok = ampc_nccl_check() == AMPC_OK;
    if (!ok)
      snprintf(why, sizeof why, "%s", ampc_last_error());
  }
  const int v = ampc_nccl_version();
#ifdef AMPC_HAVE_MPI
  if (d->mpi_started) {
    int all = ok; /* every rank takes the same path, or none would meet */
    if (d->size > 1 && MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
      all = 0;
    if (all) {
      d->comm.sum_device_f32_ordered = sum_device_f32_ordered;
      d->comm.sum_device_working = sum_device_working;
      snprintf(d->path, sizeof d->path, "nccl %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    } else {
      snprintf(d->path, sizeof d->path, "host (MPI)%s%s", ok || why[0] ? ": " : "",
               ok ? "another rank has no NCCL" : why);
    }
    return d->path;
  }
#endif
  if (!d->one_rank)
    return "none (one process)";
  if (!ok) {
    snprintf(d->path, sizeof d->path, "none (one process): %s",
             why[0] ? why : "AMPC_NCCL_ONE_RANK needs --device cuda");
    return d->path;
  }
  /* AMPC_NCCL_ONE_RANK without a launcher: a communicator of this process
   * alone, its device sums through NCCL */
  d->comm = (ampc_comm){.user = d,
                        .rank = 0,
                        .size = 1,
                        .sum_f32_ordered = one_sum_f32,
                        .sum_working = one_sum_working,
                        .sum_u64 = one_sum_u64,
                        .max_f64 = one_max_f64,
                        .allgather = one_allgather,
                        .check_same = one_check_same,
                        .bytes_sent = one_bytes_sent,
                        .sum_device_f32_ordered = sum_device_f32_ordered,
                        .sum_device_working = sum_device_working};
  snprintf(d->path, sizeof d->path, "nccl %d.%d.%d (a group of one)", v / 10000, v / 100 % 100,
           v % 100);
  return d->path;
}

void ampc_dist_abort(ampc_dist *d, int code) {
#ifdef AMPC_HAVE_MPI
  if (d && d->mpi_started && d->size > 1) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
#else
  (void)d, (void)code;
#endif
}

void ampc_dist_finalize(ampc_dist *d) {
  if (!d)
    return;
  ampc_nccl_destroy(d->nccl); /* before MPI goes */
#ifdef AMPC_HAVE_MPI
  if (d->ovl_have_comm)
    MPI_Comm_free(&d->ovl_comm);
  if (d->mpi_started)
    MPI_Finalize();
  free(d->ovl_tmp);
  free(d->ovl);
  free(d->ovl_req);
  free(d->ovl_idx);
#endif
  free(d->tmp);
  free(d->own);
  free(d);
}
