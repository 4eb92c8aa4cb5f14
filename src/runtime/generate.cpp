// Sessions: prefill in chunks, decode, windows of rows.
#include "runtime/generate.h"

#include "core/error.h"

#include <algorithm>

namespace sluice {

namespace {
// Logit rows a session holds from the start: a verify window's (prefill keeps the last row's
// only). A [512, n_vocab] buffer for the prefill chunk would be 311 MB at Qwen3's vocabulary.
constexpr int k_window_logit_rows = 16;
}  // namespace

session::session(model& m, const session_options& o)
    : model_(m), opt_(o), pool_(o.n_threads, o.pool), kv_(m.kv_shape_for(o.n_ctx)),
      scratch_(m.make_scratch(o.prefill_chunk, pool_)),
      logits_(static_cast<size_t>(std::min(o.prefill_chunk, k_window_logit_rows)) *
              static_cast<size_t>(m.hparams().n_vocab)) {}

const float* session::prefill(std::span<const token_id> tokens) {
    if (tokens.empty()) fail("session: prefill of no tokens");
    if (kv_.n_pos() + static_cast<int64_t>(tokens.size()) > kv_.shape().n_ctx)
        fail("session: {} + {} tokens exceed the context of {} (raise -c/--ctx-size)", kv_.n_pos(), tokens.size(),
             kv_.shape().n_ctx);
    scratch_.last_row_logits_only = true;
    for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(opt_.prefill_chunk)) {
        const size_t n = std::min(tokens.size() - i, static_cast<size_t>(opt_.prefill_chunk));
        model_.forward(tokens.subspan(i, n), kv_.n_pos(), kv_, scratch_, logits_.data());
    }
    return logits_.data();
}

const float* session::forward_all(std::span<const token_id> tokens) {
    // Grows only for a window longer than any before (tests, a prompt chunk through the MTP
    // drafter's target): verify windows fit the first size.
    const size_t need = tokens.size() * static_cast<size_t>(model_.hparams().n_vocab);
    if (logits_.size() < need) logits_.resize(need);
    forward_into(tokens, logits_.data());
    return logits_.data();
}

void session::forward_into(std::span<const token_id> tokens, float* logits) {
    scratch_.last_row_logits_only = false;
    model_.forward(tokens, kv_.n_pos(), kv_, scratch_, logits);
}

}  // namespace sluice
