// draft_model_drafter: a small model of the same tokenizer (e.g. Qwen3-0.6B for Qwen3-MoE)
// runs alongside the target and proposes its own continuation, one row per draft token.
//
// The draft model is a verify_target too. Its committed state only ever holds context tokens
// (committed ones), so it never needs rolling back past a commit: each propose() first
// forwards the context tokens it has not seen (the prompt, in chunks, on the first call),
// commits them, then drafts autoregressively with the drafts kept provisional -- draft k is
// read from one forward of the k-1 drafts before it, never committed. That costs k(k-1)/2
// draft rows for k drafts, small next to the target's window for the depths used (<= 15).
//
// Picks use a keyed_sampler with the request's parameters: with the same seed the Gumbel noise
// at a position is the one the target's pick will use, so a draft model whose distribution is
// close to the target's drafts the target's sampled tokens too, not only its argmax.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "spec/drafter.h"
#include "spec/target.h"

namespace sluice {

// Fails with a clear error unless the draft model's vocabulary matches the target's: every id
// both have must be the same token text, and the sizes may differ only by padding (up to
// max_size_difference ids, as converters pad embedding tables).
void check_vocab_compatible(std::span<const std::string> target_vocab, std::span<const std::string> draft_vocab,
                            int32_t max_size_difference = 128);

struct draft_model_params {
    int32_t max_draft = 15;      // the most drafts one propose() makes
    int32_t prompt_chunk = 256;  // rows per forward while catching up, for a target without prefill_without_logits
};

class draft_model_drafter final : public drafter {
public:
    // draft: the draft model's state, empty (n_past 0) at the start of each request.
    // sampling: the request's parameters (temperature 0 drafts greedily).
    draft_model_drafter(verify_target& draft, const sampling_params& sampling, draft_model_params p = {});

    std::string_view name() const override { return "draft-model"; }
    // The caller resets the draft model's state between requests (it owns it); this forgets
    // the tokens the drafter believes that state holds.
    void reset() override;
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override;
    void catch_up(std::span<const int32_t> context) override;

private:
    // Fails unless the draft state (seen_) is a prefix of ctx (shorter than it when `strict`).
    void check_prefix(std::span<const int32_t> ctx, bool strict) const;
    // Commits rows at the draft state's end whose logits nobody reads.
    void commit_unread(std::span<const int32_t> rows);

    verify_target& draft_;
    keyed_sampler sampler_;
    draft_model_params p_;
    std::vector<int32_t> seen_;    // the tokens in the draft model's committed state, then drafts
    std::vector<float> logits_;    // [max_draft, n_vocab of the draft]; [prompt_chunk, ..] after a catch-up by forward()
};

}  // namespace sluice
