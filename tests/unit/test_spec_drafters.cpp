// The drafters and the depth policy on their own: prompt lookup proposes the continuation of
// the longest, most recent match from an incremental index and adapts its length; the draft
// model's tokenizer check names the mismatch; the depth policy maximises expected tokens per
// second.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "spec/depth_policy.h"
#include "spec/draft_model_drafter.h"
#include "spec/mtp.h"
#include "spec/ngram_drafter.h"
#include "spec/toy_target.h"

namespace sluice {
namespace {

std::vector<int32_t> propose(ngram_drafter& d, const std::vector<int32_t>& ctx, int32_t max_n = 16) {
    std::vector<int32_t> out(16);
    int32_t n = d.propose(ctx, max_n, out);
    out.resize(size_t(n));
    return out;
}

TEST(ngram_drafter, proposes_the_continuation_of_the_longest_match) {
    ngram_drafter d(ngram_drafter_params{.min_ngram = 1, .max_ngram = 4, .max_draft = 16, .initial_draft = 16});
    // "1 2 3 4" occurred at the start, followed by "9 8 1 2 3 4".
    EXPECT_EQ(propose(d, {1, 2, 3, 4, 9, 8, 7, 1, 2, 3, 4}), (std::vector<int32_t>{9, 8, 7, 1, 2, 3, 4}));
    d.reset();
    // "2 3" is more recent (followed by 6) but "1 2 3" is longer (followed by 5): longer wins.
    EXPECT_EQ(propose(d, {1, 2, 3, 5, 0, 2, 3, 6, 0, 1, 2, 3}, 1), (std::vector<int32_t>{5}));
    d.reset();
    // Same length: the most recent occurrence wins.
    EXPECT_EQ(propose(d, {5, 1, 7, 5, 1, 8, 5, 1}, 1), (std::vector<int32_t>{8}));
    d.reset();
    // Nothing to match.
    EXPECT_TRUE(propose(d, {1, 2, 3, 4, 5}).empty());
    EXPECT_EQ(d.stats().empty, 1);
}

TEST(ngram_drafter, incremental_index_equals_a_rebuilt_one) {
    std::mt19937 rng(3);
    std::vector<int32_t> ctx;
    ngram_drafter grown(ngram_drafter_params{.initial_draft = 16});
    for (int step = 0; step < 400; ++step) {
        // A small alphabet so matches of every length happen.
        int32_t add = 1 + int32_t(rng() % 3);
        for (int32_t i = 0; i < add; ++i) ctx.push_back(int32_t(rng() % 6));
        ngram_drafter fresh(ngram_drafter_params{.initial_draft = 16});
        ASSERT_EQ(propose(grown, ctx), propose(fresh, ctx)) << "after " << ctx.size() << " tokens";
        EXPECT_EQ(grown.indexed(), int64_t(ctx.size()) - 1);
    }
}

TEST(ngram_drafter, limit_shrinks_after_rejection_and_grows_after_full_acceptance) {
    ngram_drafter d(ngram_drafter_params{.max_draft = 12, .initial_draft = 8});
    EXPECT_EQ(d.current_limit(), 8);
    d.observe(2, 8);
    EXPECT_EQ(d.current_limit(), 3);
    d.observe(0, 3);
    EXPECT_EQ(d.current_limit(), 1);
    d.observe(1, 1);
    EXPECT_EQ(d.current_limit(), 2);
    d.observe(2, 2);
    d.observe(4, 4);
    d.observe(8, 8);
    EXPECT_EQ(d.current_limit(), 12);
    EXPECT_EQ(d.stats().proposed, 26);
    EXPECT_EQ(d.stats().accepted, 17);
    // The limit caps proposals.
    std::vector<int32_t> ctx;
    for (int i = 0; i < 40; ++i) ctx.push_back(i % 5);
    d.observe(0, 5);
    EXPECT_EQ(propose(d, ctx).size(), 1u);
}

TEST(ngram_drafter, bad_parameters_are_rejected) {
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.min_ngram = 0}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.min_ngram = 3, .max_ngram = 2}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.max_ngram = 9}), error);
}

TEST(draft_model, mismatched_tokenizer_is_rejected_with_the_token) {
    std::vector<std::string> target = {"<s>", "a", "b", "hello", "world"};
    std::vector<std::string> same = target;
    EXPECT_NO_THROW(check_vocab_compatible(target, same));
    std::vector<std::string> padded = target;
    padded.push_back("<pad0>");
    padded.push_back("<pad1>");
    EXPECT_NO_THROW(check_vocab_compatible(target, padded));
    EXPECT_THROW(check_vocab_compatible(target, padded, 1), error);
    std::vector<std::string> other = target;
    other[3] = "Hello";
    try {
        check_vocab_compatible(target, other);
        FAIL() << "a different token 3 must be rejected";
    } catch (const error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("token 3"), std::string::npos) << m;
        EXPECT_NE(m.find("'hello'"), std::string::npos) << m;
        EXPECT_NE(m.find("'Hello'"), std::string::npos) << m;
    }
}

