// `sluice bench --json` (include/sluice/bench.h): a bench_report as one JSON document, null
// where a ceiling or a figure was not measured. Apart from bench.cpp, which measures.
#include "sluice/bench.h"

#include <nlohmann/json.hpp>

namespace sluice {

std::string format_bench_json(const bench_report& r) {
    using nlohmann::json;
    auto or_null = [](double v) { return v > 0 ? json(v) : json(nullptr); };
    json groups = json::array();
    for (const auto& g : r.groups)
        groups.push_back({{"name", g.name}, {"bytes", g.bytes}, {"bytes_per_token", g.bytes_per_token}});
    json results = json::array();
    for (const auto& x : r.results) {
        json j{{"test", x.test},
               {"kind", x.kind},
               {"n_prompt", x.n_prompt},
               {"n_gen", x.n_gen},
               {"depth", x.depth},
               {"rows", x.rows},
               {"reps", x.reps},
               {"seconds", x.seconds},
               {"mean_s", x.mean_s},
               {"stddev_s", x.stddev_s},
               {"tok_s", x.tok_s},
               {"stddev_tok_s", x.stddev_tok_s},
               {"bytes_per_token", x.bytes_per_token},
               {"ceiling_tok_s", or_null(x.ceiling_tok_s)},
               {"ceiling_fraction", x.ceiling_tok_s > 0 ? json(x.ceiling_fraction) : json(nullptr)},
               {"ceiling_bound", x.ceiling_bound},
               {"memory_ceiling_tok_s", or_null(x.memory_ceiling_tok_s)},
               {"ops_per_token", x.ops_per_token},
               {"compute_ceiling_tok_s", or_null(x.compute_ceiling_tok_s)}};
        if (x.hit_rate >= 0) {
            j["hit_rate"] = x.hit_rate;
            j["swaps"] = x.swaps;
        }
        if (x.kind == "spec") {
            j["accept"] = x.accept;
            j["acceptance"] = x.acceptance;
            j["tokens_per_step"] = x.tokens_per_step;
            j["expected_tokens_per_step"] = or_null(x.expected_tokens_per_step);
            j["rows_mean"] = x.rows_mean;
            j["same_tokens"] = x.same_tokens;
            if (!x.policy_costs_end_ms.empty()) {
                j["policy_costs_calibrated_ms"] = x.policy_costs_calibrated_ms;
                j["policy_costs_end_ms"] = x.policy_costs_end_ms;
                j["policy_draft_cost_ms"] = x.policy_draft_cost_ms;
            }
        }
        results.push_back(std::move(j));
    }
    json gpu = r.gpu_present ? json{{"note", r.gpu_note},
                                    {"pcie_h2d_gb_s", r.pcie_h2d_gb_s},
                                    {"hbm_read_gb_s", r.hbm_read_gb_s},
                                    {"peak_int8_ops_s", or_null(r.gpu_peak_ops_s)}}
                             : json(nullptr);
    json j{{"sluice_bench", 1},
           {"model", {{"path", r.model_path}, {"description", r.model}, {"file_bytes", r.file_bytes}}},
           {"machine", r.machine},
           {"backend", r.backend},
           {"threads", r.threads},
           {"numa",
            {{"nodes", r.numa_nodes},
             {"threads_per_node", r.threads_per_node},
             {"simulated", r.numa_simulated},
             {"description", r.numa}}},
           {"chunk", r.chunk},
           {"decode_warmup", r.warmup},
           {"bandwidth",
            {{"ram_read_gb_s", or_null(r.ram_read_gb_s)},
             {"ram_probe_bytes", r.ram_probe_bytes},
             {"gpu", gpu},
             {"gpu_note", r.gpu_note}}},
           {"roofline",
            {{"bandwidth_gb_s", or_null(r.bandwidth_gb_s)},
             {"bandwidth_source", r.bandwidth_source},
             {"bytes_per_token", r.bytes_per_token},
             {"kv_bytes_per_position", r.kv_bytes_per_position},
             {"ceiling_tok_s", or_null(r.ceiling_tok_s)},
             {"groups", groups},
             {"weight_macs_per_row", r.weight_macs_per_row},
             {"attn_macs_per_position", r.attn_macs_per_position},
             {"routed_macs_per_row", r.routed_macs_per_row},
             {"traffic",
              {{"shared_bytes", r.shared_bytes},
               {"embd_row_bytes", r.embd_row_bytes},
               {"routed_bytes_total", r.routed_bytes_total},
               {"n_expert", r.n_expert},
               {"n_expert_used", r.n_expert_used},
               {"kv_bytes_per_position", r.kv_bytes_per_position}}},
             {"cpu_peak_ops_s", or_null(r.cpu_peak_ops_s)},
             {"cpu_peak_isa", r.cpu_peak_isa},
             {"gpu_peak_ops_s", or_null(r.gpu_peak_ops_s)},
             {"peak_ops_s", or_null(r.peak_ops_s)},
             {"peak_source", r.peak_source},
             {"compute_ceiling_tok_s", or_null(r.compute_ceiling_tok_s)}}},
           {"results", results},
           {"placement", r.placement_json.empty() ? json(nullptr) : json::parse(r.placement_json)},
           {"placement_note", r.placement_note},
           {"notes", r.notes}};
    return j.dump(1) + "\n";
}

}  // namespace sluice
