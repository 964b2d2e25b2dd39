/*
 * tests/test_cpu_clock.c: the CPU-time account that tells a clean step
 * timing from one taken on an oversubscribed machine (src/core/cpu_clock.c):
 * the other processes' cores and the disturbed rule on constructed readings,
 * and a real reading's own CPU time rising with work done.
 */
#include "internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

/* |a - b| <= tol (this cmocka has no double comparison) */
#define assert_double_equal(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

static ampc_cpu_use use_of(double wall, double own, double busy) {
  const ampc_cpu_clock a = {100.0, 5.0, 50.0}, b = {100.0 + wall, 5.0 + own, 50.0 + busy};
  ampc_cpu_use u = {0};
  ampc_cpu_use_add(&u, &a, &b);
  return u;
}

static void others_and_rule(void **state) {
  (void)state;
  /* 10 s, 2 threads busy (own 20 s), the machine 22 s busy: others 0.2
   * cores, 2 + 0.2 <= 2 + 0.25 on 2 CPUs: clean */
  ampc_cpu_use u = use_of(10.0, 20.0, 22.0);
  assert_double_equal(ampc_cpu_use_others(&u), 0.2, 1e-12);
  assert_false(ampc_cpu_use_disturbed(&u, 2, 2));
  /* others 0.5 cores: disturbed with 2 threads on 2 CPUs, clean with 1 */
  u = use_of(10.0, 20.0, 25.0);
  assert_double_equal(ampc_cpu_use_others(&u), 0.5, 1e-12);
  assert_true(ampc_cpu_use_disturbed(&u, 2, 2));
  assert_false(ampc_cpu_use_disturbed(&u, 1, 2));
  /* 2 threads on 4 CPUs with another process on one core: clean */
  u = use_of(10.0, 20.0, 30.0);
  assert_false(ampc_cpu_use_disturbed(&u, 2, 4));
  assert_true(ampc_cpu_use_disturbed(&u, 4, 4));
  /* the clocks tick apart: a machine total below this process's time
   * gives 0, never a negative count */
  u = use_of(10.0, 20.0, 19.9);
  assert_double_equal(ampc_cpu_use_others(&u), 0.0, 0.0);
  /* under 1 s of measured time: not judged */
  u = use_of(0.5, 1.0, 2.0);
  assert_false(ampc_cpu_use_disturbed(&u, 2, 2));
}

static void sums_and_missing(void **state) {
  (void)state;
  /* two stretches add up; one without /proc/stat counts in wall and own
   * time but not in the machine's */
  ampc_cpu_use u = {0};
  const ampc_cpu_clock a = {0.0, 0.0, 0.0}, b = {2.0, 4.0, 5.0};
  const ampc_cpu_clock c = {2.0, 4.0, -1.0}, d = {3.0, 6.0, -1.0};
  ampc_cpu_use_add(&u, &a, &b);
  ampc_cpu_use_add(&u, &c, &d);
  assert_double_equal(u.wall_s, 3.0, 0.0);
  assert_double_equal(u.own_s, 6.0, 0.0);
  assert_double_equal(u.busy_wall_s, 2.0, 0.0);
  assert_double_equal(ampc_cpu_use_others(&u), 0.5, 1e-12);
  /* nothing from /proc/stat: unknown, and never disturbed */
  ampc_cpu_use v = {0};
  ampc_cpu_use_add(&v, &c, &d);
  assert_double_equal(ampc_cpu_use_others(&v), -1.0, 0.0);
  assert_false(ampc_cpu_use_disturbed(&v, 64, 1));
  /* a stretch of no wall time adds nothing */
  ampc_cpu_use w = {0};
  ampc_cpu_use_add(&w, &a, &a);
  assert_double_equal(w.wall_s, 0.0, 0.0);
}

static void real_reading(void **state) {
  (void)state;
  ampc_cpu_clock a, b;
  ampc_cpu_clock_read(&a);
  volatile double x = 0.0;
  for (long i = 0; i < 200000000L; i++) /* CPU work: this process's time rises */
    x += 1e-9;
  ampc_cpu_clock_read(&b);
  assert_true(a.own_s >= 0.0);
  assert_true(b.own_s > a.own_s);
  assert_true(b.wall_s > a.wall_s);
#ifdef __linux__
  assert_true(a.busy_s >= 0.0 && b.busy_s >= a.busy_s); /* /proc/stat's counters only rise */
#endif
  assert_true(ampc_cpu_count() >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(others_and_rule),
      cmocka_unit_test(sums_and_missing),
      cmocka_unit_test(real_reading),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
