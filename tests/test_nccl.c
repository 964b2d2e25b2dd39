/*
 * tests/test_nccl.c: the ranks' device sums (src/dist/nccl.h).
 *
 * Without arguments (CI, no GPU needed):
 *  - the rank-order chain's plan, replayed for 1..6 ranks, odd sizes and
 *    chunks on a simulation of NCCL's point-to-point semantics (a send and a
 *    receive complete together, in the order each pair posts them; a group's
 *    round ends when all its operations have completed): no deadlock, every
 *    send meets a receive of the same chunk, and the last rank ends with the
 *    bits of ((x_0 + x_1) + x_2) + ... summed in rank order (each rank adding
 *    own + running, as the device does);
 *  - the loader: without a GPU (or without libnccl, or without NCCL in the
 *    build) ampc_nccl_check fails with AMPC_ERR_UNSUPPORTED and a message that
 *    says why, and every entry refuses cleanly (no crash).
 * With --gpu: the NCCL group of one on GPU 0 (what one GPU can run): the
 * chain (with chunks of 1000 values, so several) and the all-reduce in F32,
 * F16 and BF16 must leave the values' bits as they were (a sum of one term),
 * and count the bytes sent as the host's collectives do. Exits 77 (CTest:
 * skipped) with the reason where NCCL cannot run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "backend/backend.h"
#include "dist/nccl.h"

static int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      g_fail = 1;                                                                                  \
    }                                                                                              \
  } while (0)

/* a value of varied sign and magnitude (2^-20 .. 2^20), so that the order of
 * the additions shows in the bits */
