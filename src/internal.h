/*
 * src/internal.h: included first by every library and tool source.
 *
 * Holds the build-wide numerics guard (ampc relies on IEEE inf/NaN semantics,
 * so finite-math-only builds are refused) and the private error helper.
 */
#ifndef AMPC_INTERNAL_H
#define AMPC_INTERNAL_H

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "ampc must not be built with -ffast-math/-Ofast/-ffinite-math-only: it needs inf and NaN"
#endif

#include "ampc/status.h"

#if defined(__GNUC__)
#define AMPC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMPC_PRINTF(a, b)
#endif

/* Record a formatted error message for ampc_last_error() and return s. */
ampc_status ampc_fail(ampc_status s, const char *fmt, ...) AMPC_PRINTF(2, 3);

/* Evaluate a call returning ampc_status; return its status from the
 * enclosing function unless it is AMPC_OK (the message is the callee's). */
#define AMPC_TRY(call)                                                                             \
  do {                                                                                             \
    const ampc_status try_st_ = (call);                                                            \
    if (try_st_ != AMPC_OK)                                                                        \
      return try_st_;                                                                              \
  } while (0)

/* Monotonic seconds (CLOCK_MONOTONIC), for step times and ETAs (src/core/status.c). */
double ampc_now_s(void);

#endif
