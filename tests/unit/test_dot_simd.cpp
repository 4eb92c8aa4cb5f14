// src/kernels/cpu/dot.h: every SIMD kernel returns dot_ref's bits (memcmp of the floats) for
// 1..16 rows, realistic and extreme inputs, unaligned pointers; dispatch picks the best ISA.
#include <cpuid.h>
#include "kernels/cpu/dot.h"
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace sluice::kernels {
namespace {

using quant::act_format;
using quant::act_format_for;

constexpr dtype k_simd_formats[] = {dtype::f32,  dtype::f16,  dtype::bf16, dtype::q8_0,   dtype::q4_0,
                                    dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::iq4_nl, dtype::mxfp4,
                                    dtype::q2_k, dtype::q3_k, dtype::q4_k, dtype::q5_k,   dtype::q6_k,
                                    dtype::iq4_xs, dtype::iq3_s, dtype::iq3_xxs, dtype::iq2_xxs, dtype::iq2_xs,
                                    dtype::iq2_s};

bool is_float(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }

// Byte offsets of the f16 scale fields of one block (mxfp4: the e8m0 byte, listed separately).
std::vector<int> scale_offsets(dtype t) {
    switch (t) {
    case dtype::q4_1: case dtype::q5_1: case dtype::q4_k: case dtype::q5_k: return {0, 2};
    case dtype::q2_k: return {80, 82};
    case dtype::q3_k: return {108};
    case dtype::q6_k: return {208};
    case dtype::mxfp4: return {};
    default: return {0};
    }
}

enum class fill { random, all_ff, all_80, all_7f };

// One weight row of n elements at byte offset `shift` inside the returned buffer (to test
// unaligned rows). Quantised rows are raw bytes (every bit pattern of the quants) with finite
// scales; `big` sets every scale to the largest f16 (65504) or the largest safe e8m0.
std::vector<std::byte> weight_row(dtype t, int64_t n, std::mt19937& rng, fill f, bool big, size_t shift) {
    const auto bytes = *bytes_for(t, static_cast<uint64_t>(n));
    std::vector<std::byte> buf(bytes + shift + 64);
    std::byte* w = buf.data() + shift;
    if (is_float(t)) {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = big ? 60000.0f * dist(rng) : dist(rng);
        quant::quantize_row(t, v.data(), w, n);
        return buf;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < bytes; ++i)
        w[i] = static_cast<std::byte>(f == fill::random ? byte(rng) : f == fill::all_ff ? 0xFF : f == fill::all_80 ? 0x80 : 0x7F);
    const auto& inf = info(t);
    std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
    for (uint64_t b = 0; b < bytes / inf.block_bytes; ++b) {
        std::byte* blk = w + b * inf.block_bytes;
        if (t == dtype::mxfp4) {
            blk[0] = static_cast<std::byte>(big ? 160 : 110 + byte(rng) % 30);
            continue;
        }
        for (int off : scale_offsets(t)) {
            const uint16_t h = big ? (byte(rng) & 1 ? 0xFBFF : 0x7BFF) : quant::fp32_to_fp16(scale(rng));
            std::memcpy(blk + off, &h, 2);
        }
    }
    return buf;
}

// n_rows activation rows with stride row_bytes + pad, starting `shift` bytes into the buffer.
// mode 0: quantize_act_row of random normals (realistic); 1: all +127; 2: all -127;
// 3: random int8 in [-127, 127] with a random positive dx.
struct act_rows {
    std::vector<std::byte> buf;
    size_t stride = 0, shift = 0;
    const std::byte* row(int r) const { return buf.data() + shift + r * stride; }
};

act_rows make_acts(dtype t, int64_t n, int n_rows, std::mt19937& rng, int mode, size_t shift, size_t pad) {
    const act_format f = act_format_for(t);
    act_rows a;
    a.stride = quant::act_row_bytes(f, n) + pad;
    a.shift = shift;
    a.buf.resize(a.stride * n_rows + shift + 64);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::uniform_int_distribution<int> q(-127, 127);
    std::vector<float> x(static_cast<size_t>(n));
    for (int r = 0; r < n_rows; ++r) {
        std::byte* dst = a.buf.data() + shift + r * a.stride;
        if (f == act_format::f32 || mode == 0) {
            for (auto& v : x) v = dist(rng) * (mode == 1 ? 1e4f : 1.0f);
            quant::quantize_act_row(f, x.data(), n, dst);
            continue;
        }
        const int w = f == act_format::q8_32 ? 32 : 256;
        const size_t bsz = f == act_format::q8_32 ? sizeof(quant::act_block32) : sizeof(quant::act_block256);
        for (int64_t b = 0; b < n / w; ++b) {
            std::byte* blk = dst + b * bsz;
            const float dx = mode == 3 ? std::uniform_real_distribution<float>(1e-3f, 2.0f)(rng) : 0.05f;
            std::memcpy(blk, &dx, 4);
            auto* qs = reinterpret_cast<int8_t*>(blk + 4);
            for (int i = 0; i < w; ++i) qs[i] = static_cast<int8_t>(mode == 1 ? 127 : mode == 2 ? -127 : q(rng));
            if (w == 256) {
                int16_t bs[16];
                for (int j = 0; j < 16; ++j) {
                    int s = 0;
                    for (int i = 0; i < 16; ++i) s += qs[16 * j + i];
                    bs[j] = static_cast<int16_t>(s);
                }
                std::memcpy(blk + offsetof(quant::act_block256, bsums), bs, sizeof bs);
            }
        }
    }
    return a;
}

// Runs dot_rows for every n_rows in 1..16 on the same rows and compares each output's bits
// with dot_ref's for that row.
void expect_rows_match_ref(isa i, dtype t, const std::byte* w, const act_rows& a, int64_t n, const char* what) {
    std::vector<float> ref(16);
    for (int r = 0; r < 16; ++r) ref[r] = dot_ref(t, w, a.row(r), n);
    for (int nr = 1; nr <= 16; ++nr) {
        float out[16];
        std::memset(out, 0xA5, sizeof out);
        dot_rows(i, t, w, a.row(0), a.stride, nr, n, out);
        for (int r = 0; r < nr; ++r)
            ASSERT_EQ(0, std::memcmp(&out[r], &ref[r], 4))
                << name(i) << " " << name(t) << " " << what << " n=" << n << " n_rows=" << nr << " row " << r
                << ": got " << out[r] << ", dot_ref " << ref[r];
    }
}

std::vector<int64_t> sizes(dtype t) {
    if (is_float(t)) return {1, 15, 16, 17, 100, 2048, 4103};
    if (act_format_for(t) == act_format::q8_32) return {32, 96, 4096, 18944};
    return {256, 768, 4096, 18944};   // 18944: Qwen2-7B's FFN width, the largest realistic row here
}

class dot_simd : public ::testing::TestWithParam<isa> {
protected:
    void SetUp() override {
        if (!cpu_supports(GetParam())) GTEST_SKIP() << "this CPU cannot run " << name(GetParam()) << " kernels";
    }
};

TEST_P(dot_simd, every_simd_format_has_a_kernel_except_at_scalar) {
    for (dtype t : k_simd_formats) EXPECT_EQ(has_simd(GetParam(), t), GetParam() != isa::scalar) << name(t);
}

TEST_P(dot_simd, random_rows_equal_dot_ref_bits_for_1_to_16_rows) {
    std::mt19937 rng(1234);
    for (dtype t : k_simd_formats)
        for (int64_t n : sizes(t)) {
            const auto w = weight_row(t, n, rng, fill::random, false, 0);
            expect_rows_match_ref(GetParam(), t, w.data(), make_acts(t, n, 16, rng, 0, 0, 0), n, "quantised normals");
            if (!is_float(t))
                expect_rows_match_ref(GetParam(), t, w.data(), make_acts(t, n, 16, rng, 3, 0, 0), n, "random int8");
        }
}

TEST_P(dot_simd, extreme_values_equal_dot_ref_bits) {
    std::mt19937 rng(99);
    for (dtype t : k_simd_formats) {
        const int64_t n = is_float(t) ? 4096 + 5 : 4096;
        for (fill f : {fill::random, fill::all_ff, fill::all_80, fill::all_7f}) {
            if (is_float(t) && f != fill::random) continue;
            const auto w = weight_row(t, n, rng, f, true, 0);
            for (int mode : {1, 2}) {
                // Float weights: mode 1 gives large activations, mode 2 ordinary ones.
                const auto a = make_acts(t, n, 16, rng, mode, 0, 0);
                expect_rows_match_ref(GetParam(), t, w.data(), a, n, mode == 1 ? "max scales, x=+127" : "max scales, x=-127");
            }
        }
    }
}

TEST_P(dot_simd, unaligned_rows_and_strides_equal_dot_ref_bits) {
    std::mt19937 rng(7);
    for (dtype t : k_simd_formats) {
        const int64_t n = is_float(t) ? 1000 : 2048;
        const auto w = weight_row(t, n, rng, fill::random, false, 3);
        // Float activations must stay float-aligned (dot.h): shift by 4 and pad by 4 bytes.
        const size_t shift = is_float(t) ? 4 : 1, pad = is_float(t) ? 4 : 5;
        expect_rows_match_ref(GetParam(), t, w.data() + 3, make_acts(t, n, 16, rng, 0, shift, pad), n, "unaligned");
    }
}

TEST_P(dot_simd, every_dot_ref_format_is_covered_here) {
    // A format dot_ref gains later must get a SIMD version or an explicit has_simd() == false.
    for (uint32_t id = 0; id < 64; ++id) {
        const auto inf = find_dtype(id);
        if (!inf || !has_dot(inf->type)) continue;
        bool listed = false;
        for (dtype t : k_simd_formats) listed = listed || t == inf->type;
        EXPECT_TRUE(listed) << name(inf->type) << " has dot_ref but is not in k_simd_formats";
    }
}

TEST_P(dot_simd, empty_row_is_zero_like_dot_ref) {
    for (dtype t : k_simd_formats) {
        float out[2] = {1.0f, 1.0f};
        const std::byte dummy[64] = {};
        dot_rows(GetParam(), t, dummy, dummy, 0, 2, 0, out);
        const float ref = dot_ref(t, dummy, dummy, 0);
        EXPECT_EQ(0, std::memcmp(&out[0], &ref, 4)) << name(t);
        EXPECT_EQ(0, std::memcmp(&out[1], &ref, 4)) << name(t);
    }
}

INSTANTIATE_TEST_SUITE_P(isas, dot_simd, ::testing::Values(isa::scalar, isa::avx2, isa::avx512),
                         [](const auto& info) { return std::string(name(info.param)); });

TEST(dot_dispatch, best_isa_is_the_widest_the_cpu_reports) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;  // cpuid leaf 1, ecx bit 29
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    const isa expected = avx512 ? isa::avx512 : avx2 ? isa::avx2 : isa::scalar;
    EXPECT_EQ(best_isa(), expected) << "best_isa() = " << name(best_isa()) << ", expected " << name(expected);
    EXPECT_TRUE(cpu_supports(best_isa()));
    EXPECT_TRUE(cpu_supports(isa::scalar));
    for (dtype t : k_simd_formats) EXPECT_FALSE(has_simd(isa::scalar, t)) << name(t);
}

TEST(dot_dispatch, window_outside_1_to_16_rows_is_rejected) {
    const std::byte w[64] = {};
    float out[17];
    EXPECT_THROW(dot_rows(isa::scalar, dtype::q8_0, w, w, 0, 0, 32, out), std::exception);
    EXPECT_THROW(dot_rows(best_isa(), dtype::q8_0, w, w, 0, 17, 32, out), std::exception);
    EXPECT_THROW(dot_rows(best_isa(), dtype::iq1_s, w, w, 0, 1, 256, out), std::exception);
}

}  // namespace
}  // namespace sluice::kernels
