// The canonical scalar dot products (DESIGN.md E3). Every SIMD and CUDA kernel must give these
// bits. Per weight block: the weights are decoded to integers q_i (|q_i| <= 128) with integer
// sub-block scales sc_j and mins m_j; the activations are act.h int8 blocks (qx, dx, bsums).
//
//   sumi = sum_j sc_j * dot(q_j, qx_j)          summ = sum_j m_j * sum(qx_j)     (int32, exact)
//
// and one fp32 term per block, each operation rounded on its own (-ffp-contract=off), with
// A = (d * dx) * float(sumi):
//
//   format   sub-blocks  q_i                          sc_j               d (fp32)    term t
//   Q8_0     1 x 32      qs (int8)                    1                  d           A
//   Q4_0     1 x 32      nibble - 8                   1                  d           A
//   Q5_0     1 x 32      5 bits - 16                  1                  d           A
//   Q4_1     1 x 32      nibble                       1, m_j = 1         d, m        A + (m * dx) * float(summ)
//   Q5_1     1 x 32      5 bits                       1, m_j = 1         d, m        A + (m * dx) * float(summ)
//   IQ4_NL   1 x 32      kvalues_iq4nl[nibble]        1                  d           A
//   MXFP4    1 x 32      kvalues_mxfp4[nibble] (x2)   1                  2^(e-128)   A
//   Q2_K     16 x 16     2 bits                       low nibble, m high d, dmin     A - (dmin * dx) * float(summ)
//   Q3_K     16 x 16     2 bits - (hmask ? 0 : 4)     6 bits - 32        d           A
//   Q4_K     8 x 32      nibble                       6 bits, m 6 bits   d, dmin     A - (dmin * dx) * float(summ)
//   Q5_K     8 x 32      5 bits                       6 bits, m 6 bits   d, dmin     A - (dmin * dx) * float(summ)
//   Q6_K     16 x 16     6 bits - 32                  int8               d           A
//   IQ4_XS   8 x 32      kvalues_iq4nl[nibble]        6 bits - 32        d           A
//   IQ2_XXS  8 x 32      +-grid (8, 25, 43)           2 * s4 + 1         d * 0.125f  A
//   IQ2_XS   16 x 16     +-grid (8, 25, 43)           2 * s4 + 1         d * 0.125f  A
//   IQ2_S    16 x 16     +-grid (8, 25, 43)           2 * s4 + 1         d * 0.125f  A
//   IQ3_XXS  8 x 32      +-grid (4 .. 62)             2 * s4 + 1         d * 0.25f   A
//   IQ3_S    8 x 32      +-grid (1 .. 15)             2 * s4 + 1         d           A
//
// d, dmin and m are the block's f16 values widened to fp32. The IQ2/IQ3 constant factors
// (value = d * (s + 1/2) / 4 * grid = d * (2s+1) * grid / 8, and / 4 for IQ3_XXS) are folded
// into d by one multiplication by a power of two, exact since an f16 scale times 2^-3 is a
// normal fp32 number. Legacy formats use 32-wide activation blocks (summ = sum(qx) over the
// block); K-quants and I-quants 256-wide ones, summ from bsums (pairs of them for 32-wide
// sub-blocks). Bounds: |sc_j * q_i| <= 4096 in every format (Q6_K: 128 * 32; IQ4_XS: 32 * 127),
// so |sumi| <= 256 * 4096 * 127 = 133,169,152 and |summ| <= 63 * 256 * 127: int32 never overflows.
// The row result is y = ((t0 + t1) + t2) + ... in block order, starting from t0.
#include "kernels/cpu/dot_ref.h"

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"

#include <cmath>
#include <cstring>

