// gpu_mtp_head_equals_cpu_mtp_head: the hybrid models' MTP head on the GPU
// (models/cuda_model_mtp.cpp) against the CPU's (models/hybrid_mtp.cpp), on the golden
// fixtures' F32 GGUFs whose nextn block holds random weights (qwen3next_e4_k2_mtp,
// qwen35moe_e4_k2_mtp), each with every expert in VRAM and split (budget 0: every trunk expert on
// the CPU lane; the head's experts stay in VRAM):
//   - the residual rows the CUDA model leaves in scratch.x (the drafter's input) are the CPU's bits;
//   - head rows folded in several at a time, chained rows with logits, a truncation and the same
//     positions again: h' and the logits bit for bit, with the whole vocabulary and a trimmed one;
//     the cache rows a prefix-cache checkpoint keeps (save_rows) bit for bit, and loaded back
//     (load_rows) they give the same logits;
//   - generations through the MTP drafter (greedy, and sampled with three seeds; windows 2, 3, 5):
//     every proposal and the head's logits after it equal the CPU generation's, and the tokens
//     equal the GPU's serial decoding (drafted = serial, E1-E2 on the GPU).
// Exit 0 when all hold, 1 otherwise, 77 (skipped) without a GPU.
// Usage: mtp_parity [FIXTURES_DIR] (default: tests/golden/fixtures beside this file).
// Host code only (a .cpp: the spec headers' fmt format strings do not compile under nvcc's C++20).
#include "models/cuda_model.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "models/hybrid_mtp.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/draft_vocab.h"
#include "spec/mtp_drafter.h"
#include "spec/verifier.h"

#include "../unit/mtp_recording.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

using namespace sluice;
namespace fs = std::filesystem;

