// gpu_split_model_logits_equal_cpu_model_logits (issue 10, E3): a MoE model whose routed experts
// are split between VRAM cache slots and the CPU lane (load_model_cuda with a cuda_placement)
// gives the CPU model's logits bit for bit, and so the same greedy tokens, at every budget:
//   0 (every routed expert on the CPU lane), small (the first layer's first experts), one whole
//   layer (it runs as in the all-GPU model, the others split), half of the experts (ranked by a
//   skewed synthetic routing profile), and everything (the all-GPU model);
// for each: a 12-token prompt as one window (the grouped GPU matmul skipping the CPU's pairs,
// the CPU lane deduplicating a window), then 16 greedy steps (the CPU's pick fed to every model),
// then verify windows of 4, 7, 12 and 16 rows with every row's logits, each size twice (the second
// replays the graphs the first captured, split or whole). The first 16-row window starts at
// position 51 and reaches the chunk at 64 (k_attn_chunk 32): a lane whose chunk begins after the
// window's first position, which the split attention kernel mishandled until session 46 (the
// 30B shape's windows of 12 and more rows then differed from serial decoding). The all-GPU model
// runs twice, with graphs and without, so a difference names its side. PLACEMENT_PROMPT=N (a
// longer prompt, in windows of 16) and PLACEMENT_N_CTX=N (a longer cache) move the windows deeper.
// Usage beyond the default: PLACEMENT_SHARES, PLACEMENT_BUDGETS (below).
// Each split budget runs with the cost model's PCIe split and with PCIe shares 0, 0.5 and 1
// forced (misses copied into staging slots and computed by the GPU), with the adaptive cache on
// (a half-life of 2 forwards, so that its 25 forwards swap) and, at the forced shares, off: the
// bits never change (part 4's E3 test).
// It also checks that each budget placed what it should (resident experts, hit/miss counts).
// Exit 0 when every model and budget is bit-identical, 1 otherwise, 77 (skipped) without a GPU.
// Usage: placement_parity [FILE.gguf...] (default: the qwen3moe and qwen2moe golden fixtures).
#include <cstdio>

#if __cplusplus >= 202002L   // models/model.h needs C++20 (std::span); CMake builds CUDA as C++17

#include "models/cuda_model.h"

#include "core/thread_pool.h"
#include "kernels/cuda/expert_rows.cuh"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "placement/progress.h"
#include "placement/vram_budget.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace sluice;
namespace fs = std::filesystem;

