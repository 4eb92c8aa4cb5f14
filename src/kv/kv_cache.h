// The attention KV cache of one sequence: per layer, K and V as [n_ctx, n_kv_head, head_dim]
// f32. Transactional by length: a snapshot is n_pos(), a rollback is truncate(n) (speculative
// decoding drops rejected drafts this way; positions past n_pos() are simply overwritten).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

struct kv_shape {
    int n_layer = 0;
    int n_ctx = 0;        // positions the cache holds
    int n_kv_head = 0;
    int head_dim = 0;     // of both K and V
};

class kv_cache {
public:
    explicit kv_cache(const kv_shape& s);

    const kv_shape& shape() const { return shape_; }
    int32_t n_pos() const { return n_pos_; }   // positions 0..n_pos()-1 are committed
    // Forgets positions n..; n <= n_pos().
    void truncate(int32_t n);
    void clear() { n_pos_ = 0; }
    // Marks positions up to n as filled (the model calls it after writing a window).
    void set_n_pos(int32_t n);

    // [n_ctx, n_kv_head, head_dim] of layer il.
    float* k(int il) { return k_[static_cast<size_t>(il)].data(); }
    float* v(int il) { return v_[static_cast<size_t>(il)].data(); }
    const float* k(int il) const { return k_[static_cast<size_t>(il)].data(); }
    const float* v(int il) const { return v_[static_cast<size_t>(il)].data(); }
    int64_t row_floats() const { return static_cast<int64_t>(shape_.n_kv_head) * shape_.head_dim; }

private:
    kv_shape shape_;
    int32_t n_pos_ = 0;
    std::vector<std::vector<float>> k_, v_;   // per layer [n_ctx, n_kv_head, head_dim]
};

}  // namespace sluice
