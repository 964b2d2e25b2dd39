/*
 * tests/test_cuda_plan.c: the CUDA backend's host side, on any machine.
 *
 * ampc_cuda_gemm restates ampc's row-major GEMM as cuBLASLt's column-major
 * one (src/backend/cuda/cuda_impl.h). Here every plan is replayed by a column-major
 * GEMM written from cuBLASLt's definition (D = alpha op_a(A) op_b(B) + beta C
 * + bias[row], element (r, c) of a stored matrix at r + c * ld, batch i at
 * i * stride), in double over the exact stored values, and compared with
 * ampc_gemm_reference: both sum the same exact products in the same p order,
 * so they must agree bit for bit. Then the checks that run before any CUDA
 * call (dtype table, FP8 layout and alignment, bias dtypes, overlap), and,
 * where there is no device, that every device call fails cleanly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "backend/cuda/cuda_impl.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15u;
static double urand(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-53;
}

static double get(const void *p, ampc_dtype dt, int64_t i) {
  switch (dt) {
  case AMPC_F16: return (double)ampc_f16_to_f32(((const ampc_f16 *)p)[i]);
  case AMPC_BF16: return (double)ampc_bf16_to_f32(((const ampc_bf16 *)p)[i]);
  case AMPC_F8_E4M3: return (double)ampc_e4m3_to_f32(((const ampc_f8_e4m3 *)p)[i]);
  case AMPC_F8_E5M2: return (double)ampc_e5m2_to_f32(((const ampc_f8_e5m2 *)p)[i]);
  default: return (double)((const float *)p)[i];
  }
}

/* n random values in [-1, 1) of dtype dt (64-byte aligned, for the FP8 rules) */
static void *rand_buf(ampc_dtype dt, int64_t n) {
  float *tmp = malloc((size_t)(n + 1) * sizeof *tmp);
  size_t bytes = (size_t)(n + 1) * ampc_dtype_size(dt);
  bytes = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, bytes);
  assert_non_null(tmp);
  assert_non_null(p);
  for (int64_t i = 0; i <= n; i++)
    tmp[i] = (float)(2.0 * urand() - 1.0);
  assert_int_equal(ampc_convert_ex(p, dt, tmp, AMPC_F32, (size_t)(n + 1), AMPC_CONVERT_SATURATE),
                   AMPC_OK);
  free(tmp);
  return p;
}

/* cuBLASLt's definition, column-major, in double; D written as double into
 * out (same offsets as D). scale_a etc. are host values here. */
static void replay(const ampc_cuda_plan *p, double sa, double sb, double *out) {
  for (int64_t bt = 0; bt < p->batch; bt++)
    for (int64_t j = 0; j < p->n; j++)
      for (int64_t i = 0; i < p->m; i++) {
        double s = 0.0;
        if (!p->k_zero)
          for (int64_t q = 0; q < p->k; q++) {
            const int64_t ia = bt * p->stride_a + (p->trans_a ? q + i * p->lda : i + q * p->lda);
            const int64_t ib = bt * p->stride_b + (p->trans_b ? j + q * p->ldb : q + j * p->ldb);
            s += get(p->a, p->a_dt, ia) * get(p->b, p->b_dt, ib);
          }
        const int64_t id = bt * p->stride_d + i + j * p->ldd;
        double v = (double)p->alpha * sa * sb * s;
        if (p->beta != 0.0f)
          v += (double)p->beta * get(p->d, p->d_dt, id);
        if (p->bias)
          v += get(p->bias, p->bias_dt, i);
        out[id] = v;
      }
}

typedef struct gcase {
  ampc_op opa, opb;
  int64_t m, n, k, pad_a, pad_b, pad_c, batch;
  int stride_a_zero, side_by_side, bias;
  ampc_dtype a_dt, b_dt, c_dt;
  ampc_cuda_compute compute;
  float alpha, beta;
} gcase;

