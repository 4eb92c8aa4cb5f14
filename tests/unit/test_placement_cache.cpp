// src/placement/expert_cache.h: the VRAM expert cache's rules, one test each: the initial set is
// the profile's top pairs that fit the budget; decayed counts with the configured half-life;
// hysteresis; the swap bound per step; an evicted expert leaves the GPU plan at once and a new
// one enters only after copy_landed; copying slots are never evicted; same inputs, same swaps.
#include "placement/expert_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace sluice::placement {
namespace {

void land_all(expert_cache& c) {
    for (int s = 0; s < c.n_slots(); ++s) c.copy_landed(s);
}

TEST(placement_cache, initial_set_is_the_profile_top_that_fits_the_budget) {
    // 2 layers x 4 experts, blobs of 100 bytes; budget 300: the three most-routed pairs.
    const std::vector<uint64_t> profile{5, 50, 1, 7,    // layer 0
                                        40, 0, 60, 2};  // layer 1
    cache_options o;
    o.budget_bytes = 300;
    expert_cache c(2, 4, {100, 100}, profile, o);
    EXPECT_EQ(c.n_slots(), 3);
    EXPECT_EQ(c.used_bytes(), 300u);
    EXPECT_GE(c.slot_of(1, 2), 0);
    EXPECT_GE(c.slot_of(0, 1), 0);
    EXPECT_GE(c.slot_of(1, 0), 0);
    EXPECT_LT(c.slot_of(0, 3), 0);
    // Not on the GPU until their copies land.
    EXPECT_FALSE(c.on_gpu(1, 2));
    land_all(c);
    EXPECT_TRUE(c.on_gpu(1, 2));
    EXPECT_FALSE(c.on_gpu(0, 3));
}

TEST(placement_cache, initial_set_skips_blobs_that_do_not_fit_and_keeps_filling) {
    // Layer 0 blobs 250 bytes, layer 1 blobs 100: budget 350 takes the top pair (layer 0), skips
    // the second (another 250 does not fit) and takes layer 1's top pair.
    const std::vector<uint64_t> profile{90, 80, 10, 5};
    cache_options o;
    o.budget_bytes = 350;
    expert_cache c(2, 2, {250, 100}, profile, o);
    EXPECT_GE(c.slot_of(0, 0), 0);
    EXPECT_LT(c.slot_of(0, 1), 0);   // 250 more would pass the budget
    EXPECT_GE(c.slot_of(1, 0), 0);
    EXPECT_EQ(c.used_bytes(), 350u);
}

TEST(placement_cache, zero_budget_holds_nothing_and_never_swaps) {
    cache_options o;
    o.budget_bytes = 0;
    expert_cache c(1, 4, {100}, std::vector<uint64_t>{1, 2, 3, 4}, o);
    EXPECT_EQ(c.n_slots(), 0);
    const std::vector<int32_t> ids{3, 3, 3, 3};
    for (int s = 0; s < 10; ++s) {
        c.observe(0, ids);
        EXPECT_TRUE(c.end_step().empty());
    }
}

TEST(placement_cache, scores_decay_with_the_half_life) {
    cache_options o;
    o.half_life_steps = 4;
    o.budget_bytes = 0;
    expert_cache c(1, 2, {100}, {}, o);
    const std::vector<int32_t> ids{1, 1};
    c.observe(0, ids);
    c.end_step();
    EXPECT_DOUBLE_EQ(c.score(0, 1), 2.0);
    for (int s = 0; s < 4; ++s) c.end_step();
    EXPECT_NEAR(c.score(0, 1), 1.0, 1e-12);   // halved after 4 steps
    EXPECT_EQ(c.score(0, 0), 0.0);
}

TEST(placement_cache, hysteresis_keeps_a_resident_against_a_slightly_better_candidate) {
    // One slot; resident expert 0; expert 1 routed a bit more often than 0 is kept out by the
    // margin, and swapped in once it beats margin * weakest + min_gain.
    cache_options o;
    o.budget_bytes = 100;
    o.margin = 1.5;
    o.min_gain = 1.0;
    o.half_life_steps = std::numeric_limits<double>::infinity();   // no decay: plain counts
    expert_cache c(1, 2, {100}, {}, o);   // no profile: expert 0 (id order) takes the slot
    land_all(c);
    ASSERT_TRUE(c.on_gpu(0, 0));
    const std::vector<int32_t> ten(10, 0);
    c.observe(0, ten);
    EXPECT_TRUE(c.end_step().empty());
    // Expert 1 gets exactly margin * 10 + min_gain = 16 lookups: not strictly more, no swap.
    const std::vector<int32_t> ids(16, 1);
    c.observe(0, ids);
    EXPECT_TRUE(c.end_step().empty());
    EXPECT_TRUE(c.on_gpu(0, 0));
    // One more lookup: now it is strictly past the margin.
    const std::vector<int32_t> one{1};
    c.observe(0, one);
    const auto sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].evicted, (expert_key{0, 0}));
    EXPECT_EQ(sw[0].loaded, (expert_key{0, 1}));
}

