// Per-lane weight decoding for the CUDA quantised matmul (DESIGN.md E3), written once for the
// host and the device (SLUICE_HD) so that the host can check it against kernels::dot_ref
// without a GPU (tests/gpu/matmul_parity.cu does, before it touches the device).
//
// The unit of work is a "piece": 8 consecutive elements of one weight block. A block of QK
// elements has QK/8 pieces; piece p covers elements [8p, 8p+8). Every sub-block of every format
// is 16 or 32 elements wide, so a piece lies inside one sub-block and has one integer scale sc
// and one integer min mn. A lane decodes its piece to 8 int8 weights q, and computes
//   si = sc * dot(q, qx[8p..8p+8))      sm = mn * sum(qx[8p..8p+8))
// The block's sumi / summ of dot_ref.cpp are the sums of si / sm over its pieces (integers:
// exact in any order). The per-block fp32 term is block_term below, dot_ref's expression with
// each operation rounded on its own.
#pragma once

#include "core/dtype.h"
#include "core/hd.h"

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace sluice::cuda {

// Pointers to the I-quant grids and the 4-bit level tables (quant/iq_tables.h layouts): host
// arrays on the host, copies in device memory on the device.
struct iq_tables {
    const uint8_t* ksigns;      // [128]
    const uint8_t* iq2xxs;      // [256][8]
    const uint8_t* iq2xs;       // [512][8]
    const uint8_t* iq2s;        // [1024][8]
    const uint8_t* iq3xxs;      // [256][4]
    const uint8_t* iq3s;        // [512][4]
    const int8_t* kv_iq4nl;     // [16]
    const int8_t* kv_mxfp4;     // [16]
};

enum class term_kind : uint8_t { sym, plus_min, minus_min };

// Static facts about a format: elements and bytes per block, the term form, and whether the
// activation blocks are 32 (act_block32, 36 bytes) or 256 wide (act_block256, 292 bytes).
template <dtype T>
struct fmt_traits;

#define SLUICE_FMT(T, QK, BYTES, KIND)                                        \
    template <>                                                               \
    struct fmt_traits<dtype::T> {                                             \
        static constexpr int qk = QK;                                         \
        static constexpr int block_bytes = BYTES;                             \
        static constexpr term_kind kind = term_kind::KIND;                    \
        static constexpr int act_bytes = QK == 32 ? 36 : 292;                 \
    };
SLUICE_FMT(q8_0, 32, 34, sym)
SLUICE_FMT(q4_0, 32, 18, sym)
SLUICE_FMT(q4_1, 32, 20, plus_min)
SLUICE_FMT(q5_0, 32, 22, sym)
SLUICE_FMT(q5_1, 32, 24, plus_min)
SLUICE_FMT(iq4_nl, 32, 18, sym)
SLUICE_FMT(mxfp4, 32, 17, sym)
SLUICE_FMT(q2_k, 256, 84, minus_min)
SLUICE_FMT(q3_k, 256, 110, sym)
SLUICE_FMT(q4_k, 256, 144, minus_min)
SLUICE_FMT(q5_k, 256, 176, minus_min)
SLUICE_FMT(q6_k, 256, 210, sym)
SLUICE_FMT(iq4_xs, 256, 136, sym)
SLUICE_FMT(iq2_xxs, 256, 66, sym)
SLUICE_FMT(iq2_xs, 256, 74, sym)
SLUICE_FMT(iq2_s, 256, 82, sym)
SLUICE_FMT(iq3_xxs, 256, 98, sym)
SLUICE_FMT(iq3_s, 256, 110, sym)
#undef SLUICE_FMT

// f16 bits widened to fp32 exactly (quant::fp16_to_fp32's bit construction).
SLUICE_HD inline float hd_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
#endif
}

