/*
 * ampc/backend.h: the devices a model and its training run can use, by
 * name, and what a program may ask of them without knowing which backend
 * runs them (src/backend/registry.c answers).
 *
 * A device is one of a fixed list of names ("cpu", "cuda", "cpu-split"). A
 * name is known whether or not its backend was compiled into this build: the
 * planning facts below (ampc_device_desc) hold for any known device, so that
 * `ampc plan --device cuda` works on a machine without CUDA; running on it
 * (ampc_device_open, a model created on it) needs the backend built and a
 * device present, and fails with AMPC_ERR_UNSUPPORTED and the reason
 * otherwise.
 *
 * Errors: AMPC_ERR_INVALID_ARG for an unknown name or value;
 * AMPC_ERR_UNSUPPORTED for a backend not built into this library or a
 * machine without the device; AMPC_ERR_DEVICE, AMPC_ERR_NOMEM from the
 * backend's own calls (the driver's message in ampc_last_error()).
 */
#ifndef AMPC_BACKEND_H
#define AMPC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a model's tensors live and run. CPU_SPLIT runs the CPU's functions
 * on host memory but treats it as a device's: the host's own copies (masks,
 * negatives, accuracies) are separate buffers and every exchange goes
 * through the device path's copies. It gives the CPU's bits and exists to
 * test that path (tests/test_model_device.c) where there is no GPU. Values
 * go into logs: append only. */
typedef enum ampc_device {
  AMPC_DEVICE_CPU = 0,
  AMPC_DEVICE_CUDA = 1, /* an NVIDIA GPU: the context that ampc_device_open bound */
  AMPC_DEVICE_CPU_SPLIT = 2,
} ampc_device;

/* An environment variable a backend reads once: the values it knows, and
 * what an unknown value does (it is then ignored). */
typedef struct ampc_env_switch {
  const char *name;
  const char *values[5]; /* NULL-terminated */
  const char *otherwise;
} ampc_env_switch;

/* An op with the arguments that decide whether a device runs it, for
 * ampc_device_supports (the idea of ggml's supports_op: ask before building
 * on it). */
typedef enum ampc_device_op {
  /* multi-head attention with its probabilities stored in pdt and its
   * products summed per acc */
  AMPC_DEVICE_OP_MHA = 0,
} ampc_device_op;
typedef struct ampc_op_query {
  ampc_device_op op;
  ampc_dtype pdt; /* MHA: the probabilities' storage dtype */
  ampc_acc acc;   /* the products' accumulation */
} ampc_op_query;

/* What a device is, for planning and for messages; the same in every build. */
typedef struct ampc_device_desc {
  const char *name;  /* the --device value: "cpu", "cuda", "cpu-split" */
  const char *label; /* for messages: "CPU", "CUDA" */
  /* the tensors are not in host memory the CPU can write: host reads and
   * writes go through copies (false for cpu and cpu-split) */
  bool foreign_memory;
  /* a test aid that runs the device path on the CPU (the memory account
   * and the GEMM benchmark do not offer it) */
  bool test_only;
  /* the layers take their scratch from the device context, not from the
   * model's workspace (the model's arena then holds none) */
  bool scratch_in_context;
  /* bytes the device's runtime and driver keep for the context itself
   * (kernel code, heaps): the default overhead of a memory plan; 0 where the
   * overhead is measured on the host */
  uint64_t context_bytes;
  /* the bytes a context scratch slot holds after a request of `bytes` grew
   * it (the memory account counts such slots exactly); NULL: exactly bytes */
  size_t (*scratch_slot_bytes)(size_t bytes);
  /* whether the device runs op with these arguments (NULL: every op) */
  bool (*supports)(const ampc_op_query *op);
  /* the environment switches the backend reads */
  const ampc_env_switch *env;
  int n_env;
} ampc_device_desc;

/* The facts of a known device (NULL for a value not in the enum). */
const ampc_device_desc *ampc_device_desc_get(ampc_device dev);

