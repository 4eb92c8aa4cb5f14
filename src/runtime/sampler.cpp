#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "runtime/philox.h"

namespace sluice {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

}  // namespace

keyed_sampler::keyed_sampler(int32_t n_vocab, sampling_params params)
    : n_vocab_(n_vocab), params_(std::move(params)) {
    if (n_vocab_ <= 0) fail("sampler: n_vocab: expected > 0, got {}", n_vocab_);
    const auto& p = params_;
    if (!std::isfinite(p.temperature)) fail("sampler: temperature: expected a finite value, got {}", p.temperature);
    if (!(p.top_p > 0.0f)) fail("sampler: top_p: expected > 0, got {}", p.top_p);
    if (std::isnan(p.min_p) || p.min_p > 1.0f) fail("sampler: min_p: expected a value <= 1, got {}", p.min_p);
    if (p.penalty_last_n < -1) fail("sampler: penalty_last_n: expected -1 (all), 0 (off) or > 0, got {}", p.penalty_last_n);
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
        fail("sampler: repeat_penalty: expected a finite value > 0, got {}", p.repeat_penalty);
    if (!std::isfinite(p.frequency_penalty) || !std::isfinite(p.presence_penalty))
        fail("sampler: frequency/presence penalty: expected finite values, got {} and {}",
             p.frequency_penalty, p.presence_penalty);
    for (const auto& [id, bias] : p.logit_bias) {
        if (id < 0 || id >= n_vocab_) fail("sampler: logit_bias: token id {} is outside the vocabulary [0, {})", id, n_vocab_);
        if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
            fail("sampler: logit_bias: token {}: expected a finite bias or -inf, got {}", id, bias);
    }
    // Below 1e-6 the temperature decodes greedily: logits / t overflow to inf for t below
    // ~1e-35 (every negative logit became -inf, read as banned: a run emitted EOS at once), and
    // from 1e-6 down the keyed pick already differs from the greedy one only between logits
    // closer than a millionth of the Gumbel noise.
    greedy_ = p.temperature < k_min_sampling_temperature || p.top_k == 1;
    work_.assign(size_t(n_vocab_), 0.0f);
    order_.assign(size_t(n_vocab_), 0);
    counts_.assign(size_t(n_vocab_), 0);
}

double keyed_sampler::gumbel(uint64_t seed, int64_t position, int32_t id) {
    uint64_t p = uint64_t(position);
    philox4x32 r = philox4x32_10(uint32_t(p), uint32_t(id), uint32_t(p >> 32), 0u, uint32_t(seed), uint32_t(seed >> 32));
    double u = philox_open_unit(r.v[0]);
    return -std::log(-std::log(u));
}

void keyed_sampler::apply_bias_and_penalties(std::span<const int32_t> history) {
    const auto& p = params_;
    for (const auto& [id, bias] : p.logit_bias) work_[size_t(id)] += bias;

    bool any_penalty = p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    if (!any_penalty || p.penalty_last_n == 0 || history.empty()) return;
    size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
    std::span<const int32_t> window = history.subspan(history.size() - n);
    // counts_ is all zero between picks: count, apply once per id, and zero it again, touching
    // only the ids in the window (no O(n_vocab) pass).
    for (int32_t t : window)
        if (t >= 0 && t < n_vocab_) ++counts_[size_t(t)];
    for (int32_t t : window) {
        if (t < 0 || t >= n_vocab_) continue;
        int32_t c = counts_[size_t(t)];
        if (c == 0) continue;  // already applied
        float& l = work_[size_t(t)];
        l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
        l -= float(c) * p.frequency_penalty + p.presence_penalty;
        counts_[size_t(t)] = 0;
    }
}

