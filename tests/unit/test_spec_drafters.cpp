// The drafters and the depth policy on their own: prompt lookup proposes the continuation of
// the longest, most recent match from an incremental index, with a confidence per draft learned
// per match length; the draft model's tokenizer check names the mismatch; the depth policy
// maximises expected tokens per second on a cost curve that noise does not bend.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
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

// Matching on its own: no proposal is cut for lack of confidence.
ngram_drafter_params uncut(int32_t max_ngram = 4) {
    return ngram_drafter_params{.min_ngram = 1, .max_ngram = max_ngram, .max_draft = 16, .min_chain_probability = 0.0};
}

TEST(ngram_drafter, proposes_the_continuation_of_the_longest_match) {
    ngram_drafter d(uncut());
    // "1 2 3 4" occurred at the start, followed by "9 8 7 1 2 3 4".
    EXPECT_EQ(propose(d, {1, 2, 3, 4, 9, 8, 7, 1, 2, 3, 4}, 7), (std::vector<int32_t>{9, 8, 7, 1, 2, 3, 4}));
    EXPECT_EQ(d.last_match_length(), 4);
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
    EXPECT_EQ(d.last_match_length(), 0);
}

TEST(ngram_drafter, longest_backward_match_beats_a_more_recent_shorter_one) {
    // Chains keyed on 2-grams: "1 2" last occurred after "5 9" (match "9 1 2", 3 tokens, then
    // 60) and before that after "7 8 9" (match "7 8 9 1 2", 5 tokens, then 50). The context ends
    // with "7 8 9 1 2": the older, longer match is the text being copied.
    ngram_drafter d(uncut(2));
    EXPECT_EQ(propose(d, {7, 8, 9, 1, 2, 50, 5, 9, 1, 2, 60, 3, 7, 8, 9, 1, 2}, 1), (std::vector<int32_t>{50}));
    EXPECT_EQ(d.last_match_length(), 5);
}

TEST(ngram_drafter, continuation_repeats_past_the_end_of_the_context) {
    // "4 5 6 4 5 6 4 5": the match of "4 5" three tokens back continues "6 4 5", and past the
    // context's end the copy goes on from the drafts themselves: a repeating text keeps repeating.
    ngram_drafter d(uncut());
    EXPECT_EQ(propose(d, {1, 4, 5, 6, 4, 5, 6, 4, 5}, 8), (std::vector<int32_t>{6, 4, 5, 6, 4, 5, 6, 4}));
}

TEST(ngram_drafter, incremental_index_equals_a_rebuilt_one) {
    std::mt19937 rng(3);
    std::vector<int32_t> ctx;
    ngram_drafter grown(uncut());
    for (int step = 0; step < 400; ++step) {
        // A small alphabet so matches of every length happen.
        int32_t add = 1 + int32_t(rng() % 3);
        for (int32_t i = 0; i < add; ++i) ctx.push_back(int32_t(rng() % 6));
        ngram_drafter fresh(uncut());
        ASSERT_EQ(propose(grown, ctx), propose(fresh, ctx)) << "after " << ctx.size() << " tokens";
        EXPECT_EQ(grown.last_match_length(), fresh.last_match_length());
        EXPECT_EQ(grown.indexed(), int64_t(ctx.size()) - 1);
    }
}

TEST(ngram_drafter, confidence_grows_with_the_match_and_follows_the_verdicts) {
    ngram_drafter d;
    // Before any verdict: the prior, rising with the match length (a long match is a copy).
    for (int32_t l = 1; l < ngram_drafter::k_buckets - 1; ++l) EXPECT_LE(d.acceptance(l), d.acceptance(l + 1)) << l;
    EXPECT_LT(d.acceptance(1), 0.5);
    EXPECT_GT(d.acceptance(16), 0.9);
    EXPECT_EQ(d.acceptance(40), d.acceptance(16));

    // confidence(): draft i of a proposal matched over L tokens sits L + i tokens into the match.
    std::vector<int32_t> ctx = {1, 2, 3, 4, 9, 8, 7, 1, 2, 3, 4};
    auto p = propose(d, ctx, 6);
    ASSERT_FALSE(p.empty());
    std::vector<double> keep(p.size());
    ASSERT_TRUE(d.confidence(keep));
    for (size_t i = 0; i < keep.size(); ++i) EXPECT_DOUBLE_EQ(keep[i], d.acceptance(4 + int32_t(i)));
    std::vector<double> too_many(p.size() + 1);
    EXPECT_FALSE(d.confidence(too_many));

    // A proposal stops where keeping all of it becomes unlikely: a one-token match is a guess.
    d.reset();
    auto guess = propose(d, {5, 6, 7, 8, 9, 10, 11, 12, 13, 5}, 15);
    EXPECT_EQ(d.last_match_length(), 1);
    EXPECT_GE(guess.size(), 1u);
    EXPECT_LT(guess.size(), 8u);

    // Rejections at a match length lower its estimate; kept drafts raise theirs.
    double before1 = d.acceptance(1), before2 = d.acceptance(2);
    d.observe(0, int32_t(guess.size()));  // the first draft (match length 1) was wrong
    EXPECT_LT(d.acceptance(1), before1);
    EXPECT_EQ(d.acceptance(2), before2);   // the drafts after the rejection were never judged
    d.reset();
    d.reset_stats();
    propose(d, ctx, 6);
    double before5 = d.acceptance(5), before4 = d.acceptance(4);
    d.observe(2, 6);  // drafts at lengths 4 and 5 kept, the one at 6 rejected
    EXPECT_GT(d.acceptance(4), before4);
    EXPECT_GT(d.acceptance(5), before5);
    EXPECT_EQ(d.stats().proposed, 6);
    EXPECT_EQ(d.stats().accepted, 2);
    // A new request starts from the prior again.
    d.reset();
    EXPECT_EQ(d.acceptance(4), before4);
}

