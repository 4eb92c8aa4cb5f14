#include "spec/verifier.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "runtime/token_sha.h"

namespace sluice {

const char* stop_reason_name(stop_reason r) {
    switch (r) {
        case stop_reason::max_tokens: return "max_tokens";
        case stop_reason::eos: return "eos";
        case stop_reason::stop: return "stop";
    }
    return "?";
}

namespace {

// A proposal is a guess, but the target must only ever see valid ids: the length of its prefix
// that is at most `limit` long and holds ids inside the vocabulary.
int32_t valid_prefix(int32_t n, std::span<const int32_t> drafts, int32_t n_vocab, int32_t limit) {
    n = std::clamp(n, 0, limit);
    for (int32_t i = 0; i < n; ++i)
        if (drafts[size_t(i)] < 0 || drafts[size_t(i)] >= n_vocab) return i;
    return n;
}

}  // namespace

speculative_decoder::speculative_decoder(verify_target& target, keyed_sampler& sampler, drafter* drafter,
                                         depth_policy* policy)
    : target_(target), sampler_(sampler), drafter_(drafter), policy_(policy) {
    if (sampler_.n_vocab() != target_.n_vocab())
        fail("speculative decoder: the sampler is sized for {} tokens but the target's vocabulary has {}",
             sampler_.n_vocab(), target_.n_vocab());
}

decode_result speculative_decoder::generate(std::span<const int32_t> prompt, const decode_options& opt) {
    const int32_t nv = target_.n_vocab();
    if (prompt.empty()) fail("generate: prompt: expected at least one token, got none");
    if (opt.max_window < 1 || opt.max_window > 16) fail("generate: max_window: expected 1..16, got {}", opt.max_window);
    if (opt.prefill_chunk < 1) fail("generate: prefill_chunk: expected >= 1, got {}", opt.prefill_chunk);
    if (opt.max_tokens < 0) fail("generate: max_tokens: expected >= 0, got {}", opt.max_tokens);
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= nv)
            fail("generate: prompt token {} is {}: expected an id in [0, {})", i, prompt[i], nv);
    const int32_t np0 = target_.n_past();
    if (np0 < 0 || size_t(np0) >= prompt.size())
        fail("generate: the target holds {} positions: expected fewer than the prompt's {} tokens", np0,
             prompt.size());

    decode_result res;
    res.stats.drafter_name = drafter_ && opt.max_window > 1 ? std::string(drafter_->name()) : "none";
    // Everything the loop touches is sized here: the per-token path below allocates nothing
    // beyond the growth of the output vectors, which were reserved.
    std::vector<int32_t> context(prompt.begin(), prompt.end());
    context.reserve(prompt.size() + size_t(opt.max_tokens) + 1);
    res.tokens.reserve(size_t(opt.max_tokens));
    // Prefill: every prompt token but the last, which is the first window's pending row. Their
    // logits are not read: a target that can skip them takes the rows whole; only for one that
    // cannot does the buffer below grow to a prefill chunk's rows. (It used to take
    // min(prefill_chunk, prompt) rows on every call, prompt cached or not: a [512, n_vocab] buffer
    // is 311 MB at Qwen3's vocabulary, allocated and zeroed before the first token. On this
    // 2-core machine that made the tiny qwen3moe file's decode after 512 cached positions 5x
    // slower than after 0: sluice bench -d 0,512, tg32 764 and 152 tok/s.)
    const size_t to_prefill = prompt.size() - 1 - size_t(np0);
    const std::span<const int32_t> prompt_rows = prompt.subspan(size_t(np0), to_prefill);
    const bool prefilled = to_prefill == 0 || target_.prefill_without_logits(prompt_rows);
    const size_t chunk_rows = prefilled ? 0 : std::min(size_t(opt.prefill_chunk), to_prefill);
    // A policy calibrated here times windows of up to 16 rows in the same buffer; a calibrated one
    // needs only max_window rows (a bench's timed run allocates no more than its windows use).
    const bool calibrating = policy_ && opt.calibrate_policy && !policy_->calibrated() && opt.max_window > 1;
    const size_t buf_rows = std::max(size_t(std::max(opt.max_window, calibrating ? 16 : 1)), chunk_rows);
    std::vector<float> logits(buf_rows * size_t(nv));   // [rows, n_vocab]
    std::vector<int32_t> window(size_t(opt.max_window));  // [T] pending token + drafts
    std::vector<int32_t> drafts(16);                      // [<= 15] the drafter's proposal
    std::vector<double> confidence(16);                   // [<= 15] its chance of being kept, per draft
    for (size_t next = 0; !prefilled && next < to_prefill;) {
        const size_t rows = std::min(chunk_rows, to_prefill - next);
        target_.forward(prompt_rows.subspan(next, rows), logits.data());
        target_.commit(int32_t(rows));
        next += rows;
    }
    res.stats.prompt_rows += int64_t(to_prefill);
    if (drafter_) {
        drafter_->reset();
        drafter_->reset_stats();
        // The prompt but its last token (the first window's row), as the target holds it: a draft
        // model prefills it here, so the first window pays for one row as later ones do.
        const auto c0 = std::chrono::steady_clock::now();
        if (opt.max_window > 1 && opt.max_tokens > 1) drafter_->catch_up(prompt.first(prompt.size() - 1));
        res.stats.drafter_prompt_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    }
    if (policy_) {
        policy_->reset_request();
        if (calibrating) policy_->calibrate(target_, logits, context.back());
    }