namespace {

int argmax(const float* x, int n) {
    int b = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[b]) b = i;
    return b;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
    size_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

// Which rows of a run's logits differ from the reference's, by forward: the prompt window, the
// greedy steps, and each verify window (its rows that differ, and the largest difference).
void print_differing_rows(const std::vector<float>& ref, const std::vector<float>& got, int V, int n_prompt, int steps);

// One model's run: the prompt window's logits, then each greedy step's, and the picks.
struct trace {
    std::vector<float> logits;
    std::vector<int> picks;
    double decode_s = 0;   // the greedy steps after the first (one row each)
};

// The verify windows after the greedy steps (their tokens the prompt's formula's first ones).
constexpr int k_windows[] = {4, 7, 12, 16, 4, 7, 12, 16};
constexpr int k_n_windows = static_cast<int>(sizeof k_windows / sizeof k_windows[0]);
constexpr int window_rows() {
    int r = 0;
    for (const int w : k_windows) r += w;
    return r;
}
constexpr int k_window_rows = window_rows();   // 12 + 16 + 78 positions within the cache's 128
constexpr int k_window_max = 16;   // rows a forward takes (the scratch's): the widest window
constexpr int k_steps = 16;        // greedy steps after the prompt

// Token i of the prompt (and of every verify window): spread over the vocabulary.
token_id test_token(size_t i, int n_vocab) { return static_cast<token_id>((i * 7919 + 13) % static_cast<size_t>(n_vocab)); }

// PLACEMENT_PROMPT=N: a prompt of N tokens (default and least 12), so the steps and windows after
// it attend over that many positions (the split attention's chunks).
int prompt_length() {
    const char* e = std::getenv("PLACEMENT_PROMPT");
    return e && *e ? std::max(12, std::atoi(e)) : 12;
}

// The cache's positions: PLACEMENT_N_CTX (default and least 128; more where the prompt needs it).
// A long cache sizes the split attention's records for many chunks.
int cache_positions() {
    const char* e = std::getenv("PLACEMENT_N_CTX");
    return std::max({e && *e ? std::atoi(e) : 128, 128, prompt_length() + k_steps + k_window_rows});
}

// picks_in: the CPU model's picks (fed to every model, so a difference cannot cascade); empty for
// the CPU model itself.
trace run(model& m, thread_pool& pool, const std::vector<token_id>& prompt, int steps, const std::vector<int>& picks_in) {
    const int V = m.hparams().n_vocab;
    forward_scratch s = m.make_scratch(k_window_max, pool);
    kv_cache kv(m.kv_shape_for(cache_positions()));
    trace t;
    t.logits.resize((prompt.size() + static_cast<size_t>(steps + k_window_rows)) * static_cast<size_t>(V));
    // The prompt in windows of at most k_window_max rows: one window for the default 12.
    for (size_t p0 = 0; p0 < prompt.size(); p0 += k_window_max) {
        const size_t rows = std::min<size_t>(k_window_max, prompt.size() - p0);
        m.forward(std::span<const token_id>(prompt.data() + p0, rows), static_cast<int32_t>(p0), kv, s,
                  t.logits.data() + p0 * static_cast<size_t>(V));
    }
    auto t0 = std::chrono::steady_clock::now();
    token_id next = argmax(t.logits.data() + (prompt.size() - 1) * V, V);
    t.picks.push_back(next);
    if (!picks_in.empty()) next = picks_in[0];
    for (int k = 0; k < steps; ++k) {
        float* out = t.logits.data() + (prompt.size() + static_cast<size_t>(k)) * V;
        m.forward(std::span<const token_id>(&next, 1), static_cast<int32_t>(prompt.size()) + k, kv, s, out);
        next = argmax(out, V);
        t.picks.push_back(next);
        if (k == 0) t0 = std::chrono::steady_clock::now();   // the first step captures graphs: not timed
        if (!picks_in.empty()) next = picks_in[static_cast<size_t>(k) + 1];
    }
    t.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int32_t pos = static_cast<int32_t>(prompt.size()) + steps;
    for (const int w : k_windows) {
        float* out = t.logits.data() + static_cast<size_t>(pos) * V;
        std::vector<token_id> tokens(static_cast<size_t>(w));   // the prompt's first tokens, continued past its end
        for (int i = 0; i < w; ++i) tokens[static_cast<size_t>(i)] = test_token(static_cast<size_t>(i), V);
        m.forward(tokens, pos, kv, s, out);
        for (int r = 0; r < w; ++r) t.picks.push_back(argmax(out + static_cast<size_t>(r) * V, V));
        pos += w;
    }
    return t;
}

void print_differing_rows(const std::vector<float>& ref, const std::vector<float>& got, int V, int n_prompt, int steps) {
    auto row_differs = [&](int r, float& worst) {
        int n = 0;
        for (int i = 0; i < V; ++i) {
            const size_t k = static_cast<size_t>(r) * V + i;
            if (std::memcmp(&ref[k], &got[k], 4) != 0) {
                ++n;
                const float diff = std::fabs(ref[k] - got[k]);
                worst = std::isnan(diff) || std::isnan(worst) ? NAN : std::max(worst, diff);   // a NaN on one side shows
            }
        }
        return n;
    };
    auto report = [&](const char* what, int first, int rows) {
        std::string bad;
        float worst = 0;
        for (int r = 0; r < rows; ++r)
            if (row_differs(first + r, worst) > 0) bad += " " + std::to_string(r);
        if (!bad.empty()) std::printf("  %s (%d rows): rows differing:%s (largest difference %g)\n", what, rows, bad.c_str(), worst);
    };
    report("prompt windows", 0, n_prompt);
    report("greedy steps", n_prompt, steps);
    int pos = n_prompt + steps;
    for (const int w : k_windows) {
        report(("window of " + std::to_string(w)).c_str(), pos, w);
        pos += w;
    }
}

// The phases a split load reported: each of its steps (the weights, the resident experts, the
// expert pages when their pinning began) begins, reaches 100% and ends ("" after it), in order.
// pinned: the PCIe lane opened; without it a pinning step that began may end short (a range
// the driver refused, which leaves the lane off and the load going).
int check_load_phases(const std::vector<std::string>& phases, bool pinned) {
    std::vector<std::string> want = {"weights to the GPU", "experts to the GPU"};
    const bool pin_began = std::any_of(phases.begin(), phases.end(),
                                       [](const std::string& s) { return s.rfind("pinning expert pages", 0) == 0; });
    if (pin_began) want.push_back("pinning expert pages");
    std::vector<std::string> ended;   // each step's last phase before its ""
    std::string last;
    for (const std::string& s : phases) {
        if (s.empty() && !last.empty()) ended.push_back(last);
        last = s;
    }
    bool ok = ended.size() == want.size();
    for (size_t i = 0; ok && i < want.size(); ++i)
        ok = ended[i] == want[i] + " 100%" || (!pinned && i == 2 && ended[i].rfind(want[i], 0) == 0);
    ok = ok && (pin_began || !pinned);
    std::string seen;
    for (const std::string& e : ended) seen += (seen.empty() ? "" : ", ") + e;
    std::printf("%s load progress: %zu phase updates, steps ended as [%s]\n", ok ? "PASS" : "FAIL", phases.size(), seen.c_str());
    return ok ? 0 : 1;
}

int run_file(const fs::path& path, thread_pool& pool) {
    auto mf = model_file::open(path);
    load_options o;
    o.n_ctx = cache_positions();
    auto cpu = load_model(*mf, o);
    const model_hparams& hp = cpu->hparams();
    const std::string label = (path.parent_path().filename() / path.filename()).string();
    if (hp.n_expert < 2) {
        std::printf("SKIP %-40s %-9s no routed experts\n", label.c_str(), hp.arch.c_str());
        return 0;
    }
    std::vector<token_id> prompt(static_cast<size_t>(prompt_length()));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = test_token(i, hp.n_vocab);
    const int steps = k_steps;
    const trace ref = run(*cpu, pool, prompt, steps, {});
    std::printf("---- %s %s: %d layers, %d experts (%d used); CPU model (%u threads) decode %.1f tok/s\n", label.c_str(),
                hp.arch.c_str(), hp.n_layer, hp.n_expert, hp.n_expert_used, static_cast<unsigned>(pool.n_threads()),
                (steps - 1) / ref.decode_s);

    // Every budget from its model's own expert size: a blob is gate + up + down of one expert.
    // The trunk's layers only: a hybrid file's MTP block (blk.<n_layer>) has experts the forward
    // never places.
    uint64_t all_bytes = 0;
    for (const auto& t : mf->tensors())
        if (t.name.find("_exps.weight") != std::string::npos && t.name.rfind("blk.", 0) == 0 &&
            std::atoi(t.name.c_str() + 4) < hp.n_layer)
            all_bytes += t.nbytes;
    const uint64_t blob = all_bytes / static_cast<uint64_t>(hp.n_layer * hp.n_expert);
    // A skewed profile (expert e of layer l counted (e * 37 + l * 11) % 97 + 1 times): the half
    // budget then holds a scattered set, not the lowest ids.
    placement::routing_profile prof;
    prof.n_layer = static_cast<uint32_t>(hp.n_layer);
    prof.n_expert = static_cast<uint32_t>(hp.n_expert);
    prof.k_used = static_cast<uint32_t>(hp.n_expert_used);
    for (int l = 0; l < hp.n_layer; ++l)
        for (int e = 0; e < hp.n_expert; ++e) prof.counts.push_back(static_cast<uint64_t>((e * 37 + l * 11) % 97 + 1));
    struct budget {
        const char* name;
        uint64_t bytes;
        bool profile;
        int want_resident;   // -1: not checked
        bool graphs = true;  // decode steps and windows as CUDA graphs (set_cuda_graphs)
    };
    std::vector<budget> budgets = {
        {"0", 0, false, 0},
        {"small (2/layer)", 2 * blob * static_cast<uint64_t>(hp.n_layer), false, 2 * hp.n_layer},
        // Without a profile and with the cache fixed, whole layers: layer 0 runs as in the all-GPU
        // model (no host round trip), the others split; adapting, an even share of every layer.
        {"a whole layer", blob * static_cast<uint64_t>(hp.n_expert), false, hp.n_expert},
        {"half, profiled", all_bytes / 2, true, -1},
    };
    // PLACEMENT_BUDGETS=2G,4G,8G: these budgets (no profile: the lowest ids of every layer)
    // instead of the two in the middle (for the synthetic file: the issue's budgets).
    std::vector<std::string> names;
    if (const char* env = std::getenv("PLACEMENT_BUDGETS"); env && *env) {
        budgets.resize(1);
        for (std::string rest = env; !rest.empty();) {
            const size_t c = rest.find(',');
            names.push_back(rest.substr(0, c));
            rest = c == std::string::npos ? "" : rest.substr(c + 1);
        }
        for (const std::string& n : names) budgets.push_back({n.c_str(), placement::parse_size(n), false, -1});
    }
    budgets.push_back({"everything", UINT64_MAX, false, hp.n_layer * hp.n_expert});
    budgets.push_back({"all, no graphs", UINT64_MAX, false, hp.n_layer * hp.n_expert, false});
    // PLACEMENT_SHARES=cost,0,0.5,1,stream (default): each split budget once per PCIe share (cost:
    // the cost model's split and its prefill-streaming cut-over; a number: that share of each
    // layer's misses forced over PCIe, no streaming; stream: every forward streams its split
    // layers, decode steps included).
    constexpr double k_stream = -2.0;
    std::vector<double> shares;
    {
        const char* env = std::getenv("PLACEMENT_SHARES");
        for (std::string rest = env && *env ? env : "cost,0,0.5,1,stream"; !rest.empty();) {
            const size_t c = rest.find(',');
            const std::string w = rest.substr(0, c);
            shares.push_back(w == "cost" ? -1.0 : w == "stream" ? k_stream : std::stod(w));
            rest = c == std::string::npos ? "" : rest.substr(c + 1);
        }
    }
    // Each share with the adaptive cache on, and each forced share once more with it off.
    std::vector<std::pair<double, bool>> runs;
    for (const double share : shares) runs.emplace_back(share, true);
    for (const double share : shares)
        if (share >= 0) runs.emplace_back(share, false);
    int failures = 0;
    for (const budget& b : budgets) {
        for (const auto [share, adapt] : b.bytes == UINT64_MAX ? std::vector<std::pair<double, bool>>{{-1.0, true}} : runs) {
            cuda_placement p;
            p.adaptive_cache = adapt;
            p.cache_half_life_steps = 2.0;
            p.vram_budget = b.bytes;
            p.pcie_share = share >= 0 ? share : -1.0;
            p.prefill_stream_rows = share == k_stream ? 1 : share >= 0 ? 0 : -1;
            if (b.profile) p.profile = prof;
            // The load's progress (part 8), checked on the profiled half budget's first load:
            // each step reaches 100% and ends, in load order.
            placement::progress prog(stdout, placement::progress_style::silent);
            std::vector<std::string> phases;
            prog.on_phase([&phases](const std::string& s) { phases.push_back(s); });
            const bool check_progress = b.profile && share == shares.front() && adapt;
            if (check_progress) p.progress = &prog;
            auto gpu = load_model_cuda(*mf, o, 0, p);
            if (!b.graphs) set_cuda_graphs(*gpu, false);
            if (check_progress) {
                const cuda_placement_info pi = cuda_placement_of(*gpu);
                failures += check_load_phases(phases, pi.pcie_lane || pi.adaptive_cache);
            }
            const cuda_placement_info info = cuda_placement_of(*gpu);
            const trace t = run(*gpu, pool, prompt, steps, ref.picks);
            const cuda_placement_info calibrated = cuda_placement_of(*gpu);   // the CPU figure: measured at the first forward
            const size_t d = differing(ref.logits, t.logits);
            int picks_equal = 0;
            for (size_t i = 0; i < ref.picks.size(); ++i) picks_equal += ref.picks[i] == t.picks[i];
            bool placed = b.want_resident < 0 || info.resident == b.want_resident;
            // Without a profile, fixed: as many whole layers as the budget holds; adapting, the
            // spread's last round (expert n_expert - 1 of layer 0, 1, ...) makes the only whole
            // ones (the fixtures' layers all have the same blob size; not checked for the budgets
            // named in the environment).
            if (!b.profile && names.empty()) {
                const uint64_t L = static_cast<uint64_t>(hp.n_layer), X = static_cast<uint64_t>(hp.n_expert);
                const uint64_t slots = std::min(b.bytes / blob, L * X);
                const uint64_t whole = adapt ? (slots > (X - 1) * L ? slots - (X - 1) * L : 0) : slots / X;
                placed = placed && info.whole_layers == static_cast<int>(std::min(whole, L));
            }
            std::string lanes = "all experts in VRAM (no split)";
            if (const auto m = cuda_placement_metrics(*gpu)) {
                // Hits are counted in the split layers only (a whole layer never asks the host):
                // some exactly when a split layer holds residents. A forced share: PCIe misses
                // exactly when it is above 0 and the lane is open (a float model has none, and
                // says why); a share below 1 leaves CPU misses.
                // Streaming forced: every forward (the prompt's, 16 steps, 8 windows) streams every split
                // layer, none asks the host; forced shares never stream. The cost model's runs may
                // stream the prompt window; its other forwards are planned.
                const int split_layers = hp.n_layer - info.whole_layers;
                const uint64_t forwards = (prompt.size() + k_window_max - 1) / k_window_max + static_cast<uint64_t>(steps + k_n_windows);
                const bool split_residents = info.resident > info.whole_layers * hp.n_expert;
                if (share == k_stream && info.prefill_stream) {
                    placed = placed && info.split && m->layer_plans == 0 &&
                             m->streamed_layers == forwards * static_cast<uint64_t>(split_layers) && m->streamed_bytes > 0 &&
                             m->stream_lane.measured > 0 && m->pcie_lane.measured == 0;
                } else if (share >= 0 || !info.prefill_stream) {
                    placed = placed && info.split && m->experts > 0 && (split_residents ? m->hits > 0 : m->hits == 0) &&
                             m->streamed_layers == 0 && m->stream_lane.measured == 0;
                } else {   // the cost model: what was planned hit as above, the rest streamed whole
                    placed = placed && info.split && (m->experts > 0 || m->streamed_layers > 0) &&
                             (m->experts == 0 || (split_residents ? m->hits > 0 : m->hits == 0)) &&
                             m->streamed_layers % static_cast<uint64_t>(split_layers) == 0;
                }
                if (share >= 0) {
                    placed = placed && (share > 0 && info.pcie_lane ? m->pcie > 0 : m->pcie == 0);
                    placed = placed && (share < 1 || !info.pcie_lane ? m->cpu > 0 : true);
                }
                // Streaming is open wherever the PCIe lane is (and not asked off).
                placed = placed && (share >= 0 || info.prefill_stream == info.pcie_lane);
                // No lane only for a stated reason, and never because registering failed here.
                placed = placed && (info.pcie_lane || !info.pcie_note.empty()) &&
                         info.pcie_note.find("cudaHostRegister") == std::string::npos;
                // The adaptive cache: on wherever asked for and a split layer holds residents, and
                // then it swapped where windows were planned (25 forwards at a half-life of 2; a
                // streamed layer counts no lookups); off, never a swap.
                const bool adaptable = adapt && split_residents;
                placed = placed && info.adaptive_cache == adaptable && (info.adaptive_cache || !info.adaptive_note.empty());
                if (adaptable && m->layer_plans > 0) placed = placed && m->swaps > 0;
                if (!adaptable) placed = placed && m->swaps == 0;
                char buf[512];
                std::snprintf(buf, sizeof buf,
                              "%d whole layers; split layers: hit rate %.3f (%llu hits, %llu PCIe, %llu CPU misses), GPU "
                              "lane %.2f ms, PCIe %.2f ms, CPU lane %.2f ms; %llu layer forwards streamed (from %lld rows); "
                              "%llu swaps; %s",
                              info.whole_layers, m->hit_rate(), static_cast<unsigned long long>(m->hits), static_cast<unsigned long long>(m->pcie),
                              static_cast<unsigned long long>(m->cpu), m->gpu_lane.measured * 1e3, m->pcie_lane.measured * 1e3,
                              m->cpu_lane.measured * 1e3, static_cast<unsigned long long>(m->streamed_layers),
                              static_cast<long long>(calibrated.stream_rows), static_cast<unsigned long long>(m->swaps),
                              info.pcie_lane ? ("PCIe lane " + std::to_string(info.staging_slots) + " slots, " +
                                                std::to_string(static_cast<int>(info.pcie_gb_s)) + " GB/s, CPU " +
                                                std::to_string(static_cast<int>(calibrated.cpu_gb_s)) + " GB/s")
                                                   .c_str()
                                             : ("no PCIe lane: " + info.pcie_note).c_str());
                lanes = buf;
            } else {
                placed = placed && !info.split && b.bytes >= all_bytes;   // a budget holding every expert: no split
            }
            const bool ok = d == 0 && placed && picks_equal == static_cast<int>(ref.picks.size());
            if (d != 0) print_differing_rows(ref.logits, t.logits, hp.n_vocab, static_cast<int>(prompt.size()), steps);
            failures += ok ? 0 : 1;
            char share_name[32];
            if (share == k_stream) std::snprintf(share_name, sizeof share_name, "streamed");
            else if (share < 0) std::snprintf(share_name, sizeof share_name, "cost model");
            else std::snprintf(share_name, sizeof share_name, "PCIe %.2f", share);
            if (!adapt) std::strncat(share_name, " fixed", sizeof share_name - std::strlen(share_name) - 1);
            std::printf("%s %-40s budget %-16s %-10s %d/%d experts in VRAM: logits %zu/%zu bit-identical, greedy picks %d/%zu "
                        "equal, decode %.1f tok/s; %s%s\n",
                        ok ? "PASS" : "FAIL", label.c_str(), b.name, share_name, info.resident, info.total,
                        ref.logits.size() - d, ref.logits.size(), picks_equal, ref.picks.size(), (steps - 1) / t.decode_s,
                        lanes.c_str(), placed ? "" : " (PLACEMENT NOT AS EXPECTED)");
        }
    }
    return failures;
}

// copy_cpu_pair_rows against its definition (a row copy where the slot is negative), reading
// the source from mapped pinned memory as the split model does: every element's bits.
int check_copy_rows() {
    const int64_t P = 37, n = 300;
    std::mt19937 g(7);
    std::vector<int32_t> slot(P);
    for (auto& v : slot) v = static_cast<int32_t>(g() % 3) - 1;   // -1 (CPU), 0, 1
    std::vector<float> before(static_cast<size_t>(P * n)), want(before.size());
    float* src = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&src), before.size() * 4, cudaHostAllocMapped);
    for (size_t i = 0; i < before.size(); ++i) {
        before[i] = static_cast<float>(g() % 1000) * 0.25f;
        src[i] = -static_cast<float>(g() % 1000) * 0.5f;
        want[i] = slot[i / static_cast<size_t>(n)] < 0 ? src[i] : before[i];
    }
    float* dst = nullptr;
    int32_t* d_slot = nullptr;
    float* d_src = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&dst), before.size() * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_slot), slot.size() * 4);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_src), src, 0);
    cudaMemcpy(dst, before.data(), before.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_slot, slot.data(), slot.size() * 4, cudaMemcpyHostToDevice);
    cuda::copy_cpu_pair_rows(dst, d_src, d_slot, P, n, nullptr);
    std::vector<float> got(before.size());
    cudaMemcpy(got.data(), dst, got.size() * 4, cudaMemcpyDeviceToHost);
    const cudaError_t e = cudaDeviceSynchronize();
    cudaFree(dst);
    cudaFree(d_slot);
    cudaFreeHost(src);
    const size_t d = differing(want, got);
    std::printf("%s copy_cpu_pair_rows: %zu/%zu elements as defined (%s)\n", d == 0 && e == cudaSuccess ? "PASS" : "FAIL",
                got.size() - d, got.size(), cudaGetErrorString(e));
    return d == 0 && e == cudaSuccess ? 0 : 1;
}