SLUICE_HD inline float hd_h2f(uint16_t h) {
#if defined(__CUDA_ARCH__)
    // The hardware conversion is exact for every finite or infinite half (f32 holds each one,
    // subnormals included); NaNs keep the bit construction below (their payload). One convert
    // instead of the branches below for each block's d and dmin: a decode step's expert matmuls
    // are issue-bound (tests/gpu/ncu_source.h200.txt).
    if ((h & 0x7C00u) != 0x7C00u) return __half2float(__ushort_as_half(h));
#endif
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t ex = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    uint32_t bits;
    if (ex == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (ex == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            const float f = static_cast<float>(mant) * 0x1p-24f;   // subnormal: exact
            return sign ? -f : f;
        }
    } else {
        bits = sign | ((ex + 112) << 23) | (mant << 13);
    }
    return hd_bits_f32(bits);
}

// MXFP4's e8m0 scale halved: 2^(e - 128) (quant::e8m0_to_fp32_half).
SLUICE_HD inline float hd_e8m0_half(uint8_t e) {
    return hd_bits_f32(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23));
}

SLUICE_HD inline uint16_t ld_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
SLUICE_HD inline uint32_t ld_u32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
}

// The block header: d and dmin (or Q4_1/Q5_1's m) as fp32, the format's constant factor folded
// into d (IQ2_*: * 0.125f, IQ3_XXS: * 0.25f; exact, a power of two).
template <dtype T>
SLUICE_HD inline void decode_scales(const uint8_t* b, float& d, float& dmin) {
    dmin = 0.0f;
    if constexpr (T == dtype::mxfp4) {
        d = hd_e8m0_half(b[0]);
    } else if constexpr (T == dtype::q2_k) {
        d = hd_h2f(ld_u16(b + 80));
        dmin = hd_h2f(ld_u16(b + 82));
    } else if constexpr (T == dtype::q3_k) {
        d = hd_h2f(ld_u16(b + 108));
    } else if constexpr (T == dtype::q6_k) {
        d = hd_h2f(ld_u16(b + 208));
    } else {
        d = hd_h2f(ld_u16(b));
        if constexpr (T == dtype::q4_1 || T == dtype::q5_1 || T == dtype::q4_k || T == dtype::q5_k)
            dmin = hd_h2f(ld_u16(b + 2));
        if constexpr (T == dtype::iq2_xxs || T == dtype::iq2_xs || T == dtype::iq2_s) d = d * 0.125f;
        if constexpr (T == dtype::iq3_xxs) d = d * 0.25f;
    }
}

