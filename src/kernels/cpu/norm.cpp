// Element-wise and row-reduction ops: fixed-order dot, RMSNorm, softmax, SwiGLU, top-k router.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/math.h"

#include <cmath>
#include <limits>

namespace sluice::kernels {

float dot_f32_lanes_ref(const float* a, const float* b, int64_t n) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; ++i) acc[i & 15] = std::fmaf(a[i], b[i], acc[i & 15]);
    for (int s = 8; s >= 1; s /= 2)
        for (int l = 0; l < s; ++l) acc[l] += acc[l + s];
    return acc[0];
}

float dot_f32_lanes(const float* a, const float* b, int64_t n) {
    // The F32 weight kernel of dot_rows keeps this rule (dot_ref.h: 16 lanes of fmaf, the pairwise
    // fold) in one zmm or two ymm. This file is built for the baseline ISA, where each std::fmaf
    // is a call into libm: a 576-wide RMSNorm row took 1.65 us that way on the 2-core EPYC, 0.12
    // us through the SIMD kernel (the 16-core host's ~2.4 us of ops.h is not re-measured).
    static const dot_rows_fn simd = resolve_dot_rows(best_isa(), dtype::f32);
    if (!simd || n <= 0) return dot_f32_lanes_ref(a, b, n);
    float out;
    simd(reinterpret_cast<const std::byte*>(a), reinterpret_cast<const std::byte*>(b), 0, 1, n, &out);
    return out;
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
    const float mean = dot_f32_lanes(x, x, n) / static_cast<float>(n);
    const float scale = 1.0f / std::sqrt(mean + eps);  // sqrt is correctly rounded everywhere
    if (w) {
        for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
    }
}

void softmax(float* x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = exp_f32(x[i] - mx);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

namespace {

// swiglu 8 elements at a time (silu8_avx2 gives silu_f32's bits; then one multiply), the rest
// (n % 8) by the scalar expression.
__attribute__((target("avx2,fma"))) void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8_avx2(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    for (; i < n; ++i) out[i] = silu_f32(gate[i]) * up[i];
}

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    // out may alias gate or up: each element is read before it is written, 8 at a time.
    static const bool avx2 = cpu_supports(isa::avx2);
    if (avx2) {
        swiglu_avx2(gate, up, out, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i) out[i] = silu_f32(gate[i]) * up[i];
}

void add(float* y, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

int64_t argmax_first_ref(const float* x, int64_t n) {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    int64_t best = 0;
    float bv = std::isnan(x[0]) ? neg_inf : x[0];
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > bv) {   // false for NaN
            best = i;
            bv = x[i];
        }
    return best;
}

namespace {

// Two passes: the maximum (vmaxps returns its second operand when the first is NaN, so NaN never
// wins), then the first index holding a value equal to it (+0 == -0, as the strict scan treats
// them). When the maximum is -inf every value is NaN or -inf, and the scan keeps index 0.
__attribute__((target("avx2"))) int64_t argmax_first_avx2(const float* x, int64_t n) {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    __m256 m0 = _mm256_set1_ps(neg_inf), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
    float mx = neg_inf;
    for (float v : lanes) mx = v > mx ? v : mx;
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    if (mx == neg_inf) return 0;
    const __m256 target = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz(static_cast<unsigned>(hit));
    }
    for (; i < n; ++i)
        if (x[i] == mx) return i;
    return 0;   // never: mx is one of the values
}

}  // namespace

int64_t argmax_first(const float* x, int64_t n) {
    static const bool avx2 = cpu_supports(isa::avx2);
    return avx2 ? argmax_first_avx2(x, n) : argmax_first_ref(x, n);
}

void route_topk(const router_params& p, float* logits, int32_t* ids, float* weights) {
    softmax(logits, p.n_expert);
    // Selection by repeated argmax: n_used is small (8 of 128 in Qwen3-MoE), and the strict '>'
    // keeps the lower id on ties, so the choice is a function of the probabilities alone.
    for (int k = 0; k < p.n_used; ++k) {
        int best = -1;
        for (int e = 0; e < p.n_expert; ++e) {
            bool taken = false;
            for (int j = 0; j < k; ++j) taken = taken || ids[j] == e;
            if (taken) continue;
            if (best < 0 || logits[e] > logits[best]) best = e;
        }
        ids[k] = best;
        weights[k] = logits[best];
    }
    if (p.renormalize) {
        float sum = 0.0f;
        for (int k = 0; k < p.n_used; ++k) sum += weights[k];
        for (int k = 0; k < p.n_used; ++k) weights[k] = weights[k] / sum;
    }
}

}  // namespace sluice::kernels