static void run_case(const gcase *t) {
  ampc_cuda_gemm_args g = ampc_cuda_gemm_args_default();
  g.opa = t->opa, g.opb = t->opb, g.m = t->m, g.n = t->n, g.k = t->k;
  g.alpha = t->alpha, g.beta = t->beta, g.compute = t->compute;
  g.a_dt = t->a_dt, g.b_dt = t->b_dt, g.c_dt = t->c_dt, g.batch = t->batch;
  const int64_t a_r = t->opa == AMPC_OP_N ? t->m : t->k, a_c = t->opa == AMPC_OP_N ? t->k : t->m;
  const int64_t b_r = t->opb == AMPC_OP_N ? t->k : t->n, b_c = t->opb == AMPC_OP_N ? t->n : t->k;
  g.lda = (a_c > 1 ? a_c : 1) + t->pad_a, g.ldb = (b_c > 1 ? b_c : 1) + t->pad_b;
  const int64_t a_sz = a_r > 0 ? (a_r - 1) * g.lda + a_c : 1;
  const int64_t b_sz = b_r > 0 ? (b_r - 1) * g.ldb + b_c : 1;
  g.stride_a = t->stride_a_zero ? 0 : a_sz + 3;
  g.stride_b = b_sz + 5;
  int64_t c_total;
  if (t->side_by_side) { /* heads of one attention output: column blocks */
    g.ldc = t->batch * t->n + t->pad_c;
    g.stride_c = t->n;
    c_total = (t->m - 1) * g.ldc + g.ldc;
  } else {
    g.ldc = t->n + t->pad_c;
    g.stride_c = (t->m - 1) * g.ldc + t->n + 2;
    c_total = t->batch * g.stride_c;
  }
  void *a = rand_buf(t->a_dt, (t->batch - 1) * g.stride_a + a_sz);
  void *b = rand_buf(t->b_dt, (t->batch - 1) * g.stride_b + b_sz);
  void *c = rand_buf(t->c_dt, c_total);
  void *bias = t->bias ? rand_buf(t->c_dt, t->n) : NULL;
  g.a = a, g.b = b, g.c = c, g.bias = bias, g.bias_dt = t->c_dt;

  ampc_cuda_plan p;
  if (ampc_cuda_plan_gemm("test", &g, &p) != AMPC_OK)
    fail_msg("plan: %s", ampc_last_error());
  assert_int_equal(p.m, t->n);
  assert_int_equal(p.n, t->m);
  double *out = calloc((size_t)c_total + 1, sizeof *out);
  double *ref = malloc((size_t)(t->m * t->n) * sizeof *ref);
  assert_non_null(out);
  assert_non_null(ref);
  replay(&p, 1.0, 1.0, out);
  for (int64_t bt = 0; bt < t->batch; bt++) {
    const char *ab = (const char *)a + (size_t)(bt * g.stride_a) * ampc_dtype_size(t->a_dt);
    const char *bb = (const char *)b + (size_t)(bt * g.stride_b) * ampc_dtype_size(t->b_dt);
    const char *cb = (const char *)c + (size_t)(bt * g.stride_c) * ampc_dtype_size(t->c_dt);
    assert_int_equal(ampc_gemm_reference(t->opa, t->opb, t->m, t->n, t->k, (double)t->alpha, ab,
                                         t->a_dt, g.lda, bb, t->b_dt, g.ldb, (double)t->beta, cb,
                                         t->c_dt, g.ldc, ref, NULL),
                     AMPC_OK);
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = 0; j < t->n; j++) {
        const double r = ref[i * t->n + j] + (bias ? get(bias, t->c_dt, j) : 0.0);
        const double got = out[bt * g.stride_c + i * g.ldc + j];
        if (got != r)
          fail_msg("op %c%c m=%lld n=%lld k=%lld batch %lld [%lld][%lld]: replay %.17g, "
                   "reference %.17g",
                   "NT"[t->opa], "NT"[t->opb], (long long)t -> m, (long long)t -> n,
                   (long long)t -> k, (long long)bt, (long long)i, (long long)j, got, r);
      }
  }
  free(out);
  free(ref);
  free(a);
  free(b);
  free(c);
  free(bias);
}

