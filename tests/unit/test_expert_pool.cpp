// src/moe/expert_pool.h and src/core/thread_pool.h: the MoE block's output bits equal the
// one-row definition (dot_ref per column, SwiGLU, requantisation, combine in rank order) for
// every row, whatever the window (1..16 rows and more than 16 rows on one expert), the thread
// count (1..4), pinning, and the weight format; the pool covers every index once under any
// grain, survives many back-to-back calls and sleeping workers.
#include "core/thread_pool.h"
#include "kernels/cpu/dot_ref.h"
#include "kernels/cpu/ops.h"
#include "moe/expert_pool.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include "random_experts.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

using test_support::expert_tensor;

expert_tensor make_experts(dtype t, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& g) {
    return test_support::make_experts(t, n_in, n_out, n_expert, g, 24);
}

// The definition for one row: every column by dot_ref, SwiGLU, requantise, down by dot_ref,
// out = ((0 + w_0 * y_0) + w_1 * y_1) + ... in rank order.
std::vector<float> one_row_reference(const moe::expert_bank& b, const float* x, const int32_t* ids,
                                     const float* w, int k_used, int64_t E, int64_t F) {
    std::vector<float> out(static_cast<size_t>(E), 0.0f), g(static_cast<size_t>(F)), u(static_cast<size_t>(F)),
        y(static_cast<size_t>(E));
    const auto fg = quant::act_format_for(b.gate->type), fu = quant::act_format_for(b.up->type),
               fd = quant::act_format_for(b.down->type);
    std::vector<std::byte> ag(quant::act_row_bytes(fg, E)), au(quant::act_row_bytes(fu, E)), ad(quant::act_row_bytes(fd, F));
    quant::quantize_act_row(fg, x, E, ag.data());
    quant::quantize_act_row(fu, x, E, au.data());
    for (int k = 0; k < k_used; ++k) {
        const auto wg = kernels::expert_slice(*b.gate, ids[k]), wu = kernels::expert_slice(*b.up, ids[k]),
                   wd = kernels::expert_slice(*b.down, ids[k]);
        for (int64_t j = 0; j < F; ++j) {
            g[static_cast<size_t>(j)] = kernels::dot_ref(wg.type, wg.row(j), ag.data(), E);
            u[static_cast<size_t>(j)] = kernels::dot_ref(wu.type, wu.row(j), au.data(), E);
        }
        kernels::swiglu(g.data(), u.data(), g.data(), F);
        quant::quantize_act_row(fd, g.data(), F, ad.data());
        for (int64_t j = 0; j < E; ++j) y[static_cast<size_t>(j)] = kernels::dot_ref(wd.type, wd.row(j), ad.data(), F);
        for (int64_t j = 0; j < E; ++j) out[static_cast<size_t>(j)] = out[static_cast<size_t>(j)] + w[k] * y[static_cast<size_t>(j)];
    }
    return out;
}

struct moe_case {
    dtype gate, up, down;
};

std::string case_name(const moe_case& c) {
    return std::string(name(c.gate)) + "_" + std::string(name(c.up)) + "_" + std::string(name(c.down));
}

class expert_pool_formats : public ::testing::TestWithParam<moe_case> {};

