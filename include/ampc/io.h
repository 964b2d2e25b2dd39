/*
 * ampc/io.h: safetensors files (checkpoints) read and written exactly.
 *
 * Format (https://github.com/huggingface/safetensors, "Format" section): an
 * 8-byte little-endian unsigned header length N, then N bytes of UTF-8 JSON
 * (an object mapping each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} plus an optional "__metadata__" object of string to string),
 * padded with spaces to a multiple of 8, then the raw little-endian tensor
 * bytes. Offsets are relative to the first byte after the header; the
 * tensors cover that region without holes or overlaps. dtype strings used
 * here: "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2" (as in the Rust crate).
 *
 * Writes are atomic: the file is written to a temporary file in the same
 * directory, flushed to disk (fsync), then renamed over `path`, so a crash or a
 * full disk never leaves a half-written file under the final name and never
 * damages the previous file there.
 */
#ifndef AMPC_IO_H
#define AMPC_IO_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { AMPC_ST_MAX_DIMS = 8 };

/* One tensor. For writing, `data` points to nbytes = numel * dtype size bytes
 * of the caller's memory (may be NULL when nbytes is 0); for reading, it points
 * into the loaded file (valid until ampc_safetensors_free) and nbytes is set.
 * Read data is not necessarily aligned for its dtype (offsets are byte
 * offsets): copy it out with memcpy or ampc_convert rather than casting.
 * Shape sizes and byte counts are limited to 2^53, the integers a JSON number
 * parsed as a double (cJSON) holds exactly; larger values are refused. */
typedef struct ampc_st_tensor {
  const char *name;
  ampc_dtype dtype; /* AMPC_ST_OTHER: a dtype ampc does not compute in (AMPC_ST_ANY_DTYPE) */
  int ndim;         /* 0..AMPC_ST_MAX_DIMS; 0 = scalar (one element) */
  int64_t shape[AMPC_ST_MAX_DIMS];
  const void *data;
  size_t nbytes;
  /* Set on read (ignored on write): the file's dtype string ("F32", "F64",
   * "I64", ...) and the bytes per element. */
  const char *dtype_name;
  size_t elem_size;
} ampc_st_tensor;

/* The dtype of a tensor read with AMPC_ST_ANY_DTYPE whose dtype is not one of
 * ampc's (F64, F8_E8M0, C64, I64, U64, I32, U32, I16, U16, I8, U8, BOOL; the
 * sub-byte F4/F6 types are refused): see dtype_name. */
#define AMPC_ST_OTHER ((ampc_dtype)-1)

enum {
  /* ampc_safetensors_read_ex: accept every dtype of the safetensors format,
   * not only ampc's five; the others get dtype AMPC_ST_OTHER */
  AMPC_ST_ANY_DTYPE = 1u
};

/* One __metadata__ entry (both strings NUL-terminated). */
typedef struct ampc_st_meta {
  const char *key;
  const char *value;
} ampc_st_meta;

/* Write n tensors (names unique, non-empty, not "__metadata__"; each of one
 * of ampc's dtypes, or AMPC_ST_OTHER with dtype_name one of the format's
 * others, e.g. "I8" for quantized weights) and nmeta
 * metadata entries (keys unique) to `path` atomically (see above). Tensors are
 * laid out in the order given; names and strings must be valid UTF-8. The
 * temporary file is "<path>.tmp.XXXXXX"; the new file gets the permissions of
 * the file it replaces, or 0644. Errors: AMPC_ERR_INVALID_ARG (bad name,
 * dtype, shape or a nbytes that does not match the shape, a NULL or empty
 * path), AMPC_ERR_IO (the message names the file and the system error; `path`
 * is untouched and no temporary file is left), AMPC_ERR_NOMEM. */
ampc_status ampc_safetensors_write(const char *path, const ampc_st_tensor *t, int n,
                                   const ampc_st_meta *meta, int nmeta);

typedef struct ampc_safetensors ampc_safetensors; /* a loaded file */

/* Read and validate a whole safetensors file (a regular file; it is loaded
 * into memory whole). *out is NULL on failure. Validation: the file holds at
 * least the 8-byte length; the header length fits in the file (and is at most
 * 100 MB); the header is UTF-8 and one JSON object (padding is not required,
 * but only whitespace may follow the object); each tensor has a known dtype,
 * a shape of at most AMPC_ST_MAX_DIMS non-negative sizes whose byte count does
 * not overflow, and data_offsets [begin, end] with end - begin equal to that byte
 * count, inside the data region; tensors neither overlap nor leave holes and
 * cover the data region exactly. No allocation is sized by a claimed value
 * before it has been checked against the file's real size. Duplicate tensor
 * names or metadata keys are refused; unknown keys inside a tensor entry are
 * ignored. Errors: AMPC_ERR_IO (cannot open/read, not a regular file),
 * AMPC_ERR_FORMAT (message names the file and the problem, e.g. the tensor
 * whose offsets are wrong), AMPC_ERR_NOMEM, AMPC_ERR_INVALID_ARG (NULL path or
 * out). */
ampc_status ampc_safetensors_read(const char *path, ampc_safetensors **out);
/* The same checks on a file image in memory (copied; `name` is used in
 * messages, "<memory>" when NULL). */
ampc_status ampc_safetensors_read_mem(const void *data, size_t size, const char *name,
                                      ampc_safetensors **out);

/* As the two above, with flags (AMPC_ST_ANY_DTYPE); flags 0 is the same call. */
ampc_status ampc_safetensors_read_ex(const char *path, unsigned flags, ampc_safetensors **out);
ampc_status ampc_safetensors_read_mem_ex(const void *data, size_t size, const char *name,
                                         unsigned flags, ampc_safetensors **out);

/* Number of tensors; the i-th in file order (data offset order); NULL if i is
 * out of range. */
int ampc_safetensors_count(const ampc_safetensors *f);
const ampc_st_tensor *ampc_safetensors_tensor(const ampc_safetensors *f, int i);
/* The tensor with this name, or NULL. */
const ampc_st_tensor *ampc_safetensors_find(const ampc_safetensors *f, const char *name);
/* The __metadata__ value for key, or NULL when absent. */
const char *ampc_safetensors_meta(const ampc_safetensors *f, const char *key);
/* Free a loaded file (NULL is allowed). */
void ampc_safetensors_free(ampc_safetensors *f);

/* A shape as "[2, 3]" into buf (cap bytes, NUL-terminated, cut short if it
 * does not fit), for messages that name a tensor's shape. */
void ampc_st_format_shape(char *buf, size_t cap, const int64_t *shape, int ndim);

/* Replace `path` with the n bytes at data atomically, as checkpoints are
 * written (a temporary file next to it, flushed, fsync'ed, renamed; the
 * directory fsync'ed): readers see the old file or the new one, never a mix.
 * Errors: AMPC_ERR_IO naming the step that failed (the file is unchanged). */
ampc_status ampc_file_write_atomic(const char *path, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
