// Reference dequantisation and the gguf-compatible quantisers. Every float expression here is
// written in the operation order of gguf/quants.py (the numpy oracle), so results equal it bit
// for bit (the build has -ffp-contract=off, so nothing is fused behind our back).
#include "quant/quant.h"

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant_simple.h"

#include <cmath>
#include <cstring>

namespace sluice::quant {
namespace {

template <class B>
B load(const std::byte* src, int64_t i) {
    B b;
    std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
    return b;
}
template <class B>
void store(std::byte* dst, int64_t i, const B& b) {
    std::memcpy(dst + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

float h2f(uint16_t h) { return fp16_to_fp32(h); }

// ---- dequantisers: one block of values per call, in GGML element order ----

void deq_q4_0(const block_q4_0& b, float* y) {
    const float d = h2f(b.d);
    for (int l = 0; l < 16; ++l) {
        y[l] = d * static_cast<float>((b.qs[l] & 0x0F) - 8);
        y[l + 16] = d * static_cast<float>((b.qs[l] >> 4) - 8);
    }
}
void deq_q4_1(const block_q4_1& b, float* y) {
    const float d = h2f(b.d), m = h2f(b.m);
    for (int l = 0; l < 16; ++l) {
        y[l] = d * static_cast<float>(b.qs[l] & 0x0F) + m;
        y[l + 16] = d * static_cast<float>(b.qs[l] >> 4) + m;
    }
}
// 5-bit quant of element i (0..31): low nibble from qs (elements 16.. use the high nibbles),
// fifth bit from bit i of the little-endian u32 qh.
int q5_value(const uint8_t* qs, const uint8_t* qh4, int i) {
    uint32_t qh;
    std::memcpy(&qh, qh4, 4);
    const int lo = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    return lo | static_cast<int>(((qh >> i) & 1u) << 4);
}
void deq_q5_0(const block_q5_0& b, float* y) {
    const float d = h2f(b.d);
    for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q5_value(b.qs, b.qh, i) - 16);
}
void deq_q5_1(const block_q5_1& b, float* y) {
    const float d = h2f(b.d), m = h2f(b.m);
    for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q5_value(b.qs, b.qh, i)) + m;
}
void deq_q8_0(const block_q8_0& b, float* y) {
    const float d = h2f(b.d);
    for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}
void deq_iq4_nl(const block_iq4_nl& b, float* y) {
    const float d = h2f(b.d);
    for (int l = 0; l < 16; ++l) {
        y[l] = d * static_cast<float>(k_kvalues_iq4nl[b.qs[l] & 0x0F]);
        y[l + 16] = d * static_cast<float>(k_kvalues_iq4nl[b.qs[l] >> 4]);
    }
}
void deq_mxfp4(const block_mxfp4& b, float* y) {
    const float d = e8m0_to_fp32_half(b.e);
    for (int l = 0; l < 16; ++l) {
        y[l] = d * static_cast<float>(k_kvalues_mxfp4[b.qs[l] & 0x0F]);
        y[l + 16] = d * static_cast<float>(k_kvalues_mxfp4[b.qs[l] >> 4]);
    }
}

// K-quants: element i = 128*h + 32*s + l reads bits 2s..2s+1 of qs[32h + l] (Q2_K, Q3_K low
// bits), or bits 4s..4s+3 of qs[32c + l] with i = 64c + 32s + l (Q4_K, Q5_K).
void deq_q2_k(const block_q2_k& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, s = (i / 32) % 4, l = i % 32, j = i / 16;
        const float dl = d * static_cast<float>(b.scales[j] & 0x0F);
        const float ml = dmin * static_cast<float>(b.scales[j] >> 4);
        const int q = (b.qs[32 * h + l] >> (2 * s)) & 3;
        y[i] = dl * static_cast<float>(q) - ml;
    }
}
void deq_q3_k(const block_q3_k& b, float* y) {
    const float d = h2f(b.d);
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, s = (i / 32) % 4, l = i % 32, j = i / 16;
        const float dl = d * static_cast<float>(q3_k_scale(j, b.scales));
        const int lo = (b.qs[32 * h + l] >> (2 * s)) & 3;
        const int hbit = (b.hmask[l] >> (i / 32)) & 1;
        y[i] = dl * static_cast<float>(lo - (hbit ? 0 : 4));
    }
}
void deq_q4_k(const block_q4_k& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        get_scale_min_k4(j, b.scales, sc, m);
        const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            const int q = (b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
            y[32 * j + l] = dl * static_cast<float>(q) - ml;
        }
    }
}
void deq_q5_k(const block_q5_k& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        get_scale_min_k4(j, b.scales, sc, m);
        const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            const int q = ((b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F) | (((b.qh[l] >> j) & 1) << 4);
            y[32 * j + l] = dl * static_cast<float>(q) - ml;
        }
    }
}
// Q6_K: element i = 128h + 64s + l (l < 64) takes nibble s of ql[64h + l]; its high 2 bits
// are bits 2t..2t+1 of qh[32h + (i%32)] with t = (i%128)/32.
void deq_q6_k(const block_q6_k& b, float* y) {
    const float d = h2f(b.d);
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, r = i % 128;
        const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        const float dl = d * static_cast<float>(b.scales[i / 16]);
        y[i] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
}

