// drafter: proposes the tokens that probably follow the context. A proposal is only a guess:
// the verifier keeps a draft only when it equals the keyed pick of its row (E4), so no drafter,
// however wrong, can change what is generated -- only how fast.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "spec/spec_stats.h"

namespace sluice {

class drafter {
public:
    virtual ~drafter() = default;
    virtual std::string_view name() const = 0;

    // A new request starts: forget everything from the last one. The first propose() of the
    // request sees the prompt as its context.
    virtual void reset() = 0;

    // Up to max_n tokens that follow `context` (prompt and generated tokens, all committed),
    // written to out[0..n); returns n. out.size() >= max_n. Called once per verify window;
    // context only grows between calls of one request. May propose fewer (or none).
    virtual int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) = 0;

    // Brings the drafter's state up to `context` (a prompt's tokens but its last, committed)
    // without proposing, so that the first propose() of the request pays for one row, as later
    // ones after a drafting window do: a draft model prefills the prompt here, in the prompt's
    // time. Optional: a drafter that keeps no state does nothing, and one not called here
    // catches up in propose().
    virtual void catch_up(std::span<const int32_t> context) { (void)context; }

    // The verifier's verdict on the last proposal: the first `accepted` of `proposed` drafts
    // were kept (proposed may be below what propose() returned: the decoder caps a window).
    virtual void observe(int32_t accepted, int32_t proposed) {
        stats_.proposed += proposed;
        stats_.accepted += accepted;
    }

    // The drafter's estimate, for each draft of its last proposal, that the verifier keeps it
    // given that the drafts before it were kept: out[i] for i < out.size() <= what propose()
    // returned. Returns false when it has none; the depth policy then falls back on its own
    // running acceptance and the decoder asks for the policy's depth up front.
    virtual bool confidence(std::span<double> out) const {
        (void)out;
        return false;
    }
    // True when a proposal longer than what is used costs next to nothing (prompt lookup): the
    // decoder then asks for the longest proposal and lets the depth policy cut it, draft by
    // draft, with confidence(). False for drafters that pay per draft (a draft model).
    virtual bool cheap_proposals() const { return false; }

    const drafter_stats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

protected:
    // propose() implementations count calls and empty calls here; observe() the rest.
    drafter_stats stats_;
};

}  // namespace sluice
