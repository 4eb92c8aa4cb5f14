// split_decode_bench MODEL BUDGET_GIB [N_PROMPT] [N_GEN] [ROUNDS]: a split model's decode (routed
// experts under a VRAM budget: the VRAM cache, the PCIe lane and the CPU lane) under three
// placements, each loaded afresh: the cost model's split of each layer's misses (the default),
// no PCIe lane for decode (PCIe share 0: every miss on the CPU), and 0.6 of each layer's misses
// over PCIe (more than the cost model sends on the H200 machine); and the cost model's split
// without the decode step's graph segments (every launch made by the host, as before them); and
// the cost model's split with the adaptive cache off ("fixed": whole layers, and they stay).
// More run when SPLIT_CONFIGS names them: "swaps-2" (2 swaps a forward instead of 8; session 20's
// logs predate that default, and their "cost" ran 2 and "swaps-8" 8),
// "scattered" and "scattered-fixed", the resident set chosen by a synthetic profile unrelated to
// the routing ((37 e + 11 l) mod 97 + 1 lookups of expert e in layer l), with the cache adapting
// and not (how much hit rate adaptation wins back from a stale profile). SPLIT_CONFIGS=a,b,...
// runs those configurations only.
// ROUNDS rounds, the order reversed every other round, so that the machine's drift does not decide
// the comparison. For each: the prompt's prefill in one forward (its second run; the first
// calibrates), decode tok/s (batch 1, greedy, from the same prompt), a 4-row verify window's
// time (after one untimed window, which captures the window's graphs), the calibrated figures,
// the PCIe share and where the host spent each split layer (placement_metrics::host). The tokens of every run must be equal (exit 1 otherwise): the
// placement changes no bit. Prints one line per figure and a JSON line at the end.
#include "models/cuda_model.h"

#include "decode_common.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "placement/metrics.h"
#include "placement/routing_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sluice;
using gpu_bench::argmax;
using gpu_bench::now_s;