// IQ formats: v = (db * grid) * sign, db a per-sub-block float; the sign is applied by
// negation, which is exact and equals numpy's multiplication by -1.
inline float signed_val(float db, int g, bool neg) {
    const float v = db * static_cast<float>(g);
    return neg ? -v : v;
}
void deq_iq2_xxs(const block_iq2_xxs& b, float* y) {
    const float d = h2f(b.d);
    for (int ib = 0; ib < 8; ++ib) {
        uint32_t aux[2];
        std::memcpy(aux, b.qs + 4 * ib, 8);
        const float db = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
        for (int k = 0; k < 4; ++k) {
            const uint8_t* g = k_iq2xxs_grid[(aux[0] >> (8 * k)) & 0xFF];
            const uint8_t signs = k_ksigns_iq2xs[(aux[1] >> (7 * k)) & 0x7F];
            for (int e = 0; e < 8; ++e) y[32 * ib + 8 * k + e] = signed_val(db, g[e], (signs >> e) & 1);
        }
    }
}
void deq_iq2_xs(const block_iq2_xs& b, float* y) {
    const float d = h2f(b.d);
    for (int gi = 0; gi < 32; ++gi) {   // 32 groups of 8; scale nibble gi/2
        const int s = (b.scales[gi / 4] >> (4 * ((gi / 2) % 2))) & 0x0F;
        const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
        const uint8_t* g = k_iq2xs_grid[b.qs[gi] & 511];
        const uint8_t signs = k_ksigns_iq2xs[b.qs[gi] >> 9];
        for (int e = 0; e < 8; ++e) y[8 * gi + e] = signed_val(db, g[e], (signs >> e) & 1);
    }
}
void deq_iq2_s(const block_iq2_s& b, float* y) {
    const float d = h2f(b.d);
    for (int gi = 0; gi < 32; ++gi) {
        const int s = (b.scales[gi / 4] >> (4 * ((gi / 2) % 2))) & 0x0F;
        const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
        const int idx = b.qs[gi] | (((b.qh[gi / 4] >> (2 * (gi % 4))) & 3) << 8);
        const uint8_t* g = k_iq2s_grid[idx];
        for (int e = 0; e < 8; ++e) y[8 * gi + e] = signed_val(db, g[e], (b.signs[gi] >> e) & 1);
    }
}
void deq_iq3_xxs(const block_iq3_xxs& b, float* y) {
    const float d = h2f(b.d);
    for (int ib = 0; ib < 8; ++ib) {
        uint32_t aux;
        std::memcpy(&aux, b.sas + 4 * ib, 4);
        const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        for (int k = 0; k < 4; ++k) {
            const uint8_t signs = k_ksigns_iq2xs[(aux >> (7 * k)) & 0x7F];
            const uint8_t* g1 = k_iq3xxs_grid[b.qs[8 * ib + 2 * k]];
            const uint8_t* g2 = k_iq3xxs_grid[b.qs[8 * ib + 2 * k + 1]];
            float* o = y + 32 * ib + 8 * k;
            for (int e = 0; e < 4; ++e) {
                o[e] = signed_val(db, g1[e], (signs >> e) & 1);
                o[e + 4] = signed_val(db, g2[e], (signs >> (e + 4)) & 1);
            }
        }
    }
}
void deq_iq3_s(const block_iq3_s& b, float* y) {
    const float d = h2f(b.d);
    for (int i = 0; i < 64; ++i) {   // 64 grid entries of 4 elements; scale nibble i/8
        const int s = (b.scales[i / 16] >> (4 * ((i / 8) % 2))) & 0x0F;
        const float db = d * static_cast<float>(1 + 2 * s);
        const int idx = b.qs[i] | (((b.qh[i / 8] >> (i % 8)) & 1) << 8);
        const uint8_t* g = k_iq3s_grid[idx];
        for (int e = 0; e < 4; ++e) {
            const int el = 4 * i + e;
            y[el] = signed_val(db, g[e], (b.signs[el / 8] >> (el % 8)) & 1);
        }
    }
}
void deq_iq4_xs(const block_iq4_xs& b, float* y) {
    const float d = h2f(b.d);
    for (int j = 0; j < 8; ++j) {
        const int lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
        const int hi = (b.scales_h >> (2 * j)) & 3;
        const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
        for (int l = 0; l < 16; ++l) {
            y[32 * j + l] = dl * static_cast<float>(k_kvalues_iq4nl[b.qs[16 * j + l] & 0x0F]);
            y[32 * j + l + 16] = dl * static_cast<float>(k_kvalues_iq4nl[b.qs[16 * j + l] >> 4]);
        }
    }
}

