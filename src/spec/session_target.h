// session_target: a runtime session (model + KV cache) as the speculative decoder's
// verify_target. The KV cache's truncate() is the rollback: forward() remembers the committed
// length, a second forward() before commit() first drops the provisional rows, and commit(n)
// truncates to the committed length plus n. (Recurrent state, once a model has it, needs a
// checkpoint here instead of a truncate: a later issue.)
#pragma once

#include "core/error.h"
#include "runtime/generate.h"
#include "spec/target.h"

namespace sluice {

class session_target final : public verify_target {
public:
    // max_rows: the most rows one forward may carry (the session's prefill_chunk, which sizes
    // its scratch).
    session_target(session& s, int32_t max_rows) : s_(s), max_rows_(max_rows) {}

    int32_t n_vocab() const override { return s_.get_model().hparams().n_vocab; }
    int32_t n_past() const override { return base_ >= 0 ? base_ : s_.n_pos(); }

    void forward(std::span<const int32_t> tokens, float* logits) override {
        if (tokens.empty() || int32_t(tokens.size()) > max_rows_)
            fail("session target: forward of {} rows: expected 1..{}", tokens.size(), max_rows_);
        if (base_ >= 0)
            s_.truncate(base_);  // replace the provisional rows of the last forward
        else
            base_ = s_.n_pos();
        s_.forward_into(tokens, logits);
        rows_ = int32_t(tokens.size());
    }

    bool prefill_without_logits(std::span<const int32_t> tokens) override {
        if (base_ >= 0) {   // as forward() does: the last forward's provisional rows go first
            s_.truncate(base_);
            base_ = -1;
            rows_ = 0;
        }
        s_.prefill(tokens);
        return true;
    }

    void commit(int32_t n) override {
        if (base_ < 0 || n < 0 || n > rows_) fail("session target: commit of {} rows after a forward of {}", n, rows_);
        s_.truncate(base_ + n);
        base_ = -1;
        rows_ = 0;
    }

private:
    session& s_;
    int32_t max_rows_;
    int32_t base_ = -1;  // committed length while rows are provisional, else -1
    int32_t rows_ = 0;   // rows of the last forward
};

}  // namespace sluice