// ring_routing_bell against its definition: the ids and the input in mapped host memory bit for
// bit, each pair's slot from the layer's map (-1 for an id outside the experts), and the bell
// counting rings, polled as the lanes poll it. A row of a decode step (one block) and a prefill
// chunk's input (many blocks, the last of which rings).
int check_routing_bell() {
    int failures = 0;
    const int n_expert = 16;
    std::mt19937 g(11);
    std::vector<int32_t> local(n_expert);
    for (auto& v : local) v = static_cast<int32_t>(g() % 5) - 2;   // -2.. 2: negatives are not resident
    int32_t *d_local = nullptr, *d_ids = nullptr, *d_mm = nullptr, *h_ids = nullptr, *dh_ids = nullptr;
    float *d_xn = nullptr, *h_xn = nullptr, *dh_xn = nullptr;
    uint32_t *d_state = nullptr, *h_bell = nullptr, *dh_bell = nullptr;
    const int64_t max_pairs = 2048 * 8, max_xn = 2048 * 300;
    cudaMalloc(reinterpret_cast<void**>(&d_local), n_expert * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_ids), max_pairs * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_mm), max_pairs * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_xn), max_xn * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_state), 8);
    cudaMemset(d_state, 0, 8);
    cudaHostAlloc(reinterpret_cast<void**>(&h_ids), max_pairs * 4, cudaHostAllocMapped);
    cudaHostAlloc(reinterpret_cast<void**>(&h_xn), max_xn * 4, cudaHostAllocMapped);
    cudaHostAlloc(reinterpret_cast<void**>(&h_bell), 4, cudaHostAllocMapped);
    *h_bell = 0;
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&dh_ids), h_ids, 0);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&dh_xn), h_xn, 0);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&dh_bell), h_bell, 0);
    cudaMemcpy(d_local, local.data(), n_expert * 4, cudaMemcpyHostToDevice);
    uint32_t ring = 0;
    for (const auto [rows, k, embd] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 2048}, {2048, 8, 300}, {3, 5, 7}}) {
        const int64_t P = rows * k, X = rows * embd;
        std::vector<int32_t> ids(static_cast<size_t>(P)), want_mm(ids.size());
        std::vector<float> xn(static_cast<size_t>(X));
        for (size_t p = 0; p < ids.size(); ++p) {
            ids[p] = static_cast<int32_t>(g() % (n_expert + 4)) - 2;   // some outside 0..n_expert-1
            want_mm[p] = ids[p] >= 0 && ids[p] < n_expert ? local[static_cast<size_t>(ids[p])] : -1;
        }
        for (float& v : xn) v = static_cast<float>(static_cast<int32_t>(g())) * 1e-7f;
        cudaMemcpy(d_ids, ids.data(), P * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_xn, xn.data(), X * 4, cudaMemcpyHostToDevice);
        std::memset(h_ids, 0xff, static_cast<size_t>(P) * 4);
        std::memset(h_xn, 0xff, static_cast<size_t>(X) * 4);
        cuda::ring_routing_bell({.ids = d_ids, .xn = d_xn, .pairs = P, .xn_count = X, .local_slot = d_local, .n_expert = n_expert,
                                 .host_ids = dh_ids, .host_xn = dh_xn, .mm_ids = d_mm, .state = d_state, .bell = dh_bell},
                                nullptr);
        ++ring;
        // Poll as the lanes do (no sync first): the values must be there when the bell reads ring.
        const volatile uint32_t* bell = h_bell;
        const auto t0 = std::chrono::steady_clock::now();
        while (*bell != ring && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        }
        const bool rang = *bell == ring;
        std::vector<int32_t> got_ids(h_ids, h_ids + P), got_mm(ids.size());
        std::vector<float> got_xn(h_xn, h_xn + X);
        const cudaError_t e = cudaDeviceSynchronize();
        cudaMemcpy(got_mm.data(), d_mm, P * 4, cudaMemcpyDeviceToHost);
        const bool ok = rang && e == cudaSuccess && got_ids == ids && got_mm == want_mm &&
                        std::memcmp(got_xn.data(), xn.data(), xn.size() * 4) == 0;
        std::printf("%s ring_routing_bell: %lld rows x %lld pairs, %lld input values: bell %u (want %u), ids %s, slots %s, input %s (%s)\n",
                    ok ? "PASS" : "FAIL", static_cast<long long>(rows), static_cast<long long>(k), static_cast<long long>(X),
                    *bell, ring, got_ids == ids ? "equal" : "DIFFER", got_mm == want_mm ? "as mapped" : "DIFFER",
                    std::memcmp(got_xn.data(), xn.data(), xn.size() * 4) == 0 ? "bit-identical" : "DIFFERS", cudaGetErrorString(e));
        failures += ok ? 0 : 1;
    }
    for (void* p : {static_cast<void*>(d_local), static_cast<void*>(d_ids), static_cast<void*>(d_mm), static_cast<void*>(d_xn),
                    static_cast<void*>(d_state)})
        cudaFree(p);
    for (void* p : {static_cast<void*>(h_ids), static_cast<void*>(h_xn), static_cast<void*>(h_bell)}) cudaFreeHost(p);
    return failures;
}

