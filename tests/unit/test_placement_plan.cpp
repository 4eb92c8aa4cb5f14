// src/placement/plan.h and cost_model.h: the window's ids are deduplicated; landed cache
// residents are GPU hits; misses are split between PCIe and the CPU so that the layer's makespan
// is the smallest the greedy rule finds, deterministically; without a GPU everything is CPU work;
// the predicted lane times follow the cost model; the CPU figure is a real measurement.
#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "placement/expert_arena.h"
#include "tokenizer/tokenizer.h"
#include "placement/cost_model.h"
#include "placement/expert_cache.h"
#include "placement/metrics.h"
#include "placement/plan.h"
#include "quant/quant.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

namespace sluice::placement {
namespace {

// Round figures so the expected times are easy to check: 1 MB blobs; PCIe 1 GB/s (1 ms each),
// GPU 10 GB/s (0.1 ms), CPU 0.5 GB/s (2 ms); no fixed overheads.
cost_model round_costs() {
    cost_model m;
    m.pcie_gb_s = 1.0;
    m.pcie_latency_s = 0;
    m.gpu_gb_s = 10.0;
    m.gpu_overhead_s = 0;
    m.cpu_default_gb_s = 0.5;
    m.cpu_overhead_s = 0;
    return m;
}
constexpr uint64_t k_blob = 1000000;

TEST(placement_plan, window_ids_are_deduplicated_with_their_row_counts) {
    planner p(1, 8, {k_blob}, {dtype::q8_0}, round_costs(), {});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{3, 1, 3, 3, 7, 1};   // 3 rows x top-2
    p.plan_layer(0, ids, nullptr, lp);
    ASSERT_EQ(lp.experts.size(), 3u);
    EXPECT_EQ(lp.experts[0].expert, 1);
    EXPECT_EQ(lp.experts[0].rows, 2);
    EXPECT_EQ(lp.experts[1].expert, 3);
    EXPECT_EQ(lp.experts[1].rows, 3);
    EXPECT_EQ(lp.experts[2].expert, 7);
    EXPECT_EQ(lp.experts[2].rows, 1);
    // A second window reuses the planner's counters from zero.
    const std::vector<int32_t> ids2{7, 7};
    p.plan_layer(0, ids2, nullptr, lp);
    ASSERT_EQ(lp.experts.size(), 1u);
    EXPECT_EQ(lp.experts[0].rows, 2);
}

TEST(placement_plan, without_a_gpu_every_expert_runs_on_the_cpu) {
    cache_options co;
    co.budget_bytes = 8 * k_blob;   // a cache holding everything is ignored without a device
    expert_cache cache(1, 8, {k_blob}, {}, co);
    for (int s = 0; s < cache.n_slots(); ++s) cache.copy_landed(s);
    planner p(1, 8, {k_blob}, {dtype::q8_0}, round_costs(), planner_options{.gpu = false, .staging_slots = 4});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{0, 1, 2, 3, 4, 5};
    p.plan_layer(0, ids, &cache, lp);
    EXPECT_EQ(lp.n_cpu, 6);
    EXPECT_EQ(lp.n_gpu + lp.n_pcie, 0);
    EXPECT_DOUBLE_EQ(lp.t_cpu, 6 * 2e-3);
    EXPECT_DOUBLE_EQ(lp.makespan, lp.t_cpu);
    for (const planned_expert& e : lp.experts) EXPECT_EQ(e.where, lane::cpu);
}

TEST(placement_plan, landed_residents_are_gpu_hits_and_copying_ones_are_not) {
    cache_options co;
    co.budget_bytes = 2 * k_blob;
    expert_cache cache(1, 8, {k_blob}, std::vector<uint64_t>{0, 0, 9, 8, 0, 0, 0, 0}, co);
    cache.copy_landed(cache.slot_of(0, 2));   // expert 3's copy has not landed
    planner p(1, 8, {k_blob}, {dtype::q8_0}, round_costs(), planner_options{.gpu = true, .staging_slots = 0});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{2, 3};
    p.plan_layer(0, ids, &cache, lp);
    EXPECT_EQ(lp.n_gpu, 1);
    EXPECT_EQ(lp.experts[0].expert, 2);
    EXPECT_EQ(lp.experts[0].where, lane::gpu);
    EXPECT_EQ(lp.experts[0].slot, cache.slot_of(0, 2));
    EXPECT_EQ(lp.experts[1].expert, 3);
    EXPECT_EQ(lp.experts[1].where, lane::cpu);   // no staging slots: the CPU
}

TEST(placement_plan, misses_split_to_minimise_the_makespan) {
    // 6 misses, no hits. CPU 2 ms each; PCIe path: copies back to back (1 ms each), each computed
    // 0.1 ms after it lands. Greedy in id order: 0 -> PCIe (1.1 < 2), 1 -> PCIe (2.1 vs max(1.1,2)
    // = 2: CPU), ... the optimum of this model is 3 over PCIe and 3 on the CPU? Check the rule
    // directly: every assignment is the better of the two at its turn, and the makespan is at
    // most the all-CPU and the all-PCIe ones.
    planner p(1, 16, {k_blob}, {dtype::q8_0}, round_costs(), planner_options{.gpu = true, .staging_slots = 16});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{0, 1, 2, 3, 4, 5};
    p.plan_layer(0, ids, nullptr, lp);
    EXPECT_EQ(lp.n_pcie + lp.n_cpu, 6);
    EXPECT_GT(lp.n_pcie, 0);
    EXPECT_GT(lp.n_cpu, 0);
    EXPECT_LE(lp.makespan, 6 * 2e-3);           // all on the CPU
    EXPECT_LE(lp.makespan, 6 * 1e-3 + 0.1e-3);  // all over PCIe
    // Replay the greedy rule by hand.
    double gpu = 0, land = 0, cpu = 0;
    for (int32_t e = 0; e < 6; ++e) {
        const double l2 = land + 1e-3, g2 = std::max(gpu, l2) + 0.1e-3;
        const bool pcie = std::max(g2, cpu) < std::max(gpu, cpu + 2e-3);
        const auto it = std::find_if(lp.experts.begin(), lp.experts.end(), [&](const planned_expert& x) { return x.expert == e; });
        ASSERT_NE(it, lp.experts.end());
        EXPECT_EQ(it->where, pcie ? lane::pcie : lane::cpu) << "expert " << e;
        if (pcie) {
            land = l2;
            gpu = g2;
        } else {
            cpu += 2e-3;
        }
    }
    EXPECT_DOUBLE_EQ(lp.t_pcie, land);
    EXPECT_DOUBLE_EQ(lp.t_gpu, gpu);
    EXPECT_DOUBLE_EQ(lp.t_cpu, cpu);
    EXPECT_DOUBLE_EQ(lp.makespan, std::max(gpu, cpu));
    // PCIe entries come first, their staging slots in copy order.
    int32_t slot = 0;
    for (int i = 0; i < lp.n_pcie; ++i) {
        EXPECT_EQ(lp.experts[static_cast<size_t>(i)].where, lane::pcie);
        EXPECT_EQ(lp.experts[static_cast<size_t>(i)].slot, slot++);
    }
    EXPECT_EQ(lp.pcie_bytes, static_cast<uint64_t>(lp.n_pcie) * k_blob);
}

TEST(placement_plan, staging_slots_bound_the_pcie_share) {
    cost_model m = round_costs();
    m.cpu_default_gb_s = 0.01;   // the CPU is very slow: PCIe takes all it can
    planner p(1, 16, {k_blob}, {dtype::q8_0}, m, planner_options{.gpu = true, .staging_slots = 3});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{0, 1, 2, 3, 4, 5, 6, 7};
    p.plan_layer(0, ids, nullptr, lp);
    EXPECT_EQ(lp.n_pcie, 3);
    EXPECT_EQ(lp.n_cpu, 5);
}

TEST(placement_plan, a_forced_pcie_share_pins_the_split_whatever_the_costs) {
    // The CPU is fast (every miss would stay there) but half is forced over PCIe, lowest ids first;
    // share 1 takes what the staging slots allow; share 0 none.
    cost_model m = round_costs();
    m.cpu_default_gb_s = 1000.0;
    const std::vector<int32_t> ids{9, 2, 5, 7, 2, 11};   // 5 unique misses
    const struct {
        double share;
        int pcie;
    } cases[] = {{0.5, 3}, {1.0, 4}, {0.0, 0}, {0.2, 1}};
    for (const auto& c : cases) {
        planner p(1, 16, {k_blob}, {dtype::q8_0}, m,
                  planner_options{.gpu = true, .staging_slots = 4, .forced_pcie_share = c.share});
        layer_plan lp = p.make_layer_plan();
        p.plan_layer(0, ids, nullptr, lp);
        EXPECT_EQ(lp.n_pcie, c.pcie) << "share " << c.share;
        EXPECT_EQ(lp.n_cpu, 5 - c.pcie) << "share " << c.share;
        for (int i = 0; i < lp.n_pcie; ++i) {
            EXPECT_EQ(lp.experts[static_cast<size_t>(i)].where, lane::pcie);
            EXPECT_EQ(lp.experts[static_cast<size_t>(i)].slot, i);   // staging slot = copy order
        }
        if (c.pcie >= 1) {
            EXPECT_EQ(lp.experts[0].expert, 2);
        }
    }
    // Without a GPU nothing goes over PCIe, forced or not.
    planner cpu_only(1, 16, {k_blob}, {dtype::q8_0}, m, planner_options{.gpu = false, .forced_pcie_share = 1.0});
    layer_plan lp = cpu_only.make_layer_plan();
    cpu_only.plan_layer(0, ids, nullptr, lp);
    EXPECT_EQ(lp.n_pcie, 0);
    EXPECT_THROW(planner(1, 16, {k_blob}, {dtype::q8_0}, m, planner_options{.gpu = true, .forced_pcie_share = 1.5}),
                 std::exception);
}

TEST(placement_plan, a_fast_cpu_keeps_every_miss) {
    cost_model m = round_costs();
    m.cpu_default_gb_s = 1000.0;   // 1 us per expert: never worth a 1 ms copy
    planner p(1, 16, {k_blob}, {dtype::q8_0}, m, planner_options{.gpu = true, .staging_slots = 8});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{0, 1, 2, 3};
    p.plan_layer(0, ids, nullptr, lp);
    EXPECT_EQ(lp.n_cpu, 4);
    EXPECT_EQ(lp.n_pcie, 0);
}

TEST(placement_plan, the_cpu_figure_is_per_format) {
    cost_model m = round_costs();
    m.set_cpu_gb_s(dtype::q4_k, 4.0);
    EXPECT_DOUBLE_EQ(m.cpu_gb_s(dtype::q4_k), 4.0);
    EXPECT_DOUBLE_EQ(m.cpu_gb_s(dtype::q8_0), 0.5);   // not measured: the default
    planner p(2, 4, {k_blob, k_blob}, {dtype::q4_k, dtype::q8_0}, m, {});
    layer_plan lp = p.make_layer_plan();
    const std::vector<int32_t> ids{0};
    p.plan_layer(0, ids, nullptr, lp);
    EXPECT_DOUBLE_EQ(lp.t_cpu, 1e6 / 4e9);
    p.plan_layer(1, ids, nullptr, lp);
    EXPECT_DOUBLE_EQ(lp.t_cpu, 1e6 / 0.5e9);
}

TEST(placement_plan, metrics_add_up_the_plans) {
    cache_options co;
    co.budget_bytes = k_blob;
    expert_cache cache(1, 8, {k_blob}, std::vector<uint64_t>{5, 0, 0, 0, 0, 0, 0, 0}, co);
    cache.copy_landed(0);
    planner p(1, 8, {k_blob}, {dtype::q8_0}, round_costs(), planner_options{.gpu = true, .staging_slots = 4});
    layer_plan lp = p.make_layer_plan();
    placement_metrics mt;
    const std::vector<int32_t> ids{0, 1, 2, 3};
    p.plan_layer(0, ids, &cache, lp);
    mt.add(lp);
    mt.add(lp);
    EXPECT_EQ(mt.experts, 8u);
    EXPECT_EQ(mt.hits, 2u);
    EXPECT_EQ(mt.misses(), 6u);
    EXPECT_DOUBLE_EQ(mt.hit_rate(), 0.25);
    EXPECT_EQ(mt.pcie_bytes, 2 * lp.pcie_bytes);
    const nlohmann::json j = mt.to_json();
    EXPECT_EQ(j["hits"], 2);
    EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.25);
    const std::string prom = mt.to_prometheus();
    EXPECT_NE(prom.find("sluice_expert_hits_total 2"), std::string::npos) << prom;
    EXPECT_NE(prom.find("lane=\"cpu\",kind=\"predicted\""), std::string::npos);

