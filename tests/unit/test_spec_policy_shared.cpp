// The depth policy as the serving engine uses it: one policy holds the window costs measured once
// per engine, and every request has a policy of its own that takes those costs (adopt_costs) and
// keeps its own acceptance, so one request whose drafts are never kept turns drafting off for
// itself only, while another request on the same costs keeps drafting.
#include "spec/depth_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace sluice {
namespace {

TEST(depth_policy_shared, a_request_takes_the_engines_costs_and_keeps_its_own_acceptance) {
    depth_policy engine;
    for (int32_t r = 1; r <= 16; ++r) engine.set_cost(r, 0.010 + 0.001 * (r - 1));
    depth_policy_params pp;
    pp.prior_acceptance = 0.3;
    depth_policy good(pp), bad(pp);
    good.adopt_costs(engine);
    bad.adopt_costs(engine);
    for (int32_t r = 1; r <= 16; ++r) {
        EXPECT_DOUBLE_EQ(good.cost(r), engine.cost(r));
        EXPECT_DOUBLE_EQ(bad.cost(r), engine.cost(r));
    }
    EXPECT_EQ(good.calibrated(), engine.calibrated());
    // One request's drafts are all kept, the other's never.
    for (int i = 0; i < 30; ++i) {
        good.record_acceptance(6, 6);
        bad.record_acceptance(0, 6);
    }
    EXPECT_GT(good.choose(), 3);
    EXPECT_FALSE(good.drafting_off());
    // Off for the bad one: its first window off probes (probe_depth drafts), the next runs without.
    EXPECT_EQ(bad.choose(), pp.probe_depth);
    EXPECT_TRUE(bad.drafting_off());
    EXPECT_EQ(bad.choose(), 0);
    // Taking newer costs (the engine's load moved) keeps each request's acceptance.
    const double a_good = good.acceptance(), a_bad = bad.acceptance();
    engine.record_cost(4, 0.030);
    good.adopt_costs(engine);
    bad.adopt_costs(engine);
    EXPECT_DOUBLE_EQ(good.acceptance(), a_good);
    EXPECT_DOUBLE_EQ(bad.acceptance(), a_bad);
    EXPECT_DOUBLE_EQ(good.cost(4), engine.cost(4));
    EXPECT_GT(engine.cost(4), 0.013);   // the slow window moved the shared curve
}

TEST(depth_policy_shared, drafting_turns_back_on_for_the_request_when_it_pays_again) {
    depth_policy engine;
    for (int32_t r = 1; r <= 16; ++r) engine.set_cost(r, 1.0 + 0.5 * (r - 1));   // a row costs half a window
    depth_policy_params pp;
    pp.probe_every = 3;
    pp.probe_depth = 2;
    depth_policy req(pp);
    req.adopt_costs(engine);
    for (int i = 0; i < 40; ++i) req.record_acceptance(0, 4);
    std::vector<int32_t> picks;
    for (int i = 0; i < 6; ++i) picks.push_back(req.choose());
    // Off: a probe in the first window off, then after 2 windows, then every third (probe_every),
    // so a change is noticed.
    EXPECT_EQ(picks, (std::vector<int32_t>{2, 0, 2, 0, 0, 2}));
    // The probes are kept from now on: drafting comes back.
    for (int i = 0; i < 40; ++i) req.record_acceptance(2, 2);
    EXPECT_GT(req.choose(), 0);
    EXPECT_FALSE(req.drafting_off());
    // A new request on the same policy object starts from the prior, drafting on.
    req.reset_request();
    EXPECT_FALSE(req.drafting_off());
    EXPECT_DOUBLE_EQ(req.acceptance(), pp.prior_acceptance);
}

TEST(depth_policy_shared, probes_come_after_1_2_4_windows_off_up_to_probe_every_and_start_again_when_drafting_turns_off) {
    depth_policy engine;
    for (int32_t r = 1; r <= 16; ++r) engine.set_cost(r, 1.0 + 0.5 * (r - 1));
    depth_policy_params pp;
    pp.probe_every = 8;
    pp.probe_depth = 3;
    depth_policy req(pp);
    req.adopt_costs(engine);
    auto probe_windows = [&](int n) {   // the windows (1-based) among the next n that probe
        std::vector<int> at;
        for (int i = 1; i <= n; ++i) {
            const int32_t k = req.choose();
            EXPECT_TRUE(k == 0 || k == 3) << "window " << i << ": " << k;
            if (k == 3) at.push_back(i);
        }
        return at;
    };
    for (int i = 0; i < 40; ++i) req.record_acceptance(0, 4);
    // Gaps of 1, 2, 4, 8, then 8: the probes' verdicts are not recorded, so drafting stays off.
    EXPECT_EQ(probe_windows(31), (std::vector<int>{1, 3, 7, 15, 23, 31}));
    EXPECT_TRUE(req.drafting_off());
    // Drafting back on (every draft kept), then off again: the next probe is in its first window off.
    for (int i = 0; i < 40; ++i) req.record_acceptance(4, 4);
    EXPECT_GT(req.choose(), 0);
    for (int i = 0; i < 40; ++i) req.record_acceptance(0, 4);
    EXPECT_EQ(probe_windows(4), (std::vector<int>{1, 3}));
    // A new request starts the interval at 1 too.
    for (int i = 0; i < 6; ++i) req.choose();
    req.reset_request();
    for (int i = 0; i < 40; ++i) req.record_acceptance(0, 4);
    EXPECT_EQ(probe_windows(1), (std::vector<int>{1}));
}

}  // namespace
}  // namespace sluice
