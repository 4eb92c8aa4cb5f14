#include "core/cpu_count.h"

#include <sched.h>

#include <charconv>
#include <fstream>
#include <string>
#include <thread>

namespace sluice {
namespace {

bool parse_ll(std::string_view s, long long& v) {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && p == s.data() + s.size();
}

std::string read_small_file(const char* path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

}  // namespace

int cpus_of_cfs(long long quota_us, long long period_us) {
    if (quota_us <= 0 || period_us <= 0) return 0;
    const long long cpus = (quota_us + period_us - 1) / period_us;
    return cpus > 1 << 20 ? 0 : static_cast<int>(cpus);
}

int cpus_of_cpu_max(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
    const size_t sp = text.find(' ');
    if (sp == std::string_view::npos) return 0;
    const std::string_view quota = text.substr(0, sp), period = text.substr(sp + 1);
    long long q = 0, p = 0;
    if (quota == "max" || !parse_ll(quota, q) || !parse_ll(period, p)) return 0;
    return cpus_of_cfs(q, p);
}

int usable_cpus() {
    int n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    if (n <= 0) n = 1;
    // cgroup v2 (the process's group is mounted at /sys/fs/cgroup in a container), then v1.
    int quota = cpus_of_cpu_max(read_small_file("/sys/fs/cgroup/cpu.max"));
    if (quota == 0) {
        long long q = 0, p = 0;
        if (parse_ll(read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), q) &&
            parse_ll(read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us"), p))
            quota = cpus_of_cfs(q, p);
    }
    return quota > 0 && quota < n ? quota : n;
}

}  // namespace sluice