TEST(placement_cache, the_profile_seed_outlasts_a_short_burst) {
    // The seed is the decayed mass of k_used lookups a step (8 / (1 - 2^(-1/32)) = 373.3 here),
    // all on expert 0: a burst of 100 lookups of expert 1 does not displace it; 1,000 do.
    cache_options o;
    o.budget_bytes = 100;
    expert_cache c(1, 2, {100}, std::vector<uint64_t>{1, 0}, o);
    land_all(c);
    EXPECT_NEAR(c.score(0, 0), 8.0 / (1.0 - std::exp2(-1.0 / 32.0)), 1e-9);
    c.observe(0, std::vector<int32_t>(100, 1));
    EXPECT_TRUE(c.end_step().empty());
    c.observe(0, std::vector<int32_t>(1000, 1));
    EXPECT_EQ(c.end_step().size(), 1u);
}

TEST(placement_cache, at_most_max_swaps_per_step) {
    cache_options o;
    o.budget_bytes = 400;
    o.max_swaps_per_step = 2;
    expert_cache c(1, 8, {100}, std::vector<uint64_t>{4, 4, 4, 4, 0, 0, 0, 0}, o);
    land_all(c);
    // Experts 4..7 suddenly hot: only two swaps this step, two the next.
    std::vector<int32_t> ids;
    for (int r = 0; r < 200; ++r) ids.insert(ids.end(), {4, 5, 6, 7});
    c.observe(0, ids);
    EXPECT_EQ(c.end_step().size(), 2u);
    land_all(c);
    EXPECT_EQ(c.end_step().size(), 2u);
    land_all(c);
    EXPECT_EQ(c.end_step().size(), 0u);
    for (int e = 4; e < 8; ++e) EXPECT_TRUE(c.on_gpu(0, e));
}

TEST(placement_cache, evicted_leaves_at_once_and_new_enters_after_its_copy_lands) {
    cache_options o;
    o.budget_bytes = 100;
    expert_cache c(1, 2, {100}, std::vector<uint64_t>{1, 0}, o);
    land_all(c);
    std::vector<int32_t> ids(2000, 1);   // far past the profile's seed (k_used / (1 - decay) = 373)
    c.observe(0, ids);
    const auto sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    const int slot = sw[0].slot;
    EXPECT_FALSE(c.on_gpu(0, 0));                      // evicted: out of the plan at once
    EXPECT_FALSE(c.on_gpu(0, 1));                      // copying: not yet in the plan
    EXPECT_EQ(c.state(slot), slot_state::copying);
    EXPECT_EQ(c.slot_of(0, 1), slot);
    EXPECT_TRUE(c.copy_landed(slot));
    EXPECT_TRUE(c.on_gpu(0, 1));
    EXPECT_FALSE(c.copy_landed(slot));                 // landing twice is refused
    EXPECT_FALSE(c.copy_landed(99));
}

