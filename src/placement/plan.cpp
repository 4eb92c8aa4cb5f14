#include "placement/plan.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace sluice::placement {

const char* lane_name(lane l) {
    switch (l) {
        case lane::gpu: return "gpu";
        case lane::pcie: return "pcie";
        case lane::cpu: return "cpu";
    }
    return "?";
}

planner::planner(int n_layer, int n_expert, std::vector<uint64_t> blob_bytes, std::vector<dtype> cpu_type,
                 const cost_model& costs, const planner_options& o)
    : n_layer_(n_layer), n_expert_(n_expert), blob_(std::move(blob_bytes)), type_(std::move(cpu_type)), costs_(costs), o_(o) {
    if (n_layer < 1 || n_expert < 1) fail("planner: expected >= 1 layers and experts, got {} and {}", n_layer, n_expert);
    if (blob_.size() != static_cast<size_t>(n_layer) || type_.size() != static_cast<size_t>(n_layer))
        fail("planner: expected {} blob sizes and formats (one per layer), got {} and {}", n_layer, blob_.size(),
             type_.size());
    if (o.staging_slots < 0) fail("planner: staging slots {}: expected >= 0", o.staging_slots);
    if (!(o.forced_pcie_share <= 1.0)) fail("planner: forced PCIe share {}: expected <= 1 (< 0: the cost model)", o.forced_pcie_share);
    set_costs(costs);
    rows_.assign(static_cast<size_t>(n_expert), 0);
    misses_.reserve(static_cast<size_t>(n_expert));
    lane_of_.assign(static_cast<size_t>(n_expert), lane::cpu);
}

void planner::set_costs(const cost_model& c) {
    if (!(c.pcie_gb_s > 0) || !(c.gpu_gb_s > 0) || !(c.cpu_default_gb_s > 0))
        fail("planner: the cost model's GB/s figures must be > 0 (PCIe {}, GPU {}, CPU {})", c.pcie_gb_s, c.gpu_gb_s,
             c.cpu_default_gb_s);
    costs_ = c;
}

layer_plan planner::make_layer_plan() const {
    layer_plan p;
    p.experts.reserve(static_cast<size_t>(n_expert_));
    return p;
}

void planner::plan_layer(int layer, std::span<const int32_t> ids, const expert_cache* cache, layer_plan& out) {
    out.layer = layer;
    out.experts.clear();
    out.n_gpu = out.n_pcie = out.n_cpu = 0;
    out.gpu_bytes = out.pcie_bytes = out.cpu_bytes = 0;
    out.t_gpu = out.t_pcie = out.t_cpu = out.makespan = 0;
    if (layer < 0 || layer >= n_layer_) return;
    const uint64_t bytes = blob_[static_cast<size_t>(layer)];
    const dtype t = type_[static_cast<size_t>(layer)];
    const bool gpu = o_.gpu;
    const bool use_cache = gpu && cache && cache->n_layer() == n_layer_ && cache->n_expert() == n_expert_;

    // Dedup: rows per expert (a counting pass, so the unique ids come out ascending).
    for (int32_t e : ids)
        if (e >= 0 && e < n_expert_) ++rows_[static_cast<size_t>(e)];
    misses_.clear();
    double gpu_t = 0, cpu_t = 0, land = 0;
    for (int32_t e = 0; e < n_expert_; ++e) {
        const int32_t r = rows_[static_cast<size_t>(e)];
        if (r == 0) continue;
        if (use_cache && cache->on_gpu(layer, e)) {
            out.experts.push_back({e, lane::gpu, r, cache->slot_of(layer, e), bytes});
            ++out.n_gpu;
            out.gpu_bytes += bytes;
            gpu_t += costs_.gpu_seconds(bytes);
        } else {
            misses_.push_back(e);
        }
    }
    // Misses by blob size descending, ties by id ascending: within a layer every blob has the
    // same size, so misses_ (ascending ids) is already in that order.
    // Greedy: each miss to the lane that gives the smaller makespan so far (a tie: the CPU).
    // A forced share instead sends the first round(share * misses) misses over PCIe.
    const bool forced = o_.forced_pcie_share >= 0;
    const size_t n_forced =
        forced ? static_cast<size_t>(std::llround(o_.forced_pcie_share * static_cast<double>(misses_.size()))) : 0;
    for (size_t i = 0; i < misses_.size(); ++i) {
        const double c = costs_.cpu_seconds(bytes, t);
        bool to_pcie = false;
        double gpu_if = 0, land_if = 0;
        if (gpu && out.n_pcie < o_.staging_slots) {
            land_if = land + costs_.pcie_seconds(bytes);
            gpu_if = std::max(gpu_t, land_if) + costs_.gpu_seconds(bytes);
            to_pcie = forced ? i < n_forced : std::max(gpu_if, cpu_t) < std::max(gpu_t, cpu_t + c);
        }
        lane_of_[i] = to_pcie ? lane::pcie : lane::cpu;
        if (to_pcie) {
            ++out.n_pcie;
            out.pcie_bytes += bytes;
            land = land_if;
            gpu_t = gpu_if;
        } else {
            ++out.n_cpu;
            out.cpu_bytes += bytes;
            cpu_t += c;
        }
    }
    // Entries: PCIe ones in copy order (staging slot = copy index), then CPU ones by id.
    int32_t staging = 0;
    for (size_t i = 0; i < misses_.size(); ++i)
        if (lane_of_[i] == lane::pcie) {
            const int32_t e = misses_[i];
            out.experts.push_back({e, lane::pcie, rows_[static_cast<size_t>(e)], staging++, bytes});
        }
    for (size_t i = 0; i < misses_.size(); ++i)
        if (lane_of_[i] == lane::cpu) {
            const int32_t e = misses_[i];
            out.experts.push_back({e, lane::cpu, rows_[static_cast<size_t>(e)], -1, bytes});
        }
    for (const planned_expert& p : out.experts) rows_[static_cast<size_t>(p.expert)] = 0;
    out.t_gpu = gpu_t;
    out.t_pcie = land;
    out.t_cpu = cpu_t;
    out.makespan = std::max(gpu_t, cpu_t);
}

}  // namespace sluice::placement
