// src/quant: scalar conversions and int8 activation blocks (act.h). The formats themselves are
// checked against the gguf package in tests/quant/test_quant_dequant.py.
#include "core/error.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace sluice::quant {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

std::vector<float> random_row(std::mt19937& rng, int n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng);
    return x;
}

template <class B>
std::vector<B> act_blocks(act_format f, const std::vector<float>& x) {
    std::vector<std::byte> buf(act_row_bytes(f, static_cast<int64_t>(x.size())));
    quantize_act_row(f, x.data(), static_cast<int64_t>(x.size()), buf.data());
    std::vector<B> out(buf.size() / sizeof(B));
    std::memcpy(out.data(), buf.data(), buf.size());
    return out;
}

TEST(quant, fp16_round_trips_every_finite_half) {
    for (uint32_t h = 0; h < 65536; ++h) {
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0) continue;   // NaN
        ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h) << h;
    }
}

TEST(quant, fp32_to_fp16_rounds_to_nearest_even) {
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00);        // tie, down to even
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1.8p-10f), 0x3C02);      // tie, up to even
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1.01p-11f), 0x3C01);     // just above the tie
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);               // rounds to infinity
    EXPECT_EQ(fp32_to_fp16(-1e10f), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);               // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);               // tie to even: zero
    EXPECT_EQ(fp32_to_fp16(0x1.8p-24f), 0x0002);             // tie to even: 2
    EXPECT_EQ(fp32_to_fp16(0x1.ffcp-15f), 0x0400);           // rounds up into the normals
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::nanf("")))));
}

TEST(quant, bf16_rounds_to_nearest_even_and_quiets_nan) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(fp32_to_bf16(1.0f + 0x1p-8f), 0x3F80);          // tie, down to even
    EXPECT_EQ(fp32_to_bf16(1.0f + 0x1.8p-7f), 0x3F82);        // tie, up to even
    float snan;
    const uint32_t snan_bits = 0x7F800001u;
    std::memcpy(&snan, &snan_bits, 4);
    EXPECT_EQ(fp32_to_bf16(snan), 0x7FC0);
    EXPECT_EQ(bits(bf16_to_fp32(0x3F80)), bits(1.0f));
}

TEST(quant, e8m0_half_is_a_power_of_two) {
    EXPECT_EQ(e8m0_to_fp32_half(128), 1.0f);
    EXPECT_EQ(e8m0_to_fp32_half(127), 0.5f);
    EXPECT_EQ(e8m0_to_fp32_half(1), 0x1p-127f);
    EXPECT_EQ(e8m0_to_fp32_half(0), 0x1p-128f);
    EXPECT_EQ(e8m0_to_fp32_half(255), 0x1p127f);
}

TEST(quant, act_blocks_round_trip_within_half_a_step) {
    std::mt19937 rng(1);
    for (act_format f : {act_format::q8_32, act_format::q8_256}) {
        const int w = f == act_format::q8_32 ? 32 : 256;
        const auto x = random_row(rng, 4096, 3.0f);
        std::vector<std::byte> buf(act_row_bytes(f, 4096));
        quantize_act_row(f, x.data(), 4096, buf.data());
        const size_t stride = f == act_format::q8_32 ? sizeof(act_block32) : sizeof(act_block256);
        for (int b = 0; b < 4096 / w; ++b) {
            float dx;
            std::memcpy(&dx, buf.data() + b * stride, 4);
            const auto* q = reinterpret_cast<const int8_t*>(buf.data() + b * stride + 4);
            float amax = 0.0f;
            int qmax = 0;
            for (int i = 0; i < w; ++i) {
                amax = std::fmax(amax, std::fabs(x[b * w + i]));
                qmax = std::max(qmax, std::abs(static_cast<int>(q[i])));
                const double err = std::fabs(static_cast<double>(x[b * w + i]) - static_cast<double>(q[i]) * dx);
                ASSERT_LE(err, 0.5 * dx * (1 + 1e-6)) << "block " << b << " element " << i;
            }
            EXPECT_EQ(bits(dx), bits(amax / 127.0f));
            EXPECT_EQ(qmax, 127);   // the absmax element lands on +-127
        }
    }
}