// Q4_K/Q5_K 6-bit scale and min j (quant::get_scale_min_k4).
SLUICE_HD inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Piece p (elements 8p..8p+7) of block b: q[0..8), its sub-block's scale sc and min mn
// (mn is 1 for Q4_1/Q5_1 and 0 for formats without a min). dot_ref.cpp's decode, element by
// element (k = 8p + e below is dot_ref's element index).
template <dtype T>
SLUICE_HD inline void decode_piece(const uint8_t* b, int p, const iq_tables& tb, int8_t* q, int& sc, int& mn) {
    sc = 1;
    mn = 0;
    if constexpr (T == dtype::q8_0) {
        for (int e = 0; e < 8; ++e) q[e] = static_cast<int8_t>(b[2 + 8 * p + e]);
    } else if constexpr (T == dtype::q4_0 || T == dtype::q4_1 || T == dtype::iq4_nl || T == dtype::mxfp4) {
        // Elements 0..15 are the low nibbles of qs[0..16), 16..31 the high nibbles.
        const uint8_t* qs = b + (T == dtype::q4_1 ? 4 : (T == dtype::mxfp4 ? 1 : 2));
        const int shift = p < 2 ? 0 : 4;
        for (int e = 0; e < 8; ++e) {
            const int nib = (qs[8 * (p & 1) + e] >> shift) & 0x0F;
            if constexpr (T == dtype::q4_0) q[e] = static_cast<int8_t>(nib - 8);
            else if constexpr (T == dtype::q4_1) q[e] = static_cast<int8_t>(nib);
            else if constexpr (T == dtype::iq4_nl) q[e] = tb.kv_iq4nl[nib];
            else q[e] = tb.kv_mxfp4[nib];
        }
        if constexpr (T == dtype::q4_1) mn = 1;
    } else if constexpr (T == dtype::q5_0 || T == dtype::q5_1) {
        const uint8_t* qh = b + (T == dtype::q5_0 ? 2 : 4);
        const uint8_t* qs = qh + 4;
        const uint32_t h = ld_u32(qh);
        const int shift = p < 2 ? 0 : 4;
        for (int e = 0; e < 8; ++e) {
            const int k = 8 * p + e;
            const int v = ((qs[8 * (p & 1) + e] >> shift) & 0x0F) | static_cast<int>(((h >> k) & 1u) << 4);
            q[e] = static_cast<int8_t>(T == dtype::q5_0 ? v - 16 : v);
        }
        if constexpr (T == dtype::q5_1) mn = 1;
    } else if constexpr (T == dtype::q2_k || T == dtype::q3_k) {
        // k = 8p + e: qs[32*(k/128) + k%32] >> 2*((k/32)%4), 2 bits.
        const int k0 = 8 * p;
        const uint8_t* qs = b + (T == dtype::q2_k ? 16 : 32);
        const int base = 32 * (k0 / 128) + k0 % 32, shift = 2 * ((k0 / 32) % 4);
        for (int e = 0; e < 8; ++e) {
            const int lo = (qs[base + e] >> shift) & 3;
            if constexpr (T == dtype::q2_k) {
                q[e] = static_cast<int8_t>(lo);
            } else {
                const int hbit = (b[(k0 + e) % 32] >> (k0 / 32)) & 1;   // hmask at offset 0
                q[e] = static_cast<int8_t>(lo - (hbit ? 0 : 4));
            }
        }
        const int j = k0 / 16;
        if constexpr (T == dtype::q2_k) {
            sc = b[j] & 0x0F;
            mn = b[j] >> 4;
        } else {
            const uint8_t* s = b + 96;
            const int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
            const int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
            sc = (lo | (hi << 4)) - 32;
        }
    } else if constexpr (T == dtype::q4_k || T == dtype::q5_k) {
        const int j = p / 4, l0 = 8 * (p % 4);
        const uint8_t* qs = b + (T == dtype::q4_k ? 16 : 48);
        for (int e = 0; e < 8; ++e) {
            int v = (qs[32 * (j / 2) + l0 + e] >> (4 * (j % 2))) & 0x0F;
            if constexpr (T == dtype::q5_k) v |= ((b[16 + l0 + e] >> j) & 1) << 4;   // qh at 16
            q[e] = static_cast<int8_t>(v);
        }
        scale_min_k4(j, b + 4, sc, mn);
    } else if constexpr (T == dtype::q6_k) {
        const int k0 = 8 * p, h = k0 / 128, r = k0 % 128;
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        for (int e = 0; e < 8; ++e) {
            const int rr = r + e;
            const int lo = (ql[64 * h + rr % 64] >> (4 * (rr / 64))) & 0x0F;
            const int hi = (qh[32 * h + rr % 32] >> (2 * (rr / 32))) & 3;
            q[e] = static_cast<int8_t>((lo | (hi << 4)) - 32);
        }
        sc = static_cast<int8_t>(b[192 + k0 / 16]);
    } else if constexpr (T == dtype::iq4_xs) {
        const int j = p / 4, l0 = 8 * (p % 4);
        const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
        const int hi = (ld_u16(b + 2) >> (2 * j)) & 3;
        sc = (lo | (hi << 4)) - 32;
        const uint8_t* qs = b + 8 + 16 * j;
        for (int e = 0; e < 8; ++e) {
            const int l = l0 + e;
            q[e] = tb.kv_iq4nl[l < 16 ? (qs[l] & 0x0F) : (qs[l - 16] >> 4)];
        }
    } else if constexpr (T == dtype::iq2_xxs) {
        const int j = p / 4, kk = p % 4;
        const uint32_t a0 = ld_u32(b + 2 + 8 * j), a1 = ld_u32(b + 2 + 8 * j + 4);
        sc = 2 * static_cast<int>(a1 >> 28) + 1;
        const uint8_t* g = tb.iq2xxs + 8 * ((a0 >> (8 * kk)) & 0xFF);
        const uint8_t s = tb.ksigns[(a1 >> (7 * kk)) & 0x7F];
        for (int e = 0; e < 8; ++e) q[e] = static_cast<int8_t>((s >> e) & 1 ? -g[e] : g[e]);
    } else if constexpr (T == dtype::iq2_xs) {
        const int j = p / 2;   // 16-wide sub-blocks
        sc = 2 * ((b[66 + j / 2] >> (4 * (j % 2))) & 0x0F) + 1;
        const uint16_t v = ld_u16(b + 2 + 2 * p);
        const uint8_t* g = tb.iq2xs + 8 * (v & 511);
        const uint8_t s = tb.ksigns[v >> 9];
        for (int e = 0; e < 8; ++e) q[e] = static_cast<int8_t>((s >> e) & 1 ? -g[e] : g[e]);
    } else if constexpr (T == dtype::iq2_s) {
        const int j = p / 2;
        sc = 2 * ((b[74 + j / 2] >> (4 * (j % 2))) & 0x0F) + 1;
        const int idx = b[2 + p] | (((b[66 + p / 4] >> (2 * (p % 4))) & 3) << 8);
        const uint8_t* g = tb.iq2s + 8 * idx;
        const uint8_t s = b[34 + p];
        for (int e = 0; e < 8; ++e) q[e] = static_cast<int8_t>((s >> e) & 1 ? -g[e] : g[e]);
    } else if constexpr (T == dtype::iq3_xxs) {
        const int j = p / 4, kk = p % 4;
        const uint32_t aux = ld_u32(b + 66 + 4 * j);
        sc = 2 * static_cast<int>(aux >> 28) + 1;
        const uint8_t s = tb.ksigns[(aux >> (7 * kk)) & 0x7F];
        const uint8_t* g1 = tb.iq3xxs + 4 * b[2 + 8 * j + 2 * kk];
        const uint8_t* g2 = tb.iq3xxs + 4 * b[2 + 8 * j + 2 * kk + 1];
        for (int e = 0; e < 4; ++e) {
            q[e] = static_cast<int8_t>((s >> e) & 1 ? -g1[e] : g1[e]);
            q[e + 4] = static_cast<int8_t>((s >> (e + 4)) & 1 ? -g2[e] : g2[e]);
        }
    } else if constexpr (T == dtype::iq3_s) {
        const int j = p / 4;
        sc = 1 + 2 * ((b[106 + j / 2] >> (4 * (j % 2))) & 0x0F);
        const uint8_t sg = b[74 + p];   // signs of elements 8p..8p+7
        for (int h = 0; h < 2; ++h) {
            const int gi = 2 * p + h;
            const int idx = b[2 + gi] | (((b[66 + gi / 8] >> (gi % 8)) & 1) << 8);
            const uint8_t* g = tb.iq3s + 4 * idx;
            for (int e = 0; e < 4; ++e) {
                const int bit = 4 * h + e;
                q[bit] = static_cast<int8_t>((sg >> bit) & 1 ? -g[e] : g[e]);
            }
        }
    }
}