namespace sluice::kernels {
namespace {

using namespace sluice::quant;

enum class term_kind { sym, plus_min, minus_min };

// One weight block decoded to its integer parts.
struct wblock {
    float d = 0.0f;      // fp32 scale (with the format's constant factor folded in)
    float dmin = 0.0f;   // Q4_1/Q5_1: m; K-quants: dmin; others unused
    int n_sub = 1;       // sub-blocks
    int sub_w = 32;      // elements per sub-block
    int sc[16];          // integer sub-block scales
    int mn[16];          // integer sub-block mins (plus_min / minus_min formats)
    int8_t q[256];       // integer weights
    term_kind kind = term_kind::sym;
};

template <class B>
B load(const std::byte* src, int64_t i) {
    B b;
    std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
    return b;
}

float h2f(uint16_t h) { return fp16_to_fp32(h); }

void one_sub(wblock& w) {
    w.n_sub = 1;
    w.sub_w = 32;
    w.sc[0] = 1;
    w.mn[0] = 1;
}

int q5_bits(const uint8_t* qs, const uint8_t* qh4, int i) {
    uint32_t qh;
    std::memcpy(&qh, qh4, 4);
    const int lo = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    return lo | static_cast<int>(((qh >> i) & 1u) << 4);
}

// Decodes block i of a row of format t into w. Always inlined into dot_quant<t>, where t is a
// constant, so each format's loop is compiled on its own (about 2x faster than a runtime switch).
[[gnu::always_inline]] inline void decode(dtype t, const std::byte* row, int64_t i, wblock& w) {
    switch (t) {
    case dtype::q8_0: {
        auto b = load<block_q8_0>(row, i);
        one_sub(w);
        w.d = h2f(b.d);
        for (int k = 0; k < 32; ++k) w.q[k] = b.qs[k];
        return;
    }
    case dtype::q4_0: case dtype::q4_1: {
        // Q4_0 and Q4_1 share the nibble layout; Q4_1 has m after d.
        uint16_t d, m = 0;
        const uint8_t* qs;
        block_q4_0 b0;
        block_q4_1 b1;
        if (t == dtype::q4_0) { b0 = load<block_q4_0>(row, i); d = b0.d; qs = b0.qs; }
        else { b1 = load<block_q4_1>(row, i); d = b1.d; m = b1.m; qs = b1.qs; }
        one_sub(w);
        const int off = t == dtype::q4_0 ? 8 : 0;
        for (int l = 0; l < 16; ++l) {
            w.q[l] = static_cast<int8_t>((qs[l] & 0x0F) - off);
            w.q[l + 16] = static_cast<int8_t>((qs[l] >> 4) - off);
        }
        w.d = h2f(d);
        w.dmin = h2f(m);
        w.kind = t == dtype::q4_0 ? term_kind::sym : term_kind::plus_min;
        return;
    }
    case dtype::q5_0: {
        auto b = load<block_q5_0>(row, i);
        one_sub(w);
        w.d = h2f(b.d);
        for (int k = 0; k < 32; ++k) w.q[k] = static_cast<int8_t>(q5_bits(b.qs, b.qh, k) - 16);
        return;
    }
    case dtype::q5_1: {
        auto b = load<block_q5_1>(row, i);
        one_sub(w);
        w.d = h2f(b.d);
        w.dmin = h2f(b.m);
        w.kind = term_kind::plus_min;
        for (int k = 0; k < 32; ++k) w.q[k] = static_cast<int8_t>(q5_bits(b.qs, b.qh, k));
        return;
    }
    case dtype::iq4_nl: case dtype::mxfp4: {
        const int8_t* kv = t == dtype::iq4_nl ? k_kvalues_iq4nl : k_kvalues_mxfp4;
        const uint8_t* qs;
        block_iq4_nl bn;
        block_mxfp4 bm;
        if (t == dtype::iq4_nl) { bn = load<block_iq4_nl>(row, i); w.d = h2f(bn.d); qs = bn.qs; }
        else { bm = load<block_mxfp4>(row, i); w.d = e8m0_to_fp32_half(bm.e); qs = bm.qs; }
        one_sub(w);
        for (int l = 0; l < 16; ++l) {
            w.q[l] = kv[qs[l] & 0x0F];
            w.q[l + 16] = kv[qs[l] >> 4];
        }
        return;
    }
    case dtype::q2_k: {
        auto b = load<block_q2_k>(row, i);
        w.d = h2f(b.d);
        w.dmin = h2f(b.dmin);
        w.kind = term_kind::minus_min;
        w.n_sub = 16;
        w.sub_w = 16;
        for (int j = 0; j < 16; ++j) {
            w.sc[j] = b.scales[j] & 0x0F;
            w.mn[j] = b.scales[j] >> 4;
        }
        for (int k = 0; k < 256; ++k) w.q[k] = static_cast<int8_t>((b.qs[32 * (k / 128) + k % 32] >> (2 * ((k / 32) % 4))) & 3);
        return;
    }
    case dtype::q3_k: {
        auto b = load<block_q3_k>(row, i);
        w.d = h2f(b.d);
        w.n_sub = 16;
        w.sub_w = 16;
        for (int j = 0; j < 16; ++j) w.sc[j] = q3_k_scale(j, b.scales);
        for (int k = 0; k < 256; ++k) {
            const int lo = (b.qs[32 * (k / 128) + k % 32] >> (2 * ((k / 32) % 4))) & 3;
            const int hbit = (b.hmask[k % 32] >> (k / 32)) & 1;
            w.q[k] = static_cast<int8_t>(lo - (hbit ? 0 : 4));
        }
        return;
    }
    case dtype::q4_k: case dtype::q5_k: {
        const uint8_t *scales, *qs, *qh = nullptr;
        uint16_t d, dmin;
        block_q4_k b4;
        block_q5_k b5;
        if (t == dtype::q4_k) { b4 = load<block_q4_k>(row, i); d = b4.d; dmin = b4.dmin; scales = b4.scales; qs = b4.qs; }
        else { b5 = load<block_q5_k>(row, i); d = b5.d; dmin = b5.dmin; scales = b5.scales; qs = b5.qs; qh = b5.qh; }
        w.d = h2f(d);
        w.dmin = h2f(dmin);
        w.kind = term_kind::minus_min;
        w.n_sub = 8;
        w.sub_w = 32;
        for (int j = 0; j < 8; ++j) {
            get_scale_min_k4(j, scales, w.sc[j], w.mn[j]);
            for (int l = 0; l < 32; ++l) {
                int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
                if (qh) q |= ((qh[l] >> j) & 1) << 4;
                w.q[32 * j + l] = static_cast<int8_t>(q);
            }
        }
        return;
    }
    case dtype::q6_k: {
        auto b = load<block_q6_k>(row, i);
        w.d = h2f(b.d);
        w.n_sub = 16;
        w.sub_w = 16;
        for (int j = 0; j < 16; ++j) w.sc[j] = b.scales[j];
        for (int k = 0; k < 256; ++k) {
            const int h = k / 128, r = k % 128;
            const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
            const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            w.q[k] = static_cast<int8_t>((lo | (hi << 4)) - 32);
        }
        return;
    }
    case dtype::iq4_xs: {
        auto b = load<block_iq4_xs>(row, i);
        w.d = h2f(b.d);
        w.n_sub = 8;
        w.sub_w = 32;
        for (int j = 0; j < 8; ++j) {
            const int lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
            const int hi = (b.scales_h >> (2 * j)) & 3;
            w.sc[j] = (lo | (hi << 4)) - 32;
            for (int l = 0; l < 16; ++l) {
                w.q[32 * j + l] = k_kvalues_iq4nl[b.qs[16 * j + l] & 0x0F];
                w.q[32 * j + l + 16] = k_kvalues_iq4nl[b.qs[16 * j + l] >> 4];
            }
        }
        return;
    }
    case dtype::iq2_xxs: {
        auto b = load<block_iq2_xxs>(row, i);
        w.d = h2f(b.d) * 0.125f;
        w.n_sub = 8;
        w.sub_w = 32;
        for (int j = 0; j < 8; ++j) {
            uint32_t aux[2];
            std::memcpy(aux, b.qs + 4 * j, 8);
            w.sc[j] = 2 * static_cast<int>(aux[1] >> 28) + 1;
            for (int k = 0; k < 4; ++k) {
                const uint8_t* g = k_iq2xxs_grid[(aux[0] >> (8 * k)) & 0xFF];
                const uint8_t s = k_ksigns_iq2xs[(aux[1] >> (7 * k)) & 0x7F];
                for (int e = 0; e < 8; ++e) w.q[32 * j + 8 * k + e] = static_cast<int8_t>((s >> e) & 1 ? -g[e] : g[e]);
            }
        }
        return;
    }
    case dtype::iq2_xs: {
        auto b = load<block_iq2_xs>(row, i);
        w.d = h2f(b.d) * 0.125f;
        w.n_sub = 16;
        w.sub_w = 16;
        for (int j = 0; j < 16; ++j) w.sc[j] = 2 * ((b.scales[j / 2] >> (4 * (j % 2))) & 0x0F) + 1;
        for (int gi = 0; gi < 32; ++gi) {
            const uint8_t* g = k_iq2xs_grid[b.qs[gi] & 511];
            const uint8_t s = k_ksigns_iq2xs[b.qs[gi] >> 9];
            for (int e = 0; e < 8; ++e) w.q[8 * gi + e] = static_cast<int8_t>((s >> e) & 1 ? -g[e] : g[e]);
        }
        return;
    }
    case dtype::iq2_s: {
        auto b = load<block_iq2_s>(row, i);
        w.d = h2f(b.d) * 0.125f;
        w.n_sub = 16;
        w.sub_w = 16;
        for (int j = 0; j < 16; ++j) w.sc[j] = 2 * ((b.scales[j / 2] >> (4 * (j % 2))) & 0x0F) + 1;
        for (int gi = 0; gi < 32; ++gi) {
            const uint8_t* g = k_iq2s_grid[b.qs[gi] | (((b.qh[gi / 4] >> (2 * (gi % 4))) & 3) << 8)];
            for (int e = 0; e < 8; ++e) w.q[8 * gi + e] = static_cast<int8_t>((b.signs[gi] >> e) & 1 ? -g[e] : g[e]);
        }
        return;
    }
    case dtype::iq3_xxs: {
        auto b = load<block_iq3_xxs>(row, i);
        w.d = h2f(b.d) * 0.25f;
        w.n_sub = 8;
        w.sub_w = 32;
        for (int j = 0; j < 8; ++j) {
            uint32_t aux;
            std::memcpy(&aux, b.sas + 4 * j, 4);
            w.sc[j] = 2 * static_cast<int>(aux >> 28) + 1;
            for (int k = 0; k < 4; ++k) {
                const uint8_t s = k_ksigns_iq2xs[(aux >> (7 * k)) & 0x7F];
                const uint8_t* g1 = k_iq3xxs_grid[b.qs[8 * j + 2 * k]];
                const uint8_t* g2 = k_iq3xxs_grid[b.qs[8 * j + 2 * k + 1]];
                int8_t* o = w.q + 32 * j + 8 * k;
                for (int e = 0; e < 4; ++e) {
                    o[e] = static_cast<int8_t>((s >> e) & 1 ? -g1[e] : g1[e]);
                    o[e + 4] = static_cast<int8_t>((s >> (e + 4)) & 1 ? -g2[e] : g2[e]);
                }
            }
        }
        return;
    }
    case dtype::iq3_s: {
        auto b = load<block_iq3_s>(row, i);
        w.d = h2f(b.d);
        w.n_sub = 8;
        w.sub_w = 32;
        for (int j = 0; j < 8; ++j) w.sc[j] = 1 + 2 * ((b.scales[j / 2] >> (4 * (j % 2))) & 0x0F);
        for (int gi = 0; gi < 64; ++gi) {
            const uint8_t* g = k_iq3s_grid[b.qs[gi] | (((b.qh[gi / 8] >> (gi % 8)) & 1) << 8)];
            for (int e = 0; e < 4; ++e) {
                const int el = 4 * gi + e;
                w.q[el] = static_cast<int8_t>((b.signs[el / 8] >> (el % 8)) & 1 ? -g[e] : g[e]);
            }
        }
        return;
    }
    default:
        fail("dot_ref: weight format {} has no dot product", name(t));
    }
}

// The documented term of one block (see the table above).
float block_term(const wblock& w, float dx, int32_t sumi, int32_t summ) {
    const float a = (w.d * dx) * static_cast<float>(sumi);
    switch (w.kind) {
    case term_kind::sym: return a;
    case term_kind::plus_min: return a + (w.dmin * dx) * static_cast<float>(summ);
    case term_kind::minus_min: return a - (w.dmin * dx) * static_cast<float>(summ);
    }
    return a;
}

template <dtype wt>
float dot_quant(const std::byte* w_row, const std::byte* act_row, int64_t n) {
    constexpr int64_t qk = wt == dtype::q8_0 || wt == dtype::q4_0 || wt == dtype::q4_1 || wt == dtype::q5_0 ||
                                   wt == dtype::q5_1 || wt == dtype::iq4_nl || wt == dtype::mxfp4
                               ? 32
                               : 256;
    wblock w;
    float y = 0.0f;
    for (int64_t ib = 0; ib < n / qk; ++ib) {
        decode(wt, w_row, ib, w);
        int32_t sumi = 0, summ = 0;
        float dx;
        if constexpr (qk == 32) {
            act_block32 a;
            std::memcpy(&a, act_row + ib * static_cast<int64_t>(sizeof a), sizeof a);
            dx = a.d;
            for (int k = 0; k < 32; ++k) {
                sumi += w.q[k] * a.q[k];
                summ += a.q[k];
            }
        } else {
            act_block256 a;
            std::memcpy(&a, act_row + ib * static_cast<int64_t>(sizeof a), sizeof a);
            dx = a.d;
            const int per16 = w.sub_w / 16;   // bsums per sub-block
            for (int j = 0; j < w.n_sub; ++j) {
                int32_t s = 0;
                for (int k = 0; k < w.sub_w; ++k) s += w.q[j * w.sub_w + k] * a.q[j * w.sub_w + k];
                sumi += w.sc[j] * s;
                if (w.kind == term_kind::sym) continue;   // mn[] is unset for these formats
                int32_t bs = 0;
                for (int k = 0; k < per16; ++k) bs += a.bsums[j * per16 + k];
                summ += w.mn[j] * bs;
            }
        }
        const float t = block_term(w, dx, sumi, summ);
        y = ib == 0 ? t : y + t;
    }
    return y;
}

// Widens element i of a float-weight row (F16/BF16 exactly).
template <dtype WT>
float load_weight(const std::byte* w_row, int64_t i) {
    if constexpr (WT == dtype::f32) {
        float f;
        std::memcpy(&f, w_row + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, w_row + 2 * i, 2);
        return WT == dtype::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
}

template <dtype WT>
float dot_float(const std::byte* w_row, const float* x, int64_t n) {
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] = std::fmaf(load_weight<WT>(w_row, i + l), x[i + l], acc[l]);
    for (int l = 0; i < n; ++i, ++l) acc[l] = std::fmaf(load_weight<WT>(w_row, i), x[i], acc[l]);
    for (int s = 8; s >= 1; s /= 2)
        for (int l = 0; l < s; ++l) acc[l] += acc[l + s];
    return acc[0];
}

}  // namespace

bool has_dot(dtype t) {
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

float dot_f32_ref(dtype wt, const std::byte* w_row, const float* x, int64_t n) {
    switch (wt) {
    case dtype::f32: return dot_float<dtype::f32>(w_row, x, n);
    case dtype::f16: return dot_float<dtype::f16>(w_row, x, n);
    case dtype::bf16: return dot_float<dtype::bf16>(w_row, x, n);
    default: fail("dot_f32_ref: {} is not a float weight format", name(wt));
    }
}

float dot_ref(dtype wt, const std::byte* w_row, const std::byte* act_row, int64_t n) {
    if (wt == dtype::f32 || wt == dtype::f16 || wt == dtype::bf16) {
        // The activation row of a float weight is the fp32 row itself (act_format::f32).
        return dot_f32_ref(wt, w_row, reinterpret_cast<const float*>(act_row), n);
    }
    switch (wt) {
    case dtype::q8_0: return dot_quant<dtype::q8_0>(w_row, act_row, n);
    case dtype::q4_0: return dot_quant<dtype::q4_0>(w_row, act_row, n);
    case dtype::q4_1: return dot_quant<dtype::q4_1>(w_row, act_row, n);
    case dtype::q5_0: return dot_quant<dtype::q5_0>(w_row, act_row, n);
    case dtype::q5_1: return dot_quant<dtype::q5_1>(w_row, act_row, n);
    case dtype::iq4_nl: return dot_quant<dtype::iq4_nl>(w_row, act_row, n);
    case dtype::mxfp4: return dot_quant<dtype::mxfp4>(w_row, act_row, n);
    case dtype::q2_k: return dot_quant<dtype::q2_k>(w_row, act_row, n);
    case dtype::q3_k: return dot_quant<dtype::q3_k>(w_row, act_row, n);
    case dtype::q4_k: return dot_quant<dtype::q4_k>(w_row, act_row, n);
    case dtype::q5_k: return dot_quant<dtype::q5_k>(w_row, act_row, n);
    case dtype::q6_k: return dot_quant<dtype::q6_k>(w_row, act_row, n);
    case dtype::iq2_xxs: return dot_quant<dtype::iq2_xxs>(w_row, act_row, n);
    case dtype::iq2_xs: return dot_quant<dtype::iq2_xs>(w_row, act_row, n);
    case dtype::iq2_s: return dot_quant<dtype::iq2_s>(w_row, act_row, n);
    case dtype::iq3_xxs: return dot_quant<dtype::iq3_xxs>(w_row, act_row, n);
    case dtype::iq3_s: return dot_quant<dtype::iq3_s>(w_row, act_row, n);
    case dtype::iq4_xs: return dot_quant<dtype::iq4_xs>(w_row, act_row, n);
    default: fail("dot_ref: weight format {} has no dot product", name(wt));
    }
}

}  // namespace sluice::kernels
