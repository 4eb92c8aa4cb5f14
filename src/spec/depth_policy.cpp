#include "spec/depth_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace sluice {

depth_policy::depth_policy(depth_policy_params p) : p_(p) {
    if (p_.max_rows < 1 || p_.max_rows > 16) fail("depth policy: max_rows: expected 1..16, got {}", p_.max_rows);
    if (!(p_.prior_acceptance >= 0.0 && p_.prior_acceptance <= 1.0) || !(p_.prior_weight > 0.0))
        fail("depth policy: prior: expected acceptance in [0, 1] and weight > 0, got {} and {}", p_.prior_acceptance,
             p_.prior_weight);
    if (!(p_.decay > 0.0 && p_.decay <= 1.0) || !(p_.cost_ema > 0.0 && p_.cost_ema <= 1.0))
        fail("depth policy: decay and cost_ema: expected values in (0, 1], got {} and {}", p_.decay, p_.cost_ema);
    if (p_.probe_every < 1 || p_.probe_depth < 1) fail("depth policy: probe_every and probe_depth: expected >= 1");
}

void depth_policy::calibrate(verify_target& target, std::span<float> logits, int32_t token, int32_t rounds,
                             int32_t room) {
    if (room < 1) fail("depth policy: calibrate: no room in the context for a window (room {})", room);
    size_t nv = size_t(target.n_vocab());
    if (logits.size() < size_t(p_.max_rows) * nv)
        fail("depth policy: calibrate: logits scratch: expected {} floats, got {}", size_t(p_.max_rows) * nv,
             logits.size());
    // Every size up to 8 (where kernels change their row blocking), then every other one: the
    // cost between two measured sizes is close to linear, and this halves the start-up time.
    std::vector<int32_t> sizes;
    const int32_t largest = std::min(p_.max_rows, room);
    for (int32_t r : {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16})
        if (r <= largest) sizes.push_back(r);
    if (sizes.back() != largest) sizes.push_back(largest);
    std::vector<int32_t> window(size_t(p_.max_rows), token);
    target.forward(std::span<const int32_t>(window.data(), 1), logits.data());  // warm-up, not timed
    // Rounds interleave the sizes, so a burst of interference on a shared machine lands on one
    // sample of several sizes rather than on every sample of one size; the median drops it.
    rounds = std::max(1, rounds);
    std::vector<std::vector<double>> samples(sizes.size());
    for (int32_t round = 0; round < rounds; ++round)
        for (size_t i = 0; i < sizes.size(); ++i) {
            auto t0 = std::chrono::steady_clock::now();
            target.forward(std::span<const int32_t>(window.data(), size_t(sizes[i])), logits.data());
            samples[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    target.commit(0);  // nothing of the calibration stays
    shape_.fill(0.0);
    scale_ = 1.0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<double>& v = samples[i];
        std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
        shape_[size_t(sizes[i])] = std::max(v[v.size() / 2], 1e-9);
    }
    smooth();
    calibrated_ = true;
}

void depth_policy::set_cost(int32_t rows, double seconds) {
    if (rows < 1 || rows > 16 || !(seconds > 0.0)) fail("depth policy: set_cost: expected rows 1..16 and seconds > 0");
    shape_[size_t(rows)] = seconds / scale_;
    smooth();
}

namespace {
// log(sample / estimate), clipped to a factor of 2: one timing that lost its core for a while
// moves an estimate by at most its weight times ln 2.
double clipped_log_ratio(double sample, double estimate) {
    return std::clamp(std::log(sample / estimate), -std::log(2.0), std::log(2.0));
}
}  // namespace

void depth_policy::record_cost(int32_t rows, double seconds) {
    if (rows < 1 || rows > 16 || !(seconds > 0.0) || !std::isfinite(seconds)) return;  // a clock glitch
    double& s = shape_[size_t(rows)];
    if (s == 0.0) {
        s = seconds / scale_;
    } else {
        const double lr = clipped_log_ratio(seconds, scale_ * s);
        scale_ *= std::exp(p_.cost_ema * lr);
        s *= std::exp(p_.shape_ema * lr);
    }
    smooth();
}

void depth_policy::set_draft_cost(double seconds_per_draft) {
    if (!(seconds_per_draft >= 0.0) || !std::isfinite(seconds_per_draft))
        fail("depth policy: set_draft_cost: expected finite seconds >= 0, got {}", seconds_per_draft);
    draft_cost_ = seconds_per_draft;
}

void depth_policy::record_draft_cost(double seconds, int32_t drafts) {
    if (drafts <= 0 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;  // a clock glitch
    const double per_draft = std::max(seconds / double(drafts), 1e-12);
    draft_cost_ = draft_cost_ > 0.0 ? draft_cost_ * std::exp(p_.cost_ema * clipped_log_ratio(per_draft, draft_cost_))
                                    : per_draft;
}

void depth_policy::smooth() {
    // Pool adjacent violators over the measured sizes: the least-squares non-decreasing fit, so
    // a noisy size below a smaller one does not make a deeper window look cheaper.
    std::array<int32_t, 17> rows_of{};   // block -> first measured size in it
    std::array<double, 17> sum{}, cnt{};
    int32_t nb = 0;
    for (int32_t r = 1; r <= 16; ++r) {
        if (shape_[size_t(r)] == 0.0) continue;
        rows_of[size_t(nb)] = r;
        sum[size_t(nb)] = shape_[size_t(r)];
        cnt[size_t(nb)] = 1.0;
        ++nb;
        while (nb >= 2 && sum[size_t(nb - 2)] / cnt[size_t(nb - 2)] > sum[size_t(nb - 1)] / cnt[size_t(nb - 1)]) {
            sum[size_t(nb - 2)] += sum[size_t(nb - 1)];
            cnt[size_t(nb - 2)] += cnt[size_t(nb - 1)];
            --nb;
        }
    }
    smooth_.fill(0.0);
    if (nb == 0) return;
    // Each block's mean on its measured sizes; between measured sizes linear, flat beyond them.
    std::array<double, 17> fit{};
    for (int32_t b = 0; b < nb; ++b) {
        int32_t last = b + 1 < nb ? rows_of[size_t(b + 1)] : 17;
        for (int32_t r = rows_of[size_t(b)]; r < last; ++r)
            if (shape_[size_t(r)] != 0.0) fit[size_t(r)] = sum[size_t(b)] / cnt[size_t(b)];
    }
    for (int32_t r = 1; r <= 16; ++r) {
        if (fit[size_t(r)] != 0.0) {
            smooth_[size_t(r)] = fit[size_t(r)];
            continue;
        }
        int32_t lo = r - 1, hi = r + 1;
        while (lo >= 1 && fit[size_t(lo)] == 0.0) --lo;
        while (hi <= 16 && fit[size_t(hi)] == 0.0) ++hi;
        if (lo >= 1 && hi <= 16)
            smooth_[size_t(r)] =
                fit[size_t(lo)] + double(r - lo) / double(hi - lo) * (fit[size_t(hi)] - fit[size_t(lo)]);
        else
            smooth_[size_t(r)] = lo >= 1 ? fit[size_t(lo)] : fit[size_t(hi)];
    }
}

void depth_policy::record_acceptance(int32_t accepted, int32_t proposed) {
    if (proposed <= 0) return;
    // Each draft is a trial until the first rejection: `accepted` successes, plus one failure
    // when the window stopped early.
    successes_ = successes_ * p_.decay + double(accepted);
    trials_ = trials_ * p_.decay + double(accepted) + (accepted < proposed ? 1.0 : 0.0);
}

double depth_policy::acceptance() const {
    return (successes_ + p_.prior_acceptance * p_.prior_weight) / (trials_ + p_.prior_weight);
}

double depth_policy::cost(int32_t rows) const {
    rows = std::clamp(rows, 1, 16);
    // With nothing measured every window costs the same (the memory-bound decode the design assumes).
    return smooth_[size_t(rows)] > 0.0 ? scale_ * smooth_[size_t(rows)] : 1.0;
}

double depth_policy::expected_tokens(int32_t drafts) const {
    double a = acceptance();
    if (a >= 1.0) return double(drafts + 1);
    return (1.0 - std::pow(a, double(drafts + 1))) / (1.0 - a);
}

double depth_policy::tokens_per_second(int32_t drafts) const {
    return expected_tokens(drafts) / (cost(drafts + 1) + double(drafts) * draft_cost_);
}

int32_t depth_policy::best_depth() const {
    int32_t best = 0;
    double best_tps = tokens_per_second(0);
    for (int32_t k = 1; k < p_.max_rows; ++k) {
        double tps = tokens_per_second(k);
        if (tps > best_tps * (1.0 + 1e-9)) {  // a tie keeps the shallower window
            best = k;
            best_tps = tps;
        }
    }
    return best;
}

bool depth_policy::drafting_can_pay() const {
    if (draft_cost_ <= 0.0) return true;
    const double serial_tps = 1.0 / cost(1);
    for (int32_t k = 1; k < p_.max_rows; ++k)
        if (double(k + 1) / (cost(k + 1) + double(k) * draft_cost_) > serial_tps * (1.0 + 1e-9)) return true;
    return false;
}

int32_t depth_policy::choose() {
    int32_t k = best_depth();
    off_ = k == 0;
    if (!off_) {
        off_windows_ = 0;
        probe_interval_ = 1;
        return k;
    }
    if (p_.max_rows > 1 && drafting_can_pay() && ++off_windows_ >= probe_interval_) {
        off_windows_ = 0;
        probe_interval_ = std::min(2 * probe_interval_, p_.probe_every);
        return std::min(p_.probe_depth, p_.max_rows - 1);
    }
    return 0;
}

int32_t depth_policy::choose_for(std::span<const double> keep) {
    // A window with drafts must promise this much more than a serial one: the confidences are
    // estimates from a few verdicts and the costs timings on a shared machine, and a gamble
    // that loses costs a whole wider window. (bench/workloads replayed against the serial
    // output with the cost curve measured on the 2-core machine: 10% keeps the completion
    // workloads at or above 0.97x where 0% let them drop to 0.95x; the copy workloads
    // did not move.)
    constexpr double k_min_gain = 0.10;
    const int32_t n = std::min(int32_t(keep.size()), p_.max_rows - 1);
    int32_t best = 0;
    const double serial_tps = 1.0 / cost(1);
    double best_tps = serial_tps;
    double expected = 1.0, all_kept = 1.0;
    for (int32_t k = 1; k <= n; ++k) {
        all_kept *= std::clamp(keep[size_t(k - 1)], 0.0, 1.0);
        expected += all_kept;
        double tps = expected / (cost(k + 1) + double(k) * draft_cost_);
        if (tps > best_tps * (1.0 + 1e-9) && tps > serial_tps * (1.0 + k_min_gain)) {  // a tie keeps the shallower window
            best = k;
            best_tps = tps;
        }
    }
    off_ = best == 0;
    return best;
}

void depth_policy::adopt_costs(const depth_policy& other) {
    shape_ = other.shape_;
    smooth_ = other.smooth_;
    scale_ = other.scale_;
    calibrated_ = other.calibrated_;
}

void depth_policy::reset_request() {
    successes_ = 0.0;
    trials_ = 0.0;
    off_ = false;
    off_windows_ = 0;
    probe_interval_ = 1;
    draft_cost_ = 0.0;
}

}  // namespace sluice
