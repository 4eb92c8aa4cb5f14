#include "core/cpu_count.h"

#include <gtest/gtest.h>
#include <sched.h>

namespace sluice {
namespace {

TEST(cpu_count, cgroup_v2_quota_rounds_up_and_max_means_none) {
    EXPECT_EQ(cpus_of_cpu_max("200000 100000\n"), 2);
    EXPECT_EQ(cpus_of_cpu_max("150000 100000"), 2);
    EXPECT_EQ(cpus_of_cpu_max("50000 100000"), 1);
    EXPECT_EQ(cpus_of_cpu_max("max 100000\n"), 0);
}

TEST(cpu_count, malformed_quota_text_means_no_quota) {
    EXPECT_EQ(cpus_of_cpu_max(""), 0);
    EXPECT_EQ(cpus_of_cpu_max("200000"), 0);
    EXPECT_EQ(cpus_of_cpu_max("2e5 100000"), 0);
    EXPECT_EQ(cpus_of_cpu_max("200000 0"), 0);
    EXPECT_EQ(cpus_of_cpu_max("-1 100000"), 0);
}

TEST(cpu_count, cgroup_v1_quota) {
    EXPECT_EQ(cpus_of_cfs(-1, 100000), 0);
    EXPECT_EQ(cpus_of_cfs(400000, 100000), 4);
    EXPECT_EQ(cpus_of_cfs(1, 100000), 1);
}

TEST(cpu_count, usable_cpus_is_within_the_affinity_mask) {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    const int n = usable_cpus();
    EXPECT_GE(n, 1);
    EXPECT_LE(n, CPU_COUNT(&set));
}

}  // namespace
}  // namespace sluice
