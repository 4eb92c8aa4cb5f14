// src/kernels/cpu/dot_ref: properties of the canonical dot products that the Python tests
// (tests/quant/test_quant_dot.py: bit-exact block formula for every format) do not cover.
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace sluice::kernels {
namespace {

using quant::act_format_for;

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

std::vector<float> random_row(std::mt19937& rng, int64_t n) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng);
    return x;
}

struct prepared {
    std::vector<std::byte> w, act;
};

// Weights quantised by sluice from random values, activations quantised for that format.
prepared prepare(dtype t, std::mt19937& rng, int64_t n) {
    prepared p;
    const auto wf = random_row(rng, n), x = random_row(rng, n);
    p.w.resize(*bytes_for(t, static_cast<uint64_t>(n)));
    quant::quantize_row(t, wf.data(), p.w.data(), n);
    p.act.resize(quant::act_row_bytes(act_format_for(t), n));
    quant::quantize_act_row(act_format_for(t), x.data(), n, p.act.data());
    return p;
}

TEST(dot_ref, supports_every_issue_format) {
    for (dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0, dtype::q4_1,
                    dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k, dtype::q4_k, dtype::q5_k,
                    dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs, dtype::iq3_s, dtype::iq3_xxs,
                    dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s, dtype::mxfp4})
        EXPECT_TRUE(has_dot(t)) << name(t);
    EXPECT_FALSE(has_dot(dtype::iq1_s));
    EXPECT_FALSE(has_dot(dtype::q8_k));
}

// The row result is the left fold of the block terms, in block order: y = ((t0 + t1) + t2)...
// A kernel must not split a row in two and add the halves: float addition is not associative,
// and this test shows the halves' sum does differ from the row's result on ordinary rows.
TEST(dot_ref, row_is_a_left_fold_and_split_halves_are_not_assumed_associative) {
    std::mt19937 rng(7);
    const int64_t n = 32 * 64;
    int halves_differ = 0;
    for (int trial = 0; trial < 50; ++trial) {
        const auto p = prepare(dtype::q8_0, rng, n);
        const size_t wb = sizeof(uint16_t) + 32, ab = sizeof(quant::act_block32);
        float fold = 0.0f;
        for (int64_t b = 0; b < n / 32; ++b) {
            const float t = dot_ref(dtype::q8_0, p.w.data() + b * wb, p.act.data() + b * ab, 32);
            fold = b == 0 ? t : fold + t;
        }
        const float full = dot_ref(dtype::q8_0, p.w.data(), p.act.data(), n);
        ASSERT_EQ(bits(full), bits(fold)) << "trial " << trial;
        const float h1 = dot_ref(dtype::q8_0, p.w.data(), p.act.data(), n / 2);
        const float h2 = dot_ref(dtype::q8_0, p.w.data() + (n / 64) * wb, p.act.data() + (n / 64) * ab, n / 2);
        halves_differ += bits(h1 + h2) != bits(full);
    }
    EXPECT_GT(halves_differ, 0) << "split halves happened to agree on every row; the contract still forbids them";
}

TEST(dot_ref, reads_unaligned_rows_the_same) {
    std::mt19937 rng(8);
    struct fmt { dtype t; std::vector<int> f16_offsets; };   // f16 scale fields in each block
    for (const fmt& f : {fmt{dtype::q4_1, {0, 2}}, fmt{dtype::q6_k, {208}}, fmt{dtype::iq2_xxs, {0}},
                         fmt{dtype::mxfp4, {}}}) {
        const int64_t n = 1024;
        const auto& inf = info(f.t);
        // Random bytes are valid weights once the f16 scales are small and finite (1.0 here).
        std::vector<std::byte> w(*bytes_for(f.t, n) + 1), act(quant::act_row_bytes(act_format_for(f.t), n) + 1);
        for (auto& b : w) b = static_cast<std::byte>(rng() & 0xFF);
        const uint16_t one = quant::fp32_to_fp16(1.0f);
        for (int64_t b = 0; b < n / inf.block_elems; ++b)
            for (int off : f.f16_offsets) std::memcpy(w.data() + 1 + b * inf.block_bytes + off, &one, 2);
        const auto x = random_row(rng, n);
        quant::quantize_act_row(act_format_for(f.t), x.data(), n, act.data());
        std::vector<std::byte> act_shift(act.size());
        std::memcpy(act_shift.data() + 1, act.data(), act.size() - 1);
        const std::vector<std::byte> w_aligned(w.begin() + 1, w.end());
        const float a = dot_ref(f.t, w_aligned.data(), act.data(), n);
        const float b = dot_ref(f.t, w.data() + 1, act_shift.data() + 1, n);
        EXPECT_TRUE(std::isfinite(a)) << name(f.t);
        EXPECT_EQ(bits(a), bits(b)) << name(f.t);
    }
}

