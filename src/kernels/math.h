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

// ln(x) for fp32 x > 0 (normal or subnormal), within 0.85 ulp (0.75 over every 977th fp32 value
// against double log, 0.83 over every 97th, 2026-12-03); 0 gives -inf, x < 0 or NaN gives NaN,
// +inf gives +inf. x = m * 2^e with m in [sqrt(1/2), sqrt(2)); f = m - 1 (exact); with
// s = f / (2 + f), ln(m) = f - (f^2/2 - s (f^2/2 + R(s^2))) where R is the minimax polynomial of
// fdlibm's logf (coefficients Lg1..Lg4); then e * ln2 added in two parts as in exp_f32.
SLUICE_HD inline float log_f32(float x) {
    if (x == 0.0f) return bits_to_f32(0xff800000u);   // -inf
    if (!(x > 0.0f)) return bits_to_f32(0x7fc00000u);
    if (x > 3.4028234663852886e38f) return x;   // +inf
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    int e = 0;
    if (u < 0x00800000u) {   // subnormal: scale into the normal range first
        x = x * 33554432.0f;   // 2^25
        std::memcpy(&u, &x, sizeof u);
        e = -25;
    }
    e += static_cast<int>(u >> 23) - 127;
    u = (u & 0x007fffffu) | 0x3f800000u;   // m in [1, 2)
    if (u > 0x3fb504f3u) {                 // m > sqrt(2): halve it
        u -= 0x00800000u;
        ++e;
    }
    const float f = bits_to_f32(u) - 1.0f;
    const float s = f / (2.0f + f);
    const float z = s * s;
    const float w = z * z;
    const float t1 = w * (0.40000972152f + w * 0.24279078841f);
    const float t2 = z * (0.66666662693f + w * 0.28498786688f);
    const float R = t2 + t1;
    const float hfsq = 0.5f * f * f;
    const float fe = static_cast<float>(e);
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-06f;
    return fe * ln2_hi - ((hfsq - (s * (hfsq + R) + fe * ln2_lo)) - f);
}

// ln(1 + y) for y >= 0 (Goldberg's form: u = 1 + y rounded, then ln(u) * y / (u - 1), which
// cancels u's rounding error; y below 2^-24 returns y, its value in fp32). Within 2.4 ulp of
// double log1p over y in [2^-40, 2^31] (2e6 random values, 2026-12-03).
SLUICE_HD inline float log1p_f32(float y) {
    const float u = 1.0f + y;
    if (u == 1.0f) return y;
    if (u > 1.6777216e7f) return log_f32(u);   // 2^24: y / (u - 1) is 1 to fp32 precision
    return log_f32(u) * (y / (u - 1.0f));
}

// softplus(x) = ln(1 + e^x) (x > 20: x, its fp32 value from there on): the Gated DeltaNet's decay,
// the same bits on the host and the device (it was double log1p(exp) on the host: CUDA's double
// functions are not libm's). Within 2.6 ulp of double over [-60, 25].
SLUICE_HD inline float softplus_f32(float x) {
    if (x > 20.0f) return x;
    return log1p_f32(exp_f32(x));
}

}  // namespace sluice::kernels
