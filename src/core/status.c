/*
 * src/core/status.c: status names and the thread-local last-error message.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_last_error[512];

const char *ampc_status_name(ampc_status s) {
  switch (s) {
  case AMPC_OK: return "ok";
  case AMPC_ERR_INVALID_ARG: return "invalid argument";
  case AMPC_ERR_NOMEM: return "out of memory";
  case AMPC_ERR_IO: return "i/o error";
  case AMPC_ERR_FORMAT: return "malformed input";
  case AMPC_ERR_UNSUPPORTED: return "unsupported";
  case AMPC_ERR_NUMERIC: return "non-finite value";
  }
  return "unknown status";
}

const char *ampc_last_error(void) { return g_last_error; }

ampc_status ampc_fail(ampc_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  return s;
}