// q[0..4) as one word, byte e = q[e] (the operand of dp4a).
SLUICE_HD inline int32_t pack4(const int8_t* q) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint8_t>(q[0])) |
                                (static_cast<uint32_t>(static_cast<uint8_t>(q[1])) << 8) |
                                (static_cast<uint32_t>(static_cast<uint8_t>(q[2])) << 16) |
                                (static_cast<uint32_t>(static_cast<uint8_t>(q[3])) << 24));
}

// A little-endian word at p, 4-byte aligned (one load on the device; bytes on the host).
SLUICE_HD inline uint32_t ld_u32_aligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const uint32_t*>(p);
#else
    return ld_u32(p);
#endif
}

// The alignment of a block that decode_piece_packed's word path needs (0: no word path): Q4_K
// and Q5_K read 4-byte words; Q6_K (210-byte blocks, so only every other block of a row is
// 4-byte aligned) builds its words from 2-byte loads.
template <dtype T>
inline constexpr int packed_alignment = T == dtype::q4_k || T == dtype::q5_k ? 4 : T == dtype::q6_k ? 2 : 0;

// True when block b may take decode_piece_packed's word path.
template <dtype T>
SLUICE_HD inline bool packed_aligned(const uint8_t* b) {
    constexpr int A = packed_alignment<T>;
    return A > 0 && (reinterpret_cast<uintptr_t>(b) & static_cast<uintptr_t>(A - 1)) == 0;
}