TEST(draft_model, drafts_are_the_draft_models_own_continuation) {
    // A draft model identical to the target proposes exactly the target's greedy continuation,
    // and leaves its committed state equal to the context it was shown.
    toy_target draft(toy_params{});
    toy_target reference(toy_params{});
    draft_model_drafter dm(draft, sampling_params::greedy(), draft_model_params{.max_draft = 6, .prompt_chunk = 4});
    std::vector<int32_t> ctx = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
    std::vector<int32_t> out(16);
    int32_t n = dm.propose(ctx, 6, out);
    ASSERT_EQ(n, 6);
    EXPECT_EQ(draft.committed(), ctx);
    // Reference: one token at a time, greedy.
    std::vector<int32_t> seq = ctx;
    std::vector<float> logits(64 * 200);
    keyed_sampler g(200, sampling_params::greedy());
    for (int i = 0; i < 6; ++i) {
        reference.clear();
        reference.forward(seq, logits.data());
        int32_t t = g.pick(logits.data() + (seq.size() - 1) * 200, int64_t(seq.size()), seq);
        EXPECT_EQ(out[size_t(i)], t) << "draft " << i;
        seq.push_back(t);
    }
    // Next call: the context moved on by two tokens; the drafter catches up incrementally.
    ctx.push_back(out[0]);
    ctx.push_back(out[1]);
    dm.propose(ctx, 3, out);
    EXPECT_EQ(draft.committed(), ctx);
    // A context that is not a continuation of what the draft model holds is an error.
    std::vector<int32_t> other = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    EXPECT_THROW(dm.propose(other, 3, out), error);
}

TEST(depth_policy, expected_tokens_follow_the_geometric_series) {
    depth_policy_params pp;
    pp.prior_acceptance = 0.5;
    depth_policy p(pp);
    EXPECT_DOUBLE_EQ(p.acceptance(), 0.5);
    EXPECT_DOUBLE_EQ(p.expected_tokens(0), 1.0);
    EXPECT_DOUBLE_EQ(p.expected_tokens(1), 1.5);
    EXPECT_DOUBLE_EQ(p.expected_tokens(3), 1.875);
    // Verdicts move the estimate: 3 kept then a rejection is 3 of 4 trials.
    p.record_acceptance(3, 5);
    EXPECT_NEAR(p.acceptance(), (3.0 + 0.5 * 2.0) / (4.0 + 2.0), 1e-12);
    p.reset_request();
    EXPECT_DOUBLE_EQ(p.acceptance(), 0.5);
}

TEST(depth_policy, picks_the_depth_with_most_tokens_per_second) {
    depth_policy_params pp;
    pp.prior_acceptance = 0.8;
    depth_policy p(pp);
    // Flat costs: every draft is free, so the deepest window wins.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 0.01);
    EXPECT_EQ(p.best_depth(), 15);
    // Cost 1 + 0.25 (r - 1): brute force the optimum and compare.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0 + 0.25 * (r - 1));
    int32_t want = 0;
    double best = 0.0;
    for (int32_t k = 0; k < 16; ++k) {
        double tps = (1.0 - std::pow(0.8, k + 1)) / (1.0 - 0.8) / (1.0 + 0.25 * k);
        if (tps > best) {
            best = tps;
            want = k;
        }
    }
    EXPECT_EQ(p.best_depth(), want);
    EXPECT_GT(want, 0);
    // Interpolation between measured sizes.
    depth_policy q;
    q.set_cost(1, 1.0);
    q.set_cost(5, 2.0);
    EXPECT_DOUBLE_EQ(q.cost(3), 1.5);
    EXPECT_DOUBLE_EQ(q.cost(9), 2.0);
}

TEST(depth_policy, drafting_turns_off_while_it_does_not_pay_and_probes) {
    depth_policy_params pp;
    pp.prior_acceptance = 0.6;
    pp.probe_every = 4;
    pp.probe_depth = 2;
    depth_policy p(pp);
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, double(r));  // a row costs as much as a window
    for (int i = 0; i < 20; ++i) p.record_acceptance(0, 4);         // and drafts are never kept
    std::vector<int32_t> picks;
    for (int i = 0; i < 8; ++i) picks.push_back(p.choose());
    EXPECT_TRUE(p.drafting_off());
    EXPECT_EQ(picks, (std::vector<int32_t>{0, 0, 0, 2, 0, 0, 0, 2}));
    // Good verdicts on flat costs turn it back on.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0);
    for (int i = 0; i < 50; ++i) p.record_acceptance(4, 4);
    EXPECT_GT(p.choose(), 0);
    EXPECT_FALSE(p.drafting_off());
}

TEST(depth_policy, calibration_leaves_the_target_state_unchanged) {
    toy_target t(toy_params{});
    std::vector<float> logits(16 * 200);
    std::vector<int32_t> prompt = {1, 2, 3};
    t.forward(prompt, logits.data());
    t.commit(3);
    depth_policy p;
    p.calibrate(t, logits, 5);
    EXPECT_TRUE(p.calibrated());
    EXPECT_EQ(t.committed(), prompt);
    for (int32_t r = 1; r <= 16; ++r) EXPECT_GT(p.cost(r), 0.0);
    std::vector<float> small(200);
    EXPECT_THROW(p.calibrate(t, small, 5), error);
}

// The MTP interface compiles against a minimal head and fits the drafter's conventions.
struct echo_head final : mtp_head {
    int32_t depth() const override { return 1; }
    int32_t propose(std::span<const float>, int32_t last, int64_t, int32_t max_n, std::span<int32_t> out) override {
        if (max_n < 1) return 0;
        out[0] = last;
        return 1;
    }
};

TEST(mtp, interface_is_usable) {
    echo_head h;
    std::vector<int32_t> out(4);
    std::vector<float> hidden(8, 0.0f);
    EXPECT_EQ(h.propose(hidden, 42, 10, 4, out), 1);
    EXPECT_EQ(out[0], 42);
    EXPECT_EQ(h.propose(hidden, 42, 10, 0, out), 0);
}

}  // namespace
}  // namespace sluice
