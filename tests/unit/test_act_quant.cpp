// quant/act.h: quantize_act_row (AVX2 where the CPU has it) writes the bytes of
// quantize_act_row_ref, the scalar definition, for both block widths: normal rows, ties of the
// round-to-nearest-even (x / dx exactly k + 0.5), values that clamp, zeros, tiny values whose dx
// underflows, denormals, infinities and NaNs, and signed zeros.
#include "quant/act.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace sluice::quant {
namespace {

// A 512-value row of kind k (each 256-block and 32-block gets the same treatment).
std::vector<float> make_row(int kind, std::mt19937& g) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> x(512);
    for (auto& v : x) v = n(g);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    switch (kind) {
    case 0: break;   // normals
    case 1:          // ties: amax 127 in each 32-block, so dx = 1 and x / dx = k + 0.5
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 32 == 0 ? 127.0f : static_cast<float>(static_cast<int>(i % 61) - 30) + 0.5f;
        break;
    case 2: std::fill(x.begin(), x.end(), 0.0f); break;
    case 3: for (auto& v : x) v *= 1e-44f; break;          // denormals: dx underflows to 0 or near it
    case 4: for (auto& v : x) v *= 1e-38f; break;          // tiny normals
    case 5: x[3] = inf; x[40] = -inf; x[300] = inf; break;  // inf amax: inf / inf is NaN, quantised to 0
    case 6: x[5] = nan; x[77] = nan; x[260] = -nan; break;  // NaNs ignored by the max, quantised to 0
    case 7: for (size_t i = 0; i < x.size(); i += 2) x[i] = -0.0f; break;
    case 8: x[10] = 3e38f; x[11] = -3e38f; break;           // huge values: large dx
    default: break;
    }
    return x;
}

TEST(act_quant, simd_rows_equal_the_scalar_definition) {
    std::mt19937 g(99);
    for (int kind = 0; kind <= 8; ++kind)
        for (int rep = 0; rep < 20; ++rep) {
            const std::vector<float> x = make_row(kind, g);
            for (act_format f : {act_format::q8_32, act_format::q8_256}) {
                const size_t bytes = act_row_bytes(f, 512);
                std::vector<std::byte> a(bytes), b(bytes);
                quantize_act_row(f, x.data(), 512, a.data());
                quantize_act_row_ref(f, x.data(), 512, b.data());
                ASSERT_EQ(0, std::memcmp(a.data(), b.data(), bytes))
                    << "kind " << kind << " rep " << rep << " format " << static_cast<int>(f);
            }
        }
}

// The definition itself on a tie and a clamp, so the comparison above cannot pass with both
// sides wrong the same way.
TEST(act_quant, ties_round_to_even_and_values_clamp) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;   // dx = 1
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    act_block32 blk;
    for (auto* fn : {&quantize_act_row, &quantize_act_row_ref}) {
        fn(act_format::q8_32, x.data(), 32, reinterpret_cast<std::byte*>(&blk));
        EXPECT_EQ(blk.d, 1.0f);
        EXPECT_EQ(blk.q[0], 127);
        EXPECT_EQ(blk.q[1], 2);
        EXPECT_EQ(blk.q[2], -4);
        EXPECT_EQ(blk.q[3], 0);
    }
}

}  // namespace
}  // namespace sluice::quant