// A little-endian word at p, 2-byte aligned (two 16-bit loads on the device; bytes on the host).
SLUICE_HD inline uint32_t ld_u32_aligned2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
#else
    return ld_u32(p);
#endif
}

// Four 6-bit values v (bytes 0..63) to the bytes v - 32 (two's complement), per byte without
// borrows: v >= 32 keeps its low 5 bits, v < 32 becomes v | 0xE0 (= v - 32 + 256).
SLUICE_HD inline uint32_t minus32_bytes(uint32_t v) {
    return (v & 0x1F1F1F1Fu) | (((~v >> 5) & 0x01010101u) * 0xE0u);
}

// Piece p as the kernel consumes it: q0 = pack4(q), q1 = pack4(q + 4) of decode_piece's q, with
// its sc and mn. Q4_K and Q5_K build the words from whole-word loads, Q6_K from pairs of 16-bit
// loads (four nibbles, and the high bits, per operation) when `aligned` (b has
// packed_alignment<T>: their nibble and high-bit offsets are multiples of 8 in the block); every
// other format, or an unaligned block, packs decode_piece's bytes. The same integers either way (matmul_parity checks it on the host).
template <dtype T>
SLUICE_HD inline void decode_piece_packed(const uint8_t* b, int p, const iq_tables& tb, bool aligned, int32_t& q0,
                                          int32_t& q1, int& sc, int& mn) {
    if constexpr (T == dtype::q6_k) {
        if (aligned) {
            // decode_piece's Q6_K with k0 = 8p: the 8 elements share h = k0 / 128 and the
            // shifts (r / 64, r / 32 with r = k0 % 128), and their bytes are consecutive.
            const int k0 = 8 * p, h = k0 / 128, r = k0 % 128;
            const uint8_t* ql = b + 64 * h + r % 64;
            const uint8_t* qh = b + 128 + 32 * h + r % 32;
            const int sl = 4 * (r / 64), sh = 2 * (r / 32);
            const uint32_t v0 = ((ld_u32_aligned2(ql) >> sl) & 0x0F0F0F0Fu) | (((ld_u32_aligned2(qh) >> sh) & 0x03030303u) << 4);
            const uint32_t v1 =
                ((ld_u32_aligned2(ql + 4) >> sl) & 0x0F0F0F0Fu) | (((ld_u32_aligned2(qh + 4) >> sh) & 0x03030303u) << 4);
            q0 = static_cast<int32_t>(minus32_bytes(v0));
            q1 = static_cast<int32_t>(minus32_bytes(v1));
            sc = static_cast<int8_t>(b[192 + k0 / 16]);
            mn = 0;
            return;
        }
    }
    if constexpr (T == dtype::q4_k || T == dtype::q5_k) {
        if (aligned) {
            const int j = p / 4, l0 = 8 * (p % 4);
            const uint8_t* qs = b + (T == dtype::q4_k ? 16 : 48) + 32 * (j / 2) + l0;
            const int sh = 4 * (j % 2);
            uint32_t w0 = (ld_u32_aligned(qs) >> sh) & 0x0F0F0F0Fu, w1 = (ld_u32_aligned(qs + 4) >> sh) & 0x0F0F0F0Fu;
            if constexpr (T == dtype::q5_k) {   // qh at 16: bit j of byte l0 + e is bit 4 of q[e]
                w0 |= ((ld_u32_aligned(b + 16 + l0) >> j) & 0x01010101u) << 4;
                w1 |= ((ld_u32_aligned(b + 16 + l0 + 4) >> j) & 0x01010101u) << 4;
            }
            q0 = static_cast<int32_t>(w0);
            q1 = static_cast<int32_t>(w1);
            scale_min_k4(j, b + 4, sc, mn);
            return;
        }
    }
    int8_t q[8];
    decode_piece<T>(b, p, tb, q, sc, mn);
    q0 = pack4(q);
    q1 = pack4(q + 4);
}

