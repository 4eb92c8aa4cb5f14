#include "runtime/simple_sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace sluice {

int32_t argmax(const float* logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

simple_sampler::simple_sampler(int32_t n_vocab, const simple_sampler_params& p)
    : p_(p), n_vocab_(n_vocab), rng_(p.seed), ids_(static_cast<size_t>(n_vocab)), probs_(static_cast<size_t>(n_vocab)) {
    if (n_vocab < 1) fail("sampler: n_vocab: expected >= 1, got {}", n_vocab);
    if (!std::isfinite(p.temperature)) fail("sampler: temperature: expected a finite number, got {}", p.temperature);
    if (!(p.top_p > 0.0f)) fail("sampler: top_p: expected > 0, got {}", p.top_p);
}

int32_t simple_sampler::pick(const float* logits) {
    if (p_.temperature <= 0.0f || p_.top_k == 1) return argmax(logits, n_vocab_);
    // Candidates ordered by (logit desc, id asc): a strict order, so the kept set is unique.
    int32_t n = n_vocab_;
    for (int32_t i = 0; i < n; ++i) ids_[static_cast<size_t>(i)] = i;
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (p_.top_k > 0 && p_.top_k < n) {
        std::partial_sort(ids_.begin(), ids_.begin() + p_.top_k, ids_.end(), better);
        n = p_.top_k;
    } else {
        std::sort(ids_.begin(), ids_.end(), better);
    }
    const double inv_t = 1.0 / p_.temperature;
    const double mx = logits[ids_[0]];
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        probs_[static_cast<size_t>(i)] = std::exp((logits[ids_[static_cast<size_t>(i)]] - mx) * inv_t);
        sum += probs_[static_cast<size_t>(i)];
    }
    for (int32_t i = 0; i < n; ++i) probs_[static_cast<size_t>(i)] /= sum;
    if (p_.top_p < 1.0f) {
        double cum = 0.0;
        int32_t keep = 0;
        while (keep < n && cum < p_.top_p) cum += probs_[static_cast<size_t>(keep++)];
        n = std::max(keep, 1);
    }
    if (p_.min_p > 0.0f) {
        const double floor = p_.min_p * probs_[0];
        int32_t keep = 1;
        while (keep < n && probs_[static_cast<size_t>(keep)] >= floor) ++keep;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; ++i) total += probs_[static_cast<size_t>(i)];
    double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    for (int32_t i = 0; i < n; ++i) {
        u -= probs_[static_cast<size_t>(i)];
        if (u < 0.0) return ids_[static_cast<size_t>(i)];
    }
    return ids_[static_cast<size_t>(n - 1)];
}

}  // namespace sluice