/* Whether dev runs op with these arguments (false for an unknown device). */
bool ampc_device_supports(ampc_device dev, const ampc_op_query *op);

/* The device called `name`. Errors: AMPC_ERR_INVALID_ARG naming the known
 * devices (a name need not be built to be known: see the top). */
ampc_status ampc_device_parse(const char *name, ampc_device *out);

/* Its --device name ("?" for a value not in the enum). */
const char *ampc_device_name(ampc_device dev);

/* The known names joined by sep ("cpu|cuda|cpu-split"), the test aids left
 * out unless with_tests, into buf (cap bytes, cut if short). Returns buf. */
const char *ampc_device_list(char *buf, size_t cap, const char *sep, bool with_tests);

/* 1 when the backend of dev is compiled into this library, else 0. */
int ampc_device_built(ampc_device dev);

/* How many units of dev this machine has (1 for the CPU ones; 0 where the
 * backend is not built or finds no device: never an error). */
int ampc_device_count(ampc_device dev);

/* Why ampc_device_count(dev) is 0 ("not built into this ampc (...)", the
 * driver's reason); "" when a device is there. */
const char *ampc_device_unavailable_reason(ampc_device dev);

/* AMPC_OK when dev can run here; else AMPC_ERR_UNSUPPORTED with
 * "--device NAME: no LABEL device: REASON" (or AMPC_ERR_INVALID_ARG for a
 * value not in the enum). */
ampc_status ampc_device_check(ampc_device dev);

/* A device context: made for rank `rank` (on unit rank mod the units) and
 * bound to the calling thread, so that the backend's functions called on it
 * run there; closing it restores the binding before it and frees it. The CPU
 * devices have none (*out NULL, AMPC_OK). Errors: ampc_device_check's, the
 * backend's (AMPC_ERR_NOMEM, AMPC_ERR_DEVICE). */
typedef struct ampc_device_ctx ampc_device_ctx;
ampc_status ampc_device_open(ampc_device dev, int rank, ampc_device_ctx **out);
void ampc_device_close(ampc_device_ctx *ctx); /* NULL is a no-op */

/* The context's device memory now: free and total bytes. Errors:
 * AMPC_ERR_INVALID_ARG (NULL), AMPC_ERR_UNSUPPORTED (a CPU device). */
ampc_status ampc_device_mem_info(ampc_device_ctx *ctx, size_t *free_bytes, size_t *total_bytes);

/* The backend's switches that decide results beyond the precision preset
 * (which kernels, whether GEMM algorithms are picked by timing), by index
 * i < ampc_device_setting_count(dev): its name, its value now, and whether a
 * run log records it (in an object named after the device). 0 settings for
 * a device not built. Errors: AMPC_ERR_INVALID_ARG (i out of range). */
int ampc_device_setting_count(ampc_device dev);
ampc_status ampc_device_setting(ampc_device dev, int i, const char **name, bool *value,
                                bool *logged);
/* Sets the switch called name (the process-wide default of the backend).
 * Errors: AMPC_ERR_INVALID_ARG (no such switch), AMPC_ERR_UNSUPPORTED. */
ampc_status ampc_device_set(ampc_device dev, const char *name, bool on);

/* The device's GEMM throughput (`ampc bench gemm --device NAME`): each mode
 * the backend offers on each shape, repeated reps times (1..101), the median
 * time kept; quick: a few shapes. The report's lines (a Markdown table, or
 * with json one JSON object) are handed to emit one at a time, without the
 * newline. Errors: ampc_device_check's, AMPC_ERR_UNSUPPORTED for a device
 * without such a benchmark, the backend's. */
typedef void (*ampc_emit_fn)(void *user, const char *line);
ampc_status ampc_device_bench_gemm(ampc_device dev, int reps, bool quick, bool json,
                                   ampc_emit_fn emit, void *user);

#ifdef __cplusplus
}
#endif
#endif
