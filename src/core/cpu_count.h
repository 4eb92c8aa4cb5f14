// How many CPUs this process can really use: the default thread count of `sluice run`, `serve`
// and `bench`, and the bound past which the thread pool stops spinning.
#pragma once

#include <string_view>

namespace sluice {

// The CPUs in the process's affinity mask, capped by a cgroup CPU quota when one is set (a
// container given "2 CPUs" of a 64-core host sees 64 in its mask but may run only 2 at a time:
// threads spinning past the quota stall the whole group until the next period). At least 1.
int usable_cpus();

// A cgroup quota as CPUs, rounded up: cgroup v2's cpu.max text ("max 100000" or
// "200000 100000"), or v1's quota and period in microseconds (quota -1: none). 0 when there is
// no quota or the text is malformed. Exposed for tests.
int cpus_of_cpu_max(std::string_view cpu_max);
int cpus_of_cfs(long long quota_us, long long period_us);

}  // namespace sluice
