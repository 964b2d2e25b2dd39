/*
 * tests/test_robust.c: bad checkpoints cost nothing (docs/ROBUSTNESS.md).
 *
 * A real checkpoint of a small MLP trainer is written, then damaged in every
 * way the robustness table lists: cut at every length, replaced by random
 * bytes, a header length larger than the file, a tensor claiming a huge size
 * (loaded in a child whose data segment is limited, so a huge allocation would
 * show up as AMPC_ERR_NOMEM), offsets that overlap or run past the end, a
 * wrong dtype or shape, another model's checkpoint, missing or bad metadata,
 * and single-byte corruptions anywhere. ampc_trainer_load must return
 * AMPC_ERR_FORMAT with a message naming the file (and the problem), and the
 * trainer it was loading into must be exactly as before.
 *
 * `test_robust --write-dataset FILE` only writes a small 8x8 image-text
 * dataset (32 samples, train / new style / zero-shot) for mm-micro runs in
 * tests/check_crash.sh and exits.
 */
#define _XOPEN_SOURCE 700

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ampc/ampc.h"
#include "ampc/data.h"

static char g_dir[64];
static char g_path[256];

static const char *in_dir(const char *name) {
  snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
  return g_path;
}

/* ---- files ---------------------------------------------------------------- */

static void put_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n)
    assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *get_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  const long len = ftell(f);
  assert_true(len >= 0);
  rewind(f);
  unsigned char *p = malloc((size_t)len + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* ---- the trainers --------------------------------------------------------- */

/* An MLP trainer (16-mixed, AdamW) of the given hidden width. */
static void make_trainer(ampc_trainer *T, int64_t hidden, uint64_t seed) {
  const ampc_mlp_config c = {.in = 6, .hidden = hidden, .classes = 3};
  ampc_param_spec specs[AMPC_MLP_NPARAMS];
  ampc_amp_config amp;
  const ampc_optim_config opt = ampc_optim_adamw_defaults();
  assert_int_equal(ampc_mlp_specs(&c, specs), AMPC_OK);
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp), AMPC_OK);
  assert_int_equal(ampc_trainer_init(T, &amp, &opt, specs, AMPC_MLP_NPARAMS, seed), AMPC_OK);
}

/* Everything ampc_trainer_load may change, copied. */
typedef struct {
  float *master;
  unsigned char *m, *v;
  size_t mbytes;
  int64_t step, iteration;
  float scale;
  int growth, hyst;
  int64_t overflow, skip;
  uint64_t rng[4];
} snapshot;

static void snap(const ampc_trainer *T, snapshot *s) {
  const ampc_params *P = &T->params;
  s->mbytes = (size_t)P->total * ampc_dtype_size(P->sdt);
  s->master = malloc((size_t)P->total * sizeof *s->master);
  s->m = malloc(s->mbytes);
  s->v = malloc(s->mbytes);
  assert_true(s->master && s->m && s->v && P->master && P->m && P->v);
  memcpy(s->master, P->master, (size_t)P->total * sizeof *s->master);
  memcpy(s->m, P->m, s->mbytes);
  memcpy(s->v, P->v, s->mbytes);
  s->step = T->step, s->iteration = T->iteration;
  s->scale = T->scaler.scale, s->growth = T->scaler.growth_tracker;
  s->hyst = T->scaler.hysteresis_left;
  s->overflow = T->scaler.overflow_count, s->skip = T->scaler.skip_count;
  memcpy(s->rng, T->rng.s, sizeof s->rng);
}

static int same_as(const ampc_trainer *T, const snapshot *s) {
  const ampc_params *P = &T->params;
  return memcmp(s->master, P->master, (size_t)P->total * sizeof *s->master) == 0 &&
         memcmp(s->m, P->m, s->mbytes) == 0 && memcmp(s->v, P->v, s->mbytes) == 0 &&
         s->step == T->step && s->iteration == T->iteration &&
         memcmp(&s->scale, &T->scaler.scale, sizeof s->scale) == 0 &&
         s->growth == T->scaler.growth_tracker && s->hyst == T->scaler.hysteresis_left &&
         s->overflow == T->scaler.overflow_count && s->skip == T->scaler.skip_count &&
         memcmp(s->rng, T->rng.s, sizeof s->rng) == 0;
}

static void unsnap(snapshot *s) {
  free(s->master);
  free(s->m);
  free(s->v);
}

/* The trainer every damaged file is loaded into, and its state. */
static ampc_trainer g_B;
static snapshot g_Bs;
/* The good checkpoint (of a trainer other than g_B) as bytes. */
static unsigned char *g_ck;
static size_t g_ck_n;

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ampc_robust_XXXXXX");
  if (!mkdtemp(g_dir))
    return -1;
  /* trainer A: distinctive state in every saved field */
  ampc_trainer A;
  make_trainer(&A, 5, 11);
  for (int64_t e = 0; e < A.params.total; e++) {
    A.params.master[e] = 0.001f * (float)(e % 97) - 0.03f;
    ((float *)A.params.m)[e] = 1e-4f * (float)(e % 13);
    ((float *)A.params.v)[e] = 1e-6f * (float)(e % 7);
  }
  A.step = 7, A.iteration = 9;
  A.scaler.scale = 2048.0f, A.scaler.growth_tracker = 3;
  A.scaler.overflow_count = 2, A.scaler.skip_count = 2;
  if (ampc_trainer_save(&A, in_dir("good.safetensors"), NULL, 0) != AMPC_OK)
    return -1;
  ampc_trainer_free(&A);
  g_ck = get_bytes(in_dir("good.safetensors"), &g_ck_n);
  make_trainer(&g_B, 5, 99);
  snap(&g_B, &g_Bs);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  DIR *d = opendir(g_dir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  unsnap(&g_Bs);
  ampc_trainer_free(&g_B);
  free(g_ck);
  return rmdir(g_dir);
}

/* Load path into g_B: it must fail with AMPC_ERR_FORMAT, a message naming the
 * file and containing `needle` (unless NULL), and g_B unchanged. */
static void expect_refused(const char *path, const char *needle) {
  const ampc_status st = ampc_trainer_load(&g_B, path);
  if (st != AMPC_ERR_FORMAT)
    fail_msg("%s: got status %d (%s), want AMPC_ERR_FORMAT", path, (int)st, ampc_last_error());
  const char *msg = ampc_last_error();
  if (!strstr(msg, path))
    fail_msg("message \"%s\" does not name %s", msg, path);
  if (needle && !strstr(msg, needle))
    fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
  if (!same_as(&g_B, &g_Bs))
    fail_msg("%s: a refused load changed the trainer", path);
}

/* ---- header surgery --------------------------------------------------------- */

/* The good checkpoint with its header replaced by mutate(header JSON); the
 * data region is kept as is unless extra_data (bytes to append) is given. */
static void rewrite(const char *path, void (*mutate)(cJSON *root), size_t extra_data) {
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)g_ck[i] << (8 * i);
  cJSON *root = cJSON_ParseWithLength((const char *)g_ck + 8, (size_t)hlen);
  assert_non_null(root);
  mutate(root);
  char *h = cJSON_PrintUnformatted(root);
  assert_non_null(h);
  cJSON_Delete(root);
  const size_t nh = strlen(h), nd = g_ck_n - 8 - (size_t)hlen;
  unsigned char *out = calloc(8 + nh + nd + extra_data, 1);
  assert_non_null(out);
  for (int i = 0; i < 8; i++)
    out[i] = (unsigned char)((uint64_t)nh >> (8 * i));
  memcpy(out + 8, h, nh);
  memcpy(out + 8 + nh, g_ck + 8 + hlen, nd);
  put_bytes(path, out, 8 + nh + nd + extra_data);
  free(out);
  cJSON_free(h);
}