// The four signed byte products of a and b summed, plus c (dp4a).
SLUICE_HD inline int32_t hd_dp4a(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; ++k) c += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
    return c;
#endif
}

// Q4_K, whole sub-blocks a lane: S = 1 (sub-block j0) or 2 (j0 even: j0 and j0 + 1, the pair
// whose weights are the low and high nibbles of the same 32 qs bytes). Adds sc_j * dot(q_j, x_j)
// to si and mn_j * (bsums[2 j] + bsums[2 j + 1]) to sm for each: the integers that
// decode_piece_packed and the kernels' piece_sums give over the sub-block's 4 pieces (integer
// sums in another grouping; the bsums are exact sums of the activation block's values, act.h),
// with one scale decode and one load of the weights per sub-block instead of one per piece, and
// the activation sums read instead of made (2 dp4a a piece). b: the block, 16-byte aligned; ab:
// its act_block256 (d, q[256], bsums[16]), 4-byte aligned.
template <int S>
SLUICE_HD inline void q4k_subblock_sums(const uint8_t* b, int j0, const uint8_t* ab, int32_t& si, int32_t& sm) {
    static_assert(S == 1 || S == 2, "one sub-block or an even-odd pair");
    uint32_t raw[8];
    const uint8_t* qs = b + 16 + 32 * (j0 / 2);
    // scale_min_k4's bytes as three words, its two cases both formed and one selected: the lanes
    // of a warp take different j, and a branch on j < 4 ran both sides.
    const uint32_t s0 = ld_u32_aligned(b + 4), s1 = ld_u32_aligned(b + 8), s2 = ld_u32_aligned(b + 12);
#if defined(__CUDA_ARCH__)
    const uint4 w0 = reinterpret_cast<const uint4*>(qs)[0], w1 = reinterpret_cast<const uint4*>(qs)[1];
    raw[0] = w0.x, raw[1] = w0.y, raw[2] = w0.z, raw[3] = w0.w;
    raw[4] = w1.x, raw[5] = w1.y, raw[6] = w1.z, raw[7] = w1.w;
#else
    for (int k = 0; k < 8; ++k) raw[k] = ld_u32(qs + 4 * k);
#endif
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const int j = j0 + s;
        const int sh = 4 * (j & 1);
        const uint8_t* x = ab + 4 + 32 * j;
        int32_t dot = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t q = (raw[k] >> sh) & 0x0F0F0F0Fu;
            dot = hd_dp4a(static_cast<int32_t>(q), static_cast<int32_t>(ld_u32_aligned(x + 4 * k)), dot);
        }
        const int sh8 = 8 * (j & 3);
        const uint32_t a = s0 >> sh8, m = s1 >> sh8, c = s2 >> sh8;
        const int sc = static_cast<int>(j < 4 ? a & 63u : (c & 15u) | ((a >> 2) & 0x30u));
        const int mn = static_cast<int>(j < 4 ? m & 63u : ((c >> 4) & 15u) | ((m >> 2) & 0x30u));
        const uint32_t bs = ld_u32_aligned(ab + 260 + 4 * j);   // bsums[2 j], bsums[2 j + 1]
        si += sc * dot;
        const int32_t bsum = static_cast<int32_t>(static_cast<int16_t>(bs & 0xFFFFu)) + static_cast<int16_t>(bs >> 16);
        sm += mn * bsum;
    }
}