template <class B, void (*F)(const B&, float*), int QK>
void deq_blocks(const std::byte* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) F(load<B>(src, i), dst + i * QK);
}

// ---- quantisers (gguf's algorithms, float op for float op) ----

// Index of the first element with the largest |x| (numpy argmax of abs).
int first_absmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(x[best])) best = i;
    return best;
}
// gguf's np_roundf: round half away from zero.
float round_away(float v) {
    const float a = std::fabs(v), fl = std::floor(a);
    return std::copysign(fl + std::floor(2.0f * (a - fl)), v);
}

block_q8_0 quant_q8_0(const float* x) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    block_q8_0 b;
    b.d = fp32_to_fp16(d);
    for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(round_away(x[i] * id));
    return b;
}
// Symmetric 4/5-bit: d = (signed absmax) / -half, q = trunc(x / d + half + 0.5) clamped.
template <int Half, int Max>
int quant_sym(const float* x, int* q) {   // returns fp16 bits of d
    const float max = x[first_absmax(x, 32)];
    const float d = max / static_cast<float>(-Half);
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int i = 0; i < 32; ++i) {
        const float v = std::trunc(x[i] * id + (static_cast<float>(Half) + 0.5f));
        q[i] = v >= static_cast<float>(Max) ? Max : (v <= 0.0f ? 0 : static_cast<int>(v));
    }
    return fp32_to_fp16(d);
}
// Asymmetric: d = (max - min) / Max, q = trunc((x - min) / d + 0.5) clamped; stores d and min.
template <int Max>
void quant_asym(const float* x, int* q, uint16_t& dh, uint16_t& mh) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; ++i) {
        mn = std::fmin(mn, x[i]);
        mx = std::fmax(mx, x[i]);
    }
    const float d = (mx - mn) / static_cast<float>(Max);
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int i = 0; i < 32; ++i) {
        const float v = std::trunc((x[i] - mn) * id + 0.5f);
        q[i] = v >= static_cast<float>(Max) ? Max : (v <= 0.0f ? 0 : static_cast<int>(v));
    }
    dh = fp32_to_fp16(d);
    mh = fp32_to_fp16(mn);
}
void pack_nibbles(const int* q, uint8_t* qs) {
    for (int l = 0; l < 16; ++l) qs[l] = static_cast<uint8_t>((q[l] & 0x0F) | ((q[l + 16] & 0x0F) << 4));
}
void pack_fifth_bits(const int* q, uint8_t* qh4) {
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
    std::memcpy(qh4, &qh, 4);
}
block_mxfp4 quant_mxfp4(const float* x) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    block_mxfp4 b;
    // floor(log2f(amax)) - 2 + 127, the largest level (6 = 12/2) then lands near amax.
    b.e = amax > 0.0f ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127) : 0;
    const float d = e8m0_to_fp32_half(b.e);
    int q[32];
    for (int i = 0; i < 32; ++i) {
        int best = 0;
        float best_err = std::fabs(d * static_cast<float>(k_kvalues_mxfp4[0]) - x[i]);
        for (int k = 1; k < 16; ++k) {
            const float err = std::fabs(d * static_cast<float>(k_kvalues_mxfp4[k]) - x[i]);
            if (err < best_err) {
                best_err = err;
                best = k;
            }
        }
        q[i] = best;
    }
    pack_nibbles(q, b.qs);
    return b;
}

}  // namespace