TEST(quant, zero_activation_blocks_have_zero_scale_and_quants) {
    std::vector<float> x(512, 0.0f);
    x[300] = 1.0f;   // second 256-block non-zero, its first 32-blocks zero
    const auto b256 = act_blocks<act_block256>(act_format::q8_256, x);
    EXPECT_EQ(b256[0].d, 0.0f);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(b256[0].q[i], 0);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b256[0].bsums[j], 0);
    EXPECT_EQ(b256[1].q[300 - 256], 127);
    const auto b32 = act_blocks<act_block32>(act_format::q8_32, x);
    EXPECT_EQ(b32[0].d, 0.0f);
    EXPECT_EQ(b32[9].q[300 - 288], 127);
}

TEST(quant, act_quants_round_half_to_even) {
    // amax = 127 makes dx exactly 1, so x / dx is x and the ties are exact.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = -0.5f;
    x[5] = 126.5f;
    const auto b = act_blocks<act_block32>(act_format::q8_32, x);
    EXPECT_EQ(b[0].d, 1.0f);
    EXPECT_EQ(b[0].q[1], 2);
    EXPECT_EQ(b[0].q[2], 4);
    EXPECT_EQ(b[0].q[3], -2);
    EXPECT_EQ(b[0].q[4], 0);
    EXPECT_EQ(b[0].q[5], 126);
}

TEST(quant, act_bsums_are_the_sums_of_each_16_quants) {
    std::mt19937 rng(2);
    const auto x = random_row(rng, 1024, 1.0f);
    for (const auto& b : act_blocks<act_block256>(act_format::q8_256, x)) {
        for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int i = 0; i < 16; ++i) s += b.q[16 * j + i];
            EXPECT_EQ(b.bsums[j], s);
        }
    }
}

TEST(quant, act_format_follows_the_weight_block_width) {
    EXPECT_EQ(act_format_for(dtype::f16), act_format::f32);
    EXPECT_EQ(act_format_for(dtype::q4_1), act_format::q8_32);
    EXPECT_EQ(act_format_for(dtype::mxfp4), act_format::q8_32);
    EXPECT_EQ(act_format_for(dtype::iq4_nl), act_format::q8_32);
    EXPECT_EQ(act_format_for(dtype::q6_k), act_format::q8_256);
    EXPECT_EQ(act_format_for(dtype::iq2_xxs), act_format::q8_256);
    EXPECT_THROW(act_format_for(dtype::iq1_s), error);
    EXPECT_EQ(act_row_bytes(act_format::q8_32, 64), 2 * sizeof(act_block32));
    EXPECT_EQ(act_row_bytes(act_format::q8_256, 512), 2 * sizeof(act_block256));
    EXPECT_EQ(act_row_bytes(act_format::f32, 10), 40u);
}

TEST(quant, partial_blocks_are_rejected) {
    std::vector<std::byte> raw(1024);
    std::vector<float> out(256);
    EXPECT_THROW(dequantize_row(dtype::q4_k, raw.data(), out.data(), 128), error);
    EXPECT_THROW(quantize_row(dtype::q8_0, out.data(), raw.data(), 33), error);
    EXPECT_THROW(quantize_row(dtype::iq1_s, out.data(), raw.data(), 256), error);
    EXPECT_THROW(quantize_row(dtype::q4_k, out.data(), raw.data(), 255), error);
    EXPECT_FALSE(can_dequantize(dtype::iq1_s));
    EXPECT_TRUE(can_dequantize(dtype::iq2_s));
}

TEST(quant, quantisers_reconstruct_within_one_step) {
    std::mt19937 rng(3);
    const auto x = random_row(rng, 1024, 2.0f);
    for (dtype t : {dtype::q8_0, dtype::q5_0, dtype::q5_1, dtype::q4_0, dtype::q4_1, dtype::mxfp4}) {
        std::vector<std::byte> raw(*bytes_for(t, 1024));
        std::vector<float> y(1024);
        quantize_row(t, x.data(), raw.data(), 1024);
        dequantize_row(t, raw.data(), y.data(), 1024);
        const float levels = t == dtype::q8_0 ? 127.0f : (t == dtype::q5_0 || t == dtype::q5_1) ? 15.0f : 7.0f;
        for (int b = 0; b < 32; ++b) {
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
            // MXFP4's levels are uneven (steps of up to a third of amax); the others are uniform.
            const float step = t == dtype::mxfp4 ? amax / 3.0f : amax / levels;
            for (int i = 0; i < 32; ++i)
                ASSERT_LE(std::fabs(y[b * 32 + i] - x[b * 32 + i]), step * 1.01f) << name(t) << " " << b * 32 + i;
        }
    }
}

}  // namespace
}  // namespace sluice::quant
