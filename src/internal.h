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

#include <stdbool.h>

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

/* CPU time, for telling clean timings from ones taken on a busy machine
 * (src/core/cpu_clock.c). A reading: the monotonic wall clock, this
 * process's user + system time (getrusage, every thread) and the machine's
 * busy time over all online CPUs (/proc/stat, steal included); own_s and
 * busy_s are -1 where unavailable. Seconds throughout. */
typedef struct ampc_cpu_clock {
  double wall_s, own_s, busy_s;
} ampc_cpu_clock;
void ampc_cpu_clock_read(ampc_cpu_clock *c);
int ampc_cpu_count(void); /* online CPUs, >= 1 */
/* Sums over stretches [from, to]: wall time, this process's CPU time, and
 * (where /proc/stat was read at both ends) the machine's busy time with the
 * wall and own time of those same stretches. Zero-initialise. */
typedef struct ampc_cpu_use {
  double wall_s, own_s, busy_wall_s, busy_s, busy_own_s;
} ampc_cpu_use;
void ampc_cpu_use_add(ampc_cpu_use *u, const ampc_cpu_clock *from, const ampc_cpu_clock *to);
/* other processes' mean CPU use over u, in cores (>= 0); -1 if unknown */
double ampc_cpu_use_others(const ampc_cpu_use *u);
/* Oversubscribed: this process's threads plus the other processes' cores
 * exceed the online CPUs by more than AMPC_CPU_SLACK cores over at least 1 s
 * of measured time (less cannot be told with /proc/stat's 10 ms ticks). */
#define AMPC_CPU_SLACK 0.25
bool ampc_cpu_use_disturbed(const ampc_cpu_use *u, int threads, int cpus);

#endif
