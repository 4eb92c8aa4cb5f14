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

// The acceptance assumed for a match length before any verdict of the request. Measured with
// greedy SmolLM2-135M-Instruct on bench/workloads (2026-11-29; 1,005 generated tokens, the
// proposal of the longest most recent match checked against the serial output): a one-token
// match was right 25% of the time (22/87), two 48% (22/46), three 67% (20/30), four 76%, five
// to seven 79-92%, eight to eleven 80-100%, twelve and more 98% (341/347). Sampled decoding
// keeps fewer; the request's own verdicts move the estimate.
constexpr std::array<double, ngram_drafter::k_buckets> k_prior = {
    0.0, 0.25, 0.45, 0.60, 0.70, 0.78, 0.83, 0.87, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.96, 0.97};

// Backward match length of the context's suffix against the text ending just before `pos`,
// counted up to `cap`.
int32_t match_length(std::span<const int32_t> ctx, int32_t pos, int32_t cap) {
    const int64_t len = int64_t(ctx.size());
    int32_t l = 0;
    while (l < cap && pos - 1 - l >= 0 && ctx[size_t(pos - 1 - l)] == ctx[size_t(len - 1 - l)]) ++l;
    return l;
}

}  // namespace

ngram_drafter::ngram_drafter(ngram_drafter_params p) : p_(p) {
    if (p_.min_ngram < 1 || p_.max_ngram < p_.min_ngram || p_.max_ngram > 8)
        fail("ngram drafter: n-gram lengths: expected 1 <= min <= max <= 8, got min {} max {}", p_.min_ngram, p_.max_ngram);
    if (p_.max_draft < 1 || p_.max_candidates < 1 || p_.max_match < p_.max_ngram)
        fail("ngram drafter: limits: expected max_draft >= 1, max_candidates >= 1 and max_match >= max_ngram, got {}, {} "
             "and {}",
             p_.max_draft, p_.max_candidates, p_.max_match);
    if (!(p_.min_chain_probability >= 0.0 && p_.min_chain_probability < 1.0) || !(p_.prior_weight > 0.0))
        fail("ngram drafter: expected min_chain_probability in [0, 1) and prior_weight > 0, got {} and {}",
             p_.min_chain_probability, p_.prior_weight);
    reset();
}

void ngram_drafter::reset() {
    indexed_ = 0;
    keys_.assign(1024, 0);
    vals_.assign(1024, 0);
    used_ = 0;
    prev_.assign(size_t(p_.max_ngram - p_.min_ngram + 1), {});
    kept_.fill(0.0);
    tried_.fill(0.0);
    last_match_ = 0;
    last_n_ = 0;
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

int32_t ngram_drafter::insert(uint64_t key, int32_t pos) {
    if ((used_ + 1) * 2 > keys_.size()) grow();  // load factor <= 1/2 keeps probes short
    size_t mask = keys_.size() - 1;
    for (size_t i = size_t(key) & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) {  // a later occurrence: it becomes the latest, the chain keeps the rest
            int32_t before = vals_[i];
            vals_[i] = pos;
            return before;
        }
        if (keys_[i] == 0) {
            keys_[i] = key;
            vals_[i] = pos;
            ++used_;
            return -1;
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
    for (auto& chain : prev_) chain.resize(ctx.size(), -1);
    for (int64_t j = indexed_; j <= last_end; ++j)
        for (int32_t n = p_.min_ngram; n <= p_.max_ngram && j - n + 1 >= 0; ++n)
            prev_[size_t(n - p_.min_ngram)][size_t(j + 1)] = insert(ngram_key(ctx, j, n), int32_t(j + 1));
    indexed_ = std::max<int64_t>(indexed_, last_end + 1);
}

int32_t ngram_drafter::propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) {
    ++stats_.calls;
    last_match_ = 0;
    last_n_ = 0;
    // A context shorter than what was indexed is another request: start over.
    if (int64_t(ctx.size()) < indexed_ + 1 && indexed_ > 0) reset();
    index(ctx);
    int32_t want = std::min({max_n, p_.max_draft, int32_t(out.size())});
    int64_t len = int64_t(ctx.size());
    if (want <= 0 || len == 0) {
        ++stats_.empty;
        return 0;
    }
    // The longest n-gram with an earlier occurrence has, in its chain, every occurrence whose
    // backward match is at least n long: the longest match among the most recent candidates
    // wins, the most recent on ties (text nearby is likelier to be what is being copied).
    int32_t best_pos = -1, best_len = 0;
    for (int32_t n = int32_t(std::min<int64_t>(p_.max_ngram, len)); n >= p_.min_ngram && best_pos < 0; --n) {
        const std::vector<int32_t>& chain = prev_[size_t(n - p_.min_ngram)];
        int32_t pos = lookup(ngram_key(ctx, len - 1, n));
        for (int32_t c = 0; pos >= 0 && c < p_.max_candidates; ++c, pos = chain[size_t(pos)]) {
            // The table stores hashes: a candidate whose tokens do not really match (a collision)
            // is skipped rather than proposing garbage.
            int32_t l = match_length(ctx, pos, p_.max_match);
            if (l < n) continue;
            if (l > best_len) {
                best_len = l;
                best_pos = pos;
            }
        }
    }
    if (best_pos < 0) {
        ++stats_.empty;
        return 0;
    }
    // What followed the match. Past the end of the context the copy continues from the drafts
    // themselves (text repeating with period len - best_pos goes on repeating).
    const int64_t period = len - best_pos;
    double chain_p = 1.0;
    int32_t m = 0;
    for (; m < want; ++m) {
        chain_p *= acceptance(best_len + m);
        if (m > 0 && chain_p < p_.min_chain_probability) break;
        out[size_t(m)] = m < period ? ctx[size_t(best_pos + m)] : out[size_t(m - period)];
    }
    last_match_ = best_len;
    last_n_ = m;
    return m;
}

double ngram_drafter::acceptance(int32_t match_length) const {
    size_t b = size_t(std::clamp(match_length, 0, k_buckets - 1));
    if (b == 0) return 0.0;
    return (kept_[b] + k_prior[b] * p_.prior_weight) / (tried_[b] + p_.prior_weight);
}

bool ngram_drafter::confidence(std::span<double> out) const {
    if (out.size() > size_t(last_n_)) return false;
    for (size_t i = 0; i < out.size(); ++i) out[i] = acceptance(last_match_ + int32_t(i));
    return true;
}

void ngram_drafter::observe(int32_t accepted, int32_t proposed) {
    drafter::observe(accepted, proposed);
    if (proposed <= 0 || last_match_ <= 0) return;
    // Each draft up to the first rejection was a trial at its match length; the drafts after
    // it were never judged.
    for (int32_t j = 0; j < proposed && j <= accepted; ++j) {
        size_t b = size_t(std::min(last_match_ + j, k_buckets - 1));
        tried_[b] += 1.0;
        if (j < accepted) kept_[b] += 1.0;
    }
}

}  // namespace sluice
