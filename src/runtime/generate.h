// A generation session: one model, its KV cache, the forward scratch and the thread pool (the
// context object that owns the pool). prefill() runs a prompt in fixed chunks, decode() one
// token; both return the logits of the last row.
#pragma once

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "models/model.h"

#include <memory>
#include <span>
#include <vector>

namespace sluice {

struct session_options {
    int n_ctx = 4096;         // positions the KV cache holds
    int n_threads = 1;
    int prefill_chunk = 32;   // rows per prefill forward (E1: any value gives the same bits)
    thread_pool_options pool; // pinning, spinning, the NUMA topology (runtime/numa_setup.h)
};

class session {
public:
    session(model& m, const session_options& o);

    // Runs tokens at positions n_pos().. in chunks of prefill_chunk rows; returns the logits
    // [n_vocab] of the last token (valid until the next call). tokens must be non-empty.
    const float* prefill(std::span<const token_id> tokens);
    const float* decode(token_id t) { return prefill(std::span<const token_id>(&t, 1)); }
    // Runs a window and returns all its rows' logits [n_rows, n_vocab] (teacher forcing, tests).
    const float* forward_all(std::span<const token_id> tokens);
    // Same, the logits written straight into the caller's [n_rows, n_vocab] buffer (a verify
    // window: no copy of n_vocab floats a row through the session's own buffer).
    void forward_into(std::span<const token_id> tokens, float* logits);

    int32_t n_pos() const { return kv_.n_pos(); }
    int32_t n_ctx() const { return kv_.shape().n_ctx; }
    void truncate(int32_t n) { kv_.truncate(n); }
    // True when truncate(n) can restore length n: always for attention rows; a hybrid model's
    // recurrent state rolls back only over the last window's rows (kv/recurrent_state.h).
    bool can_truncate(int32_t n) const { return kv_.can_truncate(n); }
    const model& get_model() const { return model_; }
    thread_pool& pool() { return pool_; }
    // The last forward's rows after the model's last layer, before output_norm [rows, n_embd]
    // (the residual stream the CPU models leave in their scratch, and a CUDA model once it has
    // an MTP head): the MTP drafter's input.
    const float* residual_rows() const { return scratch_.x.data(); }
    int32_t max_rows() const { return scratch_.max_rows; }

private:
    model& model_;
    session_options opt_;
    thread_pool pool_;
    kv_cache kv_;
    forward_scratch scratch_;
    std::vector<float> logits_;   // [min(prefill_chunk, 16) or the longest forward_all window, n_vocab]
};

}  // namespace sluice
