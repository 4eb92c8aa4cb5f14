#include "kv/kv_cache.h"

#include "core/checked.h"
#include "core/error.h"

namespace sluice {

kv_cache::kv_cache(const kv_shape& s) : shape_(s), rec_(s.rec) {
    if (s.n_layer < 1 || s.n_ctx < 1 || s.n_kv_head < 1 || s.head_dim < 1)
        fail("kv_cache: shape: expected positive n_layer/n_ctx/n_kv_head/head_dim, got {}/{}/{}/{}",
             s.n_layer, s.n_ctx, s.n_kv_head, s.head_dim);
    auto per_layer = checked_mul(static_cast<uint64_t>(s.n_ctx),
                                 static_cast<uint64_t>(s.n_kv_head) * static_cast<uint64_t>(s.head_dim));
    if (!per_layer || *per_layer > (uint64_t{1} << 36))
        fail("kv_cache: {} positions x {} heads x {} dims is too large", s.n_ctx, s.n_kv_head, s.head_dim);
    k_.assign(static_cast<size_t>(s.n_layer), std::vector<float>(*per_layer));
    v_.assign(static_cast<size_t>(s.n_layer), std::vector<float>(*per_layer));
}

void kv_cache::truncate(int32_t n) {
    if (n < 0 || n > n_pos_) fail("kv_cache: truncate({}): expected 0..{}", n, n_pos_);
    if (!rec_.empty()) rec_.rewind(n);   // throws (before any change) when n cannot be restored
    n_pos_ = n;
}

void kv_cache::set_n_pos(int32_t n) {
    if (n < 0 || n > shape_.n_ctx) fail("kv_cache: {} positions: the cache holds {}", n, shape_.n_ctx);
    // Attention rows alone do not make a hybrid model's state (e.g. a prefix-cache restore).
    if (!rec_.empty() && n != rec_.length())
        fail("kv_cache: {} positions: the recurrent state holds {} (attention rows alone cannot restore it)", n,
             rec_.length());
    n_pos_ = n;
}

}  // namespace sluice
