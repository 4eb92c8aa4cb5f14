// recording_drafter: an MTP drafter's every proposal with the head's logits after it, and
// generate_with_mtp: a generation through the MTP drafter that records them, for tests that
// compare two generations' drafting (the unit tests; the GPU test tests/gpu/mtp_parity.cpp
// includes it too).
#pragma once

#include "models/hybrid_mtp.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/drafter.h"
#include "spec/mtp.h"
#include "spec/mtp_drafter.h"
#include "spec/verifier.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sluice {

class recording_drafter final : public drafter {
public:
    struct call {
        std::vector<int32_t> context, drafts;
        int32_t max_n = 0;
        std::vector<float> logits;   // [n_vocab] the head's after the proposal
    };
    recording_drafter(mtp_drafter& d, const mtp_head& h) : d_(d), h_(h) {}
    std::string_view name() const override { return d_.name(); }
    void reset() override { d_.reset(); }
    int32_t propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) override {
        const int32_t n = d_.propose(ctx, max_n, out);
        calls.push_back({{ctx.begin(), ctx.end()}, {out.begin(), out.begin() + n}, max_n,
                         {h_.logits(), h_.logits() + h_.n_vocab()}});
        return n;
    }
    void observe(int32_t a, int32_t p) override {
        d_.observe(a, p);
        drafter::observe(a, p);
    }
    std::vector<call> calls;

private:
    mtp_drafter& d_;
    const mtp_head& h_;
};

// Greedy, then plain sampling at temperature 0.9 with seeds 1, 7 and 12345.
inline std::vector<sampling_params> greedy_and_sampled() {
    sampling_params hot;
    hot.temperature = 0.9f;
    hot.top_k = 0;
    hot.top_p = 1.0f;
    hot.min_p = 0.0f;
    std::vector<sampling_params> modes = {sampling_params::greedy()};
    for (uint64_t seed : {1ull, 7ull, 12345ull}) {
        hot.seed = seed;
        modes.push_back(hot);
    }
    return modes;
}

struct mtp_generation {
    decode_result res;
    std::vector<recording_drafter::call> calls;
};

// A generation of m through its MTP head (4 drafts at most) with a cache of n_ctx positions and
// rows-row forwards, the prompt prefilled 5 rows at a time (all folded into the head); max_window
// 1: serial, the drafter unused. stop_after > 0: stop once that many tokens are out.
inline mtp_generation generate_with_mtp(model& m, const std::vector<int32_t>& prompt, const sampling_params& sp,
                                        int max_window, int max_tokens, int n_ctx, int rows, int stop_after = -1) {
    session_options so;
    so.n_ctx = n_ctx;
    so.prefill_chunk = rows;
    session s(m, so);
    auto head = make_mtp_head(m, s.pool(), n_ctx, rows);
    mtp_drafter_params mp;
    mp.max_draft = 4;
    mtp_drafter d(s, *head, sp, mp);
    recording_drafter rec(d, *head);
    keyed_sampler sampler(m.hparams().n_vocab, sp);
    decode_options opt;
    opt.max_tokens = max_tokens;
    opt.max_window = max_window;
    opt.prefill_chunk = 5;
    if (stop_after > 0)
        opt.stop = [stop_after](std::span<const int32_t> g) { return int(g.size()) >= stop_after; };
    speculative_decoder dec(d.target(), sampler, max_window > 1 ? &rec : nullptr, nullptr);
    mtp_generation r{dec.generate(prompt, opt), {}};
    r.calls = std::move(rec.calls);
    return r;
}

}  // namespace sluice
