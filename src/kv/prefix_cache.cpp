#include "kv/prefix_cache.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

bool same_rows(const kv_shape& a, const kv_shape& b) {
    return a.n_layer == b.n_layer && a.n_kv_head == b.n_kv_head && a.head_dim == b.head_dim &&
           a.rec.n_layer == b.rec.n_layer && a.rec.conv_floats == b.rec.conv_floats &&
           a.rec.ssm_floats == b.rec.ssm_floats;
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

}  // namespace

size_t prefix_cache::entry_bytes(size_t n_tokens, const kv_shape& s) {
    const size_t row = static_cast<size_t>(s.n_kv_head) * static_cast<size_t>(s.head_dim);
    const size_t state = static_cast<size_t>(s.rec.n_layer) * static_cast<size_t>(s.rec.conv_floats + s.rec.ssm_floats);
    return n_tokens * sizeof(int32_t) + (n_tokens * row * 2 * static_cast<size_t>(s.n_layer) + state) * sizeof(float);
}

void prefix_cache::erase(std::list<entry>::iterator it) {
    bytes_ -= it->bytes();
    entries_.erase(it);
}

void prefix_cache::clear() {
    entries_.clear();
    bytes_ = 0;
}

bool prefix_cache::store(std::span<const int32_t> tokens, const kv_cache& kv, std::vector<float> aux) {
    const size_t n = tokens.size();
    if (n == 0) return false;
    if (n > static_cast<size_t>(kv.n_pos()))
        fail("prefix cache: store of {} rows from a cache holding {}", n, kv.n_pos());
    const kv_shape& shape = kv.shape();
    const bool recurrent = !kv.recurrent().empty();
    if (recurrent && n != static_cast<size_t>(kv.recurrent().length())) return false;   // no state at n
    const size_t need = entry_bytes(n, shape) + aux.size() * sizeof(float);
    if (need > max_bytes_) return false;   // before anything is replaced
    // A checkpoint with a state (recurrent, or a drafter's) serves only prompts that begin with all
    // of it: a longer checkpoint never covers it, and it covers no shorter one.
    const bool whole_only = recurrent || !aux.empty();
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (!same_rows(it->shape, shape)) {
            ++it;
            continue;
        }
        const size_t lcp = common_prefix(it->tokens, tokens);
        if (lcp == n && it->tokens.size() == n) {   // the same tokens
            if (aux.empty() || !it->aux.empty()) {   // already kept, with at least this state
                entries_.splice(entries_.begin(), entries_, it);
                return true;
            }
            auto dead = it++;   // kept without the drafter's state: replaced
            erase(dead);
            continue;
        }
        if (lcp == n && !whole_only) {   // covered by a longer checkpoint's rows
            entries_.splice(entries_.begin(), entries_, it);
            return true;
        }
        if (lcp == it->tokens.size() && !recurrent && it->aux.empty()) {   // a shorter one this one covers
            auto dead = it++;
            erase(dead);
            ++stats_.evicted;
            continue;
        }
        ++it;
    }
    while (bytes_ + need > max_bytes_ && !entries_.empty()) {
        erase(std::prev(entries_.end()));
        ++stats_.evicted;
    }
    entry e;
    e.tokens.assign(tokens.begin(), tokens.end());
    e.shape = shape;
    const size_t row = static_cast<size_t>(kv.row_floats());
    e.rows.resize(n * row * 2 * static_cast<size_t>(shape.n_layer));
    float* dst = e.rows.data();
    for (int il = 0; il < shape.n_layer; ++il) {
        std::memcpy(dst, kv.k(il), n * row * sizeof(float));
        dst += n * row;
        std::memcpy(dst, kv.v(il), n * row * sizeof(float));
        dst += n * row;
    }
    if (recurrent) e.state = kv.recurrent().live();
    e.aux = std::move(aux);
    bytes_ += e.bytes();
    entries_.push_front(std::move(e));
    ++stats_.stored;
    return true;
}

int32_t prefix_cache::restore(std::span<const int32_t> tokens, int32_t max_rows, kv_cache& kv, std::vector<float>* aux) {
    ++stats_.lookups;
    kv.clear();
    const kv_shape& shape = kv.shape();
    auto best = entries_.end();
    size_t best_n = 0;
    const bool recurrent = !kv.recurrent().empty();
    const size_t cap = std::min(static_cast<size_t>(std::max(max_rows, 0)), static_cast<size_t>(shape.n_ctx));
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (!same_rows(it->shape, shape) || (aux && it->aux.empty())) continue;
        const size_t lcp = common_prefix(it->tokens, tokens);
        // A state (and a drafter's) exists at the checkpoint's length only: all of it must be reused.
        if ((recurrent || aux) && (lcp != it->tokens.size() || lcp > cap)) continue;
        if (lcp > best_n) best = it, best_n = lcp;
    }
    best_n = std::min(best_n, cap);
    if (best == entries_.end() || best_n == 0) return 0;
    const size_t n_kept = best->tokens.size();
    const size_t row = static_cast<size_t>(kv.row_floats());
    const float* src = best->rows.data();
    for (int il = 0; il < shape.n_layer; ++il) {
        std::memcpy(kv.k(il), src, best_n * row * sizeof(float));
        src += n_kept * row;
        std::memcpy(kv.v(il), src, best_n * row * sizeof(float));
        src += n_kept * row;
    }
    if (recurrent) kv.recurrent().assign(best->state, static_cast<int32_t>(best_n));
    if (aux) *aux = best->aux;
    kv.set_n_pos(static_cast<int32_t>(best_n));
    entries_.splice(entries_.begin(), entries_, best);
    ++stats_.hits;
    stats_.rows_restored += static_cast<int64_t>(best_n);
    return static_cast<int32_t>(best_n);
}

}  // namespace sluice
