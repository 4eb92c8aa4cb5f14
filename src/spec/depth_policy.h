// depth_policy: how many drafts to put in the next verify window.
//
// A window of r rows costs c(r). The curve is measured at start (calibrate(): several
// interleaved rounds over the window sizes, the median of each, made non-decreasing in r, so
// one disturbed timing on a busy machine moves nothing) and then follows the real windows: a
// load factor common to every size, plus a slow correction of the size itself, each sample
// clipped to a factor of 2 (a window that was descheduled says little about the next).
//
// Two ways to choose:
// - choose_for(keep): the drafter gave, for each draft of its proposal, the probability that it
//   is kept given the drafts before it were (prompt lookup knows: a long match is a copy, a
//   one-token match a guess). k drafts yield E(k) = 1 + p0 + p0 p1 + ... tokens; the policy
//   keeps the k that maximises E(k) / (c(k + 1) + k * d), d the drafter's cost per draft. Every
//   window decides afresh, so drafting stops at once when nothing matches and resumes at the
//   first match that pays.
// - choose(): for drafters without such an estimate (a draft model), one running acceptance a
//   (each draft kept with probability a given the ones before were): E(k) = (1 - a^(k+1)) /
//   (1 - a). When k = 0 wins, drafting is off for the request, and it tries probe_depth drafts
//   in its first window off, then after 2, 4, ... windows off, up to probe_every apart, so
//   a changed acceptance is noticed. The first probes come soon because until a verdict the
//   prior alone decides: where windows cost nearly their rows' worth (a MoE whose rows route to
//   different experts) it can keep drafting off, and with a probe only every 32 windows a
//   64-token request learns from two at most (session 48, H100, the 35B shape at a 12 GiB
//   budget, acceptance 0.87: the policy's windows averaged 1.03 rows, 1.05x serial, where fixed
//   windows of 4 ran 1.28x). The interval starts again at 1 each time drafting turns off.
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
    double cost_ema = 0.2;            // weight of a real window's timing in the load factor (log scale)
    double shape_ema = 0.05;          // and in the cost of its own window size
    int32_t probe_every = 32;         // while off, the most windows between probes (1, 2, 4, ... up to this)
    int32_t probe_depth = 2;          // drafts in a probe window
};

class depth_policy {
public:
    explicit depth_policy(depth_policy_params p = {});

    // Times windows of 1..8, 10, 12, 14 and 16 rows (those up to max_rows; the others are
    // interpolated) on the target, `rounds` interleaved rounds, keeping the median of each size.
    // The rows are never committed, so the target's state is unchanged.
    // logits: [max_rows, n_vocab] scratch; token: any valid id to fill the windows with.
    // room: the rows the target's context holds past n_past(); windows stop there (sizes beyond
    // it are taken as the largest measured one's cost, as for sizes past max_rows).
    void calibrate(verify_target& target, std::span<float> logits, int32_t token, int32_t rounds = 5,
                   int32_t room = 16);
    bool calibrated() const { return calibrated_; }

    void set_cost(int32_t rows, double seconds);     // overrides (tests, or a stored calibration)
    void record_cost(int32_t rows, double seconds);  // a real window's time: load factor and size
    void set_draft_cost(double seconds_per_draft);   // an override (tests)
    // A drafter's time to propose `drafts` drafts (a draft model's or an MTP head's forwards,
    // its catch-up on the last window's tokens included): the per-draft cost the choices add to
    // a window's, k drafts costing k of it. Prompt lookup's proposals cost next to nothing and
    // are not timed. The first sample sets it; later ones move it as record_cost moves the load
    // factor (cost_ema, clipped to a factor of 2). One sample is trusted: the verifier times only
    // a drafting window that follows another, and on the shipped pair (models/README.md, the
    // 2-core VM) drafting stopped before a second such window, so waiting for a second sample
    // left the probes running, each catching the draft model up on up to 32 windows: decode
    // ~0.8x serial, against ~0.93x with one (bench/RESULTS.md, session 50). An inflated first
    // sample can so turn drafting off for the rest of its request (reset_request() forgets it).
    void record_draft_cost(double seconds, int32_t drafts);
    double draft_cost() const { return draft_cost_; }
    // The verifier's verdict on a window: the first `accepted` of `proposed` drafts were kept.
    void record_acceptance(int32_t accepted, int32_t proposed);

    // Drafts for the next window, 0..max_rows-1 (0: this window runs without drafting).
    int32_t choose();
    // Of a proposal whose draft i is kept with probability keep[i] (given drafts 0..i-1 were),
    // how many drafts to put in the window: 0..min(keep.size(), max_rows - 1).
    int32_t choose_for(std::span<const double> keep);
    // Start of a request: acceptance back to the prior, drafting on and the draft cost
    // unmeasured (the next request may draft with another drafter); window costs are kept.
    void reset_request();
    // Takes `other`'s window costs (measured shape, load factor, calibrated) and keeps this
    // policy's acceptance and draft cost (both belong to the request's drafter): the serving
    // engine measures the window costs once and gives every request a policy of its own. No
    // allocation (fixed arrays).
    void adopt_costs(const depth_policy& other);

    double acceptance() const;
    // Seconds: the measured shape (made non-decreasing in rows; sizes not measured interpolated
    // from the nearest measured ones, flat beyond them) times the load factor.
    double cost(int32_t rows) const;
    double expected_tokens(int32_t drafts) const;
    double tokens_per_second(int32_t drafts) const;
    int32_t best_depth() const;       // argmax of tokens_per_second, smallest on ties
    // False when no window of drafts could beat a serial step even with every draft kept, at the
    // measured window and draft costs (a draft model nearly as slow as the target): choose()
    // then stops probing, since no verdict could turn drafting back on. True while the draft
    // cost is unmeasured.
    bool drafting_can_pay() const;
    bool drafting_off() const { return off_; }

private:
    void smooth();                    // shape_ -> smooth_

    depth_policy_params p_;
    std::array<double, 17> shape_{};  // [rows] seconds at load factor 1, 0 = not measured
    std::array<double, 17> smooth_{}; // [rows] shape_ made non-decreasing and filled in, 0 = nothing measured
    double scale_ = 1.0;              // load factor: real windows' time over the measured shape
    double draft_cost_ = 0.0;         // seconds a draft, 0 = not measured (the request's drafter)
    double successes_ = 0.0, trials_ = 0.0;
    bool calibrated_ = false;
    bool off_ = false;
    int32_t off_windows_ = 0;         // windows off since the last probe
    int32_t probe_interval_ = 1;      // windows off before the next probe: 1, 2, 4, ... probe_every
};

}  // namespace sluice