void keyed_sampler::prepare(const float* logits, std::span<const int32_t> history) {
    for (int32_t i = 0; i < n_vocab_; ++i) {
        float l = logits[i];
        work_[size_t(i)] = std::isnan(l) ? neg_inf : l;
    }
    apply_bias_and_penalties(history);

    if (greedy_) {
        // Strict '>': ties stay with the lowest id (kernels::argmax_first's rule).
        order_[0] = static_cast<int32_t>(kernels::argmax_first(work_.data(), n_vocab_));
        n_kept_ = 1;
        return;
    }

    const float t = params_.temperature;
    for (int32_t i = 0; i < n_vocab_; ++i) work_[size_t(i)] /= t;

    // Banned ids (-inf) are never candidates; the rest in id order.
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab_; ++i)
        if (work_[size_t(i)] != neg_inf) order_[size_t(n++)] = i;
    if (n == 0) {  // everything banned: fall back to the lowest id rather than fail mid-request
        order_[0] = 0;
        n_kept_ = 1;
        return;
    }

    const float* w = work_.data();
    auto better = [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    const auto& p = params_;
    // Every filter keeps a prefix of the candidates in (logit desc, id asc) order, so the kept
    // set is the shortest of the prefixes; the code sorts only as much as it must (a full sort
    // of 150k ids per token would cost more than the rest of the pick), and because the order
    // is a strict total order, how much was sorted never changes the set.
    bool sorted = false;  // order_[0, n) in (logit desc, id asc) order
    if (p.top_k > 0 && p.top_k < n) {
        std::partial_sort(order_.begin(), order_.begin() + p.top_k, order_.begin() + n, better);
        n = p.top_k;
        sorted = true;
    }
    if (p.top_p >= 1.0f && p.min_p <= 0.0f) {
        n_kept_ = n;
        return;
    }
    double lmax = w[order_[0]];
    if (!sorted)
        for (int32_t j = 1; j < n; ++j) lmax = std::max(lmax, double(w[order_[size_t(j)]]));
    // top_p's mass is over the top_k survivors, summed in their current (deterministic) order.
    double z = 0.0;
    if (p.top_p < 1.0f)
        for (int32_t j = 0; j < n; ++j) z += std::exp(double(w[order_[size_t(j)]]) - lmax);

    int32_t limit = n;  // min_p's prefix length
    if (p.min_p > 0.0f) {
        // p_i >= min_p * p_max as a logit threshold: no exp per id.
        const double threshold = lmax + std::log(double(p.min_p));
        auto passes = [w, threshold](int32_t id) { return double(w[id]) >= threshold; };
        if (sorted) {
            limit = 1;
            while (limit < n && passes(order_[size_t(limit)])) ++limit;
        } else {
            limit = int32_t(std::partition(order_.begin(), order_.begin() + n, passes) - order_.begin());
        }
    }
    if (p.top_p < 1.0f) {
        // Walk the sorted prefix until the mass reaches top_p, sorting it in growing chunks.
        int32_t done = sorted ? limit : 0;  // order_[0, done) sorted and final
        double cum = 0.0;
        int32_t keep = limit;
        for (int32_t j = 0; j < limit; ++j) {
            if (j == done) {
                int32_t next = std::min(limit, std::max(64, done * 4));
                std::partial_sort(order_.begin() + done, order_.begin() + next, order_.begin() + limit, better);
                done = next;
            }
            cum += std::exp(double(w[order_[size_t(j)]]) - lmax) / z;
            if (cum >= double(p.top_p)) {
                keep = j + 1;
                break;
            }
        }
        limit = keep;
    }
    n_kept_ = limit;
}

int32_t keyed_sampler::pick(const float* logits, int64_t position, std::span<const int32_t> history) {
    prepare(logits, history);
    if (greedy_ || n_kept_ == 1) return order_[0];
    // Start from the best logit's score: an id whose logit is more than the largest possible
    // Gumbel value below the best score can neither win nor tie, so its noise is never computed.
    // The largest u is 1 - 2^-33, so -log(u) >= 2^-33 and g <= 33 ln 2 = 22.87; 23 is a safe
    // bound. This only skips work: the pick is the one scoring every id gives.
    constexpr double gumbel_max = 23.0;
    int32_t top = order_[0];
    for (int32_t j = 1; j < n_kept_; ++j) {
        int32_t id = order_[size_t(j)];
        if (work_[size_t(id)] > work_[size_t(top)] || (work_[size_t(id)] == work_[size_t(top)] && id < top)) top = id;
    }
    int32_t best = top;
    double best_score = double(work_[size_t(top)]) + gumbel(params_.seed, position, top);
    for (int32_t j = 0; j < n_kept_; ++j) {
        int32_t id = order_[size_t(j)];
        if (id == top || double(work_[size_t(id)]) + gumbel_max < best_score) continue;
        double s = double(work_[size_t(id)]) + gumbel(params_.seed, position, id);
        if (best < 0 || s > best_score || (s == best_score && id < best)) {
            best = id;
            best_score = s;
        }
    }
    return best;
}

}  // namespace sluice