/* The tensor entry of the header with this name. */
static cJSON *entry(cJSON *root, const char *name) {
  cJSON *e = cJSON_GetObjectItemCaseSensitive(root, name);
  assert_non_null(e);
  return e;
}

static void set_pair(cJSON *e, const char *key, double a, double b) {
  cJSON *arr = cJSON_CreateArray();
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(a));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(b));
  assert_true(cJSON_ReplaceItemInObjectCaseSensitive(e, key, arr));
}

static double offset_of(cJSON *root, const char *name, int which) {
  return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(entry(root, name), "data_offsets"),
                            which)
      ->valuedouble;
}

/* the second tensor in data order moved 4 bytes back, into the first */
static void m_overlap(cJSON *root) {
  const char *second = NULL;
  double best = 0;
  for (cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0)
      continue;
    const double b = offset_of(root, c->string, 0);
    if (b > 0 && (!second || b < best))
      best = b, second = c->string;
  }
  assert_non_null(second);
  set_pair(entry(root, second), "data_offsets", best - 4, offset_of(root, second, 1) - 4);
}
/* the last tensor runs 4 bytes past the end */
static void m_past_end(cJSON *root) {
  double last_end = 0;
  const char *last = NULL;
  for (cJSON *c = root->child; c; c = c->next)
    if (strcmp(c->string, "__metadata__") != 0 && offset_of(root, c->string, 1) > last_end)
      last_end = offset_of(root, c->string, 1), last = c->string;
  assert_non_null(last);
  cJSON *e = entry(root, last);
  set_pair(e, "data_offsets", offset_of(root, last, 0) + 4, last_end + 4);
}
/* fc1.weight claims 2^28 floats (1 GiB) over its real bytes */
static void m_huge(cJSON *root) {
  cJSON *e = entry(root, "fc1.weight");
  set_pair(e, "shape", 16384, 16384);
  set_pair(e, "data_offsets", offset_of(root, "fc1.weight", 0),
           offset_of(root, "fc1.weight", 0) + 1073741824.0);
}
/* fc1.weight's shape transposed: same bytes, wrong layout for the model */
static void m_transposed(cJSON *root) {
  cJSON *e = entry(root, "fc1.weight");
  cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const double a = cJSON_GetArrayItem(sh, 0)->valuedouble;
  const double b = cJSON_GetArrayItem(sh, 1)->valuedouble;
  set_pair(e, "shape", b, a);
}
static cJSON *meta_of(cJSON *root) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  assert_non_null(m);
  return m;
}
static void m_no_step(cJSON *root) { cJSON_DeleteItemFromObject(meta_of(root), "ampc.step"); }
static void m_bad_step(cJSON *root) {
  cJSON_ReplaceItemInObjectCaseSensitive(meta_of(root), "ampc.step", cJSON_CreateString("-4"));
}
static void m_iter_below_step(cJSON *root) {
  cJSON_ReplaceItemInObjectCaseSensitive(meta_of(root), "ampc.iteration", cJSON_CreateString("1"));
}
static void m_bad_scaler(cJSON *root) {
  cJSON_ReplaceItemInObjectCaseSensitive(meta_of(root), "ampc.scaler",
                                         cJSON_CreateString("{\"scale\":-1}"));
}
static void m_inf_scaler(cJSON *root) {
  cJSON_ReplaceItemInObjectCaseSensitive(
      meta_of(root), "ampc.scaler",
      cJSON_CreateString("{\"scale\":1e39,\"growth_tracker\":0,\"hysteresis_left\":1,"
                         "\"overflow_count\":0,\"skip_count\":0}"));
}
static void m_bad_rng(cJSON *root) {
  cJSON_ReplaceItemInObjectCaseSensitive(meta_of(root), "ampc.rng", cJSON_CreateString("zz"));
}
static void m_no_moment(cJSON *root) {
  /* the moment's bytes stay: they become a hole, so rename it instead */
  cJSON *e = cJSON_DetachItemFromObjectCaseSensitive(root, "optimizer.exp_avg.fc1.weight");
  assert_non_null(e);
  cJSON_AddItemToObject(root, "optimizer.other.fc1.weight", e);
}