static void test_mapping(void **state) {
  (void)state;
  const ampc_dtype dts[3][3] = {{AMPC_F16, AMPC_F16, AMPC_F32},
                                {AMPC_BF16, AMPC_BF16, AMPC_BF16},
                                {AMPC_F32, AMPC_F32, AMPC_F32}};
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {31, 9, 128}};
  int cases = 0;
  for (int opa = 0; opa < 2; opa++)
    for (int opb = 0; opb < 2; opb++)
      for (int s = 0; s < 4; s++)
        for (int d = 0; d < 3; d++) {
          gcase t = {(ampc_op)opa,
                     (ampc_op)opb,
                     sizes[s][0],
                     sizes[s][1],
                     sizes[s][2],
                     s,
                     2 * s,
                     s % 2,
                     1 + s % 3,
                     s == 2,
                     0,
                     d == 1,
                     dts[d][0],
                     dts[d][1],
                     dts[d][2],
                     AMPC_CUDA_COMPUTE_32F,
                     1.5f,
                     d == 2 ? 0.5f : 0.0f};
          run_case(&t);
          cases++;
        }
  /* heads side by side in one C; an A shared by every batch; beta with bias */
  gcase heads = {AMPC_OP_N, AMPC_OP_T, 9, 8, 16,       0,        0,        3,
                 4,         0,         1, 0, AMPC_F16, AMPC_F16, AMPC_F16, AMPC_CUDA_COMPUTE_32F,
                 1.0f,      0.0f};
  run_case(&heads);
  gcase shared = {
      AMPC_OP_T, AMPC_OP_N, 6, 10, 12,        1,         2,        0,
      3,         1,         0, 1,  AMPC_BF16, AMPC_BF16, AMPC_F32, AMPC_CUDA_COMPUTE_32F,
      -1.0f,     2.0f};
  run_case(&shared);
  gcase acc16 = {AMPC_OP_N, AMPC_OP_N, 5, 6, 40,       0,        0,        0,
                 1,         0,         0, 0, AMPC_F16, AMPC_F16, AMPC_F16, AMPC_CUDA_COMPUTE_16F,
                 1.0f,      1.0f};
  run_case(&acc16);
  gcase kzero = {
      AMPC_OP_N, AMPC_OP_N, 4, 3, 0,        0,        0,        0,
      2,         0,         0, 1, AMPC_F32, AMPC_F32, AMPC_F32, AMPC_CUDA_COMPUTE_32F_PEDANTIC,
      1.0f,      0.25f};
  run_case(&kzero);
  print_message("%d layouts replayed bit-exactly against ampc_gemm_reference\n", cases + 4);
}

/* FP8: the scales swap with the operands; the replay with the scales as
 * multipliers equals the reference of the dequantized values */