    token_sha sha;
    int32_t generated = 0;
    bool drafted_last_window = false;   // the drafter proposed for the last window (choose() path)
    bool done = opt.max_tokens == 0;
    res.reason = stop_reason::max_tokens;
    while (!done) {
        // How many drafts this window may carry: never more than the window allows, nor than the
        // tokens still wanted (a window emits at most drafts + 1 tokens), nor than the policy's
        // choice.
        const int32_t cap = drafter_ ? std::min(opt.max_window - 1, opt.max_tokens - generated - 1) : 0;
        int32_t n_d = 0;
        if (cap > 0 && policy_ && drafter_->cheap_proposals()) {
            // The longest proposal, cut by the policy draft by draft from the drafter's confidence.
            n_d = valid_prefix(drafter_->propose(context, cap, drafts), drafts, nv, cap);
            if (n_d > 0) {
                std::span<double> keep(confidence.data(), size_t(n_d));
                n_d = drafter_->confidence(keep) ? policy_->choose_for(keep) : std::min(n_d, policy_->choose());
                if (n_d == 0) ++res.stats.steps_drafting_off;
            }
        } else if (cap > 0) {
            int32_t depth = cap;
            if (policy_) {
                depth = std::min(depth, policy_->choose());
                if (depth == 0) ++res.stats.steps_drafting_off;
            }
            const bool drafted_last = std::exchange(drafted_last_window, depth > 0);
            if (depth > 0) {
                // Timed: a draft model's or an MTP head's forwards are a cost the policy weighs.
                // Only after a window that drafted too: the drafter then catches up on that
                // window's tokens alone (every token passes through a draft model once, so that
                // is part of steady drafting's cost), where after windows without drafts it
                // catches up on all of them, a cost of resuming, not of a draft.
                const auto d0 = std::chrono::steady_clock::now();
                n_d = valid_prefix(drafter_->propose(context, depth, drafts), drafts, nv, depth);
                if (policy_ && n_d > 0 && drafted_last)
                    policy_->record_draft_cost(
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count(), n_d);
            }
        }
        const int32_t rows = n_d + 1;
        window[0] = context.back();
        std::copy_n(drafts.begin(), n_d, window.begin() + 1);

        auto t0 = std::chrono::steady_clock::now();
        target_.forward(std::span<const int32_t>(window.data(), size_t(rows)), logits.data());
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        res.stats.forward_seconds += secs;
        if (policy_) policy_->record_cost(rows, secs);

        // Walk the rows: row i's pick is the token at position context.size() (its history is
        // the context so far, drafts kept before it included).
        int32_t emitted = 0, accepted = 0;
        for (int32_t i = 0; i < rows; ++i) {
            int32_t tok = sampler_.pick(logits.data() + size_t(i) * size_t(nv), int64_t(context.size()), context);
            bool kept_draft = i < n_d && tok == drafts[size_t(i)];
            if (std::find(opt.eos.begin(), opt.eos.end(), tok) != opt.eos.end()) {
                res.reason = stop_reason::eos;
                done = true;
                break;
            }
            context.push_back(tok);
            res.tokens.push_back(tok);
            sha.update(tok);
            ++generated;
            ++emitted;
            if (kept_draft) ++accepted;
            if (generated >= opt.max_tokens) {
                res.reason = stop_reason::max_tokens;
                done = true;
                break;
            }
            if (opt.stop && opt.stop(std::span<const int32_t>(res.tokens))) {
                res.reason = stop_reason::stop;
                done = true;
                break;
            }
            if (!kept_draft) break;  // that was the bonus token
        }
        // Rows 0..emitted-1 carried the old pending token and the kept drafts: all now in the
        // context, none of them the new pending token. Everything after is rolled back.
        target_.commit(emitted);
        res.stats.add_window(rows, n_d, accepted, emitted);
        if (n_d > 0 && !done) {
            // A window cut by a stop says nothing about the drafts after the cut.
            drafter_->observe(accepted, n_d);
            if (policy_) policy_->record_acceptance(accepted, n_d);
        } else if (n_d > 0) {
            drafter_->observe(accepted, accepted);
        }
    }
    res.token_sha = sha.hex();
    if (drafter_) res.stats.drafter = drafter_->stats();
    return res;
}

}  // namespace sluice
