// What each lane costs (issue 10, "the plan"): the figures the planner splits a layer's misses
// by. PCIe and GPU figures are inputs for now (their defaults are GPU-MACHINE.md's measurements
// or marked guesses); the CPU figure is measured here by timing the CPU expert pool on one
// expert of the model (measure_cpu_expert).
#pragma once

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "moe/expert_pool.h"

#include <algorithm>
#include <array>
#include <span>
#include <cstdint>

namespace sluice::placement {

struct cost_model {
    // Host-to-device over PCIe from pinned memory: 53.0 GB/s for 3 MB copies back to back
    // (GPU-MACHINE.md, H200, 2026-11-29), plus a per-copy latency (a guess: 10 us).
    double pcie_gb_s = 53.0;
    double pcie_latency_s = 10e-6;
    // GPU expert compute: an expert reads its blob from HBM once per window. 3,000 GB/s is a
    // guess (the H200 copies device-to-device at 4.0-4.2 TB/s read + write counted); 5 us per
    // expert launch/tail is a guess too. To be measured on the GPU machine.
    double gpu_gb_s = 3000.0;
    double gpu_overhead_s = 5e-6;
    // CPU pool, bytes of expert weights per second, per weight format (0: not measured, then
    // cpu_default_gb_s). Measured by measure_cpu_expert.
    std::array<double, 64> cpu_gb_s_by_type{};
    double cpu_default_gb_s = 20.0;   // a guess for formats never measured
    double cpu_overhead_s = 5e-6;     // per expert (a guess: two parallel_for dispatches)
    // Each row beyond the first that an expert computes costs this fraction of its one-row time
    // (the multi-row kernels decode a weight block once for up to 16 rows, but the integer dot
    // products grow with the rows). 0.5 is a guess until calibrate_cpu measures 16 rows.
    double cpu_extra_row = 0.5;
    // A split layer's host round trip (the ids to the host, the plan, the join): on the H200 a
    // split layer's serial part took ~170 us against ~65 us for a whole GPU layer (measured with
    // a stream sync before the doorbell, which session 19's A/B put within 2-5% of it:
    // cuda_expert_lanes.cpp, ranking_of), so ~105 us a layer.
    double split_round_trip_s = 105e-6;

    double cpu_gb_s(dtype t) const {
        const size_t i = static_cast<size_t>(t);
        return i < cpu_gb_s_by_type.size() && cpu_gb_s_by_type[i] > 0 ? cpu_gb_s_by_type[i] : cpu_default_gb_s;
    }
    void set_cpu_gb_s(dtype t, double v) {
        const size_t i = static_cast<size_t>(t);
        if (i < cpu_gb_s_by_type.size()) cpu_gb_s_by_type[i] = v;
    }
    // Seconds for one expert of `bytes` on each lane.
    double cpu_seconds(uint64_t bytes, dtype t) const { return cpu_overhead_s + static_cast<double>(bytes) / (cpu_gb_s(t) * 1e9); }
    double pcie_seconds(uint64_t bytes) const { return pcie_latency_s + static_cast<double>(bytes) / (pcie_gb_s * 1e9); }
    double gpu_seconds(uint64_t bytes) const { return gpu_overhead_s + static_cast<double>(bytes) / (gpu_gb_s * 1e9); }
    // Seconds for one expert computing `rows` rows on the CPU.
    double cpu_rows_seconds(uint64_t bytes, dtype t, double rows) const {
        return cpu_seconds(bytes, t) * (1.0 + cpu_extra_row * std::max(rows - 1.0, 0.0));
    }
};

// Prefill streaming (issue 10, part 5): what one split layer costs for a window of n_rows rows
//   split  - its misses shared between the CPU lane and up to staging_slots PCIe copies (the
//            share that balances the two lanes), the planner's path, plus the host round trip;
//   stream - every expert not resident copied to the GPU (the copy engine's time: the GPU
//            computes the layer while the next layer's copy runs).
// Routing is taken as uniform: a missing expert is used with probability u = 1 - (1 - k/N)^n,
// by n k / (N u) rows on average. The forward streams when the sum over its split layers of
// stream is below that of split.
struct layer_costs {
    double split_s = 0.0, stream_s = 0.0;
};
struct stream_layer {
    int64_t n_rows = 0;
    int k_used = 0, n_expert = 0;
    int missing = 0;           // experts of the layer not resident in VRAM
    uint64_t blob_bytes = 0;   // one expert's gate + up + down
    dtype type = dtype::f32;   // the experts' gate format (the CPU figure's key)
    int staging_slots = 0;     // PCIe misses the split path may copy
};
layer_costs stream_layer_costs(const cost_model& m, const stream_layer& l);
// The smallest window (rows) for which streaming the given split layers costs less than
// splitting them (stream_layer_costs summed over the layers; their n_rows is ignored), or
// k_never_streams when no window up to that size does. Streaming, once it wins, keeps winning
// as the rows grow (the split path's cost grows with the rows, the copy's does not), so a
// doubling search and a bisection find it.
inline constexpr int64_t k_never_streams = int64_t{1} << 20;
int64_t stream_cutover_rows(const cost_model& m, std::span<const stream_layer> layers);


// Times the CPU expert pool computing one row through one expert (`expert` of `bank`), `reps`
// times after one warm-up, and returns the expert's bytes (gate + up + down slices) over the
// median time, in GB/s. The weights come from RAM or cache as they do in a step: a small model's
// expert stays in cache, so this is an upper bound there; on a large model it is RAM speed.
double measure_cpu_expert(thread_pool& pool, const moe::expert_bank& bank, int32_t expert, int reps = 5);

// The pool computing one row through each of `count` experts [first, first + count) at once (a
// decode layer's CPU lane: one flat batch), once, after a warm-up batch over other experts when
// the bank has them (so the timed experts come from RAM, as a large model's do): their bytes over
// the time, in GB/s.
// rows: each of that many rows through all `count` experts (the time of a prefill's experts).
double measure_cpu_expert_batch(thread_pool& pool, const moe::expert_bank& bank, int32_t first, int32_t count,
                                int rows = 1);

// Fills the CPU figure for the bank's gate format: the best of up to three batches of up to 8
// experts not yet touched (measure_cpu_expert_batch), or measure_cpu_expert on expert 0 for a
// bank of one expert; and,
// for a bank of at least 2 experts, cpu_extra_row from a batch of 16 rows over other experts.
void calibrate_cpu(cost_model& m, thread_pool& pool, const moe::expert_bank& bank, int reps = 5);

}  // namespace sluice::placement
