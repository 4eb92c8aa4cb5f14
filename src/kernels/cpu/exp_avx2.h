// exp_f32 and silu_f32 (kernels/math.h) on 8 floats with AVX2, for the hot loops that take
// many of them (attention's scores, SwiGLU). Callers compile these inline under the same
// target attribute and run them only where cpu_supports(isa::avx2) (dot.h).
#pragma once

#include "kernels/math.h"

#include <immintrin.h>

namespace sluice::kernels {

// exp_f32 (kernels/math.h) of 8 values at once, the same IEEE operations in the same order
// (mul/add, never fused), so each lane is exp_f32's bits: t = x log2e; n = trunc(t +- 0.5);
// r = (x - n ln2_hi) - n ln2_lo; the degree-7 Horner polynomial; the scale 2^n as two factors
// 2^(n/2) (n/2 rounded toward zero, as C++'s int division) and 2^(n - n/2). exp_f32's early
// returns become blends in its order of precedence: NaN stays NaN, x > 88.72... gives +inf,
// x < -104 gives 0 (their lanes' arithmetic above is discarded).
__attribute__((target("avx2,fma"))) inline __m256 exp8_avx2(__m256 x) {
    const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m256 rt = _mm256_blendv_ps(_mm256_sub_ps(t, half), _mm256_add_ps(t, half),
                                       _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_GE_OQ));
    const __m256i n = _mm256_cvttps_epi32(rt);
    const __m256 fn = _mm256_cvtepi32_ps(n);
    const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(fn, _mm256_set1_ps(0.693145751953125f))),
                                   _mm256_mul_ps(fn, _mm256_set1_ps(1.428606765330187e-06f)));
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(n, 31)), 1);
    const __m256i n2 = _mm256_sub_epi32(n, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000)),
                         _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// silu_f32 of 8 values: x / (1 + exp_f32(-x)), the same three operations per lane.
__attribute__((target("avx2,fma"))) inline __m256 silu8_avx2(__m256 x) {
    const __m256 neg = _mm256_xor_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u))));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8_avx2(neg)));
}

}  // namespace sluice::kernels