TEST(ngram_drafter, bad_parameters_are_rejected) {
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.min_ngram = 0}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.min_ngram = 3, .max_ngram = 2}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.max_ngram = 9}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.max_candidates = 0}), error);
    EXPECT_THROW(ngram_drafter(ngram_drafter_params{.min_chain_probability = 1.0}), error);
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

TEST(draft_model, catch_up_prefills_the_prompt_and_changes_no_draft) {
    // catch_up() commits the prompt's tokens but its last; propose() then forwards one row and
    // drafts what a drafter that was not warmed drafts.
    toy_target warm_draft(toy_params{}), cold_draft(toy_params{});
    const draft_model_params dp{.max_draft = 5, .prompt_chunk = 4};
    draft_model_drafter warm(warm_draft, sampling_params::greedy(), dp), cold(cold_draft, sampling_params::greedy(), dp);
    const std::vector<int32_t> ctx = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
    warm.catch_up(std::span<const int32_t>(ctx.data(), ctx.size() - 1));
    EXPECT_EQ(warm_draft.committed(), std::vector<int32_t>(ctx.begin(), ctx.end() - 1));
    warm.catch_up(std::span<const int32_t>(ctx.data(), ctx.size() - 1));   // nothing new: nothing done
    EXPECT_EQ(warm_draft.n_past(), int32_t(ctx.size()) - 1);
    std::vector<int32_t> a(16), b(16);
    ASSERT_EQ(warm.propose(ctx, 5, a), 5);
    ASSERT_EQ(cold.propose(ctx, 5, b), 5);
    EXPECT_EQ(a, b);
    EXPECT_EQ(warm_draft.committed(), ctx);
    // A context the state is not a prefix of is an error, as in propose().
    const std::vector<int32_t> other = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    EXPECT_THROW(warm.catch_up(other), error);
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

TEST(depth_policy, a_drafters_measured_cost_per_draft_makes_windows_shallower) {
    depth_policy_params pp;
    pp.prior_acceptance = 0.8;
    depth_policy p(pp);
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0 + 0.25 * (r - 1));
    auto brute = [&](double d) {   // argmax over k of E(k) / (cost(k + 1) + k d)
        int32_t want = 0;
        double best = 0.0;
        for (int32_t k = 0; k < 16; ++k) {
            const double tps = (1.0 - std::pow(0.8, k + 1)) / (1.0 - 0.8) / (1.0 + 0.25 * k + d * k);
            if (tps > best * (1.0 + 1e-9)) {
                best = tps;
                want = k;
            }
        }
        return want;
    };
    const int32_t free_depth = p.best_depth();
    EXPECT_EQ(free_depth, brute(0.0));
    // A draft model that costs half a one-row window a draft: the first sample sets the cost.
    p.record_draft_cost(3.0, 6);
    EXPECT_DOUBLE_EQ(p.draft_cost(), 0.5);
    EXPECT_EQ(p.best_depth(), brute(0.5));
    EXPECT_LT(p.best_depth(), free_depth);
    // Settled: later samples move it by at most cost_ema * ln 2 each (a descheduled drafter says little).
    p.record_draft_cost(600.0, 6);
    EXPECT_NEAR(p.draft_cost(), 0.5 * std::exp(pp.cost_ema * std::log(2.0)), 1e-12);
    p.record_draft_cost(-1.0, 3);   // clock glitches and empty proposals change nothing
    p.record_draft_cost(1.0, 0);
    EXPECT_NEAR(p.draft_cost(), 0.5 * std::exp(pp.cost_ema * std::log(2.0)), 1e-12);
    // The draft cost is the request's: taking an engine's window costs keeps it.
    depth_policy engine;
    for (int32_t r = 1; r <= 16; ++r) engine.set_cost(r, 2.0);
    const double d = p.draft_cost();
    p.adopt_costs(engine);
    EXPECT_DOUBLE_EQ(p.draft_cost(), d);
    EXPECT_DOUBLE_EQ(p.cost(3), 2.0);
    // A new request may draft with another drafter: its cost is measured again.
    p.reset_request();
    EXPECT_DOUBLE_EQ(p.draft_cost(), 0.0);
    EXPECT_DOUBLE_EQ(p.cost(3), 2.0);
}