static float value(int r, int64_t i) {
  uint64_t h =
      (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(i + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const float m = 1.0f + (float)(h % 1000u) / 1000.0f;
  const int e = (int)((h >> 10) % 41u) - 20;
  float v = m;
  for (int k = 0; k < (e < 0 ? -e : e); k++)
    v = e < 0 ? v * 0.5f : v * 2.0f;
  return (h >> 20) & 1u ? -v : v;
}

/* one rank of the simulation */
typedef struct sim_rank {
  float *x, *tmp;
  int64_t round;
  int sent, received; /* this round's operations done */
} sim_rank;

/* ranks x n values in chunks of `chunk`: returns the number of elements whose
 * reverse-order sum differs from the rank-order one (the data's sensitivity) */
static int64_t simulate(int size, int64_t n, int64_t chunk) {
  sim_rank *S = calloc((size_t)size, sizeof *S);
  float *ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
  for (int r = 0; r < size; r++) {
    S[r].x = malloc((size_t)(n ? n : 1) * sizeof(float));
    S[r].tmp = malloc((size_t)chunk * sizeof(float));
    for (int64_t i = 0; i < n; i++)
      S[r].x[i] = value(r, i);
  }
  int64_t differ = 0;
  for (int64_t i = 0; i < n; i++) {
    float a = value(0, i), b = value(size - 1, i);
    for (int r = 1; r < size; r++)
      a = a + value(r, i);
    for (int r = size - 2; r >= 0; r--)
      b = b + value(r, i);
    ref[i] = a;
    differ += memcmp(&a, &b, sizeof a) != 0;
  }
  const int64_t rounds = ampc_chain_rounds(n, chunk);
  CHECK(rounds == (n > 0 ? (n + chunk - 1) / chunk + 1 : 0), "rounds %lld for n %lld chunk %lld",
        (long long)rounds, (long long)n, (long long)chunk);
  int64_t sent_values[8] = {0}, recv_values[8] = {0};
  for (;;) {
    int progress = 0, left = 0;
    for (int r = 0; r < size; r++) {
      sim_rank *me = &S[r];
      if (me->round >= rounds)
        continue;
      left = 1;
      const ampc_chain_round rd = ampc_chain_round_get(r, size, n, chunk, me->round);
      /* the receive meets rank r - 1's send of its current round, if posted */
      if (rd.recv_len && !me->received && S[r - 1].round < rounds && !S[r - 1].sent) {
        const ampc_chain_round pr = ampc_chain_round_get(r - 1, size, n, chunk, S[r - 1].round);
        if (pr.send_len) {
          CHECK(pr.send_off == rd.recv_off && pr.send_len == rd.recv_len,
                "size %d n %lld chunk %lld: rank %d sends [%lld, +%lld) in round %lld, rank %d "
                "receives [%lld, +%lld) in round %lld",
                size, (long long)n, (long long)chunk, r - 1, (long long)pr.send_off,
                (long long)pr.send_len, (long long)S[r - 1].round, r, (long long)rd.recv_off,
                (long long)rd.recv_len, (long long)me->round);
          const int64_t len = pr.send_len < rd.recv_len ? pr.send_len : rd.recv_len;
          memcpy(me->tmp, S[r - 1].x + pr.send_off, (size_t)len * sizeof(float));
          me->received = 1, S[r - 1].sent = 1, progress = 1;
          sent_values[r - 1] += pr.send_len, recv_values[r] += rd.recv_len;
        }
      }
      if ((!rd.send_len || me->sent) && (!rd.recv_len || me->received)) {
        for (int64_t i = 0; i < rd.recv_len; i++) /* own + running */
          me->x[rd.recv_off + i] = me->x[rd.recv_off + i] + me->tmp[i];
        me->round++, me->sent = 0, me->received = 0, progress = 1;
      }
    }
    if (!left)
      break;
    if (!progress) {
      CHECK(0, "size %d n %lld chunk %lld: the chain deadlocks", size, (long long)n,
            (long long)chunk);
      break;
    }
  }
  for (int r = 0; r < size && r < 8; r++) {
    CHECK(sent_values[r] == (r < size - 1 ? n : 0), "size %d n %lld: rank %d sent %lld values",
          size, (long long)n, r, (long long)sent_values[r]);
    CHECK(recv_values[r] == (r > 0 ? n : 0), "size %d n %lld: rank %d received %lld values", size,
          (long long)n, r, (long long)recv_values[r]);
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += memcmp(&S[size - 1].x[i], &ref[i], sizeof(float)) != 0;
  CHECK(bad == 0, "size %d n %lld chunk %lld: %lld sums differ from the rank-order sum", size,
        (long long)n, (long long)chunk, (long long)bad);
  for (int r = 0; r < size; r++)
    free(S[r].x), free(S[r].tmp);
  free(S);
  free(ref);
  return differ;
}

static void test_plan(void) {
  static const int64_t chunks[] = {1, 4, 5, 64};
  static const int64_t sizes[] = {0, 1, 3, 4, 5, 63, 64, 65, 200, 1001};
  int64_t differ = 0;
  for (int size = 1; size <= 6; size++)
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
      for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        differ += simulate(size, sizes[k], chunks[c]);
  /* the data do tell the orders apart, so the bit checks above mean something */
  CHECK(differ > 0, "no sum depends on the order: the data cannot check the order");
  /* out-of-range rounds are empty */
  const ampc_chain_round e = ampc_chain_round_get(0, 2, 10, 4, 4);
  CHECK(!e.send_len && !e.recv_len, "round 4 of 4 is not empty");
  const ampc_chain_round f = ampc_chain_round_get(2, 2, 10, 4, 1);
  CHECK(!f.send_len && !f.recv_len, "rank 2 of 2 has a round");
  CHECK(ampc_chain_rounds(10, 0) == 0 && ampc_chain_rounds(-1, 4) == 0, "rounds of nothing");
  printf("chain plan: 1..6 ranks, %zu sizes, %zu chunks: rank-order bits, no deadlock (%lld sums "
         "differ in reverse order)\n",
         sizeof sizes / sizeof *sizes, sizeof chunks / sizeof *chunks, (long long)differ);
}

/* why NCCL cannot run here ("" when it can) */
static char g_reason[512];

/* the loader and the entries refuse cleanly; returns whether NCCL can run */
static bool test_loader(void) {
  const ampc_status st = ampc_nccl_check();
  snprintf(g_reason, sizeof g_reason, "%s", st == AMPC_OK ? "" : ampc_last_error());
  const char *msg = g_reason;
  if (!ampc_nccl_built()) {
    CHECK(st == AMPC_ERR_UNSUPPORTED && strstr(msg, "not built"), "not built: status %d, '%s'",
          (int)st, msg);
  } else if (ampc_device_count(AMPC_DEVICE_CUDA) < 1) {
    CHECK(st == AMPC_ERR_UNSUPPORTED && !strncmp(msg, "NCCL: ", 6),
          "no GPU: expected AMPC_ERR_UNSUPPORTED and 'NCCL: ...', got %d, '%s'", (int)st, msg);
  }
  if (st != AMPC_OK)
    printf("NCCL not available: %s (libnccl version %d)\n", msg, ampc_nccl_version());
  ampc_nccl *g = (ampc_nccl *)&g_fail; /* must not be touched */
  const ampc_status c1 = ampc_nccl_create(0, 1, 0, NULL, NULL, &g);
  CHECK(c1 != AMPC_OK && g == NULL, "ampc_nccl_create without a bound context: status %d", (int)c1);
  CHECK(ampc_nccl_create(1, 1, 0, NULL, NULL, &g) != AMPC_OK, "rank 1 of 1 accepted");
  CHECK(ampc_nccl_create(0, 2, 0, NULL, NULL, &g) != AMPC_OK, "2 ranks without a broadcast");
  float x[4] = {0};
  CHECK(ampc_nccl_sum_f32_ordered(NULL, x, 4, NULL) != AMPC_OK, "sum on no group");
  CHECK(ampc_nccl_sum_working(NULL, x, AMPC_F32, 4, NULL) != AMPC_OK, "sum on no group");
  ampc_nccl_destroy(NULL);
  return st == AMPC_OK;
}

/* the group of one on GPU 0 */
static int test_gpu(void) {
  if (!test_loader()) {
    printf("# skip: NCCL cannot run here: %s\n", g_reason);
    return 77;
  }
  ampc_device_ctx *ctx = NULL;
  ampc_status st = ampc_device_open(AMPC_DEVICE_CUDA, 0, &ctx);
  if (st != AMPC_OK) {
    fprintf(stderr, "FAIL: ampc_device_open: %s\n", ampc_last_error());
    return 1;
  }
  const ampc_backend *be = ampc_device_backend(AMPC_DEVICE_CUDA);
  ampc_nccl *g = NULL;
  st = ampc_nccl_create(0, 1, 1000, NULL, NULL, &g);
  if (st != AMPC_OK) {
    fprintf(stderr, "FAIL: ampc_nccl_create: %s\n", ampc_last_error());
    ampc_device_close(ctx);
    return 1;
  }
  printf("NCCL %d: a group of one on GPU 0\n", ampc_nccl_version());
  enum { N = 3 * 1000 + 17 };
  static float hf[N];
  static uint16_t h16[N], back[2 * N];
  for (int64_t i = 0; i < N; i++)
    hf[i] = value(0, i);
  void *d = NULL;
  if (be->alloc(&d, sizeof hf) != AMPC_OK) {
    fprintf(stderr, "FAIL: alloc: %s\n", ampc_last_error());
    return 1;
  }
  /* the chain (FP32, rank order): three chunks and a part */
  uint64_t sent = 0;
  st = be->to_device(d, hf, sizeof hf);
  if (st == AMPC_OK)
    st = ampc_nccl_sum_f32_ordered(g, d, N, &sent);
  if (st == AMPC_OK)
    st = be->to_host(back, d, sizeof hf);
  CHECK(st == AMPC_OK, "the chain: %s", ampc_last_error());
  CHECK(st != AMPC_OK || !memcmp(back, hf, sizeof hf), "the chain changed the values");
  CHECK(sent == sizeof hf, "the chain sent %llu bytes, expected %zu (the broadcast's root)",
        (unsigned long long)sent, sizeof hf);
  /* the all-reduce in each working dtype */
  static const ampc_dtype dts[] = {AMPC_F32, AMPC_F16, AMPC_BF16};
  for (size_t k = 0; k < 3; k++) {
    const ampc_dtype dt = dts[k];
    const size_t bytes = (size_t)N * ampc_dtype_size(dt);
    const void *src = hf;
    if (dt != AMPC_F32) {
      ampc_convert(h16, dt, hf, AMPC_F32, N);
      src = h16;
    }
    sent = 0;
    st = be->to_device(d, src, bytes);
    if (st == AMPC_OK)
      st = ampc_nccl_sum_working(g, d, dt, N, &sent);
    if (st == AMPC_OK)
      st = be->to_host(back, d, bytes);
    CHECK(st == AMPC_OK, "all-reduce %s: %s", ampc_dtype_name(dt), ampc_last_error());
    CHECK(st != AMPC_OK || !memcmp(back, src, bytes), "all-reduce %s changed the values",
          ampc_dtype_name(dt));
    CHECK(sent == bytes, "all-reduce %s sent %llu bytes", ampc_dtype_name(dt),
          (unsigned long long)sent);
  }
  CHECK(ampc_nccl_sum_working(g, d, AMPC_F8_E4M3, N, NULL) == AMPC_ERR_INVALID_ARG,
        "an FP8 all-reduce accepted");
  be->release(d);
  ampc_nccl_destroy(g);
  ampc_device_close(ctx);
  printf("%s\n", g_fail ? "FAILED"
                        : "passed: chain and all-reduce (f32, f16, bf16) on a group "
                          "of one");
  return g_fail;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--gpu"))
    return test_gpu();
  test_plan();
  (void)test_loader();
  printf("%s\n", g_fail ? "FAILED" : "passed");
  return g_fail;
}
