// What each lane costs (issue 10, "the plan"): the figures the planner splits a layer's misses
// by. PCIe and GPU figures are inputs for now (their defaults are GPU-MACHINE.md's measurements
// or marked guesses); the CPU figure is measured here by timing the CPU expert pool on one
// expert of the model (measure_cpu_expert).
#pragma once

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "moe/expert_pool.h"

#include <array>
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
};

// Times the CPU expert pool computing one row through one expert (`expert` of `bank`), `reps`
// times after one warm-up, and returns the expert's bytes (gate + up + down slices) over the
// median time, in GB/s. The weights come from RAM or cache as they do in a step: a small model's
// expert stays in cache, so this is an upper bound there; on a large model it is RAM speed.
double measure_cpu_expert(thread_pool& pool, const moe::expert_bank& bank, int32_t expert, int reps = 5);

// The pool computing one row through each of `count` experts [first, first + count) at once (a
// decode layer's CPU lane: one flat batch), once, after a warm-up batch over other experts when
// the bank has them (so the timed experts come from RAM, as a large model's do): their bytes over
// the time, in GB/s.
double measure_cpu_expert_batch(thread_pool& pool, const moe::expert_bank& bank, int32_t first, int32_t count);

// Fills the CPU figure for the bank's gate format: a batch of up to 8 experts not yet touched
// (measure_cpu_expert_batch), or measure_cpu_expert on expert 0 for a bank of one expert.
void calibrate_cpu(cost_model& m, thread_pool& pool, const moe::expert_bank& bank, int reps = 5);

}  // namespace sluice::placement