TEST(placement_cache, a_copying_slot_is_never_evicted) {
    cache_options o;
    o.budget_bytes = 100;
    o.max_swaps_per_step = 4;
    expert_cache c(1, 3, {100}, std::vector<uint64_t>{1, 0, 0}, o);
    land_all(c);
    std::vector<int32_t> ids(2000, 1);
    c.observe(0, ids);
    ASSERT_EQ(c.end_step().size(), 1u);   // 0 -> 1, copying
    std::vector<int32_t> hot(20000, 2);
    c.observe(0, hot);
    EXPECT_TRUE(c.end_step().empty());    // 2 is hotter, but the only slot is still copying
    c.copy_landed(c.slot_of(0, 1));
    c.observe(0, hot);
    const auto sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].loaded, (expert_key{0, 2}));
}

TEST(placement_cache, initial_ties_go_by_layer_then_expert) {
    cache_options o;
    o.budget_bytes = 300;
    // Layer 1's expert 0 and layer 0's experts 2, 3 tie at 5 behind layer 0's expert 1.
    expert_cache c(2, 4, {100, 100}, std::vector<uint64_t>{0, 9, 5, 5, 5, 0, 0, 0}, o);
    EXPECT_GE(c.slot_of(0, 1), 0);
    EXPECT_GE(c.slot_of(0, 2), 0);
    EXPECT_GE(c.slot_of(0, 3), 0);
    EXPECT_LT(c.slot_of(1, 0), 0);
}

TEST(placement_cache, adaptation_off_keeps_the_initial_set) {
    cache_options o;
    o.budget_bytes = 100;
    o.adaptive = false;
    expert_cache c(1, 2, {100}, std::vector<uint64_t>{1, 0}, o);
    land_all(c);
    std::vector<int32_t> ids(1000, 1);
    for (int s = 0; s < 5; ++s) {
        c.observe(0, ids);
        EXPECT_TRUE(c.end_step().empty());
    }
    EXPECT_TRUE(c.on_gpu(0, 0));
}

TEST(placement_cache, same_inputs_give_the_same_swaps) {
    const auto run = [] {
        cache_options o;
        o.budget_bytes = 1000;
        o.max_swaps_per_step = 3;
        o.half_life_steps = 8;
        std::vector<uint64_t> profile(4 * 16);
        std::mt19937 g(7);
        for (auto& p : profile) p = g() % 100;
        expert_cache c(4, 16, {100, 100, 100, 100}, profile, o);
        std::vector<int> trace;
        std::vector<int32_t> ids(8);
        for (int step = 0; step < 200; ++step) {
            for (int l = 0; l < 4; ++l) {
                for (auto& i : ids) i = static_cast<int32_t>(g() % 16 < 12 ? g() % 4 + (step / 50) * 4 : g() % 16);
                c.observe(l, ids);
            }
            for (const cache_swap& s : c.end_step()) {
                trace.insert(trace.end(), {s.slot, s.evicted.layer, s.evicted.expert, s.loaded.layer, s.loaded.expert});
                if (step % 3 != 0) c.copy_landed(s.slot);
            }
            if (step % 3 == 0)
                for (int s = 0; s < c.n_slots(); ++s) c.copy_landed(s);
        }
        return trace;
    };
    const auto a = run(), b = run();
    EXPECT_FALSE(a.empty());   // the hot set moves every 50 steps: the cache must follow
    EXPECT_EQ(a, b);
}

