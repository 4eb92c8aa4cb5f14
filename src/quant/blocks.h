// GGML block layouts (ggml-common.h), byte for byte. Scales are raw f16/e8m0 bits; the
// element order inside each block is documented where it is decoded (quant.cpp).
// Blocks are read with memcpy (rows in a mapped file need not be aligned for these structs).
#pragma once

#include <cstdint>

namespace sluice::quant {

inline constexpr int qk_legacy = 32;   // elements per legacy / IQ4_NL / MXFP4 block
inline constexpr int qk_k = 256;       // elements per K-quant / 256-wide I-quant super-block

struct block_q4_0 { uint16_t d; uint8_t qs[16]; };                     // q = nibble - 8
struct block_q4_1 { uint16_t d, m; uint8_t qs[16]; };                  // x = d*q + m
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };      // q = 5 bits - 16
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };   // x = d*q + m
struct block_q8_0 { uint16_t d; int8_t qs[32]; };
struct block_mxfp4 { uint8_t e; uint8_t qs[16]; };                     // e8m0 scale
struct block_iq4_nl { uint16_t d; uint8_t qs[16]; };

struct block_q2_k {
    uint8_t scales[16];   // low nibble: scale, high nibble: min, per 16 elements
    uint8_t qs[64];       // 2-bit quants
    uint16_t d, dmin;
};
struct block_q3_k {
    uint8_t hmask[32];    // high bit (set = no -4 offset)
    uint8_t qs[64];       // low 2 bits
    uint8_t scales[12];   // 16 6-bit scales, biased by 32
    uint16_t d;
};
struct block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];   // 8 6-bit scales and 8 6-bit mins
    uint8_t qs[128];
};
struct block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
struct block_q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
struct block_iq2_xxs { uint16_t d; uint16_t qs[32]; };   // read as 8 pairs of u32
struct block_iq2_xs { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
struct block_iq2_s {
    uint16_t d;
    uint8_t qs[32];       // low 8 bits of the grid index per 8 elements
    uint8_t signs[32];    // one sign bit per element
    uint8_t qh[8];        // high 2 bits of the grid indices
    uint8_t scales[8];
};
struct block_iq3_xxs { uint16_t d; uint8_t qs[64]; uint8_t sas[32]; };   // sas: 8 u32 scale+signs
struct block_iq3_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
};
struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
              sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 && sizeof(block_mxfp4) == 17 &&
              sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_q2_k) == 84 && sizeof(block_q3_k) == 110 && sizeof(block_q4_k) == 144 &&
              sizeof(block_q5_k) == 176 && sizeof(block_q6_k) == 210);
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
              sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110 && sizeof(block_iq4_xs) == 136);

// 6-bit scale j (0..7) and min j of a Q4_K/Q5_K scales[12] array.
inline void get_scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// 6-bit Q3_K scale j (0..15), bias removed: -32..31.
inline int q3_k_scale(int j, const uint8_t* s) {
    int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

}  // namespace sluice::quant
