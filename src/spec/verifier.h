// speculative_decoder: the decode loop, serial and drafted alike.
//
// Invariant between windows: the target has committed every context token but the last one
// (n_past = context size - 1); the last one is pending. A window is that pending token plus up
// to T-1 drafts, forwarded in one call. Row i's logits give the token at absolute position
// n_past + i + 1, picked by the keyed sampler from (logits, seed, position, history) where the
// history is the committed context plus the drafts kept before row i -- exactly what serial
// decoding has at that position. A draft is kept while it equals its row's pick; the first
// pick that differs (or the pick after the last draft) is the bonus token. The rows whose input
// tokens are now in the context, except the new pending one, are committed; the rest are
// rolled back. Serial decoding is this loop with no drafts (one row), so drafted output equals
// serial output by construction: only the number of windows differs.
//
// Stops inside a window end it at the same token serial would stop at: EOS (not emitted),
// max_tokens, and a stop callback that sees the generated ids after each emitted token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "spec/depth_policy.h"
#include "spec/drafter.h"
#include "spec/spec_stats.h"
#include "spec/target.h"

namespace sluice {

enum class stop_reason { max_tokens, eos, stop };
const char* stop_reason_name(stop_reason r);

struct decode_options {
    int32_t max_tokens = 128;        // tokens to generate at most (EOS excluded)
    std::vector<int32_t> eos;        // ids that end the generation; they are not emitted
    // Called after each emitted token with every id generated so far; returning true stops the
    // generation there, that token included (stop strings: the caller detokenizes and matches).
    std::function<bool(std::span<const int32_t> generated)> stop;
    int32_t max_window = 16;         // rows per verify window, 1..16 (1 = serial)
    int32_t prefill_chunk = 256;     // rows per prompt forward
    bool calibrate_policy = true;    // time windows of 1..16 rows before the first one, once
};

struct decode_result {
    std::vector<int32_t> tokens;     // generated ids (EOS excluded)
    std::string token_sha;           // SHA-256 of tokens as little-endian u32, hex
    stop_reason reason = stop_reason::max_tokens;
    spec_stats stats;
};

class speculative_decoder {
public:
    // drafter and policy may be null: no drafter = serial decoding; no policy = every window
    // asks the drafter for up to max_window - 1 drafts.
    speculative_decoder(verify_target& target, keyed_sampler& sampler, drafter* drafter = nullptr,
                        depth_policy* policy = nullptr);

    // Generates after `prompt` (non-empty). The target must hold a prefix of the prompt (usually
    // nothing, n_past 0; a prefix-cache hit holds more) and at most prompt.size() - 1 tokens.
    // On return the target holds the context minus its last token: prompt + tokens, less one.
    decode_result generate(std::span<const int32_t> prompt, const decode_options& opt);

private:
    verify_target& target_;
    keyed_sampler& sampler_;
    drafter* drafter_;
    depth_policy* policy_;
};

}  // namespace sluice
