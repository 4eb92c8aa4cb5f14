// Philox4x32-10 against the known-answer vectors of Random123's kat_vectors file (the SC11
// paper's reference implementation), and the (0, 1) mapping keyed sampling relies on.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/philox.h"

namespace sluice {
namespace {

struct kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
};

TEST(philox, matches_random123_known_answers) {
    const kat cases[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (const auto& c : cases) {
        philox4x32 r = philox4x32_10(c.ctr[0], c.ctr[1], c.ctr[2], c.ctr[3], c.key[0], c.key[1]);
        for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], c.out[i]) << "word " << i << " of counter " << std::hex << c.ctr[0];
    }
}

TEST(philox, open_unit_never_reaches_zero_or_one) {
    EXPECT_GT(philox_open_unit(0u), 0.0);
    EXPECT_LT(philox_open_unit(0xffffffffu), 1.0);
    EXPECT_DOUBLE_EQ(philox_open_unit(0x80000000u), 0.5 + 0.5 / 4294967296.0);
    // The Gumbel transform stays finite at both ends.
    for (uint32_t x : {0u, 1u, 0xfffffffeu, 0xffffffffu}) {
        double u = philox_open_unit(x);
        EXPECT_TRUE(std::isfinite(-std::log(-std::log(u)))) << x;
    }
}

TEST(philox, nearby_counters_give_unrelated_words) {
    // Counters that differ in one bit (what positions p and p + 1 look like) share no output word.
    philox4x32 a = philox4x32_10(1000, 7, 0, 0, 42, 0);
    philox4x32 b = philox4x32_10(1001, 7, 0, 0, 42, 0);
    philox4x32 c = philox4x32_10(1000, 7, 0, 0, 43, 0);
    for (int i = 0; i < 4; ++i) {
        EXPECT_NE(a.v[i], b.v[i]);
        EXPECT_NE(a.v[i], c.v[i]);
    }
}

}  // namespace
}  // namespace sluice
