// depth_policy: how many drafts to put in the next verify window.
//
// A window of r rows costs c(r) (measured: calibrate() at start, then a running average of
// every real window). With per-draft acceptance a (each draft kept with probability a given
// the ones before were), k drafts yield E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a)
// tokens. The policy picks the k in [0, max_rows - 1] that maximises E(k) / (c(k + 1) + k * d),
// d being the drafter's cost per draft token. When k = 0 wins, drafting is off for the request;
// every probe_every windows it tries probe_depth drafts so a changed acceptance is noticed.
// Which depth it picks changes only speed: drafted output equals serial output at any depth.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "spec/target.h"

namespace sluice {

struct depth_policy_params {
    int32_t max_rows = 16;            // the largest window, 1..16
    double prior_acceptance = 0.6;    // the acceptance assumed before any verdict
    double prior_weight = 2.0;        // how many pseudo-trials the prior counts for
    double decay = 0.95;              // per verdict: older verdicts fade, the estimate follows the text
    double cost_ema = 0.2;            // weight of a new window-cost sample in the running average
    int32_t probe_every = 32;         // while off, windows between probes
    int32_t probe_depth = 2;          // drafts in a probe window
};

class depth_policy {
public:
    explicit depth_policy(depth_policy_params p = {});

    // Times windows of 1..max_rows rows on the target (reps each, the fastest kept: the others
    // saw interference). The rows are never committed, so the target's state is unchanged.
    // logits: [max_rows, n_vocab] scratch; token: any valid id to fill the windows with.
    void calibrate(verify_target& target, std::span<float> logits, int32_t token, int32_t reps = 3);
    bool calibrated() const { return calibrated_; }

    void set_cost(int32_t rows, double seconds);     // overrides (tests, or a stored calibration)
    void record_cost(int32_t rows, double seconds);  // a real window's time: running average
    void set_draft_cost(double seconds_per_draft) { draft_cost_ = seconds_per_draft; }
    // The verifier's verdict on a window: the first `accepted` of `proposed` drafts were kept.
    void record_acceptance(int32_t accepted, int32_t proposed);

    // Drafts for the next window, 0..max_rows-1 (0: this window runs without drafting).
    int32_t choose();
    // Start of a request: acceptance back to the prior and drafting on; costs are kept.
    void reset_request();

    double acceptance() const;
    double cost(int32_t rows) const;  // measured, or interpolated from the nearest measured sizes
    double expected_tokens(int32_t drafts) const;
    double tokens_per_second(int32_t drafts) const;
    int32_t best_depth() const;       // argmax of tokens_per_second, smallest on ties
    bool drafting_off() const { return off_; }

private:
    depth_policy_params p_;
    std::array<double, 17> cost_{};   // [rows] seconds, 0 = not measured
    double draft_cost_ = 0.0;
    double successes_ = 0.0, trials_ = 0.0;
    bool calibrated_ = false;
    bool off_ = false;
    int32_t off_windows_ = 0;
};

}  // namespace sluice
