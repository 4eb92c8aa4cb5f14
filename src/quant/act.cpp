// int8 activation blocks (DESIGN.md E3). The CUDA side quantises with the same expression:
// dx = amax / 127, q = nearbyint(x / dx) (round to nearest even under the default mode), a
// real division, not a multiplication by 1/dx, so both sides round the same quotient.
#include "quant/act.h"

#include "core/error.h"

#include <cmath>
#include <cstring>

namespace sluice::quant {
namespace {

// Quantises w values of x into q and returns dx. Edge cases, which the CUDA side must treat
// the same way: dx == 0 (amax 0, or amax so small that amax / 127 underflows) gives all-zero
// quants; a NaN quotient (NaN input, or inf / inf when amax is inf) quantises to 0. The hot
// loop does not throw: a non-finite activation is a bug upstream that the logits will show.
float quantize_block(const float* x, int w, int8_t* q) {
    float amax = 0.0f;
    for (int i = 0; i < w; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float dx = amax / 127.0f;
    if (dx == 0.0f) {
        std::memset(q, 0, static_cast<size_t>(w));
        return 0.0f;
    }
    for (int i = 0; i < w; ++i) {
        float r = std::nearbyint(x[i] / dx);
        if (!(r == r)) r = 0.0f;
        r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
        q[i] = static_cast<int8_t>(r);
    }
    return dx;
}

}  // namespace

act_format act_format_for(dtype weight) {
    switch (weight) {
    case dtype::f32: case dtype::f16: case dtype::bf16:
        return act_format::f32;
    case dtype::q4_0: case dtype::q4_1: case dtype::q5_0: case dtype::q5_1: case dtype::q8_0:
    case dtype::iq4_nl: case dtype::mxfp4:
        return act_format::q8_32;
    case dtype::q2_k: case dtype::q3_k: case dtype::q4_k: case dtype::q5_k: case dtype::q6_k:
    case dtype::iq2_xxs: case dtype::iq2_xs: case dtype::iq2_s: case dtype::iq3_xxs:
    case dtype::iq3_s: case dtype::iq4_xs:
        return act_format::q8_256;
    default:
        fail("act_format_for: weight format {} has no dot product", name(weight));
    }
}

size_t act_row_bytes(act_format f, int64_t n) {
    switch (f) {
    case act_format::f32: return static_cast<size_t>(n) * sizeof(float);
    case act_format::q8_32: return static_cast<size_t>(n / 32) * sizeof(act_block32);
    case act_format::q8_256: return static_cast<size_t>(n / 256) * sizeof(act_block256);
    }
    return 0;
}

void quantize_act_row(act_format f, const float* x, int64_t n, std::byte* dst) {
    switch (f) {
    case act_format::f32:
        std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
        return;
    case act_format::q8_32:
        for (int64_t b = 0; b < n / 32; ++b) {
            act_block32 blk;
            blk.d = quantize_block(x + 32 * b, 32, blk.q);
            std::memcpy(dst + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
        }
        return;
    case act_format::q8_256:
        for (int64_t b = 0; b < n / 256; ++b) {
            act_block256 blk;
            blk.d = quantize_block(x + 256 * b, 256, blk.q);
            for (int j = 0; j < 16; ++j) {
                int s = 0;
                for (int i = 0; i < 16; ++i) s += blk.q[16 * j + i];
                blk.bsums[j] = static_cast<int16_t>(s);   // |s| <= 16 * 127
            }
            std::memcpy(dst + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
        }
        return;
    }
}

}  // namespace sluice::quant