// n little-endian words from p, 2-byte aligned: on the device the aligned words that cover them
// and a funnel shift each (one 4-byte load a word instead of two 2-byte loads and a merge).
// Reads up to 2 bytes past p + 4 n when p is 4-byte aligned (the caller's block holds them).
template <int N>
SLUICE_HD inline void ld_words2(const uint8_t* p, uint32_t (&w)[N]) {
#if defined(__CUDA_ARCH__)
    // p less its misalignment (not the address masked as an integer, which lost the pointer's
    // shared-memory space: generic loads in place of LDS).
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3u);
    const uint32_t* aw = reinterpret_cast<const uint32_t*>(p - mis);
    const uint32_t s = mis * 8u;
    uint32_t prev = aw[0];
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const uint32_t next = aw[k + 1];
        w[k] = __funnelshift_r(prev, next, s);
        prev = next;
    }
#else
    for (int k = 0; k < N; ++k) w[k] = ld_u32(p + 4 * k);
#endif
}

// Q6_K, 32-element segments a lane: S = 1 (elements 32 seg .. + 32) or 2 (64 seg .. + 64).
// Adds sc_k * (dot(u, x) - 32 * bsums[k]) over the segments' 16-wide sub-blocks k to si, u the
// unsigned 6-bit values (q = u - 32): decode_piece's integers summed another way (the bsums are
// exact sums of the activation block's values, act.h), without minus32_bytes, with the weights
// loaded once a segment (the high bits once for both) and a scale load a sub-block instead of a
// piece. b: the block, 2-byte aligned (packed_alignment); ab: its act_block256, 4-byte aligned.
// With the changes of its call (the router's shared quantisation, q with k in one launch) the
// 30B shape's whole-model decode 301.7 -> 305.8 tok/s at 512 positions, 223.5 -> 226.4 at 4,096
// (decode_bench, H100, session 37: tests/gpu/parity.h100.log).
template <int S>
SLUICE_HD inline void q6k_segment_sums(const uint8_t* b, int seg, const uint8_t* ab, int32_t& si) {
    static_assert(S == 1 || S == 2, "32 or 64 elements a lane");
    const int e0 = 32 * S * seg, h = e0 / 128;
    uint32_t qh[8];
    ld_words2<8>(b + 128 + 32 * h, qh);   // bits 2 (r / 32) of byte 32 h + r % 32: element 128 h + r
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const int r = e0 % 128 + 32 * s;
        uint32_t ql[8];
        ld_words2<8>(b + 64 * h + r % 64, ql);
        const int sl = 4 * (r / 64), shh = 2 * (r / 32);
        const int kk = (128 * h + r) / 16;   // the segment's first sub-block (even)
        const uint32_t bs = ld_u32_aligned(ab + 260 + 2 * kk);   // bsums[kk], bsums[kk + 1]
        const uint16_t scw = ld_u16(b + 192 + kk);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int32_t dot = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int wi = 4 * half + k;
                const uint32_t u = ((ql[wi] >> sl) & 0x0F0F0F0Fu) | (((qh[wi] >> shh) & 0x03030303u) << 4);
                const uint32_t x = ld_u32_aligned(ab + 4 + 128 * h + r + 4 * wi);
                dot = hd_dp4a(static_cast<int32_t>(u), static_cast<int32_t>(x), dot);
            }
            const int32_t sc = static_cast<int8_t>(scw >> (8 * half));
            const int32_t bsum = static_cast<int16_t>(bs >> (16 * half));
            si += sc * (dot - 32 * bsum);
        }
    }
}