bool can_dequantize(dtype t) {
    switch (t) {
    case dtype::f32: case dtype::f16: case dtype::bf16: case dtype::q8_0: case dtype::q4_0:
    case dtype::q4_1: case dtype::q5_0: case dtype::q5_1: case dtype::q2_k: case dtype::q3_k:
    case dtype::q4_k: case dtype::q5_k: case dtype::q6_k: case dtype::iq4_nl: case dtype::iq4_xs:
    case dtype::iq3_s: case dtype::iq3_xxs: case dtype::iq2_xxs: case dtype::iq2_xs:
    case dtype::iq2_s: case dtype::mxfp4:
        return true;
    default:
        return false;
    }
}

void dequantize_row(dtype t, const std::byte* src, float* dst, int64_t n) {
    if (n < 0 || n % info(t).block_elems != 0)
        fail("dequantize_row: {}: {} elements is not a whole number of {}-element blocks", name(t), n,
             info(t).block_elems);
    switch (t) {
    case dtype::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case dtype::f16:
        for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load<uint16_t>(src, i));
        return;
    case dtype::bf16:
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load<uint16_t>(src, i));
        return;
    case dtype::q4_0: return deq_blocks<block_q4_0, deq_q4_0, 32>(src, dst, n);
    case dtype::q4_1: return deq_blocks<block_q4_1, deq_q4_1, 32>(src, dst, n);
    case dtype::q5_0: return deq_blocks<block_q5_0, deq_q5_0, 32>(src, dst, n);
    case dtype::q5_1: return deq_blocks<block_q5_1, deq_q5_1, 32>(src, dst, n);
    case dtype::q8_0: return deq_blocks<block_q8_0, deq_q8_0, 32>(src, dst, n);
    case dtype::iq4_nl: return deq_blocks<block_iq4_nl, deq_iq4_nl, 32>(src, dst, n);
    case dtype::mxfp4: return deq_blocks<block_mxfp4, deq_mxfp4, 32>(src, dst, n);
    case dtype::q2_k: return deq_blocks<block_q2_k, deq_q2_k, 256>(src, dst, n);
    case dtype::q3_k: return deq_blocks<block_q3_k, deq_q3_k, 256>(src, dst, n);
    case dtype::q4_k: return deq_blocks<block_q4_k, deq_q4_k, 256>(src, dst, n);
    case dtype::q5_k: return deq_blocks<block_q5_k, deq_q5_k, 256>(src, dst, n);
    case dtype::q6_k: return deq_blocks<block_q6_k, deq_q6_k, 256>(src, dst, n);
    case dtype::iq2_xxs: return deq_blocks<block_iq2_xxs, deq_iq2_xxs, 256>(src, dst, n);
    case dtype::iq2_xs: return deq_blocks<block_iq2_xs, deq_iq2_xs, 256>(src, dst, n);
    case dtype::iq2_s: return deq_blocks<block_iq2_s, deq_iq2_s, 256>(src, dst, n);
    case dtype::iq3_xxs: return deq_blocks<block_iq3_xxs, deq_iq3_xxs, 256>(src, dst, n);
    case dtype::iq3_s: return deq_blocks<block_iq3_s, deq_iq3_s, 256>(src, dst, n);
    case dtype::iq4_xs: return deq_blocks<block_iq4_xs, deq_iq4_xs, 256>(src, dst, n);
    default: fail("dequantize_row: {} has no dequantiser", name(t));
    }
}

