#include "spec/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

namespace {

// Hash of the n tokens ending at index `end` (inclusive), n folded in so that the lengths
// share one table. splitmix64's finaliser spreads the bits; 0 is reserved for empty slots.
uint64_t ngram_key(std::span<const int32_t> ctx, int64_t end, int32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull * uint64_t(n + 1);
    for (int64_t j = end - n + 1; j <= end; ++j) {
        h ^= uint64_t(uint32_t(ctx[size_t(j)])) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h ^= h >> 30;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 27;
        h *= 0x94D049BB133111EBull;
        h ^= h >> 31;
    }
    return h | 1;
}

}  // namespace

ngram_drafter::ngram_drafter(ngram_drafter_params p) : p_(p) {
    if (p_.min_ngram < 1 || p_.max_ngram < p_.min_ngram || p_.max_ngram > 8)
        fail("ngram drafter: n-gram lengths: expected 1 <= min <= max <= 8, got min {} max {}", p_.min_ngram, p_.max_ngram);
    if (p_.max_draft < 1 || p_.initial_draft < 1)
        fail("ngram drafter: draft limits: expected >= 1, got max {} initial {}", p_.max_draft, p_.initial_draft);
    reset();
}

void ngram_drafter::reset() {
    limit_ = std::min(p_.initial_draft, p_.max_draft);
    indexed_ = 0;
    keys_.assign(1024, 0);
    vals_.assign(1024, 0);
    used_ = 0;
}

void ngram_drafter::grow() {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<int32_t> old_vals = std::move(vals_);
    keys_.assign(old_keys.size() * 2, 0);
    vals_.assign(old_keys.size() * 2, 0);
    used_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
        if (old_keys[i] != 0) insert(old_keys[i], old_vals[i]);
}

void ngram_drafter::insert(uint64_t key, int32_t pos) {
    if ((used_ + 1) * 2 > keys_.size()) grow();  // load factor <= 1/2 keeps probes short
    size_t mask = keys_.size() - 1;
    for (size_t i = size_t(key) & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) {  // a later occurrence: the most recent one wins
            vals_[i] = pos;
            return;
        }
        if (keys_[i] == 0) {
            keys_[i] = key;
            vals_[i] = pos;
            ++used_;
            return;
        }
    }
}

int32_t ngram_drafter::lookup(uint64_t key) const {
    size_t mask = keys_.size() - 1;
    for (size_t i = size_t(key) & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) return vals_[i];
        if (keys_[i] == 0) return -1;
    }
}

void ngram_drafter::index(std::span<const int32_t> ctx) {
    // An n-gram ending at j enters the table once its continuation ctx[j + 1] exists, so the
    // context's own last n-gram never matches itself.
    int64_t last_end = int64_t(ctx.size()) - 2;
    for (int64_t j = indexed_; j <= last_end; ++j)
        for (int32_t n = p_.min_ngram; n <= p_.max_ngram && j - n + 1 >= 0; ++n)
            insert(ngram_key(ctx, j, n), int32_t(j + 1));
    indexed_ = std::max<int64_t>(indexed_, last_end + 1);
}

int32_t ngram_drafter::propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) {
    ++stats_.calls;
    // A context shorter than what was indexed is another request: start over.
    if (int64_t(ctx.size()) < indexed_ + 1 && indexed_ > 0) reset();
    index(ctx);
    int32_t want = std::min({max_n, limit_, int32_t(out.size())});
    int64_t len = int64_t(ctx.size());
    if (want <= 0 || len == 0) {
        ++stats_.empty;
        return 0;
    }
    for (int32_t n = std::min<int64_t>(p_.max_ngram, len); n >= p_.min_ngram; --n) {
        int32_t pos = lookup(ngram_key(ctx, len - 1, n));
        if (pos < n) continue;
        // The table stores hashes: confirm the tokens really match (a collision proposes nothing
        // at this length rather than garbage).
        if (!std::equal(ctx.begin() + (pos - n), ctx.begin() + pos, ctx.end() - n)) continue;
        int32_t m = int32_t(std::min<int64_t>(want, len - pos));
        std::copy_n(ctx.begin() + pos, m, out.begin());
        return m;
    }
    ++stats_.empty;
    return 0;
}

void ngram_drafter::observe(int32_t accepted, int32_t proposed) {
    drafter::observe(accepted, proposed);
    if (proposed <= 0) return;
    if (accepted >= proposed)
        limit_ = std::min(p_.max_draft, limit_ * 2);
    else
        limit_ = std::max(1, accepted + 1);
}

}  // namespace sluice
