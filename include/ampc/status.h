/*
 * ampc/status.h: error reporting for the whole library.
 *
 * The library never prints and never exits. Every fallible function returns an
 * ampc_status; on failure it also leaves a human-readable message (naming the
 * file, flag or value at fault) in a thread-local buffer that the caller reads
 * with ampc_last_error(). Only the command-line layer prints it.
 */
#ifndef AMPC_STATUS_H
#define AMPC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_status {
  AMPC_OK = 0,
  AMPC_ERR_INVALID_ARG = 1, /* a value, shape, dtype or flag is not allowed */
  AMPC_ERR_NOMEM = 2,       /* an allocation failed */
  AMPC_ERR_IO = 3,          /* a file could not be opened, read or written */
  AMPC_ERR_FORMAT = 4,      /* a file's contents are malformed */
  AMPC_ERR_UNSUPPORTED = 5, /* valid but not implemented (e.g. a dtype pair) */
  AMPC_ERR_NUMERIC = 6,     /* a non-finite value where one is not allowed */
  AMPC_ERR_DEVICE = 7,      /* the GPU runtime or library failed (its message is kept) */
  AMPC_ERR_NOT_FOUND = 8 /* what was asked for is absent (e.g. a pack made without sample keys) */
} ampc_status;

/* Short constant name of a status code ("ok", "invalid argument", ...). */
const char *ampc_status_name(ampc_status s);

/* The message left by the most recent failing ampc call on this thread, or ""
 * when none failed yet. The pointer stays valid until the next failing call. */
const char *ampc_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