TEST(depth_policy, no_probes_where_drafts_cannot_pay_even_when_all_are_kept) {
    depth_policy_params pp;
    pp.probe_every = 4;
    pp.probe_depth = 2;
    depth_policy p(pp);
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0 + 0.25 * (r - 1));
    for (int i = 0; i < 20; ++i) p.record_acceptance(0, 4);   // off
    EXPECT_TRUE(p.drafting_can_pay());                       // draft cost not measured yet
    // A draft costing a whole one-row window: k + 1 tokens for 1 + 0.25 k + k > k + 1 seconds.
    p.record_draft_cost(6.0, 6);
    EXPECT_FALSE(p.drafting_can_pay());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(p.choose(), 0) << "window " << i;
    // A cheaper drafter can pay again (every draft kept): the probes come back.
    depth_policy q(pp);
    for (int32_t r = 1; r <= 16; ++r) q.set_cost(r, 1.0 + 0.25 * (r - 1));
    for (int i = 0; i < 20; ++i) q.record_acceptance(0, 4);
    q.record_draft_cost(0.6, 6);
    EXPECT_TRUE(q.drafting_can_pay());
    EXPECT_EQ(q.choose(), 2);
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
    // Probes in the 1st window off, then 2 and 4 windows apart (probe_every 4).
    EXPECT_EQ(picks, (std::vector<int32_t>{2, 0, 2, 0, 0, 0, 2, 0}));
    // Good verdicts on flat costs turn it back on.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0);
    for (int i = 0; i < 50; ++i) p.record_acceptance(4, 4);
    EXPECT_GT(p.choose(), 0);
    EXPECT_FALSE(p.drafting_off());
}

TEST(depth_policy, a_proposal_is_cut_where_another_row_stops_paying) {
    depth_policy p;
    // A row costs half a one-row window more.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0 + 0.5 * (r - 1));
    auto brute = [&](const std::vector<double>& keep) {
        int32_t want = 0;
        double best = 1.0 / p.cost(1), e = 1.0, all = 1.0;
        for (size_t k = 1; k <= keep.size(); ++k) {
            all *= keep[k - 1];
            e += all;
            if (e / p.cost(int32_t(k) + 1) > best * (1.0 + 1e-9)) {
                best = e / p.cost(int32_t(k) + 1);
                want = int32_t(k);
            }
        }
        return want;
    };
    // A copy in progress: deep.
    std::vector<double> copy(15, 0.98);
    EXPECT_EQ(p.choose_for(copy), brute(copy));
    EXPECT_GE(p.choose_for(copy), 6);
    EXPECT_FALSE(p.drafting_off());
    // A one-token guess does not pay for its row: this window runs without drafts.
    std::vector<double> guess = {0.25, 0.45, 0.6};
    EXPECT_EQ(p.choose_for(guess), 0);
    EXPECT_TRUE(p.drafting_off());
    // A draft that would pay only a little on the estimates (3% here) is not worth the risk of
    // a wider window that loses.
    std::vector<double> slim = {0.55};
    EXPECT_EQ(p.choose_for(slim), 0);
    // Confidence that falls along the proposal: cut where it falls.
    std::vector<double> fading = {0.97, 0.97, 0.97, 0.9, 0.3, 0.2, 0.2, 0.2};
    EXPECT_EQ(p.choose_for(fading), brute(fading));
    EXPECT_EQ(p.choose_for(fading), 4);
    // Free rows: every draft that might be kept goes in.
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0);
    EXPECT_EQ(p.choose_for(fading), 8);
    // Never more than the window holds.
    depth_policy small(depth_policy_params{.max_rows = 4});
    EXPECT_EQ(small.choose_for(copy), 3);
}

TEST(depth_policy, noisy_timings_never_make_a_deeper_window_look_cheaper) {
    depth_policy p;
    // Measured: 3 rows slower than 4 and 5 (one disturbed sample).
    p.set_cost(1, 1.0);
    p.set_cost(2, 1.2);
    p.set_cost(3, 2.0);
    p.set_cost(4, 1.4);
    p.set_cost(5, 1.8);
    for (int32_t r = 2; r <= 16; ++r) EXPECT_GE(p.cost(r), p.cost(r - 1)) << r;
    // The violators are pooled (their mean), the rest kept.
    EXPECT_DOUBLE_EQ(p.cost(2), 1.2);
    EXPECT_DOUBLE_EQ(p.cost(3), 1.7);
    EXPECT_DOUBLE_EQ(p.cost(4), 1.7);
    EXPECT_DOUBLE_EQ(p.cost(5), 1.8);
}

