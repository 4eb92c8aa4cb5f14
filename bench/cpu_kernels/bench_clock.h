// CPU-time clocks of the CPU kernel benchmarks: a preempted thread's wait does not count.
#pragma once

#include <ctime>

// Seconds of CPU time of the calling thread (thread) or of the whole process (process).
inline double cpu_seconds(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
inline double thread_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }
inline double process_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }
