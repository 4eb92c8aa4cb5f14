// Philox4x32-10: the counter-based RNG behind keyed sampling (E4).
//
// Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC11). A pure
// function of (counter[4], key[2]): no state, so the random number for (seed, position, vocab
// id) is the same on any thread, in any window size and on the host or the device. The
// known-answer vectors of the paper's kat_vectors file are in tests/unit/test_sampler_philox.cpp.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace sluice {

struct philox4x32 {
    uint32_t v[4];
};

namespace philox_detail {

// Multipliers and Weyl key increments of Philox4x32 (the paper's table 2).
inline constexpr uint32_t m0 = 0xD2511F53u;
inline constexpr uint32_t m1 = 0xCD9E8D57u;
inline constexpr uint32_t w0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t w1 = 0xBB67AE85u;  // sqrt(3) - 1

SLUICE_HD inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
    uint64_t p = uint64_t(a) * uint64_t(b);
    hi = uint32_t(p >> 32);
    lo = uint32_t(p);
}

// One S-box round: two 32x32->64 products, the high halves xor-ed with the other words and
// the key, the words permuted.
SLUICE_HD inline void round(uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(m0, c[0], hi0, lo0);
    mulhilo(m1, c[2], hi1, lo1);
    uint32_t r0 = hi1 ^ c[1] ^ k0;
    uint32_t r2 = hi0 ^ c[3] ^ k1;
    c[0] = r0;
    c[1] = lo1;
    c[2] = r2;
    c[3] = lo0;
}

}  // namespace philox_detail

// Philox4x32 with R rounds (10 is the standard, crush-resistant count used everywhere here).
template <int Rounds = 10>
SLUICE_HD inline philox4x32 philox4x32_r(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                         uint32_t k0, uint32_t k1) {
    uint32_t c[4] = {c0, c1, c2, c3};
    for (int r = 0; r < Rounds; ++r) {
        if (r > 0) {  // the key is bumped between rounds, not before the first
            k0 += philox_detail::w0;
            k1 += philox_detail::w1;
        }
        philox_detail::round(c, k0, k1);
    }
    return philox4x32{{c[0], c[1], c[2], c[3]}};
}

SLUICE_HD inline philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                          uint32_t k0, uint32_t k1) {
    return philox4x32_r<10>(c0, c1, c2, c3, k0, k1);
}

// The uniform in the open interval (0, 1) that keyed sampling uses: all 32 bits of x, offset by
// half a step, u = (x + 0.5) * 2^-32. In double both operations are exact (33 significant
// bits), so u is never 0 or 1 and -log(-log(u)) is always finite.
SLUICE_HD inline double philox_open_unit(uint32_t x) {
    return (double(x) + 0.5) * (1.0 / 4294967296.0);
}

}  // namespace sluice
