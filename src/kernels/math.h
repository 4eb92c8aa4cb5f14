// Scalar math shared by the host and the device (E3): exp, SiLU and sigmoid written here, not
// taken from libm or CUDA's intrinsics, so the CPU and the GPU give the same bits for them.
// Every operation is a single IEEE operation rounded on its own (the build passes
// -ffp-contract=off to the host compiler and --fmad=false to nvcc), so the result does not
// depend on the compiler's choice of fused instructions.
#pragma once

#include "core/hd.h"

#include <cstdint>
#include <cstring>

namespace sluice::kernels {

SLUICE_HD inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// e^x for fp32, faithful to about 1-2 ulp over the normal range.
// Range reduction x = n*ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split into a high part whose
// product with n is exact and a low part), then e^r by its Taylor polynomial to degree 7 (the
// truncation error r^8/8! < 6e-9 is below half an ulp), then the result scaled by 2^n built
// from its exponent bits. Results below the normal range are scaled in two steps so that
// subnormals come out right; x below -104 gives 0, above 88.72 gives +inf, NaN stays NaN.
SLUICE_HD inline float exp_f32(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return bits_to_f32(0x7f800000u);
    if (x < -104.0f) return 0.0f;
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;       // 12 significant bits: n * ln2_hi is exact
    const float ln2_lo = 1.428606765330187e-06f;   // ln2 - ln2_hi
    const float t = x * log2e;
    // Round to nearest (ties away from zero) without libm: |t| < 151 fits an int.
    const int n = static_cast<int>(t >= 0.0f ? t + 0.5f : t - 0.5f);
    const float fn = static_cast<float>(n);
    const float r = (x - fn * ln2_hi) - fn * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n as two factors so that n down to -150 and up to 128 stay representable.
    const int n1 = n / 2;
    const int n2 = n - n1;
    const float s1 = bits_to_f32(static_cast<uint32_t>(n1 + 127) << 23);
    const float s2 = bits_to_f32(static_cast<uint32_t>(n2 + 127) << 23);
    return (p * s1) * s2;
}

SLUICE_HD inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// SiLU(x) = x * sigmoid(x), written as x / (1 + e^-x) (one rounding fewer).
SLUICE_HD inline float silu_f32(float x) { return x / (1.0f + exp_f32(-x)); }

}  // namespace sluice::kernels