static void test_fp8_mapping(void **state) {
  (void)state;
  const int64_t m = 32, n = 48, k = 64;
  ampc_f8_e4m3 *a = rand_buf(AMPC_F8_E4M3, m * k);
  ampc_f8_e5m2 *b = rand_buf(AMPC_F8_E5M2, n * k);
  float *c = rand_buf(AMPC_F32, m * n);
  ampc_bf16 *bias = rand_buf(AMPC_BF16, n);
  /* host stand-ins for the device scales (16-byte aligned, as required) */
  _Alignas(16) const float sa = 0.25f;
  _Alignas(16) const float sb = 3.0f;
  float amax;
  ampc_cuda_gemm_args g = ampc_cuda_gemm_args_default();
  g.opa = AMPC_OP_N, g.opb = AMPC_OP_T, g.m = m, g.n = n, g.k = k;
  g.a = a, g.a_dt = AMPC_F8_E4M3, g.lda = k, g.b = b, g.b_dt = AMPC_F8_E5M2, g.ldb = k;
  g.c = c, g.c_dt = AMPC_F32, g.ldc = n, g.bias = bias, g.bias_dt = AMPC_BF16;
  g.scale_a = &sa, g.scale_b = &sb, g.amax_c = &amax;
  ampc_cuda_plan p;
  assert_int_equal(ampc_cuda_plan_gemm("test", &g, &p), AMPC_OK);
  assert_true(p.fp8);
  assert_int_equal(p.a_dt, AMPC_F8_E5M2); /* cuBLASLt's A is ampc's B */
  assert_ptr_equal(p.scale_a, &sb);
  assert_ptr_equal(p.scale_b, &sa);
  assert_ptr_equal(p.amax_d, &amax);
  assert_int_equal(p.trans_a, 1); /* "TN" */
  assert_int_equal(p.trans_b, 0);
  assert_int_equal(p.c_layout_dt, AMPC_F32);
  double *out = calloc((size_t)(m * n), sizeof *out), *ref = malloc((size_t)(m * n) * 8);
  float *af = malloc((size_t)(m * k) * 4), *bf = malloc((size_t)(n * k) * 4);
  assert_non_null(out);
  assert_non_null(ref);
  assert_non_null(af);
  assert_non_null(bf);
  replay(&p, (double)*p.scale_a, (double)*p.scale_b, out);
  assert_int_equal(ampc_convert(af, AMPC_F32, a, AMPC_F8_E4M3, (size_t)(m * k)), AMPC_OK);
  assert_int_equal(ampc_convert(bf, AMPC_F32, b, AMPC_F8_E5M2, (size_t)(n * k)), AMPC_OK);
  assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_T, m, n, k, (double)sa * (double)sb, af,
                                       AMPC_F32, k, bf, AMPC_F32, k, 0.0, NULL, AMPC_F32, n, ref,
                                       NULL),
                   AMPC_OK);
  for (int64_t i = 0; i < m * n; i++)
    assert_true(out[i] == ref[i] + (double)ampc_bf16_to_f32(bias[i % n]));
  /* an FP8 C: its C layout is BF16 (beta = 0), scale_c allowed */
  ampc_f8_e4m3 *c8 = rand_buf(AMPC_F8_E4M3, m * n);
  _Alignas(16) const float sc = 2.0f;
  g.c = c8, g.c_dt = AMPC_F8_E4M3, g.scale_c = &sc;
  assert_int_equal(ampc_cuda_plan_gemm("test", &g, &p), AMPC_OK);
  assert_int_equal(p.c_layout_dt, AMPC_BF16);
  assert_ptr_equal(p.scale_d, &sc);
  free(out);
  free(ref);
  free(af);
  free(bf);
  free(a);
  free(b);
  free(c);
  free(c8);
  free(bias);
}

/* expect status s and a message containing `needle` */
static void expect(const ampc_cuda_gemm_args *g, ampc_status s, const char *needle) {
  ampc_cuda_plan p;
  const ampc_status got = ampc_cuda_plan_gemm("ampc_cuda_gemm", g, &p);
  if (got != s || !strstr(ampc_last_error(), needle))
    fail_msg("expected %s with '%s', got %s: %s", ampc_status_name(s), needle,
             ampc_status_name(got), ampc_last_error());
}

