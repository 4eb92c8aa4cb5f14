// int8 activation blocks (DESIGN.md E3). The CUDA side quantises with the same expression:
// dx = amax / 127, q = nearbyint(x / dx) (round to nearest even under the default mode), a
// real division, not a multiplication by 1/dx, so both sides round the same quotient.
#include "quant/act.h"

#include "core/error.h"

#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice::quant {
namespace {

// Quantises w values of x into q and returns dx. Edge cases, which the CUDA side must treat
// the same way: dx == 0 (amax 0, or amax so small that amax / 127 underflows) gives all-zero
// quants; a NaN quotient (NaN input, or inf / inf when amax is inf) quantises to 0. The hot
// loop does not throw: a non-finite activation is a bug upstream that the logits will show.
float quantize_block_ref(const float* x, int w, int8_t* q) {
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

#if defined(__x86_64__)
// quantize_block_ref with AVX2, the same bits (a test compares them on edge values): vmaxps
// with the running max as its second operand returns that operand for a NaN |x|, as fmax
// ignores a NaN, and a max is exact in any order; the same division; vroundps to nearest even
// is nearbyint in the default rounding mode; NaN to 0, the clamp, the conversion of integral
// values. The scalar loop calls libm's fmaxf and nearbyintf per value: with them it was 7.4% of
// a pp512 on the 4-layer Qwen3-30B-A3B-shaped IQ4_XS file (perf, 2-core AMD EPYC). w: a
// multiple of 32.
__attribute__((target("avx2"))) float quantize_block_avx2(const float* x, int w, int8_t* q) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < w; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float dx = _mm_cvtss_f32(h) / 127.0f;
    if (dx == 0.0f) {
        std::memset(q, 0, static_cast<size_t>(w));
        return 0.0f;
    }
    const __m256 d = _mm256_set1_ps(dx), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    // The packs work within 128-bit lanes: the packed bytes' dwords hold elements 0-3, 8-11,
    // 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31; the permutation puts them in order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < w; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; ++k) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), d),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));   // NaN -> 0
            v[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
        }
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(b, order));
    }
    return dx;
}
#endif

float quantize_block(const float* x, int w, int8_t* q, bool simd) {
#if defined(__x86_64__)
    if (simd) return quantize_block_avx2(x, w, q);
#endif
    (void)simd;
    return quantize_block_ref(x, w, q);
}

bool cpu_has_avx2() {
#if defined(__x86_64__)
    static const bool yes = __builtin_cpu_supports("avx2");
    return yes;
#else
    return false;
#endif
}

void quantize_row(act_format f, const float* x, int64_t n, std::byte* dst, bool simd) {
    switch (f) {
    case act_format::f32:
        std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
        return;
    case act_format::q8_32:
        for (int64_t b = 0; b < n / 32; ++b) {
            act_block32 blk;
            blk.d = quantize_block(x + 32 * b, 32, blk.q, simd);
            std::memcpy(dst + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
        }
        return;
    case act_format::q8_256:
        for (int64_t b = 0; b < n / 256; ++b) {
            act_block256 blk;
            blk.d = quantize_block(x + 256 * b, 256, blk.q, simd);
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
    quantize_row(f, x, n, dst, cpu_has_avx2());
}

void quantize_act_row_ref(act_format f, const float* x, int64_t n, std::byte* dst) { quantize_row(f, x, n, dst, false); }

}  // namespace sluice::quant