// split_streamed_pairs against its definition: each pair's slot from the layer's map (-1 where
// not resident or outside the experts) and its expert where not resident (else -1).
int check_split_streamed() {
    const int n_expert = 16;
    const int64_t P = 2048 * 8 + 3;
    std::mt19937 g(13);
    std::vector<int32_t> local(n_expert), ids(static_cast<size_t>(P)), want_slot(ids.size()), want_rest(ids.size());
    for (auto& v : local) v = static_cast<int32_t>(g() % 4) - 1;   // -1 (not resident, the map's only negative) .. 2
    for (size_t p = 0; p < ids.size(); ++p) {
        ids[p] = static_cast<int32_t>(g() % (n_expert + 4)) - 2;   // some outside 0..n_expert-1
        const bool in = ids[p] >= 0 && ids[p] < n_expert;
        const int32_t s = in ? local[static_cast<size_t>(ids[p])] : -1;
        want_slot[p] = s;
        want_rest[p] = in && s < 0 ? ids[p] : -1;
    }
    int32_t *d_local = nullptr, *d_ids = nullptr, *d_slot = nullptr, *d_rest = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&d_local), n_expert * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_ids), P * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_slot), P * 4);
    cudaMalloc(reinterpret_cast<void**>(&d_rest), P * 4);
    cudaMemcpy(d_local, local.data(), n_expert * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_ids, ids.data(), P * 4, cudaMemcpyHostToDevice);
    cuda::split_streamed_pairs(d_ids, P, d_local, n_expert, d_slot, d_rest, nullptr);
    std::vector<int32_t> got_slot(ids.size()), got_rest(ids.size());
    cudaMemcpy(got_slot.data(), d_slot, P * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(got_rest.data(), d_rest, P * 4, cudaMemcpyDeviceToHost);
    const cudaError_t e = cudaDeviceSynchronize();
    for (int32_t* p : {d_local, d_ids, d_slot, d_rest}) cudaFree(p);
    const bool ok = e == cudaSuccess && got_slot == want_slot && got_rest == want_rest;
    std::printf("%s split_streamed_pairs: %lld pairs: slots %s, buffer ids %s (%s)\n", ok ? "PASS" : "FAIL",
                static_cast<long long>(P), got_slot == want_slot ? "as mapped" : "DIFFER",
                got_rest == want_rest ? "as defined" : "DIFFER", cudaGetErrorString(e));
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    std::vector<fs::path> files;
    for (int i = 1; i < argc; ++i) files.emplace_back(argv[i]);
    if (files.empty()) {
        const fs::path fx = fs::path(__FILE__).parent_path().parent_path() / "golden" / "fixtures";
        for (const char* f : {"qwen3moe_e8_k2/model-Q8_0.gguf", "qwen3moe_e8_k2/model-Q4_0.gguf",
                              "qwen3moe_e8_k2/model-F32.gguf", "qwen3moe_e64_k8/model-Q8_0.gguf",
                              "qwen2moe_shexp/model-Q8_0.gguf"})
            files.push_back(fx / f);
    }
    thread_pool pool(static_cast<int>(std::max(4u, std::thread::hardware_concurrency())));
    int failures = check_copy_rows() + check_routing_bell() + check_split_streamed();
    for (const auto& f : files) {
        try {
            failures += run_file(f, pool);
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", f.string().c_str(), e.what());
            ++failures;
        }
    }
    std::printf("%s: %d model/budget runs differ from the CPU model\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

#else

int main() {
    std::printf("SKIP: built as C++17 (CMake's CUDA dialect); bench/gpu/build.sh builds this test as C++20\n");
    return 77;
}

#endif