    // Streamed layers count on their own lane: the staged copies' PCIe figures do not move.
    const lane_seconds pcie_before = mt.pcie_lane;
    mt.add_streamed(4000, 2e-3);
    mt.add_streamed(6000, 3e-3);
    mt.add_stream_measured(6e-3);
    EXPECT_EQ(mt.streamed_layers, 2u);
    EXPECT_EQ(mt.streamed_bytes, 10000u);
    EXPECT_DOUBLE_EQ(mt.stream_lane.predicted, 5e-3);
    EXPECT_DOUBLE_EQ(mt.stream_lane.measured, 6e-3);
    EXPECT_EQ(mt.pcie_lane.predicted, pcie_before.predicted);
    EXPECT_EQ(mt.pcie_lane.measured, pcie_before.measured);
    placement_metrics sum;
    sum.merge(mt);
    sum.merge(mt);
    EXPECT_DOUBLE_EQ(sum.stream_lane.measured, 12e-3);
    EXPECT_DOUBLE_EQ(mt.to_json()["lanes"]["stream"]["predicted_s"].get<double>(), 5e-3);
    EXPECT_NE(mt.to_prometheus().find("lane=\"stream\",kind=\"measured\"} 0.006"), std::string::npos);
    mt.host.launch = 0.25;
    sum.merge(mt);
    EXPECT_DOUBLE_EQ(sum.host.launch, 0.25);
    EXPECT_DOUBLE_EQ(mt.to_json()["host_s"]["launch"].get<double>(), 0.25);
    EXPECT_NE(mt.to_prometheus().find("phase=\"launch\"} 0.25"), std::string::npos);
    mt.gpu_between = 0.5;
    sum.merge(mt);
    EXPECT_DOUBLE_EQ(sum.gpu_between, 0.5);
    EXPECT_DOUBLE_EQ(mt.to_json()["gpu_between_s"].get<double>(), 0.5);
    EXPECT_NE(mt.to_prometheus().find("sluice_expert_gpu_between_seconds_total 0.5"), std::string::npos);
}

TEST(placement_plan, cpu_expert_rate_is_measured_on_the_pool) {
    // A small Q8_0 bank: the measurement runs the real pool and returns a positive, finite rate.
    const int64_t E = 256, F = 512, X = 4;
    std::mt19937 g(3);
    std::normal_distribution<float> d(0.0f, 0.5f);
    auto make = [&](int64_t n_in, int64_t n_out, std::vector<std::byte>& buf, tensor_view& v) {
        const uint64_t row = *bytes_for(dtype::q8_0, static_cast<uint64_t>(n_in));
        buf.resize(row * static_cast<uint64_t>(n_out * X));
        std::vector<float> f(static_cast<size_t>(n_in));
        for (int64_t r = 0; r < n_out * X; ++r) {
            for (auto& x : f) x = d(g);
            quant::quantize_row(dtype::q8_0, f.data(), buf.data() + r * row, n_in);
        }
        v.name = "experts";
        v.type = dtype::q8_0;
        v.n_dims = 3;
        v.ne = {n_in, n_out, X, 1};
        v.data = buf.data();
        v.nbytes = buf.size();
    };
    std::vector<std::byte> bg, bu, bd;
    tensor_view vg, vu, vd;
    make(E, F, bg, vg);
    make(E, F, bu, vu);
    make(F, E, bd, vd);
    thread_pool pool(2);
    const moe::expert_bank bank{&vg, &vu, &vd};
    const double gbs = measure_cpu_expert(pool, bank, 1, 3);
    EXPECT_GT(gbs, 0.0);
    EXPECT_LT(gbs, 10000.0);
    cost_model m;
    calibrate_cpu(m, pool, bank, 3);
    EXPECT_GT(m.cpu_gb_s_by_type[static_cast<size_t>(dtype::q8_0)], 0.0);
    EXPECT_THROW(measure_cpu_expert(pool, bank, 4, 1), std::exception);
    // A batch of distinct experts (the calibration's form) and its range checks.
    const double batch = measure_cpu_expert_batch(pool, bank, 1, 2);
    EXPECT_GT(batch, 0.0);
    EXPECT_LT(batch, 10000.0);
    EXPECT_THROW(measure_cpu_expert_batch(pool, bank, 3, 2), std::exception);
    EXPECT_THROW(measure_cpu_expert_batch(pool, bank, 0, 0), std::exception);
    // 16 rows through each expert (the row-cost calibration's form); rows outside 1..64 refused.
    EXPECT_GT(measure_cpu_expert_batch(pool, bank, 0, 2, 16), 0.0);
    EXPECT_THROW(measure_cpu_expert_batch(pool, bank, 0, 2, 0), std::exception);
    EXPECT_THROW(measure_cpu_expert_batch(pool, bank, 0, 2, 65), std::exception);
    EXPECT_GE(m.cpu_extra_row, 0.0);
}

// A Qwen3-30B-A3B-shaped split layer (128 experts, 8 used, 3.1 MB blobs, nothing resident, 16
// staging slots) and the H200 machine's figures (PCIe 53 GB/s, CPU 40 GB/s at one row).
struct h200_stream_case {
    cost_model m;
    stream_layer l;
    h200_stream_case() {
        m.pcie_gb_s = 53.0;
        m.pcie_latency_s = 0.0;
        m.set_cpu_gb_s(dtype::q4_k, 40.0);
        m.cpu_extra_row = 0.5;
        l.k_used = 8;
        l.n_expert = 128;
        l.missing = 128;
        l.blob_bytes = 3'100'000;
        l.type = dtype::q4_k;
        l.staging_slots = 16;
    }
};

// Prefill streaming's choice (stream_layer_costs) for h200_stream_case: a decode row splits (8
// experts on the CPU and PCIe beat copying 128), a 512-row chunk streams (every expert is
// routed, with ~32 rows each on the CPU), and once streaming wins it keeps winning as the chunk
// grows. Nothing missing costs nothing.
TEST(cost_model, stream_choice) {
    h200_stream_case hc;
    cost_model& m = hc.m;
    stream_layer& l = hc.l;
    l.n_rows = 1;
    const layer_costs one = stream_layer_costs(m, l);
    EXPECT_LT(one.split_s, one.stream_s);
    EXPECT_NEAR(one.stream_s, 128 * 3.1e6 / 53e9, 1e-9);
    l.n_rows = 512;
    const layer_costs big = stream_layer_costs(m, l);
    EXPECT_GT(big.split_s, big.stream_s);
    EXPECT_DOUBLE_EQ(big.stream_s, one.stream_s);   // the copy does not depend on the rows
    bool streamed = false;
    for (int64_t n = 1; n <= 4096; n *= 2) {
        l.n_rows = n;
        const layer_costs c = stream_layer_costs(m, l);
        if (streamed) {
            EXPECT_LT(c.stream_s, c.split_s) << n << " rows";
        }
        streamed = streamed || c.stream_s < c.split_s;
    }
    EXPECT_TRUE(streamed);
    // Half the experts resident: half the copy.
    l.missing = 64;
    EXPECT_NEAR(stream_layer_costs(m, l).stream_s, big.stream_s / 2, 1e-9);
    l.missing = 0;
    const layer_costs none = stream_layer_costs(m, l);
    EXPECT_EQ(none.split_s, 0.0);
    EXPECT_EQ(none.stream_s, 0.0);
}

// The forward's cut-over (stream_cutover_rows): the first row count at which the summed stream
// cost of the split layers is below the summed split cost, checked against a linear scan (also
// with half of each layer resident); a copy engine too slow to win below 2^20 rows never streams.
TEST(cost_model, stream_cutover_rows) {
    h200_stream_case hc;
    cost_model& m = hc.m;
    stream_layer& l = hc.l;
    const std::vector<stream_layer> layers(48, l);
    const auto streams = [&](const std::vector<stream_layer>& ls, int64_t n) {
        double split = 0, stream = 0;
        for (stream_layer x : ls) {
            x.n_rows = n;
            split += stream_layer_costs(m, x).split_s;
            stream += stream_layer_costs(m, x).stream_s;
        }
        return stream < split;
    };
    const int64_t cut = stream_cutover_rows(m, layers);
    ASSERT_GT(cut, 1);
    ASSERT_LT(cut, 512);
    for (int64_t n = 1; n < cut; ++n) EXPECT_FALSE(streams(layers, n)) << n << " rows";
    for (int64_t n = cut; n < cut + 64; ++n) EXPECT_TRUE(streams(layers, n)) << n << " rows";
    // Half of each layer resident: half the copy, and the staging slots take a larger share of
    // the misses, so the split path stays cheaper for a few more rows.
    std::vector<stream_layer> half = layers;
    for (stream_layer& x : half) x.missing = 64;
    const int64_t cut_half = stream_cutover_rows(m, half);
    ASSERT_LT(cut_half, 512);
    for (int64_t n = 1; n < cut_half; ++n) EXPECT_FALSE(streams(half, n)) << n << " rows";
    EXPECT_TRUE(streams(half, cut_half));
    // A copy engine at 100 KB/s never pays.
    cost_model slow = m;
    slow.pcie_gb_s = 1e-4;
    EXPECT_EQ(stream_cutover_rows(slow, layers), k_never_streams);
    EXPECT_EQ(stream_cutover_rows(m, {}), k_never_streams);
}

// The shipped MoE's real routing, planned layer by layer from inside the forward (the routing
// observer), with the cache adapting between windows: no budget or no GPU puts every expert on
// the CPU; a budget for every expert makes every lookup a hit once the copies land; in between,
// some hits and some misses. The observer allocates nothing and changes no logit.
struct live_planner {
    planner* p;
    expert_cache* cache;
    layer_plan plan;
    placement_metrics m;
    static void observe(void* ctx, int layer, const int32_t* ids, int64_t n) {
        auto* self = static_cast<live_planner*>(ctx);
        self->p->plan_layer(layer, std::span<const int32_t>(ids, static_cast<size_t>(n)), self->cache, self->plan);
        self->m.add(self->plan);
        self->cache->observe(layer, std::span<const int32_t>(ids, static_cast<size_t>(n)));
    }
};

placement_metrics plan_the_shipped_model(double budget_share, bool gpu) {
    const std::filesystem::path path = std::filesystem::path(SLUICE_SOURCE_DIR) / "models/sluice-moe-25m-Q8_0.gguf";
    auto f = model_file::open(path);
    auto tok = tokenizer::for_model(*f, path);
    auto net = load_model(*f, load_options{128});
    const model_hparams& hp = net->hparams();
    arena_options ao;
    ao.use_cache_file = false;
    auto arena = expert_arena::open(path, *f, hp.n_layer, hp.n_expert, ao);
    std::vector<uint64_t> blob(static_cast<size_t>(hp.n_layer));
    std::vector<dtype> type(static_cast<size_t>(hp.n_layer));
    uint64_t all = 0;
    for (int l = 0; l < hp.n_layer; ++l) {
        blob[static_cast<size_t>(l)] = arena->layout(l).blob_bytes();
        type[static_cast<size_t>(l)] = arena->layout(l).gate_type;
        all += blob[static_cast<size_t>(l)] * static_cast<uint64_t>(hp.n_expert);
    }
    cache_options co;
    co.budget_bytes = static_cast<uint64_t>(budget_share * static_cast<double>(all));
    co.k_used = hp.n_expert_used;
    expert_cache cache(hp.n_layer, hp.n_expert, blob, {}, co);
    for (int s = 0; s < cache.n_slots(); ++s) cache.copy_landed(s);   // the initial copies, at load
    planner p(hp.n_layer, hp.n_expert, blob, type, cost_model{}, planner_options{.gpu = gpu, .staging_slots = 4});
    live_planner lp{&p, &cache, p.make_layer_plan(), {}};
    thread_pool pool(2);
    forward_scratch s = net->make_scratch(4, pool);
    s.on_route = {&live_planner::observe, &lp};
    kv_cache kv(net->kv_shape_for(128));
    const std::vector<token_id> ids =
        tok->encode("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n", false, true);
    std::vector<float> logits(4 * static_cast<size_t>(hp.n_vocab));
    for (size_t at = 0; at < ids.size(); at += 4) {
        const size_t n = std::min<size_t>(4, ids.size() - at);
        net->forward(std::span<const token_id>(ids.data() + at, n), static_cast<int32_t>(at), kv, s, logits.data());
        for (const cache_swap& sw : cache.end_step()) {
            ++lp.m.swaps;
            cache.copy_landed(sw.slot);   // landed before the next window
        }
    }
    return lp.m;
}

TEST(placement_plan, real_routing_hits_grow_with_the_budget) {
    const placement_metrics none = plan_the_shipped_model(0.0, true);
    EXPECT_GT(none.experts, 0u);
    EXPECT_EQ(none.hits, 0u);
    const placement_metrics no_gpu = plan_the_shipped_model(1.0, false);
    EXPECT_EQ(no_gpu.hits + no_gpu.pcie, 0u);
    EXPECT_EQ(no_gpu.cpu, no_gpu.experts);
    EXPECT_EQ(no_gpu.experts, none.experts);   // the same routing: placement changes no token
    const placement_metrics all = plan_the_shipped_model(1.0, true);
    EXPECT_EQ(all.hits, all.experts);
    EXPECT_EQ(all.experts, none.experts);
    const placement_metrics quarter = plan_the_shipped_model(0.25, true);
    EXPECT_GT(quarter.hits, 0u);
    EXPECT_LT(quarter.hits, quarter.experts);
    EXPECT_EQ(quarter.experts, none.experts);
}

}  // namespace
}  // namespace sluice::placement