static void test_checks(void **state) {
  (void)state;
  static _Alignas(64) uint8_t buf[3][64 * 64 * 4];
  ampc_cuda_gemm_args base = ampc_cuda_gemm_args_default();
  base.m = 16, base.n = 32, base.k = 48;
  base.a = buf[0], base.lda = 48, base.b = buf[1], base.ldb = 32, base.c = buf[2], base.ldc = 32;
  ampc_cuda_plan p;
  assert_int_equal(ampc_cuda_plan_gemm("t", &base, &p), AMPC_OK);
  ampc_cuda_gemm_args g;

  g = base, g.m = -1;
  expect(&g, AMPC_ERR_INVALID_ARG, "negative dimension");
  g = base, g.lda = 47;
  expect(&g, AMPC_ERR_INVALID_ARG, "lda=47 < 48");
  g = base, g.opb = AMPC_OP_T;
  expect(&g, AMPC_ERR_INVALID_ARG, "ldb=32 < 48");
  g = base, g.ldc = 31;
  expect(&g, AMPC_ERR_INVALID_ARG, "ldc=31 < 32");
  g = base, g.c = NULL;
  expect(&g, AMPC_ERR_INVALID_ARG, "C is NULL");
  g = base, g.a = NULL;
  expect(&g, AMPC_ERR_INVALID_ARG, "A is NULL");
  g = base, g.a = NULL, g.b = NULL, g.alpha = 0.0f; /* BLAS: A and B not read */
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  assert_true(p.k_zero);
  g = base, g.m = 0, g.a = g.b = g.c = NULL;
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  assert_true(p.noop);
  g = base, g.b_dt = AMPC_BF16;
  expect(&g, AMPC_ERR_UNSUPPORTED, "one input dtype");
  g = base, g.c_dt = AMPC_BF16;
  expect(&g, AMPC_ERR_UNSUPPORTED, "f16 x f16 -> bf16");
  g = base, g.a_dt = g.b_dt = g.c_dt = AMPC_BF16, g.compute = AMPC_CUDA_COMPUTE_16F;
  expect(&g, AMPC_ERR_UNSUPPORTED, "compute 16F takes f16");
  g = base, g.compute = AMPC_CUDA_COMPUTE_32F_PEDANTIC;
  expect(&g, AMPC_ERR_UNSUPPORTED, "32F_PEDANTIC takes f32");
  g = base, g.a_dt = g.b_dt = g.c_dt = AMPC_F32, g.compute = AMPC_CUDA_COMPUTE_32F_FAST_TF32;
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  g = base, g.compute = (ampc_cuda_compute)9;
  expect(&g, AMPC_ERR_INVALID_ARG, "unknown compute type");
  g = base, g.a_dt = (ampc_dtype)77;
  expect(&g, AMPC_ERR_INVALID_ARG, "invalid dtype 77");
  /* batches: C must not overlap */
  g = base, g.batch = 2, g.stride_c = 32;
  expect(&g, AMPC_ERR_INVALID_ARG, "overlap");
  g = base, g.batch = 2, g.stride_c = 16 * 32, g.stride_a = g.stride_b = 0;
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  g = base, g.batch = -1;
  expect(&g, AMPC_ERR_INVALID_ARG, "negative");
  g = base, g.c = buf[2] + 1;
  expect(&g, AMPC_ERR_INVALID_ARG, "not aligned");
  /* bias dtypes */
  float fscale = 1.0f;
  g = base, g.bias = buf[0], g.bias_dt = AMPC_F32;
  expect(&g, AMPC_ERR_UNSUPPORTED, "bias dtype f32");
  g = base, g.scale_a = &fscale;
  expect(&g, AMPC_ERR_INVALID_ARG, "FP8 GEMMs only");

  /* FP8 */
  ampc_cuda_gemm_args f = base;
  f.a_dt = AMPC_F8_E4M3, f.b_dt = AMPC_F8_E4M3, f.c_dt = AMPC_BF16;
  f.opb = AMPC_OP_T, f.ldb = 48;
  assert_int_equal(ampc_cuda_plan_gemm("t", &f, &p), AMPC_OK);
  _Alignas(16) float scales[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  g = f, g.scale_a = scales, g.scale_b = scales + 4;
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  g = f, g.scale_a = scales, g.scale_b = scales + 1;
  expect(&g, AMPC_ERR_INVALID_ARG, "16-byte aligned");
  g = f, g.opb = AMPC_OP_N, g.ldb = 32;
  expect(&g, AMPC_ERR_UNSUPPORTED, "op(A) = N and op(B) = T");
  g = f, g.opa = AMPC_OP_T, g.lda = 16;
  expect(&g, AMPC_ERR_UNSUPPORTED, "op(A) = N and op(B) = T");
  g = f, g.lda = 56;
  expect(&g, AMPC_ERR_UNSUPPORTED, "multiples of 16");
  g = f, g.a = buf[0] + 8;
  expect(&g, AMPC_ERR_UNSUPPORTED, "16-byte aligned");
  g = f, g.a_dt = g.b_dt = AMPC_F8_E5M2;
  expect(&g, AMPC_ERR_UNSUPPORTED, "E5M2 x E5M2");
  g = f, g.b_dt = AMPC_F16;
  expect(&g, AMPC_ERR_UNSUPPORTED, "both operands FP8");
  g = f, g.c_dt = AMPC_F8_E5M2;
  expect(&g, AMPC_ERR_UNSUPPORTED, "E5M2 C needs an E5M2 operand");
  g = f, g.c_dt = AMPC_F8_E4M3, g.bias = buf[0], g.bias_dt = AMPC_F16; /* C layout = bias's */
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  assert_int_equal(p.c_layout_dt, AMPC_F16);
  g = f, g.c_dt = AMPC_F8_E4M3, g.beta = 1.0f;
  expect(&g, AMPC_ERR_UNSUPPORTED, "beta = 0");
  g = f, g.scale_c = &fscale;
  expect(&g, AMPC_ERR_INVALID_ARG, "scale_c applies to an FP8 C only");
  g = f, g.bias = buf[0], g.bias_dt = AMPC_F16;
  expect(&g, AMPC_ERR_UNSUPPORTED, "bias dtype f16");
  g = f, g.c_dt = AMPC_F32, g.bias = buf[0], g.bias_dt = AMPC_BF16;
  assert_int_equal(ampc_cuda_plan_gemm("t", &g, &p), AMPC_OK);
  g = base, g.c_dt = AMPC_F8_E4M3;
  expect(&g, AMPC_ERR_UNSUPPORTED, "f16 x f16 -> e4m3");

  assert_int_equal(ampc_cuda_align_class(NULL), 256);
  assert_int_equal(ampc_cuda_align_class(buf[0] + 2), 2);
  assert_int_equal(ampc_cuda_align_class(buf[0] + 48), 16);
}

/* Where no GPU is, every device call fails cleanly with the reason. */
static void test_no_device(void **state) {
  (void)state;
  const int n = ampc_cuda_device_count();
  print_message("CUDA backend %s; %d device(s)%s%s\n", ampc_cuda_built() ? "built" : "not built", n,
                n ? "" : ": ", ampc_cuda_unavailable_reason());
  size_t ver = 0;
  if (ampc_cuda_built()) { /* cuBLASLt is dlopen'ed: it loads without a GPU */
    if (ampc_cuda_load_cublaslt(&ver) != AMPC_OK)
      fail_msg("cuBLASLt: %s", ampc_last_error());
    print_message("cuBLASLt %zu loaded\n", ver);
    assert_true(ver > 0);
  } else {
    assert_int_equal(ampc_cuda_load_cublaslt(&ver), AMPC_ERR_UNSUPPORTED);
  }
  if (n > 0) {
    print_message("a device is present: its checks are tests/test_cuda_gemm.c\n");
    return;
  }
  assert_true(strlen(ampc_cuda_unavailable_reason()) > 0);
  ampc_cuda_ctx *ctx = (ampc_cuda_ctx *)1;
  assert_int_equal(ampc_cuda_create(0, 0, &ctx), AMPC_ERR_UNSUPPORTED);
  assert_null(ctx);
  assert_non_null(strstr(ampc_last_error(), ampc_cuda_built() ? "no CUDA device" : "without CUDA"));
  ampc_cuda_device_info info;
  assert_int_equal(ampc_cuda_device_info_get(0, &info), AMPC_ERR_UNSUPPORTED);
  ampc_cuda_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mapping),
      cmocka_unit_test(test_fp8_mapping),
      cmocka_unit_test(test_checks),
      cmocka_unit_test(test_no_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
