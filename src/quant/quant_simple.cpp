// Simple quantisers (see quant_simple.h). K-quants and IQ4: round to nearest; each
// sub-block gets the scale that maps its extreme value onto the extreme level; the per-block
// f16 scale is chosen so the largest sub-block scale uses the top of the integer scale range;
// quants are computed against the scales as stored (after f16 and integer rounding).
#include "quant/quant_simple.h"

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sluice::quant {
namespace {

int clamp_round(float v, int lo, int hi) {
    const float r = std::nearbyint(v);
    if (!(r == r)) return 0;
    return r < static_cast<float>(lo) ? lo : (r > static_cast<float>(hi) ? hi : static_cast<int>(r));
}

// The element of largest magnitude (first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
    return best;
}

// Index of the level of kv (16 entries) nearest to v (first one on ties).
int nearest_level(const int8_t* kv, float v) {
    int best = 0;
    float err = std::fabs(v - static_cast<float>(kv[0]));
    for (int k = 1; k < 16; ++k) {
        const float e = std::fabs(v - static_cast<float>(kv[k]));
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

// Asymmetric sub-blocks (value = d*sc*q - dmin*m): fills sc, m and q for n_sub sub-blocks of
// w elements with q in [0, qmax] and sc, m in [0, smax]; returns the stored d and dmin.
void quant_asym_k(const float* x, int n_sub, int w, int qmax, int smax, int* sc, int* m, int* q,
                  uint16_t& dh, uint16_t& dminh) {
    float scale[16], minv[16], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < n_sub; ++j) {
        float mn = 0.0f, mx = x[j * w];
        for (int i = 0; i < w; ++i) {
            mn = std::fmin(mn, x[j * w + i]);
            mx = std::fmax(mx, x[j * w + i]);
        }
        scale[j] = (mx - mn) / static_cast<float>(qmax);
        minv[j] = -mn;
        max_scale = std::fmax(max_scale, scale[j]);
        max_min = std::fmax(max_min, minv[j]);
    }
    dh = fp32_to_fp16(max_scale / static_cast<float>(smax));
    dminh = fp32_to_fp16(max_min / static_cast<float>(smax));
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(dminh);
    for (int j = 0; j < n_sub; ++j) {
        sc[j] = d > 0.0f ? clamp_round(scale[j] / d, 0, smax) : 0;
        m[j] = dmin > 0.0f ? clamp_round(minv[j] / dmin, 0, smax) : 0;
        const float dl = d * static_cast<float>(sc[j]), ml = dmin * static_cast<float>(m[j]);
        for (int i = 0; i < w; ++i) q[j * w + i] = dl > 0.0f ? clamp_round((x[j * w + i] + ml) / dl, 0, qmax) : 0;
    }
}

// Symmetric sub-blocks (value = d*sc*level): the sub-block's extreme maps to `extreme` (a
// negative level), the block's largest sub-block scale to sc = smin (negative). Returns d.
uint16_t quant_sym_scales(const float* x, int n_sub, int w, float extreme, int smin, int smax, int* sc) {
    float s[16], big = 0.0f;
    for (int j = 0; j < n_sub; ++j) {
        s[j] = signed_absmax(x + j * w, w) / extreme;
        if (std::fabs(s[j]) > std::fabs(big)) big = s[j];
    }
    const uint16_t dh = fp32_to_fp16(big / static_cast<float>(smin));
    const float d = fp16_to_fp32(dh);
    for (int j = 0; j < n_sub; ++j) sc[j] = d != 0.0f ? clamp_round(s[j] / d, smin, smax) : 0;
    return dh;
}

block_q2_k quant_q2_k(const float* x) {
    int sc[16], m[16], q[256];
    block_q2_k b{};
    quant_asym_k(x, 16, 16, 3, 15, sc, m, q, b.d, b.dmin);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
    for (int i = 0; i < 256; ++i) b.qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>(q[i] << (2 * ((i / 32) % 4)));
    return b;
}

block_q3_k quant_q3_k(const float* x) {
    int sc[16];
    block_q3_k b{};
    b.d = quant_sym_scales(x, 16, 16, -4.0f, -32, 31, sc);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < 16; ++j) {
        const int u = sc[j] + 32;   // 6 bits
        b.scales[j % 8] |= static_cast<uint8_t>((u & 0x0F) << (4 * (j / 8)));
        b.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
    for (int i = 0; i < 256; ++i) {
        const float dl = d * static_cast<float>(sc[i / 16]);
        const int q = dl != 0.0f ? clamp_round(x[i] / dl, -4, 3) : 0;
        const int lo = q >= 0 ? q : q + 4;   // q = lo - (high bit ? 0 : 4)
        b.qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>(lo << (2 * ((i / 32) % 4)));
        if (q >= 0) b.hmask[i % 32] |= static_cast<uint8_t>(1u << (i / 32));
    }
    return b;
}

// The inverse of get_scale_min_k4: 8 6-bit scales and mins into 12 bytes.
void pack_scale_min_k4(const int* sc, const int* m, uint8_t* q) {
    std::memset(q, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            q[j] |= static_cast<uint8_t>(sc[j] & 63);
            q[j + 4] |= static_cast<uint8_t>(m[j] & 63);
        } else {
            q[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
            q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
            q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
        }
    }
}

block_q4_k quant_q4_k(const float* x) {
    int sc[8], m[8], q[256];
    block_q4_k b{};
    quant_asym_k(x, 8, 32, 15, 63, sc, m, q, b.d, b.dmin);
    pack_scale_min_k4(sc, m, b.scales);
    for (int i = 0; i < 256; ++i) b.qs[32 * (i / 64) + i % 32] |= static_cast<uint8_t>(q[i] << (4 * ((i / 32) % 2)));
    return b;
}

block_q5_k quant_q5_k(const float* x) {
    int sc[8], m[8], q[256];
    block_q5_k b{};
    quant_asym_k(x, 8, 32, 31, 63, sc, m, q, b.d, b.dmin);
    pack_scale_min_k4(sc, m, b.scales);
    for (int i = 0; i < 256; ++i) {
        b.qs[32 * (i / 64) + i % 32] |= static_cast<uint8_t>((q[i] & 0x0F) << (4 * ((i / 32) % 2)));
        b.qh[i % 32] |= static_cast<uint8_t>((q[i] >> 4) << (i / 32));
    }
    return b;
}

block_q6_k quant_q6_k(const float* x) {
    int sc[16];
    block_q6_k b{};
    b.d = quant_sym_scales(x, 16, 16, -32.0f, -128, 127, sc);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(sc[j]);
    for (int i = 0; i < 256; ++i) {
        const float dl = d * static_cast<float>(sc[i / 16]);
        const int q = (dl != 0.0f ? clamp_round(x[i] / dl, -32, 31) : 0) + 32;
        const int h = i / 128, r = i % 128;
        b.ql[64 * h + r % 64] |= static_cast<uint8_t>((q & 0x0F) << (4 * (r / 64)));
        b.qh[32 * h + r % 32] |= static_cast<uint8_t>((q >> 4) << (2 * (r / 32)));
    }
    return b;
}

block_iq4_nl quant_iq4_nl(const float* x) {
    block_iq4_nl b{};
    b.d = fp32_to_fp16(signed_absmax(x, 32) / static_cast<float>(k_kvalues_iq4nl[0]));
    const float d = fp16_to_fp32(b.d);
    for (int i = 0; i < 32; ++i) {
        const int k = d != 0.0f ? nearest_level(k_kvalues_iq4nl, x[i] / d) : 8;   // level 8 is +1: nearest to 0
        b.qs[i % 16] |= static_cast<uint8_t>(k << (4 * (i / 16)));
    }
    return b;
}

block_iq4_xs quant_iq4_xs(const float* x) {
    int sc[8];
    block_iq4_xs b{};
    b.d = quant_sym_scales(x, 8, 32, static_cast<float>(k_kvalues_iq4nl[0]), -32, 31, sc);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < 8; ++j) {
        const int u = sc[j] + 32;
        b.scales_l[j / 2] |= static_cast<uint8_t>((u & 0x0F) << (4 * (j % 2)));
        b.scales_h |= static_cast<uint16_t>((u >> 4) << (2 * j));
        const float dl = d * static_cast<float>(sc[j]);
        for (int l = 0; l < 32; ++l) {
            const int k = dl != 0.0f ? nearest_level(k_kvalues_iq4nl, x[32 * j + l] / dl) : 8;
            b.qs[16 * j + l % 16] |= static_cast<uint8_t>(k << (4 * (l / 16)));
        }
    }
    return b;
}

// ---- I-quants with grids (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) ----
// value = dfold * L_j * grid * sign with L_j = 2s+1 (s 4 bits) and dfold = d/8 (IQ2), d/4
// (IQ3_XXS), d (IQ3_S). Each sub-block's largest |x| maps to the grid's top level, the block's
// largest sub-block scale to L = 31; each group takes the grid entry nearest in squared error
// to its magnitudes (exhaustive search) and the signs of x. Where the format stores 7 sign bits
// per 8 values (the 8th is the parity), an odd count of negatives flips the cheapest sign.

struct iq_grid {
    const uint8_t* entries;   // n x width magnitudes
    int n, width;
};

int nearest_grid(const iq_grid& g, const float* mag) {
    int best = 0;
    float best_err = 0.0f;
    for (int k = 0; k < g.n; ++k) {
        float err = 0.0f;
        for (int e = 0; e < g.width; ++e) {
            const float diff = mag[e] - static_cast<float>(g.entries[k * g.width + e]);
            err += diff * diff;
        }
        if (k == 0 || err < best_err) {
            best_err = err;
            best = k;
        }
    }
    return best;
}

// Scales: returns the stored f16 d and fills the 4-bit s_j for n_sub sub-blocks of w values.
uint16_t iq_scales(const float* x, int n_sub, int w, float gmax, float fold, int* s, float* dl) {
    float t[16], tmax = 0.0f;
    for (int j = 0; j < n_sub; ++j) {
        t[j] = std::fabs(signed_absmax(x + j * w, w)) / gmax;
        tmax = std::fmax(tmax, t[j]);
    }
    const uint16_t dh = fp32_to_fp16(tmax / 31.0f * fold);
    const float dfold = fp16_to_fp32(dh) / fold;   // exact: fold is a power of two
    for (int j = 0; j < n_sub; ++j) {
        s[j] = dfold > 0.0f ? clamp_round((t[j] / dfold - 1.0f) / 2.0f, 0, 15) : 0;
        dl[j] = dfold * static_cast<float>(2 * s[j] + 1);
    }
    return dh;
}

// Grid indices and the 8 sign bits of one group of 8 values with sub-block scale dl.
// width 8: one index; width 4: two indices (IQ3). parity: make the negatives even.
uint8_t iq_group(const iq_grid& g, const float* x, float dl, bool parity, int* idx) {
    float mag[8];
    for (int e = 0; e < 8; ++e) mag[e] = dl > 0.0f ? std::fabs(x[e]) / dl : 0.0f;
    for (int h = 0; h < 8 / g.width; ++h) idx[h] = nearest_grid(g, mag + h * g.width);
    unsigned neg = 0;
    for (int e = 0; e < 8; ++e)
        if (x[e] < 0.0f) neg |= 1u << e;
    if (parity && (__builtin_popcount(neg) & 1)) {
        int cheapest = 0;
        float cost = 0.0f;
        for (int e = 0; e < 8; ++e) {   // flipping e costs 4 |x_e| dl g_e: take the smallest
            const float c = std::fabs(x[e]) * static_cast<float>(g.entries[idx[e / g.width] * g.width + e % g.width]);
            if (e == 0 || c < cost) {
                cost = c;
                cheapest = e;
            }
        }
        neg ^= 1u << cheapest;
    }
    return static_cast<uint8_t>(neg);
}

block_iq2_xxs quant_iq2_xxs(const float* x) {
    const iq_grid g{&k_iq2xxs_grid[0][0], 256, 8};
    int s[8], idx[1];
    float dl[8];
    block_iq2_xxs b{};
    b.d = iq_scales(x, 8, 32, 43.0f, 8.0f, s, dl);
    for (int j = 0; j < 8; ++j) {
        uint32_t aux[2] = {0, static_cast<uint32_t>(s[j]) << 28};
        for (int k = 0; k < 4; ++k) {
            const uint8_t neg = iq_group(g, x + 32 * j + 8 * k, dl[j], true, idx);
            aux[0] |= static_cast<uint32_t>(idx[0]) << (8 * k);
            aux[1] |= static_cast<uint32_t>(neg & 0x7F) << (7 * k);
        }
        std::memcpy(b.qs + 4 * j, aux, 8);
    }
    return b;
}

block_iq2_xs quant_iq2_xs(const float* x) {
    const iq_grid g{&k_iq2xs_grid[0][0], 512, 8};
    int s[16], idx[1];
    float dl[16];
    block_iq2_xs b{};
    b.d = iq_scales(x, 16, 16, 43.0f, 8.0f, s, dl);
    for (int j = 0; j < 16; ++j) b.scales[j / 2] |= static_cast<uint8_t>(s[j] << (4 * (j % 2)));
    for (int gi = 0; gi < 32; ++gi) {
        const uint8_t neg = iq_group(g, x + 8 * gi, dl[gi / 2], true, idx);
        b.qs[gi] = static_cast<uint16_t>(idx[0] | ((neg & 0x7F) << 9));
    }
    return b;
}

block_iq2_s quant_iq2_s(const float* x) {
    const iq_grid g{&k_iq2s_grid[0][0], 1024, 8};
    int s[16], idx[1];
    float dl[16];
    block_iq2_s b{};
    b.d = iq_scales(x, 16, 16, 43.0f, 8.0f, s, dl);
    for (int j = 0; j < 16; ++j) b.scales[j / 2] |= static_cast<uint8_t>(s[j] << (4 * (j % 2)));
    for (int gi = 0; gi < 32; ++gi) {
        b.signs[gi] = iq_group(g, x + 8 * gi, dl[gi / 2], false, idx);
        b.qs[gi] = static_cast<uint8_t>(idx[0] & 0xFF);
        b.qh[gi / 4] |= static_cast<uint8_t>((idx[0] >> 8) << (2 * (gi % 4)));
    }
    return b;
}

block_iq3_xxs quant_iq3_xxs(const float* x) {
    const iq_grid g{&k_iq3xxs_grid[0][0], 256, 4};
    int s[8], idx[2];
    float dl[8];
    block_iq3_xxs b{};
    b.d = iq_scales(x, 8, 32, 62.0f, 4.0f, s, dl);
    for (int j = 0; j < 8; ++j) {
        uint32_t aux = static_cast<uint32_t>(s[j]) << 28;
        for (int k = 0; k < 4; ++k) {
            const uint8_t neg = iq_group(g, x + 32 * j + 8 * k, dl[j], true, idx);
            b.qs[8 * j + 2 * k] = static_cast<uint8_t>(idx[0]);
            b.qs[8 * j + 2 * k + 1] = static_cast<uint8_t>(idx[1]);
            aux |= static_cast<uint32_t>(neg & 0x7F) << (7 * k);
        }
        std::memcpy(b.sas + 4 * j, &aux, 4);
    }
    return b;
}

block_iq3_s quant_iq3_s(const float* x) {
    const iq_grid g{&k_iq3s_grid[0][0], 512, 4};
    int s[8], idx[2];
    float dl[8];
    block_iq3_s b{};
    b.d = iq_scales(x, 8, 32, 15.0f, 1.0f, s, dl);
    for (int j = 0; j < 8; ++j) b.scales[j / 2] |= static_cast<uint8_t>(s[j] << (4 * (j % 2)));
    for (int gi = 0; gi < 32; ++gi) {   // 32 groups of 8 = 64 grid entries of 4
        b.signs[gi] = iq_group(g, x + 8 * gi, dl[gi / 4], false, idx);
        for (int h = 0; h < 2; ++h) {
            const int i = 2 * gi + h;
            b.qs[i] = static_cast<uint8_t>(idx[h] & 0xFF);
            b.qh[i / 8] |= static_cast<uint8_t>((idx[h] >> 8) << (i % 8));
        }
    }
    return b;
}

template <class B, B (*F)(const float*), int QK>
void quant_blocks(const float* src, std::byte* dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i) {
        const B b = F(src + i * QK);
        std::memcpy(dst + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
    }
}

}  // namespace