// Windows 1..16, 20 and 72 (an expert shared by more than 16 rows: several dot_rows calls of 16;
// by 70 or more: two tile calls of up to kernels::k_tile_max_rows), threads 1..4, pinned or
// not: every row's bits equal the one-row definition.
TEST_P(expert_pool_formats, moe_rows_equal_the_one_row_definition_for_any_window_and_threads) {
    const moe_case c = GetParam();
    const int64_t E = 256, F = 512;
    const int n_expert = 6, K = 3, max_rows = 72;
    std::mt19937 g(7);
    const auto gate = make_experts(c.gate, E, F, n_expert, g), up = make_experts(c.up, E, F, n_expert, g),
               down = make_experts(c.down, F, E, n_expert, g);
    moe::expert_bank bank{&gate.view, &up.view, &down.view};

    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(max_rows * E)), w(static_cast<size_t>(max_rows * K));
    std::vector<int32_t> ids(static_cast<size_t>(max_rows * K));
    for (auto& v : x) v = d(g);
    for (int r = 0; r < max_rows; ++r) {
        // K distinct experts per row; from row 2 on, expert 0 is in every row at rank r % K (a
        // window of 20 puts 18 or more rows on it: more than one dot_rows call of 16; one of 72,
        // 70: more than one tile call).
        std::vector<int32_t> e(static_cast<size_t>(n_expert));
        std::iota(e.begin(), e.end(), 0);
        std::shuffle(e.begin(), e.end(), g);
        if (r >= 2) std::swap(*std::find(e.begin(), e.end(), 0), e[static_cast<size_t>(r % K)]);
        for (int k = 0; k < K; ++k) {
            ids[static_cast<size_t>(r * K + k)] = e[static_cast<size_t>(k)];
            w[static_cast<size_t>(r * K + k)] = 0.2f + 0.3f * std::abs(d(g));
        }
    }
    std::vector<std::vector<float>> ref;
    for (int r = 0; r < max_rows; ++r)
        ref.push_back(one_row_reference(bank, x.data() + r * E, ids.data() + r * K, w.data() + r * K, K, E, F));

    auto s = moe::make_expert_scratch(max_rows, K, n_expert, E, F);
    std::vector<float> out(static_cast<size_t>(max_rows * E));
    for (int threads = 1; threads <= 4; ++threads) {
        for (bool pin : {true, false}) {
            thread_pool_options po;
            po.pin = pin;
            thread_pool pool(threads, po);
            for (int window : {1, 2, 3, 5, 8, 13, 16, 20, 72}) {
                // Windows start at different rows (within the first 20), so rows meet different
                // neighbours.
                for (int r0 = 0; r0 + window <= std::max(20, window); r0 += window >= 20 ? window : 7) {
                    std::fill(out.begin(), out.end(), -1.0f);
                    moe::run_experts(pool, bank, x.data() + r0 * E, ids.data() + r0 * K, w.data() + r0 * K, window, s,
                                     out.data());
                    for (int r = 0; r < window; ++r)
                        ASSERT_EQ(0, std::memcmp(out.data() + r * E, ref[static_cast<size_t>(r0 + r)].data(), E * sizeof(float)))
                            << case_name(c) << ": row " << r0 + r << " in a window of " << window << " at " << r0 << ", "
                            << threads << " threads, pin " << pin;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(expert_pool, expert_pool_formats,
                         ::testing::Values(moe_case{dtype::q4_k, dtype::q4_k, dtype::q6_k},
                                           moe_case{dtype::q8_0, dtype::q8_0, dtype::q8_0},
                                           moe_case{dtype::q4_0, dtype::q4_1, dtype::q5_0},
                                           moe_case{dtype::q5_k, dtype::q5_k, dtype::q5_1},
                                           moe_case{dtype::iq4_xs, dtype::iq4_xs, dtype::iq4_nl},
                                           moe_case{dtype::mxfp4, dtype::mxfp4, dtype::mxfp4},
                                           moe_case{dtype::iq3_s, dtype::iq3_xxs, dtype::q2_k},
                                           moe_case{dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s},
                                           moe_case{dtype::q3_k, dtype::q3_k, dtype::q6_k},
                                           moe_case{dtype::f16, dtype::bf16, dtype::f32},
                                           moe_case{dtype::q8_0, dtype::q4_k, dtype::f16}),
                         [](const auto& info) { return case_name(info.param); });

TEST(expert_pool, scratch_with_bad_sizes_is_rejected) {
    EXPECT_THROW(moe::make_expert_scratch(0, 2, 8, 256, 256), std::exception);
    EXPECT_THROW(moe::make_expert_scratch(4, 9, 8, 256, 256), std::exception);
    EXPECT_THROW(moe::make_expert_scratch(4, 2, 8, 0, 256), std::exception);
}

TEST(thread_pool, every_index_once_for_any_grain_and_thread_index_in_range) {
    for (int t : {1, 2, 3, 5}) {
        thread_pool pool(t);
        for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
            for (int64_t grain : {0, 1, 3, 64, 5000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<bool> bad{false};
                pool.parallel_for_tid(n, grain, [&](int tid, int64_t b, int64_t e) {
                    if (tid < 0 || tid >= t || b >= e || (grain > 0 && e - b > grain)) bad = true;
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
                });
                EXPECT_FALSE(bad) << t << " threads, n " << n << ", grain " << grain;
                for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << t << " " << n << " " << grain;
            }
        }
    }
}

// Many short calls back to back (the decode pattern), with workers that sleep at once
// (spin_us 0) and with spinning ones: no call is lost or run twice.
TEST(thread_pool, back_to_back_calls_and_sleeping_workers_lose_nothing) {
    for (int spin : {0, 1000}) {
        thread_pool_options o;
        o.spin_us = spin;
        thread_pool pool(3, o);
        std::vector<int64_t> sum(64, 0);
        for (int call = 0; call < 3000; ++call)
            pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) sum[static_cast<size_t>(i)] += call;
            });
        const int64_t want = 2999LL * 3000 / 2;
        for (int64_t v : sum) ASSERT_EQ(v, want) << "spin_us " << spin;
    }
}

// Calls whose chunk counts alternate between few and many, with more threads than CPUs: a
// worker left holding a finished call's word must never claim a chunk against the next call's
// larger count (that ran a chunk twice and made the caller wait for ever on 2 cores).
TEST(thread_pool, a_late_worker_never_claims_a_chunk_of_a_finished_call) {
    for (int spin : {0, 1000}) {
        thread_pool_options o;
        o.spin_us = spin;
        thread_pool pool(3, o);
        std::vector<int> hits(101, 0);
        for (int call = 0; call < 20000; ++call) {
            const int64_t n = call % 2 ? 2 : 101;
            pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
            });
        }
        for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], i < 2 ? 20000 : 10000) << "index " << i << ", spin_us " << spin;
    }
}