TEST(depth_policy, real_windows_move_costs_by_bounded_steps_and_together) {
    depth_policy p;
    for (int32_t r = 1; r <= 16; ++r) p.set_cost(r, 1.0 + 0.25 * (r - 1));
    // One window that lost its core for a while (100x) moves the estimate by a bounded step.
    p.record_cost(1, 100.0);
    EXPECT_LT(p.cost(1), 1.0 * std::pow(2.0, 0.2 + 0.05) + 1e-9);
    EXPECT_GT(p.cost(1), 1.0);
    // A machine that became twice as slow: one-row windows alone bring every size along (the
    // load factor is shared), so deeper windows do not look cheap by comparison.
    for (int i = 0; i < 60; ++i) p.record_cost(1, 2.0);
    EXPECT_NEAR(p.cost(1), 2.0, 0.05);
    EXPECT_GT(p.cost(8), 1.5 * (1.0 + 0.25 * 7));
    // Glitches are ignored.
    double c = p.cost(3);
    p.record_cost(3, 0.0);
    p.record_cost(3, -1.0);
    p.record_cost(0, 1.0);
    p.record_cost(17, 1.0);
    EXPECT_EQ(p.cost(3), c);
}

// Sleeps a time that grows with the rows; one call is disturbed by a long stall.
class sleepy_target final : public verify_target {
public:
    int32_t n_vocab() const override { return 4; }
    int32_t n_past() const override { return 0; }
    void forward(std::span<const int32_t> tokens, float* logits) override {
        std::fill(logits, logits + tokens.size() * 4, 0.0f);
        auto ms = std::chrono::microseconds(2000 + 1000 * int64_t(tokens.size() - 1));
        if (tokens.size() == 5 && ++calls5_ == 2) ms += std::chrono::milliseconds(200);
        std::this_thread::sleep_for(ms);
    }
    void commit(int32_t) override {}

private:
    int calls5_ = 0;
};

TEST(depth_policy, calibration_drops_a_disturbed_sample) {
    sleepy_target t;
    depth_policy p;
    std::vector<float> logits(16 * 4);
    p.calibrate(t, logits, 1);
    for (int32_t r = 2; r <= 16; ++r) EXPECT_GE(p.cost(r), p.cost(r - 1)) << r;
    // True costs 2 ms + 1 ms per extra row: 6 ms at 5 rows, 17 ms at 16. The 200 ms stall of
    // one 5-row sample is not in the estimate.
    EXPECT_LT(p.cost(5), 0.8 * p.cost(16));
    EXPECT_GT(p.cost(16), 2.0 * p.cost(1));
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

// The MTP interface compiles against a minimal head (the real one: tests/unit/test_hybrid_mtp.cpp):
// a head whose logits favour the token it was given.
struct echo_head final : mtp_head {
    int32_t past = 0;
    std::vector<float> l = std::vector<float>(8, 0.0f), h = std::vector<float>(2, 0.0f);
    int32_t n_vocab() const override { return 8; }
    int32_t n_embd() const override { return 2; }
    int32_t max_rows() const override { return 1; }
    int32_t n_ctx() const override { return 64; }
    int32_t n_past() const override { return past; }
    void truncate(int32_t n) override { past = n; }
    void target_hidden(const float* r, int64_t n, float* out) const override { std::copy(r, r + 2 * n, out); }
    void forward(const float*, std::span<const int32_t> t, int32_t pos0, bool) override {
        std::fill(l.begin(), l.end(), 0.0f);
        l[size_t(t.back())] = 1.0f;
        past = pos0 + int32_t(t.size());
    }
    const float* out_hidden(int32_t) const override { return h.data(); }
    const float* logits() const override { return l.data(); }
    int64_t row_floats() const override { return 0; }   // no cache rows
    void save_rows(int32_t, float*) const override {}
    void load_rows(const float*, int32_t n) override { past = n; }
};

TEST(mtp, interface_is_usable) {
    echo_head hd;
    std::vector<float> hidden(2, 0.0f);
    const int32_t t = 5;
    hd.forward(hidden.data(), std::span<const int32_t>(&t, 1), 0, true);
    EXPECT_EQ(hd.n_past(), 1);
    EXPECT_EQ(hd.logits()[5], 1.0f);
    hd.truncate(0);
    EXPECT_EQ(hd.n_past(), 0);
}

}  // namespace
}  // namespace sluice