// Whole-word decoders of a K-quant super-block, for the tensor-core kernel's steps
// (matmul_mma.cuh, mma_decode_words): decode_piece's integers, 4 or 8 weights an operation
// (matmul_parity checks them against decode_piece on the host). b must be 4-byte aligned (Q4_K,
// Q5_K) or 2-byte aligned (Q6_K), packed_alignment<T>.
// Q4_K / Q5_K: qs word w (0..31): lo = the weights of elements 64 (w / 8) + 4 (w % 8) + [0, 4)
// (its low nibbles; Q5_K: bit 2 (w / 8) of qh's bytes 4 (w % 8) .. their fifth bits), hi = those
// of the same elements + 32 (high nibbles; bit 2 (w / 8) + 1).
template <dtype T>
SLUICE_HD inline void decode_word_k4(const uint8_t* b, int w, uint32_t& lo, uint32_t& hi) {
    static_assert(T == dtype::q4_k || T == dtype::q5_k, "Q4_K and Q5_K");
    const uint32_t q = ld_u32_aligned(b + (T == dtype::q4_k ? 16 : 48) + 4 * w);
    lo = q & 0x0F0F0F0Fu;
    hi = (q >> 4) & 0x0F0F0F0Fu;
    if constexpr (T == dtype::q5_k) {
        const int j2 = w >> 3;
        const uint32_t h = ld_u32_aligned(b + 16 + 4 * (w & 7));
        lo |= ((h >> (2 * j2)) & 0x01010101u) << 4;
        hi |= ((h >> (2 * j2 + 1)) & 0x01010101u) << 4;
    }
}

// Q6_K, half h (0, 1) and l = 4 i (i 0..7): out[m] = the weights of elements 128 h + 32 m + l +
// [0, 4), m = 0..3, from the ql words at 64 h + l and 64 h + 32 + l (low nibbles for m = 0, 1,
// high for 2, 3) and the qh word at 32 h + l (bits 2 m, 2 m + 1).
SLUICE_HD inline void decode_words_q6k(const uint8_t* b, int h, int l, uint32_t (&out)[4]) {
    const uint32_t qa = ld_u32_aligned2(b + 64 * h + l), qb = ld_u32_aligned2(b + 64 * h + 32 + l);
    const uint32_t qh = ld_u32_aligned2(b + 128 + 32 * h + l);
    out[0] = minus32_bytes((qa & 0x0F0F0F0Fu) | ((qh & 0x03030303u) << 4));
    out[1] = minus32_bytes((qb & 0x0F0F0F0Fu) | (((qh >> 2) & 0x03030303u) << 4));
    out[2] = minus32_bytes(((qa >> 4) & 0x0F0F0F0Fu) | (((qh >> 4) & 0x03030303u) << 4));
    out[3] = minus32_bytes(((qb >> 4) & 0x0F0F0F0Fu) | (((qh >> 6) & 0x03030303u) << 4));
}

// dot_ref.cpp's block_term: A = (d * dx) * float(sumi), then + or - (dmin * dx) * float(summ),
// each operation rounded on its own (the host build has -ffp-contract=off, nvcc --fmad=false;
// the device path names the rounding explicitly).
template <term_kind K>
SLUICE_HD inline float block_term(float d, float dmin, float dx, int32_t sumi, int32_t summ) {
#if defined(__CUDA_ARCH__)
    const float a = __fmul_rn(__fmul_rn(d, dx), __int2float_rn(sumi));
    if constexpr (K == term_kind::sym) return a;
    const float m = __fmul_rn(__fmul_rn(dmin, dx), __int2float_rn(summ));
    if constexpr (K == term_kind::plus_min) return __fadd_rn(a, m);
    else return __fsub_rn(a, m);
#else
    const float a = (d * dx) * static_cast<float>(sumi);
    if constexpr (K == term_kind::sym) return a;
    const float m = (dmin * dx) * static_cast<float>(summ);
    if constexpr (K == term_kind::plus_min) return a + m;
    else return a - m;
#endif
}

}  // namespace sluice::cuda
