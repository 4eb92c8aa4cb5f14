// What the placement did (issue 10, "metrics"): cache hits and misses, the PCIe share and bytes,
// the CPU expert time and each lane's predicted and measured seconds. Accumulated from the layer
// plans of a run; printed by `sluice bench` (JSON) and /metrics (Prometheus text).
#pragma once

#include "placement/plan.h"

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace sluice::placement {

struct lane_seconds {
    double predicted = 0.0;   // the cost model's figure, summed over layers
    double measured = 0.0;    // wall time the lane took, summed (0 when not measured)
};

struct placement_metrics {
    uint64_t layer_plans = 0;      // (layer, window) plans counted
    uint64_t experts = 0;          // unique routed experts over those plans
    uint64_t hits = 0;             // on the GPU lane from the VRAM cache
    uint64_t pcie = 0;             // misses copied over PCIe
    uint64_t cpu = 0;              // misses computed by the CPU pool
    uint64_t pcie_bytes = 0, cpu_bytes = 0, gpu_bytes = 0;
    uint64_t swaps = 0;            // cache swaps made
    uint64_t swap_bytes = 0;       // ... the bytes their copies moved over PCIe
    uint64_t streamed_layers = 0;  // split layers whose experts were streamed whole (prefill)
    uint64_t streamed_bytes = 0;   // ... the bytes those copies moved over PCIe
    lane_seconds gpu_lane, pcie_lane, cpu_lane;
    // Prefill streaming's copies (whole split layers over PCIe, predicted at the calibrated PCIe
    // rate). Kept apart from pcie_lane, the staging slots' copies of a plan: a run that prefills
    // with streaming moves far more bytes this way (session 15's 80B run: 509 GB streamed
    // against 107 GB staged), and summing the two made the staged copies look 5x slower than
    // the cost model said.
    lane_seconds stream_lane;
    // Where the host thread spends a split layer (steady clock, summed over split layers):
    //   routing_wait - polling until the layer's doorbell rings (its routed ids have reached
    //                  the host), after the launches of the resident lane;
    //   launch       - from then until the CPU lane starts: the plan, the PCIe copies' and the
    //                  staged launches (the CPU lane waits for them);
    //   between      - from one split layer's join to the next one's routing in the same
    //                  forward: the launches of the layers in between (the GPU is idle until
    //                  they reach it).
    struct host_seconds {
        double routing_wait = 0.0, launch = 0.0, between = 0.0;
    } host;
    // The GPU's time from a split layer's join to the next split layer's doorbell (CUDA events:
    // the combine, the layers between, the next norm and router), summed.
    // The step's serial path holds it whatever the host does: with the host's launches captured
    // as graphs it is most of what is left outside the lanes.
    double gpu_between = 0.0;
    double makespan_predicted = 0.0;

    uint64_t misses() const { return pcie + cpu; }
    double hit_rate() const { return experts ? static_cast<double>(hits) / static_cast<double>(experts) : 0.0; }
    // Share of the misses sent over PCIe (0 when there were none).
    double pcie_share() const { return misses() ? static_cast<double>(pcie) / static_cast<double>(misses()) : 0.0; }

    // Adds one layer plan (its predicted lane times included).
    void add(const layer_plan& p);
    // Adds measured seconds of each lane for one layer.
    void add_measured(double gpu_s, double pcie_s, double cpu_s);
    // Adds one streamed layer's host bytes and the copy time the cost model predicts for them.
    void add_streamed(uint64_t bytes, double predicted_s);
    void add_stream_measured(double s) { stream_lane.measured += s; }
    void merge(const placement_metrics& o);

    nlohmann::json to_json() const;
    // Prometheus text exposition lines (sluice_expert_* metrics, with HELP and TYPE).
    std::string to_prometheus() const;
};

}  // namespace sluice::placement