TEST(placement_cache, same_layer_swaps_stay_in_the_candidates_layer) {
    // Slots (0, 0) and (1, 0); layer 1's expert 3 hot. The globally weakest resident is layer 0's
    // (its seed is half a layer's mass, 186.7, against 373.3), but same_layer evicts layer 1's
    // own weakest: each layer keeps its slots.
    const std::vector<uint64_t> profile{1, 1, 0, 0, 5, 0, 0, 0};
    cache_options o;
    o.budget_bytes = 200;
    o.same_layer = true;
    expert_cache c(2, 4, {100, 100}, profile, o);
    land_all(c);
    c.observe(1, std::vector<int32_t>(5000, 3));
    const auto sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].evicted, (expert_key{1, 0}));
    EXPECT_EQ(sw[0].loaded, (expert_key{1, 3}));
    EXPECT_EQ(sw[0].bytes, 100u);
    EXPECT_TRUE(c.on_gpu(0, 0));
    EXPECT_EQ(c.n_slots(), 2);
    // Without same_layer the same lookups evict layer 0's expert (the weakest anywhere).
    o.same_layer = false;
    expert_cache g(2, 4, {100, 100}, profile, o);
    land_all(g);
    g.observe(1, std::vector<int32_t>(5000, 3));
    ASSERT_EQ(g.end_step().size(), 1u);
    EXPECT_FALSE(g.on_gpu(0, 0));
}

TEST(placement_cache, same_layer_swaps_go_to_the_best_candidates_and_skip_layers_without_slots) {
    // Three layers; layer 2 has no slot (the budget holds two blobs). One swap a step: the layer
    // whose candidate scores highest goes first (layer 1: 9,000 lookups against layer 0's 6,000;
    // both past 1.25 x the seed of 373.3 + 1), then layer 0; layer 2's hotter candidate has no
    // slot to take.
    cache_options o;
    o.budget_bytes = 200;
    o.same_layer = true;
    o.max_swaps_per_step = 1;
    expert_cache c(3, 2, {100, 100, 100}, std::vector<uint64_t>{9, 0, 9, 0, 1, 0}, o);
    land_all(c);
    ASSERT_EQ(c.slot_of(2, 0), -1);
    c.observe(0, std::vector<int32_t>(6000, 1));
    c.observe(1, std::vector<int32_t>(9000, 1));
    c.observe(2, std::vector<int32_t>(50000, 1));
    auto sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].loaded, (expert_key{1, 1}));
    land_all(c);
    sw = c.end_step();
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].loaded, (expert_key{0, 1}));
    land_all(c);
    EXPECT_TRUE(c.end_step().empty());
    EXPECT_EQ(c.slot_of(2, 1), -1);
}

TEST(placement_cache, spread_without_a_profile_gives_each_layer_a_share) {
    // 3 layers x 4 experts, room for 7 blobs: experts 0 and 1 of every layer, then expert 2 of
    // layer 0. Without spread: layer 0 whole, then layer 1's experts 0..2.
    cache_options o;
    o.budget_bytes = 700;
    o.spread = true;
    expert_cache c(3, 4, {100, 100, 100}, {}, o);
    for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 4; ++e) EXPECT_EQ(c.slot_of(l, e) >= 0, e < 2 || (e == 2 && l == 0)) << l << "," << e;
    o.spread = false;
    expert_cache w(3, 4, {100, 100, 100}, {}, o);
    for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 4; ++e) EXPECT_EQ(w.slot_of(l, e) >= 0, l == 0 || (l == 1 && e < 3)) << l << "," << e;
}

TEST(placement_cache, bad_options_are_rejected) {
    cache_options o;
    EXPECT_THROW(expert_cache(0, 4, {}, {}, o), std::exception);
    EXPECT_THROW(expert_cache(1, 4, {100, 100}, {}, o), std::exception);
    EXPECT_THROW(expert_cache(1, 4, {100}, std::vector<uint64_t>{1, 2, 3}, o), std::exception);
    o.margin = 0.5;
    EXPECT_THROW(expert_cache(1, 4, {100}, {}, o), std::exception);
}

}  // namespace
}  // namespace sluice::placement
