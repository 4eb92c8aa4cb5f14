// src/kernels/cpu/attention.cpp: the SIMD attention gives attention_ref's bits (the scalar
// definition: fixed KV chunks in order, online merge) for GQA ratios 1..8, head sizes 64 and
// 128, short and long contexts (up to 32K positions), extreme scores, any thread count; a row's
// bits do not depend on the window it is computed in (E1).
#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

struct attn_case {
    int n_head, n_kv, hd;
    int32_t pos0;
    int64_t rows;
    float qscale;   // query magnitude: large values give scores far apart (exp underflow, merges)
};

struct attn_data {
    std::vector<float> q, k, v;
};

attn_data make_data(const attn_case& c, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    attn_data a;
    const int64_t n_pos = c.pos0 + c.rows;
    a.q.resize(static_cast<size_t>(c.rows * c.n_head * c.hd));
    a.k.resize(static_cast<size_t>(n_pos * c.n_kv * c.hd));
    a.v.resize(a.k.size());
    for (auto& x : a.q) x = c.qscale * d(g);
    for (auto& x : a.k) x = d(g);
    for (auto& x : a.v) x = d(g);
    return a;
}

kernels::attention_params params(const attn_case& c) {
    kernels::attention_params p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv;
    p.head_dim = c.hd;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    return p;
}

std::string describe(const attn_case& c) {
    return "heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv) + " hd " + std::to_string(c.hd) + " pos0 " +
           std::to_string(c.pos0) + " rows " + std::to_string(c.rows) + " qscale " + std::to_string(c.qscale);
}

// attention_ref's output for a case, on one thread: the bits every other form must give.
std::vector<float> scalar_definition(const attn_case& c, const attn_data& a) {
    std::vector<float> ref(a.q.size());
    thread_pool one(1);
    kernels::attention_ref(one, params(c), a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, ref.data());
    return ref;
}

TEST(row_exact_attention, simd_attention_gives_the_scalar_definitions_bits) {
    const attn_case cases[] = {
        {4, 4, 64, 0, 1, 1.0f},      {4, 2, 64, 0, 5, 1.0f},      {8, 2, 128, 31, 3, 1.0f},
        {8, 1, 64, 32, 1, 1.0f},     {9, 3, 64, 100, 7, 1.0f},    {32, 4, 128, 700, 2, 1.0f},
        {4, 2, 64, 200, 40, 1.0f},   {4, 2, 64, 300, 3, 30.0f},   {2, 1, 128, 4000, 2, 8.0f},
        {4, 4, 16, 70, 2, 1.0f},     {2, 2, 48, 50, 3, 1.0f},     {2, 1, 8, 40, 2, 1.0f},
        // The V sum's passes: 64 dimensions (8 chains), then 32, then 16: 96 = 64 + 32,
        // 80 = 64 + 16, 192 = 3 x 64, 256 = 4 x 64.
        {4, 2, 96, 70, 2, 1.0f},     {4, 1, 80, 45, 3, 1.0f},     {2, 1, 192, 90, 2, 1.0f},
        {4, 2, 256, 130, 2, 1.0f},
    };
    for (const auto& c : cases) {
        const auto a = make_data(c, 11);
        const auto p = params(c);
        const std::vector<float> ref = scalar_definition(c, a);
        std::vector<float> got(a.q.size());
        for (float x : ref) ASSERT_TRUE(std::isfinite(x)) << describe(c);
        for (int t : {1, 2, 3}) {
            thread_pool pool(t);
            std::fill(got.begin(), got.end(), -7.0f);
            kernels::attention(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, got.data());
            ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float))) << describe(c) << ", " << t << " threads";
        }
    }
}

// 32K positions: one decode row at the end of a long context, GQA 4:1, both head sizes.
TEST(row_exact_attention, long_context_simd_equals_scalar) {
    for (int hd : {64, 128}) {
        const attn_case c{8, 2, hd, 32767, 1, 2.0f};
        const auto a = make_data(c, 5);
        const auto p = params(c);
        std::vector<float> ref(a.q.size()), got(a.q.size());
        thread_pool pool(2);
        kernels::attention_ref(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, ref.data());
        kernels::attention(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, got.data());
        EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float))) << describe(c);
    }
}