bool quantize_matches_gguf(dtype t) {
    switch (t) {
    case dtype::f32: case dtype::f16: case dtype::bf16: case dtype::q8_0: case dtype::q4_0:
    case dtype::q4_1: case dtype::q5_0: case dtype::q5_1: case dtype::mxfp4:
        return true;
    default:
        return false;
    }
}

bool can_quantize(dtype t) { return quantize_matches_gguf(t) || has_simple_quantizer(t); }

void quantize_row(dtype t, const float* src, std::byte* dst, int64_t n) {
    if (n < 0 || n % info(t).block_elems != 0)
        fail("quantize_row: {}: {} elements is not a whole number of {}-element blocks", name(t), n,
             info(t).block_elems);
    int q[32];
    switch (t) {
    case dtype::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case dtype::f16:
        for (int64_t i = 0; i < n; ++i) store(dst, i, fp32_to_fp16(src[i]));
        return;
    case dtype::bf16:
        for (int64_t i = 0; i < n; ++i) store(dst, i, fp32_to_bf16(src[i]));
        return;
    case dtype::q8_0:
        for (int64_t i = 0; i < n / 32; ++i) store(dst, i, quant_q8_0(src + 32 * i));
        return;
    case dtype::q4_0:
        for (int64_t i = 0; i < n / 32; ++i) {
            block_q4_0 b;
            b.d = static_cast<uint16_t>(quant_sym<8, 15>(src + 32 * i, q));
            pack_nibbles(q, b.qs);
            store(dst, i, b);
        }
        return;
    case dtype::q5_0:
        for (int64_t i = 0; i < n / 32; ++i) {
            block_q5_0 b;
            b.d = static_cast<uint16_t>(quant_sym<16, 31>(src + 32 * i, q));
            pack_nibbles(q, b.qs);
            pack_fifth_bits(q, b.qh);
            store(dst, i, b);
        }
        return;
    case dtype::q4_1:
        for (int64_t i = 0; i < n / 32; ++i) {
            block_q4_1 b;
            quant_asym<15>(src + 32 * i, q, b.d, b.m);
            pack_nibbles(q, b.qs);
            store(dst, i, b);
        }
        return;
    case dtype::q5_1:
        for (int64_t i = 0; i < n / 32; ++i) {
            block_q5_1 b;
            quant_asym<31>(src + 32 * i, q, b.d, b.m);
            pack_nibbles(q, b.qs);
            pack_fifth_bits(q, b.qh);
            store(dst, i, b);
        }
        return;
    case dtype::mxfp4:
        for (int64_t i = 0; i < n / 32; ++i) store(dst, i, quant_mxfp4(src + 32 * i));
        return;
    default:
        if (has_simple_quantizer(t)) return quantize_row_simple(t, src, dst, n);
        fail("quantize_row: {} has no quantiser", name(t));
    }
}

}  // namespace sluice::quant
