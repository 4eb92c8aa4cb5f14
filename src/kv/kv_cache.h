// The attention KV cache of one sequence: per layer, K and V as [n_ctx, n_kv_head, head_dim]
// f32. Transactional by length: a snapshot is n_pos(), a rollback is truncate(n) (speculative
// decoding drops rejected drafts this way; positions past n_pos() are simply overwritten).
#pragma once

#include "kv/recurrent_state.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace sluice {

struct kv_shape {
    int n_layer = 0;
    int n_ctx = 0;        // positions the cache holds
    int n_kv_head = 0;
    int head_dim = 0;     // of both K and V
    recurrent_shape rec;  // hybrid models (Gated DeltaNet layers): their recurrent state; else empty
};

class kv_cache {
public:
    explicit kv_cache(const kv_shape& s);

    const kv_shape& shape() const { return shape_; }
    int32_t n_pos() const { return n_pos_; }   // positions 0..n_pos()-1 are committed
    // Forgets positions n..; n <= n_pos(). With a recurrent state, n must be one it can restore
    // (the last window's rows, or 0): see can_truncate.
    void truncate(int32_t n);
    bool can_truncate(int32_t n) const { return n >= 0 && n <= n_pos_ && (rec_.empty() || rec_.can_rewind(n)); }
    void clear() {
        n_pos_ = 0;
        rec_.reset();
    }
    // Marks positions up to n as filled (the model calls it after writing a window).
    void set_n_pos(int32_t n);

    // [n_ctx, n_kv_head, head_dim] of layer il.
    float* k(int il) { return k_[static_cast<size_t>(il)].data(); }
    float* v(int il) { return v_[static_cast<size_t>(il)].data(); }
    const float* k(int il) const { return k_[static_cast<size_t>(il)].data(); }
    const float* v(int il) const { return v_[static_cast<size_t>(il)].data(); }
    int64_t row_floats() const { return static_cast<int64_t>(shape_.n_kv_head) * shape_.head_dim; }

    // The recurrent state that travels with these rows (empty for pure-attention models).
    recurrent_state& recurrent() { return rec_; }
    const recurrent_state& recurrent() const { return rec_; }

    // A model that keeps its own copy of this cache, keyed by the object's address (the CUDA
    // model's in VRAM), asks to hear when this address stops holding these rows: `hook` runs
    // once, when the cache is destroyed, moved from or assigned to. One hook; a new one
    // replaces (and does not run) the old. A copy starts without one.
    void on_release(std::function<void()> hook) { release_.f = std::move(hook); }

private:
    struct release_hook {
        std::function<void()> f;
        release_hook() = default;
        release_hook(const release_hook&) {}
        release_hook(release_hook&& o) noexcept { o.run(); }
        release_hook& operator=(const release_hook&) {
            run();
            return *this;
        }
        release_hook& operator=(release_hook&& o) noexcept {
            run();
            o.run();
            return *this;
        }
        ~release_hook() { run(); }
        void run() noexcept {
            if (auto g = std::exchange(f, nullptr)) g();
        }
    };

    kv_shape shape_;
    int32_t n_pos_ = 0;
    std::vector<std::vector<float>> k_, v_;   // per layer [n_ctx, n_kv_head, head_dim]
    recurrent_state rec_;
    release_hook release_;
};

}  // namespace sluice