namespace {

// One placement's totals over the rounds.
struct config_totals {
    const char* name;
    double pcie_share;   // cuda_placement::pcie_share (< 0: the cost model)
    bool graphs = true;  // the decode steps' graph segments (cuda_model_graphs.cpp)
    bool adaptive = true;    // cuda_placement::adaptive_cache
    bool scattered = false;  // the resident set from the synthetic profile
    int swaps = 8;           // cuda_placement::cache_swaps_per_step
    double decode_s = 0, window_s = 0, prefill_s = 0;
    int tokens = 0, windows = 0, prefills = 0;
    double pcie_gb_s = 0, cpu_gb_s = 0;
    placement::placement_metrics m;
};

// (37 e + 11 l) mod 97 + 1 lookups of expert e in layer l: a profile unrelated to the routing.
// The shape from the file's metadata (the MoE architectures' block_count, expert_count and
// expert_used_count).
placement::routing_profile scattered_profile(const model_file& f) {
    const std::string a = f.architecture();
    const auto key = [&](const char* k) {
        const auto v = f.meta().get_int(a + "." + k);
        if (!v || *v < 1) throw std::runtime_error("scattered profile: no " + a + "." + k);
        return static_cast<uint32_t>(*v);
    };
    placement::routing_profile prof;
    prof.n_layer = key("block_count");
    prof.n_expert = key("expert_count");
    prof.k_used = key("expert_used_count");
    for (uint32_t l = 0; l < prof.n_layer; ++l)
        for (uint32_t e = 0; e < prof.n_expert; ++e) prof.counts.push_back((e * 37 + l * 11) % 97 + 1);
    return prof;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 3) {
        std::fprintf(stderr, "usage: split_decode_bench MODEL BUDGET_GIB [N_PROMPT] [N_GEN] [ROUNDS]\n");
        return 2;
    }
    const double budget_gib = std::atof(argv[2]);
    const int n_prompt = argc > 3 ? std::atoi(argv[3]) : 512;
    const int n_gen = argc > 4 ? std::atoi(argv[4]) : 32;
    const int rounds = argc > 5 ? std::atoi(argv[5]) : 3;
    try {
        if (!cuda_available()) {
            std::printf("SKIP: no CUDA device\n");
            return 77;
        }
        auto mf = model_file::open(argv[1]);
        std::vector<token_id> prompt(static_cast<size_t>(n_prompt));
        const std::vector<config_totals> all{{"cost", -1.0},
                                             {"cpu-only", 0.0},
                                             {"pcie-0.6", 0.6},
                                             {"no-graphs", -1.0, false},
                                             {"fixed", -1.0, true, false},
                                             {"scattered", -1.0, true, true, true},
                                             {"scattered-fixed", -1.0, true, false, true},
                                             {"swaps-2", -1.0, true, true, false, 2}};
        std::vector<config_totals> cfg;
        const char* names = std::getenv("SPLIT_CONFIGS");
        for (const config_totals& c : all) {
            const std::string n = c.name;
            if (names && *names ? ("," + std::string(names) + ",").find("," + n + ",") != std::string::npos
                                : n.rfind("scattered", 0) != 0 && n != "swaps-2")
                cfg.push_back(c);
        }
        if (cfg.empty()) {
            std::fprintf(stderr, "SPLIT_CONFIGS=%s names no configuration\n", names);
            return 2;
        }
        const int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        std::vector<token_id> reference;
        bool equal = true;
        for (int r = 0; r < rounds; ++r) {
            for (size_t k = 0; k < cfg.size(); ++k) {
                config_totals& c = cfg[r % 2 == 0 ? k : cfg.size() - 1 - k];
                double t0 = now_s();
                load_options o;
                o.n_ctx = n_prompt + n_gen + 64;
                cuda_placement p;
                p.vram_budget = static_cast<uint64_t>(budget_gib * 1073741824.0);
                p.pcie_share = c.pcie_share;
                p.adaptive_cache = c.adaptive;
                p.cache_swaps_per_step = c.swaps;
                if (c.scattered) p.profile = scattered_profile(*mf);
                auto m = load_model_cuda(*mf, o, 0, p, c.graphs);
                const model_hparams& hp = m->hparams();
                if (r == 0 && k == 0) {
                    const cuda_placement_info info = cuda_placement_of(*m);
                    std::printf("model: %s, %d layers, %d of %d experts in VRAM (%d whole layers), PCIe lane %s; loaded in %.1f s\n",
                                hp.arch.c_str(), hp.n_layer, info.resident, info.total, info.whole_layers,
                                info.pcie_lane ? "on" : info.pcie_note.c_str(), now_s() - t0);
                    prompt = gpu_bench::synthetic_prompt(n_prompt, hp.n_vocab);
                }
                thread_pool pool(n_threads);
                forward_scratch s = m->make_scratch(n_prompt > 16 ? n_prompt : 16, pool);
                s.last_row_logits_only = true;
                std::vector<float> logits(static_cast<size_t>(hp.n_vocab) * 16);
                kv_cache kv(m->kv_shape_for(o.n_ctx));
                m->forward(prompt, 0, kv, s, logits.data());   // the first forward calibrates
                // The prompt again, timed: one forward of n_prompt rows (streamed where the cost
                // model's cut-over is below it), the same logits.
                kv.truncate(0);
                double tp = now_s();
                m->forward(prompt, 0, kv, s, logits.data());
                c.prefill_s += now_s() - tp;
                ++c.prefills;
                const cuda_placement_info info = cuda_placement_of(*m);
                c.pcie_gb_s = info.pcie_gb_s;
                c.cpu_gb_s = info.cpu_gb_s;
                reset_cuda_placement_metrics(*m);
                std::vector<token_id> out;
                token_id next = argmax(logits.data(), hp.n_vocab);
                t0 = now_s();
                for (int i = 0; i < n_gen; ++i) {
                    m->forward(std::span<const token_id>(&next, 1), n_prompt + i, kv, s, logits.data());
                    next = argmax(logits.data(), hp.n_vocab);
                    out.push_back(next);
                    if (i == 0) {   // the first step captures the graphs: not timed
                        t0 = now_s();
                        reset_cuda_placement_metrics(*m);
                    }
                }
                c.decode_s += now_s() - t0;
                c.tokens += n_gen - 1;
                if (const auto pm = cuda_placement_metrics(*m)) c.m.merge(*pm);   // the decode's layers only
                // Verify windows of 4 rows after the decoded tokens, rolled back each time.
                s.last_row_logits_only = false;
                const std::vector<token_id> win(4, out.front());
                const int32_t pos = kv.n_pos();
                m->forward(win, pos, kv, s, logits.data());   // untimed: a split model captures the window's graphs here
                kv.truncate(pos);
                t0 = now_s();
                for (int w = 0; w < 3; ++w) {
                    m->forward(win, pos, kv, s, logits.data());
                    kv.truncate(pos);
                }
                c.window_s += now_s() - t0;
                c.windows += 3;
                if (reference.empty()) reference = out;
                else if (out != reference) equal = false;
            }
        }
        std::string json = "{\"budget_gib\": " + std::to_string(budget_gib) + ", \"n_prompt\": " + std::to_string(n_prompt) +
                           ", \"n_gen\": " + std::to_string(n_gen) + ", \"rounds\": " + std::to_string(rounds);
        for (const config_totals& c : cfg) {
            const double plans = c.m.layer_plans ? static_cast<double>(c.m.layer_plans) : 1.0;
            const double tok_s = c.tokens / c.decode_s, win_ms = 1e3 * c.window_s / c.windows;
            const double pp_tok_s = c.prefills * static_cast<double>(n_prompt) / c.prefill_s;
            std::printf("%-9s prefill %.1f tok/s, decode %.2f tok/s, window of 4 %.2f ms; calibrated PCIe %.1f GB/s, CPU %.1f GB/s; hit rate "
                        "%.3f, %llu swaps; PCIe share "
                        "%.3f; per split layer-forward (%llu): routing wait %.1f us, launch %.1f, CPU lane %.1f, between %.1f "
                        "(GPU between %.1f); PCIe lane %.1f us measured (%.1f predicted)\n",
                        c.name, pp_tok_s, tok_s, win_ms, c.pcie_gb_s, c.cpu_gb_s, c.m.hit_rate(), static_cast<unsigned long long>(c.m.swaps),
                        c.m.pcie_share(),
                        static_cast<unsigned long long>(c.m.layer_plans), 1e6 * c.m.host.routing_wait / plans,
                        1e6 * c.m.host.launch / plans, 1e6 * c.m.cpu_lane.measured / plans, 1e6 * c.m.host.between / plans, 1e6 * c.m.gpu_between / plans,
                        1e6 * c.m.pcie_lane.measured / plans, 1e6 * c.m.pcie_lane.predicted / plans);
            json += std::string(", \"") + c.name + "\": {\"prefill_tok_s\": " + std::to_string(pp_tok_s) +
                    ", \"decode_tok_s\": " + std::to_string(tok_s) +
                    ", \"window4_ms\": " + std::to_string(win_ms) + ", \"pcie_share\": " + std::to_string(c.m.pcie_share()) +
                    ", \"hit_rate\": " + std::to_string(c.m.hit_rate()) + ", \"swaps\": " + std::to_string(c.m.swaps) + "}";
        }
        std::printf("tokens of every run: %s\n", equal ? "identical" : "DIFFER");
        std::printf("%s, \"tokens_equal\": %s}\n", json.c_str(), equal ? "true" : "false");
        return equal ? 0 : 1;
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
}
