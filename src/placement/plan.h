// The plan of one MoE layer for one window (DESIGN.md "One decode step", issue 10): the window's
// routed ids deduplicated, each unique expert sent to one lane:
//   gpu  - a VRAM cache hit (resident and landed: expert_cache::on_gpu);
//   pcie - a miss copied by the copy engine into a staging slot, then computed by the GPU;
//   cpu  - a miss the CPU pool computes in place from RAM.
// Misses are split by the cost model to minimise the layer's makespan (the layer is a barrier:
// it ends when both the GPU and the CPU are done). Greedy: misses by blob size descending, ties
// by expert id ascending; each goes to the lane that gives the smaller makespan so far (a tie
// goes to the CPU, which leaves the copy engine free). The GPU computes its hits first, then each
// copied expert once it has landed and the GPU is free; copies run back to back.
// Without a GPU every routed expert goes to the CPU lane: exactly the computation `sluice run`
// does on a machine without one.
// plan_layer allocates nothing (its buffers are sized by make_layer_plan / the constructor).
#pragma once

#include "core/dtype.h"
#include "placement/cost_model.h"
#include "placement/expert_cache.h"

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::placement {

enum class lane : uint8_t { gpu, pcie, cpu };
const char* lane_name(lane l);

struct planned_expert {
    int32_t expert = -1;
    lane where = lane::cpu;
    int32_t rows = 0;      // routed (row, rank) pairs of the window that use it
    int32_t slot = -1;     // gpu: the cache slot; pcie: the staging slot; cpu: -1
    uint64_t bytes = 0;    // its blob (gate + up + down)
};

struct layer_plan {
    int32_t layer = -1;
    // Unique experts: GPU hits (ascending id), then PCIe ones in copy order, then CPU ones
    // (ascending id).
    std::vector<planned_expert> experts;   // capacity n_expert
    int n_gpu = 0, n_pcie = 0, n_cpu = 0;
    uint64_t gpu_bytes = 0, pcie_bytes = 0, cpu_bytes = 0;
    // Predicted seconds: the GPU lane's finish (hits, then copied experts as they land), the copy
    // engine's busy time, the CPU lane's time, and the layer's makespan max(gpu, cpu).
    double t_gpu = 0, t_pcie = 0, t_cpu = 0, makespan = 0;
};

struct planner_options {
    bool gpu = false;          // a device is in use (false: everything on the CPU)
    int staging_slots = 4;     // PCIe misses per layer at most (staging buffers on the GPU)
    // < 0: the cost model splits the misses. 0..1: this share of each layer's misses goes over
    // PCIe whatever it costs (rounded to nearest, at most staging_slots; the lowest ids first):
    // tests pin the split with it (E3: the tokens must not depend on it).
    double forced_pcie_share = -1.0;
};

class planner {
public:
    // blob_bytes: [n_layer] one expert's blob in each layer; cpu_type: [n_layer] the format the
    // CPU figure of the cost model is taken for (the experts' gate format).
    planner(int n_layer, int n_expert, std::vector<uint64_t> blob_bytes, std::vector<dtype> cpu_type,
            const cost_model& costs, const planner_options& o);

    layer_plan make_layer_plan() const;   // buffers sized for any window
    // ids: the window's routed ids [n_rows * k_used] (values outside [0, n_expert) are skipped);
    // cache: null, or the VRAM cache whose landed residents are hits (ignored without a GPU).
    void plan_layer(int layer, std::span<const int32_t> ids, const expert_cache* cache, layer_plan& out);

    const cost_model& costs() const { return costs_; }
    void set_costs(const cost_model& c);   // a calibrated model (same checks as the constructor's)
    const planner_options& options() const { return o_; }

private:
    int n_layer_, n_expert_;
    std::vector<uint64_t> blob_;
    std::vector<dtype> type_;
    cost_model costs_;
    planner_options o_;
    std::vector<int32_t> rows_;    // [n_expert] rows per expert in the current window
    std::vector<int32_t> misses_;  // [n_expert] the current window's misses
    std::vector<lane> lane_of_;    // [n_expert] the lane of misses_[i]
};

}  // namespace sluice::placement
