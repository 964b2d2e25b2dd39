/*
 * src/core/status.c: status names, the thread-local last-error message, and
 * the monotonic clock.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
  case AMPC_ERR_DEVICE: return "device error";
  case AMPC_ERR_NOT_FOUND: return "not found";
  }
  return "unknown status";
}

const char *ampc_last_error(void) { return g_last_error; }

ampc_status ampc_fail(ampc_status s, const char *fmt, ...) {
  /* formatted apart first: an argument may be ampc_last_error() itself (a
   * caller adding context to a callee's message) */
  char buf[sizeof g_last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(g_last_error, buf, sizeof buf);
  return s;
}

double ampc_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
