// verify_target: what the speculative decoder needs from a model. The real forward pass
// (src/models, src/runtime/generate.*) implements it; the tests use toy targets.
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

struct verify_target {
    virtual ~verify_target() = default;
    virtual int32_t n_vocab() const = 0;
    // Committed positions: the state (KV cache, later recurrent state) holds the tokens at
    // positions [0, n_past()).
    virtual int32_t n_past() const = 0;
    // Forwards rows tokens[i] at positions n_past() + i and writes their logits,
    // logits: [tokens.size(), n_vocab] row-major. The rows stay provisional: a second forward
    // before commit() starts again at n_past() and replaces them. Row i's logits must not
    // depend on the number of rows (E1).
    virtual void forward(std::span<const int32_t> tokens, float* logits) = 0;
    // Keeps the first n_rows_kept rows of the last forward (n_past() grows by that many) and
    // rolls the rest back, as if they had never been forwarded. 0 <= n_rows_kept <= rows.
    virtual void commit(int32_t n_rows_kept) = 0;
    // Commits rows tokens[i] at positions n_past() + i whose logits nobody reads (a prompt's rows
    // before its last; provisional rows of a forward not committed are dropped first, as by a
    // second forward), where the target has a cheaper way than forward() + commit(): a session
    // runs its output head for the last row only (session::prefill), and the caller needs no
    // [rows, n_vocab] buffer. Returns false, having done nothing, where it has none; the caller
    // then forwards and commits the rows itself.
    virtual bool prefill_without_logits(std::span<const int32_t> /*tokens*/) { return false; }
};

}  // namespace sluice
