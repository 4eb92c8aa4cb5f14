// core/numa_topology.h, the NUMA paths of core/thread_pool.h and moe/expert_pool.h, and
// moe/numa_placement.h: cpulists parse or are rejected with their text; sysfs trees give the
// allowed CPUs per node; simulated splits and thread plans are balanced; every expert belongs to
// exactly one node; the multi-node expert pool gives the one-node bits (E2) for windows 1..16
// and threads 1..4; placement on a simulated topology touches nothing, and on a real node
// changes no byte.
#include "core/error.h"
#include "core/numa_topology.h"
#include "core/thread_pool.h"
#include "moe/expert_pool.h"
#include "moe/numa_placement.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include "random_experts.h"
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

std::vector<int> range(int lo, int hi) {   // [lo, hi]
    std::vector<int> v;
    for (int i = lo; i <= hi; ++i) v.push_back(i);
    return v;
}

TEST(numa, cpulists_of_the_kernel_format_parse) {
    EXPECT_EQ(parse_cpulist("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
    EXPECT_EQ(parse_cpulist("0,2,4\n"), (std::vector<int>{0, 2, 4}));
    EXPECT_EQ(parse_cpulist("7-7"), (std::vector<int>{7}));
    EXPECT_TRUE(parse_cpulist("").empty());     // a memory-only node
    EXPECT_TRUE(parse_cpulist("\n").empty());
}

TEST(numa, malformed_cpulists_are_rejected_quoting_the_text) {
    for (const char* bad : {"a", "3-1", "1,1", "2,1", "0-", "-3", "1,,2", "1 2", "99999999", "0-3,2", ",", "1,", "0x3",
                            "1-2-3", "+1"}) {
        try {
            parse_cpulist(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
        }
    }
}

// A sysfs node directory in a temporary folder.
struct fake_sysfs {
    std::filesystem::path dir;
    explicit fake_sysfs(const std::string& tag) {
        dir = std::filesystem::temp_directory_path() / ("sluice_numa_" + tag + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
    }
    ~fake_sysfs() { std::filesystem::remove_all(dir); }
    void node(const std::string& name, const std::string& cpulist) const {
        std::filesystem::create_directories(dir / name);
        std::ofstream(dir / name / "cpulist") << cpulist;
    }
};

TEST(numa, sysfs_nodes_are_intersected_with_the_allowed_cpus) {
    fake_sysfs fs("good");
    fs.node("node0", "0-3\n");
    fs.node("node1", "4-7\n");
    fs.node("node2", "\n");          // memory only (CXL, HBM): no CPU, dropped
    fs.node("node3", "8-9\n");       // none of its CPUs allowed: dropped
    fs.node("nodeX", "garbage\n");   // not a node directory: ignored
    std::ofstream(fs.dir / "possible") << "0-3\n";
    const numa_topology t = read_numa_topology(fs.dir.string(), {1, 2, 5, 6, 7});
    ASSERT_EQ(t.nodes.size(), 2u);
    EXPECT_EQ(t.nodes[0].id, 0);
    EXPECT_EQ(t.nodes[0].cpus, (std::vector<int>{1, 2}));
    EXPECT_EQ(t.nodes[1].id, 1);
    EXPECT_EQ(t.nodes[1].cpus, (std::vector<int>{5, 6, 7}));
    EXPECT_FALSE(t.simulated);
    EXPECT_EQ(t.n_cpus(), 5);
}

TEST(numa, nodes_are_ordered_by_number_not_by_name) {
    fake_sysfs fs("order");
    fs.node("node10", "2\n");
    fs.node("node2", "1\n");
    const numa_topology t = read_numa_topology(fs.dir.string(), {1, 2});
    ASSERT_EQ(t.nodes.size(), 2u);
    EXPECT_EQ(t.nodes[0].id, 2);
    EXPECT_EQ(t.nodes[1].id, 10);
}

TEST(numa, a_malformed_sysfs_cpulist_is_an_error_naming_the_file) {
    fake_sysfs fs("bad");
    fs.node("node0", "0-3\n");
    fs.node("node1", "4-x\n");
    try {
        read_numa_topology(fs.dir.string(), range(0, 7));
        FAIL() << "accepted a malformed cpulist";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("node1/cpulist"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("4-x"), std::string::npos) << e.what();
    }
}

TEST(numa, no_sysfs_means_one_node_of_every_allowed_cpu) {
    const numa_topology t = read_numa_topology("/nonexistent/sluice/node", {0, 3});
    ASSERT_EQ(t.nodes.size(), 1u);
    EXPECT_EQ(t.nodes[0].cpus, (std::vector<int>{0, 3}));
}

TEST(numa, this_machine_has_its_allowed_cpus_on_some_node) {
    const numa_topology t = detect_numa_topology();
    ASSERT_FALSE(t.nodes.empty());
    EXPECT_EQ(t.n_cpus(), static_cast<int>(allowed_cpus().size()));
}

TEST(numa, the_simulated_split_is_contiguous_and_balanced) {
    const numa_topology t = simulate_numa_topology(2, {0, 1, 2, 3, 4});
    EXPECT_TRUE(t.simulated);
    ASSERT_EQ(t.nodes.size(), 2u);
    EXPECT_EQ(t.nodes[0].cpus, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(t.nodes[1].cpus, (std::vector<int>{3, 4}));
    const numa_topology u = simulate_numa_topology(3, range(10, 16));
    ASSERT_EQ(u.nodes.size(), 3u);
    EXPECT_EQ(u.nodes[0].cpus, (std::vector<int>{10, 11, 12}));
    EXPECT_EQ(u.nodes[1].cpus, (std::vector<int>{13, 14}));
    EXPECT_EQ(u.nodes[2].cpus, (std::vector<int>{15, 16}));
    EXPECT_THROW(simulate_numa_topology(3, {0, 1}), error);   // a node without a CPU
    EXPECT_THROW(simulate_numa_topology(0, {0, 1}), error);
}

TEST(numa, the_numa_option_and_the_environment) {
    EXPECT_EQ(parse_numa_option("off").m, numa_choice::mode::off);
    EXPECT_EQ(parse_numa_option("auto").m, numa_choice::mode::automatic);
    const numa_choice c = parse_numa_option("simulate:3");
    EXPECT_EQ(c.m, numa_choice::mode::simulate);
    EXPECT_EQ(c.simulate_nodes, 3);
    for (const char* bad : {"on", "", "simulate:", "simulate:0", "simulate:x", "simulate:65", "simulate:2x", "AUTO"})
        EXPECT_THROW(parse_numa_option(bad), error) << bad;

    EXPECT_TRUE(resolve_numa(parse_numa_option("off"), "2").nodes.empty());
    EXPECT_THROW(resolve_numa(parse_numa_option("auto"), "two"), error);
    EXPECT_FALSE(resolve_numa(parse_numa_option("auto"), "1").simulated);
    EXPECT_FALSE(resolve_numa(parse_numa_option("auto"), nullptr).simulated);
    if (allowed_cpus().size() >= 2) {
        const numa_topology t = resolve_numa(parse_numa_option("auto"), "2");
        EXPECT_TRUE(t.simulated);
        EXPECT_EQ(t.nodes.size(), 2u);
        EXPECT_EQ(resolve_numa(parse_numa_option("simulate:2"), nullptr).nodes.size(), 2u);
    }
}

numa_topology two_real_nodes(int cpus_a, int cpus_b) {
    numa_topology t;
    t.nodes.push_back({0, range(0, cpus_a - 1)});
    t.nodes.push_back({1, range(cpus_a, cpus_a + cpus_b - 1)});
    return t;
}

TEST(numa, threads_go_to_the_nodes_in_proportion_node_by_node) {
    const numa_thread_plan p = plan_numa_threads(two_real_nodes(4, 4), 8);
    EXPECT_EQ(p.threads_per_node, (std::vector<int>{4, 4}));
    EXPECT_EQ(p.cpu, (std::vector<int>{-1, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(p.node, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
    EXPECT_EQ(p.node_id, (std::vector<int>{0, 1}));
    EXPECT_EQ(describe(p), "2 nodes (4+4 threads)");

    // 5 of 8: 2.5 each, the tie to the lower node.
    const numa_thread_plan q = plan_numa_threads(two_real_nodes(4, 4), 5);
    EXPECT_EQ(q.threads_per_node, (std::vector<int>{3, 2}));
    EXPECT_EQ(q.cpu, (std::vector<int>{-1, 1, 2, 4, 5}));
    EXPECT_EQ(plan_numa_threads(two_real_nodes(6, 2), 4).threads_per_node, (std::vector<int>{3, 1}));

    // Three nodes, two threads: the third gets none and is left out.
    numa_topology three = two_real_nodes(2, 2);
    three.nodes.push_back({5, {4, 5}});
    const numa_thread_plan r = plan_numa_threads(three, 2);
    EXPECT_EQ(r.threads_per_node, (std::vector<int>{1, 1}));
    EXPECT_EQ(r.node_id, (std::vector<int>{0, 1}));
    EXPECT_EQ(r.cpu, (std::vector<int>{-1, 2}));

    // One node: one thread, more threads than a real topology's CPUs, one node in the topology.
    EXPECT_EQ(plan_numa_threads(two_real_nodes(4, 4), 1).n_nodes(), 1);
    EXPECT_EQ(plan_numa_threads(two_real_nodes(4, 4), 9).n_nodes(), 1);
    EXPECT_EQ(plan_numa_threads(numa_topology{}, 4).n_nodes(), 1);
    EXPECT_EQ(describe(plan_numa_threads(numa_topology{}, 4)), "1 node");

    // Simulated: more threads than CPUs still spread, nothing pinned.
    const numa_thread_plan s = plan_numa_threads(simulate_numa_topology(2, {0, 1}), 4);
    EXPECT_EQ(s.threads_per_node, (std::vector<int>{2, 2}));
    EXPECT_EQ(s.cpu, (std::vector<int>{-1, -1, -1, -1}));
    EXPECT_TRUE(s.simulated);
}

TEST(numa, the_pool_knows_each_threads_node) {
    thread_pool_options o;
    // Simulated CPUs 0-3: those this machine lacks are not pinned; a simulated pool keeps its nodes.
    o.numa = simulate_numa_topology(2, range(0, 3));
    thread_pool pool(4, o);
    ASSERT_EQ(pool.n_nodes(), 2);
    EXPECT_TRUE(pool.numa_simulated());
    EXPECT_EQ((std::vector<int>{pool.node_of(0), pool.node_of(1), pool.node_of(2), pool.node_of(3)}),
              (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ((std::vector<int>(pool.threads_per_node().begin(), pool.threads_per_node().end())), (std::vector<int>{2, 2}));
    // Workers go to their own node first; the caller to the node of the CPU it runs on.
    for (int tid = 1; tid < 4; ++tid) EXPECT_EQ(pool.home_node(tid), pool.node_of(tid));
    EXPECT_GE(pool.home_node(0), 0);
    EXPECT_LT(pool.home_node(0), 2);
    // No topology: one node.
    thread_pool one(3);
    EXPECT_EQ(one.n_nodes(), 1);
    EXPECT_EQ(one.node_of(2), 0);
}

// The caller is never pinned: it works first for the node of the CPU it runs on.
TEST(numa, the_caller_starts_with_the_node_of_its_cpu) {
    const std::vector<int> cpus = allowed_cpus();
    if (cpus.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs";
    cpu_set_t saved;
    ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    thread_pool_options o;
    o.numa = simulate_numa_topology(2, cpus);   // node 1 holds the last allowed CPU
    thread_pool pool(2, o);
    ASSERT_EQ(pool.n_nodes(), 2);
    for (int node : {1, 0}) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(node == 1 ? cpus.back() : cpus.front(), &one);
        ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
        EXPECT_EQ(pool.home_node(0), node);
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
}

TEST(numa, a_real_topology_whose_cpus_cannot_be_pinned_gives_a_one_node_pool) {
    thread_pool_options o;
    numa_topology t;
    t.nodes.push_back({0, {1000, 1001}});   // CPUs this machine does not have: pinning fails
    t.nodes.push_back({1, {1002, 1003}});
    o.numa = t;
    thread_pool pool(4, o);
    EXPECT_EQ(pool.n_nodes(), 1);
    EXPECT_EQ(pool.node_of(3), 0);
}

TEST(numa, every_expert_belongs_to_exactly_one_node_in_proportion_to_its_threads) {
    const std::vector<std::vector<int>> splits{{1, 1}, {3, 2}, {4, 4}, {1, 1, 1}, {5, 1, 2}, {8, 8, 8, 8}, {1, 15}};
    for (const auto& tpn : splits) {
        const int m = static_cast<int>(tpn.size());
        const int T = std::accumulate(tpn.begin(), tpn.end(), 0);
        for (int32_t n_expert = 1; n_expert <= 160; ++n_expert) {
            ASSERT_EQ(moe::first_expert_of_node(n_expert, tpn, 0), 0);
            ASSERT_EQ(moe::first_expert_of_node(n_expert, tpn, m), n_expert);
            std::vector<int> owner(static_cast<size_t>(n_expert), -1);
            for (int k = 0; k < m; ++k) {
                const int32_t b = moe::first_expert_of_node(n_expert, tpn, k), e = moe::first_expert_of_node(n_expert, tpn, k + 1);
                ASSERT_LE(b, e);
                // Balanced: within one expert of the node's share n_expert * t_k / T.
                EXPECT_LT(std::abs(double(e - b) - double(n_expert) * tpn[static_cast<size_t>(k)] / T), 1.0)
                    << n_expert << " experts, node " << k;
                for (int32_t x = b; x < e; ++x) {
                    ASSERT_EQ(owner[static_cast<size_t>(x)], -1) << "expert " << x << " twice";
                    owner[static_cast<size_t>(x)] = k;
                }
            }
            for (int32_t x = 0; x < n_expert; ++x) ASSERT_GE(owner[static_cast<size_t>(x)], 0) << "expert " << x << " on no node";
        }
    }
}

using test_support::expert_tensor;

expert_tensor make_experts(dtype t, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& g) {
    return test_support::make_experts(t, n_in, n_out, n_expert, g, 0);
}

// E2: with a simulated topology of 2 (and 3) nodes, run_experts takes the per-node path (jobs
// per expert, claimed node first, down per expert with the finisher's combine) and must give
// the one-node pool's bits for every window of 1..16 rows and 1..4 threads.
TEST(numa, multi_node_expert_pool_gives_the_one_node_bits) {
    const int64_t E = 256, F = 512;
    const int n_expert = 8, K = 3, max_rows = 16;
    std::mt19937 g(11);
    for (const auto& [tg, tu, td] : {std::tuple{dtype::q4_k, dtype::q4_k, dtype::q6_k},
                                     std::tuple{dtype::q8_0, dtype::q4_0, dtype::q8_0}}) {
        const auto gate = make_experts(tg, E, F, n_expert, g), up = make_experts(tu, E, F, n_expert, g),
                   down = make_experts(td, F, E, n_expert, g);
        const moe::expert_bank bank{&gate.view, &up.view, &down.view};
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(max_rows * E)), w(static_cast<size_t>(max_rows * K));
        std::vector<int32_t> ids(static_cast<size_t>(max_rows * K));
        for (auto& v : x) v = d(g);
        for (int r = 0; r < max_rows; ++r) {
            std::vector<int32_t> e(static_cast<size_t>(n_expert));
            std::iota(e.begin(), e.end(), 0);
            std::shuffle(e.begin(), e.end(), g);
            for (int k = 0; k < K; ++k) {
                ids[static_cast<size_t>(r * K + k)] = e[static_cast<size_t>(k)];
                w[static_cast<size_t>(r * K + k)] = 0.2f + 0.3f * std::abs(d(g));
            }
        }
        auto s = moe::make_expert_scratch(max_rows, K, n_expert, E, F);
        // The one-node bits of every window, with one thread.
        std::vector<std::vector<float>> want(max_rows + 1);
        {
            thread_pool one(1);
            for (int window = 1; window <= max_rows; ++window) {
                want[static_cast<size_t>(window)].assign(static_cast<size_t>(window * E), -1.0f);
                moe::run_experts(one, bank, x.data(), ids.data(), w.data(), window, s, want[static_cast<size_t>(window)].data());
            }
        }
        std::vector<float> out(static_cast<size_t>(max_rows * E));
        for (int nodes : {2, 3}) {
            for (int threads = 1; threads <= 4; ++threads) {
                thread_pool_options o;
                o.numa = simulate_numa_topology(nodes, range(0, 3));
                thread_pool pool(threads, o);
                ASSERT_EQ(pool.n_nodes(), threads < 2 ? 1 : std::min(nodes, threads)) << threads << " threads";
                for (int window = 1; window <= max_rows; ++window) {
                    std::fill(out.begin(), out.end(), -1.0f);
                    moe::run_experts(pool, bank, x.data(), ids.data(), w.data(), window, s, out.data());
                    ASSERT_EQ(0, std::memcmp(out.data(), want[static_cast<size_t>(window)].data(), window * E * sizeof(float)))
                        << name(tg) << "/" << name(td) << ": window " << window << ", " << threads << " threads, " << nodes
                        << " simulated nodes";
                }
            }
        }
    }
}

// A page-aligned anonymous buffer holding a fake 3-D expert tensor.
struct page_buffer {
    std::byte* p = nullptr;
    size_t n = 0;
    explicit page_buffer(size_t bytes) : n(bytes) {
        void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::runtime_error("mmap");
        p = static_cast<std::byte*>(m);
    }
    ~page_buffer() { ::munmap(p, n); }
};

TEST(numa, placement_on_one_node_or_simulated_nodes_touches_nothing) {
    page_buffer buf(16 * 4096);
    tensor_view t;
    t.name = "blk.0.ffn_up_exps.weight";
    t.n_dims = 3;
    t.ne = {4096, 1, 16, 1};
    t.type = dtype::i8;
    t.data = buf.p;
    t.nbytes = buf.n;
    const tensor_view* list[] = {&t};
    const auto one = moe::place_experts(list, plan_numa_threads(numa_topology{}, 4));
    EXPECT_EQ(one.nodes, 1);
    EXPECT_EQ(one.checked_pages, 0u);
    const auto sim = moe::place_experts(list, plan_numa_threads(simulate_numa_topology(2, {0, 1}), 2));
    EXPECT_EQ(sim.nodes, 1);
    EXPECT_EQ(sim.checked_pages, 0u);
    EXPECT_NE(sim.note.find("simulated"), std::string::npos) << sim.note;
    // Not a 3-D tensor: an error, not a guess.
    tensor_view flat = t;
    flat.n_dims = 2;
    const tensor_view* bad[] = {&flat};
    EXPECT_THROW(moe::place_experts(bad, plan_numa_threads(two_real_nodes(1, 1), 2)), error);
}

// The system calls for real, on the one node this machine has: a plan of two "nodes" that are
// both node 0 binds and moves every page to node 0, finds them all there, and changes no byte.
TEST(numa, placement_binds_every_expert_page_to_its_node_and_changes_no_byte) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    page_buffer buf(64 * page);
    for (size_t i = 0; i < buf.n; ++i) buf.p[i] = static_cast<std::byte>(i * 131 + 7);
    std::vector<std::byte> copy(buf.p, buf.p + buf.n);
    tensor_view t;
    t.name = "blk.0.ffn_gate_exps.weight";
    t.n_dims = 3;
    t.ne = {static_cast<int64_t>(page), 8, 8, 1};   // 8 experts of 8 pages
    t.type = dtype::i8;
    t.data = buf.p;
    t.nbytes = buf.n;
    numa_thread_plan plan = plan_numa_threads(two_real_nodes(1, 1), 2);
    ASSERT_EQ(plan.n_nodes(), 2);
    plan.node_id = {0, 0};
    const tensor_view* list[] = {&t};
    const moe::numa_placement_report r = moe::place_experts(list, plan);
    EXPECT_EQ(0, std::memcmp(buf.p, copy.data(), buf.n));
    EXPECT_EQ(r.nodes, 2);
    EXPECT_EQ(r.bytes, buf.n);
    if (r.note.find("not permitted") != std::string::npos || r.note.find("not implemented") != std::string::npos)
        GTEST_SKIP() << "the NUMA system calls are refused here: " << r.note;
    EXPECT_EQ(r.note, "");
    EXPECT_EQ(r.checked_pages, 64u);
    EXPECT_EQ(r.pages_on_node, 64u) << r.describe();
}

}  // namespace
}  // namespace sluice
