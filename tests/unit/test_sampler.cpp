// keyed_sampler: the pick at a position is a pure function of (logits, params, history, seed,
// position), its filters keep exactly the documented sets, and its draws follow the softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "runtime/philox.h"
#include "runtime/sampler.h"

namespace sluice {
namespace {

sampling_params plain(float temperature, uint64_t seed = 1) {
    sampling_params p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

std::vector<int32_t> sorted_candidates(const keyed_sampler& s) {
    auto c = s.candidates();
    std::vector<int32_t> v(c.begin(), c.end());
    std::sort(v.begin(), v.end());
    return v;
}

TEST(sampler, greedy_ties_go_to_the_lowest_id) {
    std::vector<float> l = {0.5f, 1.0f, -3.0f, 2.0f, 1.0f, 2.0f, 2.0f};
    keyed_sampler greedy(7, sampling_params::greedy());
    EXPECT_TRUE(greedy.is_greedy());
    for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(greedy.pick(l.data(), p, {}), 3);
    sampling_params k1 = plain(1.0f);
    k1.top_k = 1;  // top_k 1 is greedy too
    keyed_sampler top1(7, k1);
    EXPECT_TRUE(top1.is_greedy());
    EXPECT_EQ(top1.pick(l.data(), 5, {}), 3);
    // NaN is -inf, not a winner.
    l[0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(greedy.pick(l.data(), 0, {}), 3);
}

// Temperatures far below any useful one (1e-38: logits / t overflowed, every negative logit
// became -inf and a run with only negative logits picked id 0, end of text) decode greedily.
TEST(sampler, vanishing_temperatures_decode_greedily) {
    const std::vector<float> l = {-5.0f, -1.0f, -3.0f, -0.5f, -2.0f};
    for (float t : {1e-38f, 1e-40f, 1e-45f, 1e-9f}) {
        keyed_sampler s(5, plain(t, 3));
        EXPECT_TRUE(s.is_greedy()) << t;
        for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(s.pick(l.data(), p, {}), 3) << t;
    }
    EXPECT_FALSE(keyed_sampler(5, plain(1e-6f, 3)).is_greedy());
}

TEST(sampler, same_logits_seed_and_position_give_the_same_pick) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> l(300);
    for (float& x : l) x = nd(rng);
    sampling_params sp = plain(0.9f, 1234);
    sp.top_k = 50;
    sp.top_p = 0.9f;
    keyed_sampler a(300, sp), b(300, sp);
    std::vector<int32_t> hist_a = {1, 2, 3}, hist_b = {9, 9};  // no penalties: history is irrelevant
    int differing_positions = 0;
    int32_t first = a.pick(l.data(), 0, hist_a);
    for (int64_t p = 0; p < 500; ++p) {
        int32_t x = a.pick(l.data(), p, hist_a);
        // A second sampler, the same sampler again, and a different (unused) history all agree.
        ASSERT_EQ(x, b.pick(l.data(), p, hist_b));
        ASSERT_EQ(x, a.pick(l.data(), p, hist_a));
        if (x != first) ++differing_positions;
    }
    // Different positions draw differently (same logits, fresh noise per position).
    EXPECT_GT(differing_positions, 100);
}

TEST(sampler, pick_is_gumbel_argmax_over_philox_noise) {
    const int32_t nv = 64;
    std::mt19937 rng(11);
    // Narrow logits (every id competes) and wide ones (most ids are skipped without their noise
    // being computed, which must not change the pick).
    for (float spread : {2.0f, 40.0f}) {
    std::uniform_real_distribution<float> ud(-spread, spread);
    std::vector<float> l(nv);
    for (float& x : l) x = ud(rng);
    const uint64_t seed = 0x1234567890abcdefull;
    keyed_sampler s(nv, plain(0.7f, seed));
    for (int64_t p = 0; p < 300; ++p) {
        int32_t want = -1;
        double best = 0.0;
        for (int32_t i = 0; i < nv; ++i) {
            philox4x32 r = philox4x32_10(uint32_t(p), uint32_t(i), 0u, 0u, 0x90abcdefu, 0x12345678u);
            double u = (double(r.v[0]) + 0.5) / 4294967296.0;
            double score = double(l[size_t(i)] / 0.7f) - std::log(-std::log(u));
            if (want < 0 || score > best) {
                want = i;
                best = score;
            }
        }
        ASSERT_EQ(s.pick(l.data(), p, {}), want) << "position " << p << " spread " << spread;
    }
    }
}

TEST(sampler, sampled_frequencies_follow_the_softmax) {
    const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    for (float temp : {1.0f, 0.5f}) {
        keyed_sampler s(6, plain(temp, 77));
        std::vector<double> prob(6);
        double z = 0.0;
        for (int i = 0; i < 6; ++i) z += prob[size_t(i)] = std::exp(double(l[size_t(i)]) / temp);
        const int n = 20000;
        std::vector<int> count(6, 0);
        for (int64_t p = 0; p < n; ++p) ++count[size_t(s.pick(l.data(), p, {}))];
        for (int i = 0; i < 6; ++i) {
            double pi = prob[size_t(i)] / z;
            double sigma = std::sqrt(pi * (1.0 - pi) / n);
            EXPECT_NEAR(double(count[size_t(i)]) / n, pi, 4.5 * sigma + 1e-4) << "id " << i << " temperature " << temp;
        }
    }
}

TEST(sampler, seeds_give_different_draws) {
    const std::vector<float> l = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
    keyed_sampler a(8, plain(1.0f, 1)), b(8, plain(1.0f, 2));
    int same = 0;
    for (int64_t p = 0; p < 400; ++p) same += a.pick(l.data(), p, {}) == b.pick(l.data(), p, {});
    EXPECT_LT(same, 120);  // about 400/8 + a margin for the skew, far from 400
}

TEST(sampler, top_k_keeps_the_k_best_ties_by_lowest_id) {
    const std::vector<float> l = {1.0f, 5.0f, 5.0f, 3.0f, 2.0f, 3.0f};
    sampling_params sp = plain(1.0f);
    sp.top_k = 2;
    keyed_sampler k2(6, sp);
    k2.prepare(l.data(), {});
    EXPECT_EQ(sorted_candidates(k2), (std::vector<int32_t>{1, 2}));
    sp.top_k = 3;
    keyed_sampler k3(6, sp);
    k3.prepare(l.data(), {});
    EXPECT_EQ(std::vector<int32_t>(k3.candidates().begin(), k3.candidates().end()), (std::vector<int32_t>{1, 2, 3}));
    // Only candidates are ever picked.
    for (int64_t p = 0; p < 300; ++p) {
        int32_t t = k3.pick(l.data(), p, {});
        ASSERT_TRUE(t == 1 || t == 2 || t == 3) << t;
    }
}

TEST(sampler, top_p_keeps_the_smallest_prefix_reaching_the_mass) {
    // Probabilities 0.5, 0.3, 0.15, 0.05 (temperature 1).
    const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
    auto kept = [&](float top_p) {
        sampling_params sp = plain(1.0f);
        sp.top_p = top_p;
        keyed_sampler s(4, sp);
        s.prepare(l.data(), {});
        return sorted_candidates(s);
    };
    EXPECT_EQ(kept(0.45f), (std::vector<int32_t>{1}));
    EXPECT_EQ(kept(0.75f), (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(kept(0.9f), (std::vector<int32_t>{0, 1, 3}));
    EXPECT_EQ(kept(0.99f), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(sampler, min_p_keeps_ids_above_the_fraction_of_the_best) {
    const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
    auto kept = [&](float min_p) {
        sampling_params sp = plain(1.0f);
        sp.min_p = min_p;
        keyed_sampler s(4, sp);
        s.prepare(l.data(), {});
        return sorted_candidates(s);
    };
    EXPECT_EQ(kept(0.25f), (std::vector<int32_t>{0, 1, 3}));  // threshold 0.125
    EXPECT_EQ(kept(0.5f), (std::vector<int32_t>{1, 3}));      // threshold 0.25
    EXPECT_EQ(kept(0.9f), (std::vector<int32_t>{1}));
}

TEST(sampler, filters_keep_the_same_set_as_a_full_sort) {
    // Reference: sort every id by (logit desc, id asc), then cut the top_k, top_p and min_p
    // prefixes in that order. The sampler sorts only what it must; the sets must agree.
    std::mt19937 rng(17);
    const int32_t nv = 3000;
    std::vector<float> l(nv);
    for (int trial = 0; trial < 200; ++trial) {
        std::normal_distribution<float> nd(0.0f, 1.0f + float(trial % 4));
        for (float& x : l) x = std::round(nd(rng) * 64.0f) / 64.0f;  // coarse values: many ties
        sampling_params sp = plain(0.5f + float(trial % 3) * 0.5f);
        sp.top_k = trial % 5 == 0 ? 0 : int32_t(rng() % 2000);
        sp.top_p = trial % 3 == 0 ? 1.0f : 0.2f + 0.79f * float(rng() % 1000) / 1000.0f;
        sp.min_p = trial % 4 == 0 ? 0.0f : float(rng() % 1000) / 5000.0f;
        keyed_sampler s(nv, sp);
        s.prepare(l.data(), {});
        std::vector<int32_t> ids(nv);
        std::iota(ids.begin(), ids.end(), 0);
        std::vector<float> t(nv);
        for (int32_t i = 0; i < nv; ++i) t[size_t(i)] = l[size_t(i)] / sp.temperature;
        std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return t[a] > t[b] || (t[a] == t[b] && a < b); });
        size_t n = sp.top_k > 0 ? size_t(sp.top_k) : ids.size();
        double lmax = t[ids[0]];
        if (sp.top_p < 1.0f) {
            double z = 0.0;
            for (size_t j = 0; j < n; ++j) z += std::exp(double(t[ids[j]]) - lmax);
            double cum = 0.0;
            for (size_t j = 0; j < n; ++j) {
                cum += std::exp(double(t[ids[j]]) - lmax) / z;
                if (cum >= double(sp.top_p)) {
                    n = j + 1;
                    break;
                }
            }
        }
        if (sp.min_p > 0.0f) {
            size_t m = 1;
            while (m < n && double(t[ids[m]]) >= lmax + std::log(double(sp.min_p))) ++m;
            n = m;
        }
        ids.resize(n);
        std::sort(ids.begin(), ids.end());
        ASSERT_EQ(sorted_candidates(s), ids) << "trial " << trial << " top_k " << sp.top_k << " top_p " << sp.top_p
                                             << " min_p " << sp.min_p;
    }
}

TEST(sampler, penalties_and_bias_match_a_hand_computation) {
    const std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    sampling_params sp = plain(0.5f);
    sp.penalty_last_n = 5;
    sp.repeat_penalty = 2.0f;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.25f;
    sp.logit_bias = {{5, 1.5f}, {2, -0.5f}};
    keyed_sampler s(6, sp);
    // Last 5 of the history: 0 three times, 1 once, 4 once; the 3 at the front is out of reach.
    const std::vector<int32_t> history = {3, 0, 0, 1, 4, 0};
    s.prepare(l.data(), history);
    // bias:      [2, -1, 0, 3, -2, 2.5]
    // id 0: 2 > 0 -> 2 / 2 = 1, - (3 * 0.5 + 0.25) = -0.75
    // id 1: -1 -> -1 * 2 = -2, - (0.5 + 0.25) = -2.75
    // id 4: -2 -> -4, - 0.75 = -4.75
    // then / temperature 0.5
    const std::vector<float> want = {-1.5f, -5.5f, 0.0f, 6.0f, -9.5f, 5.0f};
    auto got = s.adjusted_logits();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "id " << i;
    // Applying again gives the same result: the occurrence counts were cleared after use.
    s.prepare(l.data(), history);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(s.adjusted_logits()[i], want[i]) << "id " << i;

    // Greedy sees the penalties too: 3 loses its lead once it was just generated.
    sampling_params g = sampling_params::greedy();
    g.repeat_penalty = 2.0f;
    g.presence_penalty = 0.75f;
    keyed_sampler gs(6, g);
    EXPECT_EQ(gs.pick(l.data(), 6, std::vector<int32_t>{}), 3);
    EXPECT_EQ(gs.pick(l.data(), 6, std::vector<int32_t>{3}), 0);  // 3 -> 1.5 - 0.75 = 0.75 < 2
}

TEST(sampler, banned_ids_are_never_picked) {
    const std::vector<float> l = {0.0f, 10.0f, 0.0f, 0.0f};
    sampling_params sp = plain(1.0f);
    sp.logit_bias = {{1, -std::numeric_limits<float>::infinity()}};
    keyed_sampler s(4, sp);
    for (int64_t p = 0; p < 200; ++p) ASSERT_NE(s.pick(l.data(), p, {}), 1);
    sampling_params g = sampling_params::greedy();
    g.logit_bias = sp.logit_bias;
    keyed_sampler gs(4, g);
    EXPECT_EQ(gs.pick(l.data(), 0, {}), 0);
}

TEST(sampler, bad_parameters_are_rejected) {
    sampling_params sp;
    sp.logit_bias = {{10, 1.0f}};
    EXPECT_THROW(keyed_sampler(10, sp), error);
    sp.logit_bias = {{-1, 1.0f}};
    EXPECT_THROW(keyed_sampler(10, sp), error);
    sampling_params t;
    t.temperature = std::numeric_limits<float>::infinity();
    EXPECT_THROW(keyed_sampler(10, t), error);
    sampling_params r;
    r.repeat_penalty = 0.0f;
    EXPECT_THROW(keyed_sampler(10, r), error);
    EXPECT_THROW(keyed_sampler(0, sampling_params{}), error);
}

}  // namespace
}  // namespace sluice