// The positions cut over the threads (attention_scratch): every chunk computed alone, then
// merged in order, gives the scalar definition's bits: rows 1..4, GQA 1..8, head sizes 16..256,
// contexts that end inside a chunk, on a chunk's edge and past the 64-chunk rounds (one round
// ends exactly at 2,048 positions; in two cases a window's rows end on both sides of that edge),
// head sizes that are no multiple of 16 (the scalar chunk), thread counts 2..9. `always` makes
// every call split; the last part checks the calls that decide for themselves.
TEST(row_exact_attention, positions_split_over_threads_give_the_scalar_definitions_bits) {
    const attn_case cases[] = {
        {9, 3, 64, 31, 1, 1.0f},     {9, 3, 64, 32, 1, 1.0f},     {9, 3, 64, 200, 4, 1.0f},
        {8, 1, 64, 2047, 1, 1.0f},   {16, 2, 256, 2048, 2, 1.0f}, {4, 2, 64, 2100, 3, 30.0f},
        {32, 4, 128, 4500, 1, 2.0f}, {6, 2, 16, 95, 2, 1.0f},     {2, 2, 48, 700, 4, 8.0f},
        {4, 4, 64, 6200, 1, 1.0f},   {8, 1, 64, 2046, 3, 1.0f},   {9, 3, 64, 2045, 4, 4.0f},
        {4, 2, 40, 100, 2, 1.0f},    {12, 4, 24, 2110, 4, 1.0f},
    };
    for (const auto& c : cases) {
        const auto a = make_data(c, 17);
        const auto p = params(c);
        const std::vector<float> ref = scalar_definition(c, a);
        std::vector<float> got(a.q.size());
        std::vector<float> parts(kernels::attention_split_floats(p), -3.0f);
        for (int t : {2, 3, 9}) {
            thread_pool pool(t);
            for (bool always : {true, false}) {
                std::fill(got.begin(), got.end(), -7.0f);
                kernels::attention(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, got.data(),
                                   kernels::attention_scratch{parts.data(), parts.size(), always});
                ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)))
                    << describe(c) << ", " << t << " threads" << (always ? ", split" : ", split where it pays");
            }
        }
    }
    // A scratch one float short is not used (the unsplit loop runs): still the same bits.
    const attn_case c{9, 3, 64, 500, 1, 1.0f};
    const auto a = make_data(c, 2);
    const auto p = params(c);
    std::vector<float> ref(a.q.size()), got(a.q.size());
    std::vector<float> parts(kernels::attention_split_floats(p) - 1);
    thread_pool pool(4);
    kernels::attention_ref(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, ref.data());
    kernels::attention(pool, p, a.q.data(), a.k.data(), a.v.data(), c.pos0, c.rows, got.data(),
                       kernels::attention_scratch{parts.data(), parts.size(), true});
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)));
}

// A row computed inside a window of 1..16 (or 40) rows equals that row computed alone.
TEST(row_exact_attention, window_rows_equal_single_rows) {
    const attn_case c{8, 2, 64, 90, 40, 1.5f};
    const auto a = make_data(c, 3);
    const auto p = params(c);
    const int64_t qrow = static_cast<int64_t>(c.n_head) * c.hd;
    thread_pool pool(2);
    std::vector<float> single(a.q.size()), win(a.q.size());
    for (int64_t r = 0; r < c.rows; ++r)
        kernels::attention(pool, p, a.q.data() + r * qrow, a.k.data(), a.v.data(), c.pos0 + static_cast<int32_t>(r), 1,
                           single.data() + r * qrow);
    for (int64_t w : {2, 3, 7, 16, 40}) {
        for (int64_t r0 = 0; r0 + w <= c.rows; r0 += w) {
            kernels::attention(pool, p, a.q.data() + r0 * qrow, a.k.data(), a.v.data(), c.pos0 + static_cast<int32_t>(r0), w,
                               win.data() + r0 * qrow);
            EXPECT_EQ(0, std::memcmp(single.data() + r0 * qrow, win.data() + r0 * qrow, static_cast<size_t>(w * qrow) * sizeof(float)))
                << "window " << w << " at row " << r0;
        }
    }
}

}  // namespace
}  // namespace sluice