namespace {

constexpr int k_ctx = 96, k_rows = 16;

std::vector<int32_t> tokens(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 53 + salt * 97 + 5) % 380;
    return t;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

struct tally {
    int checks = 0, failures = 0;
    void expect(bool ok, const std::string& what) {
        ++checks;
        if (!ok) {
            ++failures;
            std::printf("  differs: %s\n", what.c_str());
        }
    }
};

// Head rows on both sides from the same hidden states: the prompt folded in 5 rows at a time,
// then three chained rows with logits, a truncation and two rows at the truncated positions.
void compare_heads(model& cpu, model& gpu, const draft_vocab* vocab, tally& t, const char* tag) {
    const int32_t V = cpu.hparams().n_vocab, E = cpu.hparams().n_embd;
    std::shared_ptr<const mtp_draft_rows> rc, rg;
    if (vocab) {
        rc = gather_mtp_draft_rows(cpu, *vocab);
        rg = gather_mtp_draft_rows(gpu, *vocab);
    }
    session_options so;
    so.n_ctx = k_ctx;
    so.prefill_chunk = k_rows;
    session sc(cpu, so), sg(gpu, so);
    auto hc = make_mtp_head(cpu, sc.pool(), k_ctx, k_rows, rc);
    auto hg = make_mtp_head(gpu, sg.pool(), k_ctx, k_rows, rg);
    t.expect(hc && hg, std::string(tag) + ": both models give a head");
    if (!hc || !hg) return;
    const std::vector<int32_t> ids = tokens(14, 3);
    const int n = 12;
    sc.forward_all(std::span<const int32_t>(ids.data(), n));
    sg.forward_all(std::span<const int32_t>(ids.data(), n));
    t.expect(same_bits(sc.residual_rows(), sg.residual_rows(), size_t(n) * E), std::string(tag) + ": residual rows");
    std::vector<float> hid(size_t(n) * E);
    hc->target_hidden(sc.residual_rows(), n, hid.data());
    for (int p = 0; p < n - 1; p += 5) {
        const int cnt = std::min(5, n - 1 - p);
        const std::span<const int32_t> next(&ids[size_t(p + 1)], size_t(cnt));
        hc->forward(hid.data() + size_t(p) * E, next, p, false);
        hg->forward(hid.data() + size_t(p) * E, next, p, false);
        for (int r = 0; r < cnt; ++r)
            t.expect(same_bits(hc->out_hidden(r), hg->out_hidden(r), size_t(E)),
                     std::string(tag) + ": h' of folded row " + std::to_string(p + r));
    }
    // Chained rows from the last target row (position n - 1), logits each time.
    std::vector<float> chain(hid.begin() + size_t(n - 1) * E, hid.begin() + size_t(n) * E), chain_g = chain;
    std::vector<float> two_rows(size_t(2) * E);   // the rows run again after the truncation
    int32_t tok = ids[size_t(n)];
    for (int k = 0; k < 3; ++k) {
        hc->forward(chain.data(), std::span<const int32_t>(&tok, 1), n - 1 + k, true);
        hg->forward(chain_g.data(), std::span<const int32_t>(&tok, 1), n - 1 + k, true);
        t.expect(same_bits(hc->logits(), hg->logits(), size_t(V)), std::string(tag) + ": logits of chained row " + std::to_string(k));
        t.expect(same_bits(hc->out_hidden(0), hg->out_hidden(0), size_t(E)), std::string(tag) + ": h' of chained row " + std::to_string(k));
        if (k == 0) std::memcpy(two_rows.data(), hc->out_hidden(0), size_t(E) * 4);
        std::memcpy(chain.data(), hc->out_hidden(0), size_t(E) * 4);
        std::memcpy(chain_g.data(), hg->out_hidden(0), size_t(E) * 4);
        tok = (tok * 31 + 7) % 380;
    }
    // Back to n rows (the first chained row kept), then two other rows at positions n, n + 1:
    // the GPU's cache rows there are overwritten, as the CPU's are.
    hc->truncate(n);
    hg->truncate(n);
    t.expect(hc->n_past() == n && hg->n_past() == n, std::string(tag) + ": n_past after truncate");
    std::memcpy(two_rows.data() + E, hid.data() + size_t(n - 2) * E, size_t(E) * 4);
    const int32_t two[2] = {17, 250};
    hc->forward(two_rows.data(), std::span<const int32_t>(two, 2), n, true);
    hg->forward(two_rows.data(), std::span<const int32_t>(two, 2), n, true);
    t.expect(same_bits(hc->logits(), hg->logits(), size_t(V)), std::string(tag) + ": logits after truncation");
    t.expect(same_bits(hc->out_hidden(1), hg->out_hidden(1), size_t(E)), std::string(tag) + ": h' after truncation");
    // The cache rows as a prefix-cache checkpoint keeps them (save_rows): the CPU's bits; put back
    // (load_rows) into the GPU head after it forgot them, the two rows again give the same logits.
    t.expect(hc->row_floats() == hg->row_floats(), std::string(tag) + ": floats a cache row");
    if (hc->row_floats() != hg->row_floats()) return;
    const size_t kept = size_t(n + 2) * size_t(hc->row_floats());
    std::vector<float> rows_c(kept), rows_g(kept);
    hc->save_rows(n + 2, rows_c.data());
    hg->save_rows(n + 2, rows_g.data());
    t.expect(same_bits(rows_c.data(), rows_g.data(), kept), std::string(tag) + ": saved cache rows");
    hg->truncate(0);
    std::vector<float> first_n(size_t(n) * size_t(hc->row_floats()));
    hc->save_rows(n, first_n.data());
    hg->load_rows(first_n.data(), n);
    t.expect(hg->n_past() == n, std::string(tag) + ": n_past after load_rows");
    hg->forward(two_rows.data(), std::span<const int32_t>(two, 2), n, true);
    t.expect(same_bits(hc->logits(), hg->logits(), size_t(V)), std::string(tag) + ": logits after load_rows");
}

using run_result = mtp_generation;

run_result generate(model& m, const std::vector<int32_t>& prompt, const sampling_params& sp, int max_window, int max_tokens) {
    return generate_with_mtp(m, prompt, sp, max_window, max_tokens, k_ctx, k_rows);
}

void compare_generations(model& cpu, model& gpu, tally& t, const char* tag) {
    const std::vector<sampling_params> modes = greedy_and_sampled();
    int64_t proposed = 0, accepted = 0;
    for (size_t mi = 0; mi < modes.size(); ++mi) {
        const std::vector<int32_t> prompt = tokens(9, int(mi) + 10);
        const run_result serial = generate(gpu, prompt, modes[mi], 1, 24);
        for (int w : {2, 3, 5}) {
            const std::string what = std::string(tag) + ": mode " + std::to_string(mi) + " window " + std::to_string(w);
            const run_result g = generate(gpu, prompt, modes[mi], w, 24);
            const run_result c = generate(cpu, prompt, modes[mi], w, 24);
            t.expect(g.res.tokens == serial.res.tokens && g.res.token_sha == serial.res.token_sha,
                     what + ": GPU drafted tokens = GPU serial");
            t.expect(c.res.tokens == g.res.tokens, what + ": CPU drafted tokens = GPU drafted");
            bool calls_equal = c.calls.size() == g.calls.size();
            for (size_t i = 0; calls_equal && i < c.calls.size(); ++i)
                calls_equal = c.calls[i].context == g.calls[i].context && c.calls[i].drafts == g.calls[i].drafts &&
                              same_bits(c.calls[i].logits.data(), g.calls[i].logits.data(), c.calls[i].logits.size());
            t.expect(calls_equal, what + ": every proposal and its logits (" + std::to_string(g.calls.size()) + " calls)");
            proposed += g.res.stats.drafts_proposed;
            accepted += g.res.stats.drafts_accepted;
        }
    }
    t.expect(proposed > 0, std::string(tag) + ": the windows carried drafts");
    std::printf("  %s: %lld drafts proposed on the GPU, %lld accepted\n", tag, static_cast<long long>(proposed),
                static_cast<long long>(accepted));
}

int run_fixture(const fs::path& path) {
    auto f = model_file::open(path);
    load_options o;
    o.n_ctx = k_ctx;
    auto cpu = load_model(*f, o);
    tally t;
    for (const bool split : {false, true}) {
        cuda_placement p;
        if (split) p.vram_budget = 0;   // every trunk expert on the CPU lane (the PCIe lane too)
        auto gpu = load_model_cuda(*f, o, 0, p);
        const char* tag = split ? "budget 0" : "all in VRAM";
        compare_heads(*cpu, *gpu, nullptr, t, tag);
        draft_vocab v;
        v.n_vocab = cpu->hparams().n_vocab;
        v.ids = {5, 383, 17, 0, 100, 42, 250, 7, 91};
        compare_heads(*cpu, *gpu, &v, t, split ? "budget 0, trimmed vocabulary" : "trimmed vocabulary");
        compare_generations(*cpu, *gpu, t, tag);
        std::printf("  %s: the head's block holds %.1f KiB of VRAM\n", tag, double(cuda_mtp_bytes(*gpu)) / 1024.0);
    }
    std::printf("%s %-40s %d of %d checks hold\n", t.failures ? "FAIL" : "PASS",
                (path.parent_path().filename() / path.filename()).string().c_str(), t.checks - t.failures, t.checks);
    return t.failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (!cuda_available()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path(__FILE__).parent_path().parent_path() / "golden" / "fixtures";
    int failures = 0, n = 0;
    for (const char* name : {"qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"}) {
        const fs::path f = dir / name / "converted-F32.gguf";
        ++n;
        try {
            failures += run_fixture(f);
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", f.string().c_str(), e.what());
            ++failures;
        }
    }
    std::printf("%s: %d of %d fixtures differ\n", failures ? "FAIL" : "PASS", failures, n);
    return failures ? 1 : 0;
}
