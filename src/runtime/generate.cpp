// Sessions: prefill in chunks, decode, windows of rows.
#include "runtime/generate.h"

#include "core/error.h"

#include <algorithm>

namespace sluice {

session::session(model& m, const session_options& o)
    : model_(m), opt_(o), pool_(o.n_threads, o.pool), kv_(m.kv_shape_for(o.n_ctx)),
      scratch_(m.make_scratch(o.prefill_chunk, pool_)),
      logits_(static_cast<size_t>(o.prefill_chunk) * static_cast<size_t>(m.hparams().n_vocab)) {}

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
    scratch_.last_row_logits_only = false;
    model_.forward(tokens, kv_.n_pos(), kv_, scratch_, logits_.data());
    return logits_.data();
}

}  // namespace sluice