bool has_simple_quantizer(dtype t) {
    switch (t) {
    case dtype::q2_k: case dtype::q3_k: case dtype::q4_k: case dtype::q5_k: case dtype::q6_k:
    case dtype::iq4_nl: case dtype::iq4_xs: case dtype::iq2_xxs: case dtype::iq2_xs: case dtype::iq2_s:
    case dtype::iq3_xxs: case dtype::iq3_s:
        return true;
    default:
        return false;
    }
}

void quantize_row_simple(dtype t, const float* src, std::byte* dst, int64_t n) {
    switch (t) {
    case dtype::q2_k: return quant_blocks<block_q2_k, quant_q2_k, 256>(src, dst, n);
    case dtype::q3_k: return quant_blocks<block_q3_k, quant_q3_k, 256>(src, dst, n);
    case dtype::q4_k: return quant_blocks<block_q4_k, quant_q4_k, 256>(src, dst, n);
    case dtype::q5_k: return quant_blocks<block_q5_k, quant_q5_k, 256>(src, dst, n);
    case dtype::q6_k: return quant_blocks<block_q6_k, quant_q6_k, 256>(src, dst, n);
    case dtype::iq4_nl: return quant_blocks<block_iq4_nl, quant_iq4_nl, 32>(src, dst, n);
    case dtype::iq4_xs: return quant_blocks<block_iq4_xs, quant_iq4_xs, 256>(src, dst, n);
    case dtype::iq2_xxs: return quant_blocks<block_iq2_xxs, quant_iq2_xxs, 256>(src, dst, n);
    case dtype::iq2_xs: return quant_blocks<block_iq2_xs, quant_iq2_xs, 256>(src, dst, n);
    case dtype::iq2_s: return quant_blocks<block_iq2_s, quant_iq2_s, 256>(src, dst, n);
    case dtype::iq3_xxs: return quant_blocks<block_iq3_xxs, quant_iq3_xxs, 256>(src, dst, n);
    case dtype::iq3_s: return quant_blocks<block_iq3_s, quant_iq3_s, 256>(src, dst, n);
    default: fail("quantize_row: {} has no quantiser", name(t));
    }
}

}  // namespace sluice::quant
