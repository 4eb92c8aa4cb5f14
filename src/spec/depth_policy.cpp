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

void depth_policy::calibrate(verify_target& target, std::span<float> logits, int32_t token, int32_t reps) {
    size_t nv = size_t(target.n_vocab());
    if (logits.size() < size_t(p_.max_rows) * nv)
        fail("depth policy: calibrate: logits scratch: expected {} floats, got {}", size_t(p_.max_rows) * nv,
             logits.size());
    std::vector<int32_t> window(size_t(p_.max_rows), token);
    target.forward(std::span<const int32_t>(window.data(), 1), logits.data());  // warm-up, not timed
    for (int32_t rows = 1; rows <= p_.max_rows; ++rows) {
        double best = 0.0;
        for (int32_t r = 0; r < std::max(1, reps); ++r) {
            auto t0 = std::chrono::steady_clock::now();
            target.forward(std::span<const int32_t>(window.data(), size_t(rows)), logits.data());
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = r == 0 ? s : std::min(best, s);
        }
        cost_[size_t(rows)] = std::max(best, 1e-9);
    }
    target.commit(0);  // nothing of the calibration stays
    calibrated_ = true;
}

void depth_policy::set_cost(int32_t rows, double seconds) {
    if (rows < 1 || rows > 16 || !(seconds > 0.0)) fail("depth policy: set_cost: expected rows 1..16 and seconds > 0");
    cost_[size_t(rows)] = seconds;
}

void depth_policy::record_cost(int32_t rows, double seconds) {
    if (rows < 1 || rows > 16 || !(seconds > 0.0)) return;  // a clock glitch is not worth failing a request
    double& c = cost_[size_t(rows)];
    c = c == 0.0 ? seconds : (1.0 - p_.cost_ema) * c + p_.cost_ema * seconds;
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
    if (cost_[size_t(rows)] > 0.0) return cost_[size_t(rows)];
    // Nearest measured sizes below and above: linear between them, flat beyond them; with
    // nothing measured every window costs the same (the memory-bound decode the design assumes).
    int32_t lo = rows - 1, hi = rows + 1;
    while (lo >= 1 && cost_[size_t(lo)] == 0.0) --lo;
    while (hi <= 16 && cost_[size_t(hi)] == 0.0) ++hi;
    bool has_lo = lo >= 1, has_hi = hi <= 16;
    if (has_lo && has_hi) {
        double t = double(rows - lo) / double(hi - lo);
        return cost_[size_t(lo)] + t * (cost_[size_t(hi)] - cost_[size_t(lo)]);
    }
    if (has_lo) return cost_[size_t(lo)];
    if (has_hi) return cost_[size_t(hi)];
    return 1.0;
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

int32_t depth_policy::choose() {
    int32_t k = best_depth();
    off_ = k == 0;
    if (!off_) {
        off_windows_ = 0;
        return k;
    }
    if (p_.max_rows > 1 && ++off_windows_ >= p_.probe_every) {
        off_windows_ = 0;
        return std::min(p_.probe_depth, p_.max_rows - 1);
    }
    return 0;
}

void depth_policy::reset_request() {
    successes_ = 0.0;
    trials_ = 0.0;
    off_ = false;
    off_windows_ = 0;
}

}  // namespace sluice