// The job word keeps 16 bits of generation: past 65,536 calls it wraps, and a call's chunks are
// still each run once.
TEST(thread_pool, calls_past_the_generation_wrap_lose_nothing) {
    thread_pool pool(3);
    std::vector<int64_t> hits(7, 0);
    for (int call = 0; call < 70000; ++call)
        pool.parallel_for(call % 3 ? 7 : 2, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
        });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], i < 2 ? 70000 : 46666) << "index " << i;
}

// More chunks than the job word counts (2^24 - 4096): the grain grows and every index is still
// covered once.
TEST(thread_pool, a_range_beyond_the_chunk_count_limit_is_covered_once) {
    thread_pool pool(3);
    const int64_t n = (int64_t{1} << 24) + 12345;
    std::atomic<int64_t> covered{0}, calls{0};
    std::atomic<bool> bad{false};
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        if (b < 0 || e > n || b >= e) bad = true;
        covered += e - b;
        ++calls;
    });
    EXPECT_FALSE(bad);
    EXPECT_EQ(covered.load(), n);
    EXPECT_LT(calls.load(), int64_t{1} << 24);
}

// A pool destroyed right after a call: a worker whose empty claim lands on the destructor's
// generation must still see the stop (it once slept for ever there, and the join hung).
TEST(thread_pool, destroyed_right_after_a_call_always_joins) {
    // More threads than this machine's CPUs: workers get preempted between their checks.
    for (int threads : {3, 8})
        for (int i = 0; i < 1500; ++i) {
            thread_pool pool(threads);
            std::atomic<int64_t> sum{0};
            pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { sum += e - b; });
            ASSERT_EQ(sum.load(), 64);
        }
}

TEST(thread_pool, bad_options_are_rejected) {
    EXPECT_THROW(thread_pool(0), std::exception);
    thread_pool_options o;
    o.spin_us = -1;
    EXPECT_THROW(thread_pool(2, o), std::exception);
}

}  // namespace
}  // namespace sluice