// The widest integer sums: Q6_K with every scale -128, every quant -32 and every activation
// +127 reaches 16 * 16 * 128 * 32 * 127 = 133,169,152 (int32 holds it); Q8_0 with -128.
TEST(dot_ref, extreme_blocks_do_not_overflow_the_integer_sums) {
    std::vector<float> x(256, 1.0f);
    std::vector<std::byte> act(quant::act_row_bytes(quant::act_format::q8_256, 256));
    quant::quantize_act_row(quant::act_format::q8_256, x.data(), 256, act.data());
    std::vector<std::byte> q6(210, std::byte{0});   // ql = qh = 0: every quant is -32
    for (int j = 0; j < 16; ++j) q6[192 + j] = std::byte{0x80};   // scales = -128
    const uint16_t one = quant::fp32_to_fp16(1.0f);
    std::memcpy(q6.data() + 208, &one, 2);
    const float dx = 1.0f / 127.0f;
    EXPECT_EQ(dot_ref(dtype::q6_k, q6.data(), act.data(), 256), (1.0f * dx) * 133169152.0f);

    std::vector<std::byte> act32(quant::act_row_bytes(quant::act_format::q8_32, 32));
    quant::quantize_act_row(quant::act_format::q8_32, x.data(), 32, act32.data());
    std::vector<std::byte> q8(34, std::byte{0x80});   // every quant -128
    std::memcpy(q8.data(), &one, 2);
    EXPECT_EQ(dot_ref(dtype::q8_0, q8.data(), act32.data(), 32), (1.0f * dx) * (-128.0f * 127.0f * 32.0f));
}

// Float weights: 16 lanes of fmaf in index order, folded pairwise, written here a second way
// (one lane at a time, then an explicit tree).
float lanes_reference(const std::vector<float>& w, const std::vector<float>& x) {
    float lane[16];
    for (int l = 0; l < 16; ++l) {
        float acc = 0.0f;
        for (size_t i = static_cast<size_t>(l); i < w.size(); i += 16) acc = std::fmaf(w[i], x[i], acc);
        lane[l] = acc;
    }
    float s8[8], s4[4], s2[2];
    for (int l = 0; l < 8; ++l) s8[l] = lane[l] + lane[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

TEST(dot_ref, float_weights_follow_the_16_lane_fma_rule) {
    std::mt19937 rng(9);
    for (int64_t n : {1, 15, 16, 17, 100, 4096}) {
        const auto w = random_row(rng, n), x = random_row(rng, n);
        std::vector<std::byte> raw(static_cast<size_t>(n) * 4);
        std::memcpy(raw.data(), w.data(), raw.size());
        EXPECT_EQ(bits(dot_f32_ref(dtype::f32, raw.data(), x.data(), n)), bits(lanes_reference(w, x))) << n;
        // dot_ref on an f32 activation row is the same function.
        std::vector<std::byte> act(quant::act_row_bytes(quant::act_format::f32, n));
        quant::quantize_act_row(quant::act_format::f32, x.data(), n, act.data());
        EXPECT_EQ(bits(dot_ref(dtype::f32, raw.data(), act.data(), n)), bits(lanes_reference(w, x)));
        // F16 and BF16 widen exactly first.
        std::vector<uint16_t> h(static_cast<size_t>(n)), bh(static_cast<size_t>(n));
        std::vector<float> wh(static_cast<size_t>(n)), wb(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            h[i] = quant::fp32_to_fp16(w[i]);
            wh[i] = quant::fp16_to_fp32(h[i]);
            bh[i] = quant::fp32_to_bf16(w[i]);
            wb[i] = quant::bf16_to_fp32(bh[i]);
        }
        EXPECT_EQ(bits(dot_f32_ref(dtype::f16, reinterpret_cast<const std::byte*>(h.data()), x.data(), n)),
                  bits(lanes_reference(wh, x)));
        EXPECT_EQ(bits(dot_f32_ref(dtype::bf16, reinterpret_cast<const std::byte*>(bh.data()), x.data(), n)),
                  bits(lanes_reference(wb, x)));
    }
}

TEST(dot_ref, float_lane_accumulation_is_fused) {
    // Lane 0 gets -1 * 1, then (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: a fused multiply-add keeps
    // the 2^-24, a separate multiply rounds it away (tie to even).
    std::vector<float> w(17, 0.0f), x(17, 0.0f);
    w[0] = -1.0f;
    x[0] = 1.0f;
    w[16] = x[16] = 1.0f + 0x1p-12f;
    std::vector<std::byte> raw(17 * 4);
    std::memcpy(raw.data(), w.data(), raw.size());
    EXPECT_EQ(dot_f32_ref(dtype::f32, raw.data(), x.data(), 17), 0x1p-11f + 0x1p-24f);
}

}  // namespace
}  // namespace sluice::kernels