/* ---- the tests ---------------------------------------------------------------- */

static void test_good_loads(void **state) {
  (void)state;
  ampc_trainer C;
  make_trainer(&C, 5, 5);
  assert_int_equal(ampc_trainer_load(&C, in_dir("good.safetensors")), AMPC_OK);
  assert_int_equal(C.step, 7);
  assert_int_equal(C.iteration, 9);
  assert_true(C.scaler.scale == 2048.0f);
  ampc_trainer_free(&C);
}

static void test_truncated_everywhere(void **state) {
  (void)state;
  const char *p = in_dir("cut.safetensors");
  for (size_t n = 0; n < g_ck_n; n++) {
    put_bytes(p, g_ck, n);
    expect_refused(p, NULL);
  }
  put_bytes(p, g_ck, 3);
  expect_refused(p, "too short");
  put_bytes(p, g_ck, g_ck_n - 1);
  expect_refused(p, "past the end");
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void test_random_bytes(void **state) {
  (void)state;
  const char *p = in_dir("random.safetensors");
  uint64_t s = 0x9E3779B97F4A7C15u;
  unsigned char buf[4096];
  for (int trial = 0; trial < 300; trial++) {
    const size_t n = (size_t)(xorshift(&s) % sizeof buf);
    for (size_t i = 0; i < n; i++)
      buf[i] = (unsigned char)xorshift(&s);
    if (trial % 2 && n >= 8) { /* a plausible header length: reach the JSON parser */
      const uint64_t h = xorshift(&s) % (n - 7);
      for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(h >> (8 * i));
      if (n > 8)
        buf[8] = '{';
    }
    put_bytes(p, buf, n);
    expect_refused(p, NULL);
  }
}

/* Flip one byte at many places of the good file: anything the reader accepts
 * must load completely or be refused without a change. */
static void test_byte_flips(void **state) {
  (void)state;
  const char *p = in_dir("flip.safetensors");
  unsigned char *b = malloc(g_ck_n);
  assert_non_null(b);
  uint64_t s = 12345;
  int refused = 0;
  for (size_t i = 0; i < g_ck_n; i += 1 + (size_t)(xorshift(&s) % 5)) {
    memcpy(b, g_ck, g_ck_n);
    b[i] ^= (unsigned char)(1u << (xorshift(&s) % 8));
    put_bytes(p, b, g_ck_n);
    ampc_trainer C;
    make_trainer(&C, 5, 99);
    snapshot cs;
    snap(&C, &cs);
    const ampc_status st = ampc_trainer_load(&C, p);
    if (st != AMPC_OK) {
      assert_int_equal(st, AMPC_ERR_FORMAT);
      assert_non_null(strstr(ampc_last_error(), p));
      assert_true(same_as(&C, &cs));
      refused++;
    }
    unsnap(&cs);
    ampc_trainer_free(&C);
  }
  free(b);
  assert_true(refused > 0);
}

static void test_header_length_past_file(void **state) {
  (void)state;
  const char *p = in_dir("hlen.safetensors");
  unsigned char *b = malloc(g_ck_n);
  assert_non_null(b);
  memcpy(b, g_ck, g_ck_n);
  const uint64_t claims[] = {g_ck_n - 7, g_ck_n, (uint64_t)1 << 40, UINT64_MAX};
  for (size_t k = 0; k < sizeof claims / sizeof claims[0]; k++) {
    for (int i = 0; i < 8; i++)
      b[i] = (unsigned char)(claims[k] >> (8 * i));
    put_bytes(p, b, g_ck_n);
    expect_refused(p, "header length");
  }
  free(b);
}

/* VmData of this process in bytes (0 if unknown). */
static uint64_t vm_data(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmData: %llu kB", &kb) == 1)
      break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

static void test_huge_claim_no_allocation(void **state) {
  (void)state;
  const char *p = in_dir("huge.safetensors");
  rewrite(p, m_huge, 0);
  fflush(NULL);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* at most 64 MiB more than now: a 1 GiB allocation would fail (NOMEM) */
    const struct rlimit rl = {vm_data() + ((uint64_t)64 << 20), vm_data() + ((uint64_t)64 << 20)};
    if (rl.rlim_cur == ((uint64_t)64 << 20) || setrlimit(RLIMIT_DATA, &rl) != 0)
      _exit(3);
    ampc_trainer C;
    make_trainer(&C, 5, 99);
    const ampc_status st = ampc_trainer_load(&C, p);
    _exit(st == AMPC_ERR_FORMAT && strstr(ampc_last_error(), "past the end") ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3)
    skip(); /* no /proc or no RLIMIT_DATA: the plain check below still runs */
  assert_int_equal(WEXITSTATUS(status), 0);
  expect_refused(p, "past the end");
}

static void test_bad_offsets(void **state) {
  (void)state;
  const char *p = in_dir("offsets.safetensors");
  rewrite(p, m_overlap, 0);
  expect_refused(p, "overlap");
  rewrite(p, m_past_end, 0);
  expect_refused(p, "past the end");
}

static void test_wrong_shape_dtype_model(void **state) {
  (void)state;
  const char *p = in_dir("shape.safetensors");
  rewrite(p, m_transposed, 0);
  expect_refused(p, "tensor 'fc1.weight' has shape [6, 5], the model's is [5, 6]");

  /* another configuration of the same model (hidden 8 vs 5) */
  ampc_trainer O;
  make_trainer(&O, 8, 3);
  assert_int_equal(ampc_trainer_save(&O, in_dir("other.safetensors"), NULL, 0), AMPC_OK);
  ampc_trainer_free(&O);
  expect_refused(in_dir("other.safetensors"), "the model's is [5, 6]");

  /* another model: a checkpoint with none of the MLP's tensors */
  const float x[4] = {1, 2, 3, 4};
  ampc_st_tensor tt = {
      .name = "vision.patch_embed.weight", .dtype = AMPC_F32, .ndim = 1, .data = x, .nbytes = 16};
  tt.shape[0] = 4;
  const ampc_st_meta meta[] = {{"ampc.step", "1"}, {"ampc.iteration", "1"}};
  assert_int_equal(ampc_safetensors_write(in_dir("mm.safetensors"), &tt, 1, meta, 2), AMPC_OK);
  expect_refused(in_dir("mm.safetensors"), "tensor 'fc1.weight' is missing");

  /* a wrong dtype: every tensor of the good file, fc1.weight stored as FP8 */
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(in_dir("good.safetensors"), &f), AMPC_OK);
  const int n = ampc_safetensors_count(f);
  ampc_st_tensor *all = calloc((size_t)n, sizeof *all);
  assert_non_null(all);
  for (int i = 0; i < n; i++) {
    all[i] = *ampc_safetensors_tensor(f, i);
    if (strcmp(all[i].name, "fc1.weight") == 0) {
      all[i].dtype = AMPC_F8_E4M3;
      all[i].nbytes /= 4;
    }
  }
  static const char *const keys[] = {"format",         "ampc.version", "ampc.config", "ampc.step",
                                     "ampc.iteration", "ampc.scaler",  "ampc.rng"};
  ampc_st_meta m[7];
  for (int k = 0; k < 7; k++) {
    m[k].key = keys[k];
    m[k].value = ampc_safetensors_meta(f, keys[k]);
    assert_non_null(m[k].value);
  }
  assert_int_equal(ampc_safetensors_write(in_dir("fp8.safetensors"), all, n, m, 7), AMPC_OK);
  free(all);
  ampc_safetensors_free(f);
  expect_refused(in_dir("fp8.safetensors"), "tensor 'fc1.weight' has dtype");

  rewrite(p, m_no_moment, 0);
  expect_refused(p, "tensor 'optimizer.exp_avg.fc1.weight' is missing");
}

static void test_bad_metadata(void **state) {
  (void)state;
  const char *p = in_dir("meta.safetensors");
  rewrite(p, m_no_step, 0);
  expect_refused(p, "ampc.step");
  rewrite(p, m_bad_step, 0);
  expect_refused(p, "ampc.step");
  rewrite(p, m_iter_below_step, 0);
  expect_refused(p, "ampc.iteration");
  rewrite(p, m_bad_scaler, 0);
  expect_refused(p, "ampc.scaler");
  rewrite(p, m_inf_scaler, 0);
  expect_refused(p, "ampc.scaler");
  rewrite(p, m_bad_rng, 0);
  expect_refused(p, "ampc.rng");
}

/* ---- --write-dataset ----------------------------------------------------------- */

/* 32 samples of 8x8 RGB: 16 concepts (12 trained, 4 held out), two styles
 * each; concept c's images are a noisy colour of its class, its caption two
 * words naming the class and the concept. */
static int write_dataset(const char *path) {
  enum { N = 32, S = 8, C = 3, L = 4, V = 2 + 3 + 16, K = 3 };
  static uint8_t img[N * S * S * C];
  static int32_t tok[N * L], lab[N], con[N];
  static uint8_t split[N], style[N];
  static char wbuf[V][16], cbuf[N][32];
  static char *words[V], *caps[N];
  static char *classes[K] = {"red", "green", "blue"};
  snprintf(wbuf[0], sizeof wbuf[0], "<pad>");
  snprintf(wbuf[1], sizeof wbuf[1], "<unk>");
  for (int k = 0; k < K; k++)
    snprintf(wbuf[2 + k], sizeof wbuf[2 + k], "%s", classes[k]);
  for (int c = 0; c < 16; c++)
    snprintf(wbuf[5 + c], sizeof wbuf[5 + c], "w%d", c);
  for (int v = 0; v < V; v++)
    words[v] = wbuf[v];
  uint64_t s = 77;
  for (int i = 0; i < N; i++) {
    const int c = i / 2, st = i % 2, k = c % K;
    con[i] = c;
    style[i] = (uint8_t)st;
    lab[i] = k;
    split[i] = (uint8_t)(c >= 12 ? AMPC_SPLIT_ZERO_SHOT
                         : st    ? AMPC_SPLIT_NEW_STYLE
                                 : AMPC_SPLIT_TRAIN);
    for (int e = 0; e < S * S; e++)
      for (int ch = 0; ch < C; ch++)
        img[(i * S * S + e) * C + ch] =
            (uint8_t)((ch == k ? 180 : 40) + (int)(xorshift(&s) % 60) + 8 * c);
    tok[i * L] = 2 + k;
    tok[i * L + 1] = c >= 12 ? 1 : 5 + c; /* held-out words are <unk> */
    tok[i * L + 2] = tok[i * L + 3] = 0;
    snprintf(cbuf[i], sizeof cbuf[i], "%s w%d", classes[k], c);
    caps[i] = cbuf[i];
  }
  ampc_dataset d;
  memset(&d, 0, sizeof d);
  d.n = N, d.height = S, d.width = S, d.channels = C, d.seq_len = L, d.vocab = V;
  d.n_classes = K;
  d.images = img, d.tokens = tok, d.label = lab, d.concept = con, d.split = split;
  d.style = style, d.words = words, d.class_names = classes, d.captions = caps;
  if (ampc_dataset_save(&d, path) != AMPC_OK) {
    fprintf(stderr, "%s\n", ampc_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-dataset") == 0)
    return write_dataset(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_loads),
      cmocka_unit_test(test_truncated_everywhere),
      cmocka_unit_test(test_random_bytes),
      cmocka_unit_test(test_byte_flips),
      cmocka_unit_test(test_header_length_past_file),
      cmocka_unit_test(test_huge_claim_no_allocation),
      cmocka_unit_test(test_bad_offsets),
      cmocka_unit_test(test_wrong_shape_dtype_model),
      cmocka_unit_test(test_bad_metadata),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
