#include "placement/metrics.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace sluice::placement {

void placement_metrics::add(const layer_plan& p) {
    ++layer_plans;
    experts += static_cast<uint64_t>(p.n_gpu + p.n_pcie + p.n_cpu);
    hits += static_cast<uint64_t>(p.n_gpu);
    pcie += static_cast<uint64_t>(p.n_pcie);
    cpu += static_cast<uint64_t>(p.n_cpu);
    gpu_bytes += p.gpu_bytes;
    pcie_bytes += p.pcie_bytes;
    cpu_bytes += p.cpu_bytes;
    gpu_lane.predicted += p.t_gpu;
    pcie_lane.predicted += p.t_pcie;
    cpu_lane.predicted += p.t_cpu;
    makespan_predicted += p.makespan;
}

void placement_metrics::add_measured(double gpu_s, double pcie_s, double cpu_s) {
    gpu_lane.measured += gpu_s;
    pcie_lane.measured += pcie_s;
    cpu_lane.measured += cpu_s;
}

void placement_metrics::add_streamed(uint64_t bytes, double predicted_s) {
    ++streamed_layers;
    streamed_bytes += bytes;
    stream_lane.predicted += predicted_s;
}

void placement_metrics::merge(const placement_metrics& o) {
    layer_plans += o.layer_plans;
    experts += o.experts;
    hits += o.hits;
    pcie += o.pcie;
    cpu += o.cpu;
    pcie_bytes += o.pcie_bytes;
    cpu_bytes += o.cpu_bytes;
    gpu_bytes += o.gpu_bytes;
    swaps += o.swaps;
    swap_bytes += o.swap_bytes;
    streamed_layers += o.streamed_layers;
    streamed_bytes += o.streamed_bytes;
    for (auto [a, b] : {std::pair{&gpu_lane, &o.gpu_lane}, std::pair{&pcie_lane, &o.pcie_lane}, std::pair{&cpu_lane, &o.cpu_lane},
                        std::pair{&stream_lane, &o.stream_lane}}) {
        a->predicted += b->predicted;
        a->measured += b->measured;
    }
    host.routing_wait += o.host.routing_wait;
    host.launch += o.host.launch;
    host.between += o.host.between;
    gpu_between += o.gpu_between;
    makespan_predicted += o.makespan_predicted;
}

nlohmann::json placement_metrics::to_json() const {
    const auto lane_j = [](const lane_seconds& l) { return nlohmann::json{{"predicted_s", l.predicted}, {"measured_s", l.measured}}; };
    return {{"layer_plans", layer_plans},
            {"experts", experts},
            {"hits", hits},
            {"misses", misses()},
            {"hit_rate", hit_rate()},
            {"pcie_experts", pcie},
            {"cpu_experts", cpu},
            {"pcie_share", pcie_share()},
            {"pcie_bytes", pcie_bytes},
            {"cpu_bytes", cpu_bytes},
            {"gpu_bytes", gpu_bytes},
            {"swaps", swaps},
            {"swap_bytes", swap_bytes},
            {"streamed_layers", streamed_layers},
            {"streamed_bytes", streamed_bytes},
            {"cpu_expert_seconds", cpu_lane.measured},
            {"lanes",
             {{"gpu", lane_j(gpu_lane)}, {"pcie", lane_j(pcie_lane)}, {"cpu", lane_j(cpu_lane)}, {"stream", lane_j(stream_lane)}}},
            {"host_s", {{"routing_wait", host.routing_wait}, {"launch", host.launch}, {"between", host.between}}},
            {"gpu_between_s", gpu_between},
            {"makespan_predicted_s", makespan_predicted}};
}

std::string placement_metrics::to_prometheus() const {
    std::string s;
    const auto counter = [&](const char* name, const char* help, double v) {
        s += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    const auto gauge = [&](const char* name, const char* help, double v) {
        s += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    counter("sluice_expert_lookups_total", "Unique routed experts planned (per layer and window).", static_cast<double>(experts));
    counter("sluice_expert_hits_total", "Routed experts served from the VRAM cache.", static_cast<double>(hits));
    counter("sluice_expert_pcie_total", "Routed experts copied over PCIe.", static_cast<double>(pcie));
    counter("sluice_expert_cpu_total", "Routed experts computed by the CPU pool.", static_cast<double>(cpu));
    counter("sluice_expert_pcie_bytes_total", "Expert bytes copied over PCIe.", static_cast<double>(pcie_bytes));
    counter("sluice_expert_cache_swaps_total", "VRAM cache swaps.", static_cast<double>(swaps));
    counter("sluice_expert_cache_swap_bytes_total", "Expert bytes copied over PCIe by cache swaps.",
            static_cast<double>(swap_bytes));
    counter("sluice_expert_streamed_layers_total", "Split layers whose experts were streamed to the GPU whole (prefill).",
            static_cast<double>(streamed_layers));
    counter("sluice_expert_streamed_bytes_total", "Expert bytes streamed over PCIe for prefill.",
            static_cast<double>(streamed_bytes));
    gauge("sluice_expert_hit_rate", "Hits over unique routed experts.", hit_rate());
    gauge("sluice_expert_pcie_share", "PCIe experts over misses.", pcie_share());
    s += "# HELP sluice_expert_lane_seconds_total Seconds per lane, predicted by the cost model and measured.\n"
         "# TYPE sluice_expert_lane_seconds_total counter\n";
    for (auto [name, l] : {std::pair{"gpu", &gpu_lane}, std::pair{"pcie", &pcie_lane}, std::pair{"cpu", &cpu_lane},
                           std::pair{"stream", &stream_lane}}) {
        s += fmt::format("sluice_expert_lane_seconds_total{{lane=\"{}\",kind=\"predicted\"}} {}\n", name, l->predicted);
        s += fmt::format("sluice_expert_lane_seconds_total{{lane=\"{}\",kind=\"measured\"}} {}\n", name, l->measured);
    }
    s += "# HELP sluice_expert_host_seconds_total Host time of the split layers by phase.\n"
         "# TYPE sluice_expert_host_seconds_total counter\n";
    for (auto [name, v] : {std::pair{"routing_wait", host.routing_wait}, std::pair{"launch", host.launch},
                           std::pair{"between", host.between}})
        s += fmt::format("sluice_expert_host_seconds_total{{phase=\"{}\"}} {}\n", name, v);
    s += "# HELP sluice_expert_gpu_between_seconds_total GPU time from a split layer's join to the next one's routing.\n"
         "# TYPE sluice_expert_gpu_between_seconds_total counter\n";
    s += fmt::format("sluice_expert_gpu_between_seconds_total {}\n", gpu_between);
    return s;
}

}  // namespace sluice::placement
