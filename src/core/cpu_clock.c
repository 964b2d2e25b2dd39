/*
 * src/core/cpu_clock.c: how much CPU this process and the rest of the
 * machine used over a stretch of wall time, so that a run can tell a clean
 * timing from one taken on an oversubscribed machine (another job, another
 * MPI rank, a hypervisor stealing time).
 *
 * This process: getrusage(RUSAGE_SELF) user + system time, every thread.
 * The machine: the first ("cpu") line of /proc/stat (proc(5)): user, nice,
 * system, irq, softirq and steal ticks, in units of sysconf(_SC_CLK_TCK),
 * over every online CPU. Steal counts as busy: it is time a virtual CPU
 * wanted and the hypervisor gave to someone else.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

void ampc_cpu_clock_read(ampc_cpu_clock *c) {
  c->wall_s = ampc_now_s();
  struct rusage ru;
  c->own_s = -1.0;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    c->own_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
               (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
  c->busy_s = -1.0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f)
    return;
  unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal = 0;
  const int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys,
                         &idle, &iowait, &irq, &softirq, &steal);
  fclose(f);
  const long tck = sysconf(_SC_CLK_TCK);
  if (got >= 7 && tck > 0)
    c->busy_s = (double)(user + nice + sys + irq + softirq + (got >= 8 ? steal : 0)) / (double)tck;
}

int ampc_cpu_count(void) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void ampc_cpu_use_add(ampc_cpu_use *u, const ampc_cpu_clock *from, const ampc_cpu_clock *to) {
  const double wall = to->wall_s - from->wall_s;
  if (!(wall > 0.0))
    return;
  u->wall_s += wall;
  if (from->own_s >= 0.0 && to->own_s >= 0.0)
    u->own_s += to->own_s - from->own_s;
  if (from->busy_s >= 0.0 && to->busy_s >= 0.0 && from->own_s >= 0.0 && to->own_s >= 0.0) {
    u->busy_wall_s += wall;
    u->busy_s += to->busy_s - from->busy_s;
    u->busy_own_s += to->own_s - from->own_s;
  }
}

double ampc_cpu_use_others(const ampc_cpu_use *u) {
  if (!(u->busy_wall_s > 0.0))
    return -1.0;
  const double o = (u->busy_s - u->busy_own_s) / u->busy_wall_s;
  return o > 0.0 ? o : 0.0; /* the two clocks tick differently: never below 0 */
}

bool ampc_cpu_use_disturbed(const ampc_cpu_use *u, int threads, int cpus) {
  const double others = ampc_cpu_use_others(u);
  /* too short to tell with /proc/stat's 10 ms ticks, or no /proc/stat */
  if (others < 0.0 || u->busy_wall_s < 1.0)
    return false;
  return (double)threads + others > (double)cpus + AMPC_CPU_SLACK;
}
