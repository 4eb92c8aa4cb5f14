// Causal GQA attention over the KV cache, reduced in fixed chunks of KV positions (E1).
//
// attention_ref is the definition: plain scalar code. attention runs the same arithmetic with
// AVX2+FMA (on AVX-512 machines too: 16-lane reductions map onto two ymm halves, and the V
// accumulation is element-wise, so a wider vector would not change the order of anything) and
// gives attention_ref's bits: every operation below is the same IEEE operation on the same
// operands in the same order, only several independent ones at a time:
//  - a score is dot_f32_lanes: lane l (i % 16 == l) by fmaf in index order, two ymm accumulators
//    holding lanes 0-7 and 8-15, then the pairwise fold (8, 4, 2, 1) with the same pairs;
//  - the chunk max and the running sum of exponentials stay scalar, in order (32 values a
//    chunk); exp_f32 of the scores runs 8 at a time (exp8_avx2: the same operations per lane);
//  - oc[d] += p_j * v_j[d] (a multiply, then an add: no FMA contraction) element-wise in j order;
//    the merge o = o * a + oc * bc and the final o / l likewise.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/math.h"

#include <immintrin.h>

namespace sluice::kernels {

namespace {

// One (row, head): query qh [hd], keys/values of its KV head at k/v + j * kv_stride for
// positions j < n_kv; writes o [hd]. The scalar definition.
void attend_ref(const float* qh, const float* k, const float* v, int64_t kv_stride, int hd, int64_t n_kv,
                float scale, float* o) {
    float score[k_attn_chunk];   // this chunk's scores, then their exponentials
    float oc[k_max_head_dim];    // this chunk's weighted sum of V
    float m = 0.0f, l = 0.0f;    // running max and sum of exponentials
    for (int64_t c0 = 0; c0 < n_kv; c0 += k_attn_chunk) {
        const int n = static_cast<int>(n_kv - c0 < k_attn_chunk ? n_kv - c0 : k_attn_chunk);
        float mc = 0.0f;
        for (int j = 0; j < n; ++j) {
            score[j] = dot_f32_lanes(qh, k + (c0 + j) * kv_stride, hd) * scale;
            mc = (j == 0 || score[j] > mc) ? score[j] : mc;
        }
        float lc = 0.0f;
        for (int d = 0; d < hd; ++d) oc[d] = 0.0f;
        for (int j = 0; j < n; ++j) {
            score[j] = exp_f32(score[j] - mc);
            lc += score[j];
            const float* vj = v + (c0 + j) * kv_stride;
            for (int d = 0; d < hd; ++d) oc[d] += score[j] * vj[d];
        }
        if (c0 == 0) {
            m = mc;
            l = lc;
            for (int d = 0; d < hd; ++d) o[d] = oc[d];
        } else {
            // Merge: rescale both partial results to the larger max.
            const float mn = mc > m ? mc : m;
            const float a = exp_f32(m - mn), bc = exp_f32(mc - mn);
            l = l * a + lc * bc;
            for (int d = 0; d < hd; ++d) o[d] = o[d] * a + oc[d] * bc;
            m = mn;
        }
    }
    for (int d = 0; d < hd; ++d) o[d] = o[d] / l;
}

#define SLUICE_AVX2 __attribute__((target("avx2,fma")))

// dot_f32_lanes(a, b, hd) for hd % 16 == 0.
SLUICE_AVX2 inline float dot16_avx2(const float* a, const float* b, int hd) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    const __m256 s8 = _mm256_add_ps(lo, hi);                                              // l < 8: l + (l + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // l < 4
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // l < 2
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                           // l = 0
    return _mm_cvtss_f32(s1);
}

// attend_ref for hd % 8 == 0 and hd % 16 == 0 (the score needs whole 16-lane groups).
SLUICE_AVX2 void attend_avx2(const float* qh, const float* k, const float* v, int64_t kv_stride, int hd,
                             int64_t n_kv, float scale, float* o) {
    float score[k_attn_chunk];
    float m = 0.0f, l = 0.0f;
    for (int64_t c0 = 0; c0 < n_kv; c0 += k_attn_chunk) {
        const int n = static_cast<int>(n_kv - c0 < k_attn_chunk ? n_kv - c0 : k_attn_chunk);
        const float* kc = k + c0 * kv_stride;
        const float* vc = v + c0 * kv_stride;
        float mc = 0.0f;
        for (int j = 0; j < n; ++j) {
            score[j] = dot16_avx2(qh, kc + j * kv_stride, hd) * scale;
            mc = (j == 0 || score[j] > mc) ? score[j] : mc;
        }
        // The exponentials 8 at a time (exp8_avx2 gives exp_f32's bits), the sum in j order.
        int j8 = 0;
        for (; j8 + 8 <= n; j8 += 8)
            _mm256_storeu_ps(score + j8, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(score + j8), _mm256_set1_ps(mc))));
        for (int j = j8; j < n; ++j) score[j] = exp_f32(score[j] - mc);
        float lc = 0.0f;
        for (int j = 0; j < n; ++j) lc += score[j];
        float a = 0.0f, bc = 0.0f;
        if (c0 != 0) {
            const float mn = mc > m ? mc : m;
            a = exp_f32(m - mn);
            bc = exp_f32(mc - mn);
            l = l * a + lc * bc;
            m = mn;
        } else {
            m = mc;
            l = lc;
        }
        // V, 8 dimensions at a time: oc = ((0 + p0 v0) + p1 v1) + ... in j order.
        for (int d = 0; d < hd; d += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int j = 0; j < n; ++j)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(score[j]), _mm256_loadu_ps(vc + j * kv_stride + d)));
            if (c0 == 0) {
                _mm256_storeu_ps(o + d, acc);
            } else {
                const __m256 prev = _mm256_mul_ps(_mm256_loadu_ps(o + d), _mm256_set1_ps(a));
                _mm256_storeu_ps(o + d, _mm256_add_ps(prev, _mm256_mul_ps(acc, _mm256_set1_ps(bc))));
            }
        }
    }
    const __m256 lv = _mm256_set1_ps(l);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(o + d, _mm256_div_ps(_mm256_loadu_ps(o + d), lv));
}

#undef SLUICE_AVX2

using attend_fn = void (*)(const float*, const float*, const float*, int64_t, int, int64_t, float, float*);

void run(thread_pool& pool, attend_fn f, const attention_params& p, const float* q, const float* k,
         const float* v, int32_t pos0, int64_t n_rows, float* out) {
    const int hd = p.head_dim;
    const int group = p.n_head / p.n_kv_head;                           // query heads per KV head
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;  // floats per position
    // One task per (row, head); a chunk of 1 keeps the tail short (a task is a whole context).
    pool.parallel_for(n_rows * p.n_head, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const int64_t r = t / p.n_head;
            const int h = static_cast<int>(t % p.n_head);
            const int kvh = h / group;
            // causal: row r at position pos0 + r sees positions 0..pos0+r
            f(q + (r * p.n_head + h) * hd, k + kvh * hd, v + kvh * hd, kv_stride, hd, pos0 + r + 1, p.scale,
              out + (r * p.n_head + h) * hd);
        }
    });
}

}  // namespace

void attention_ref(thread_pool& pool, const attention_params& p, const float* q, const float* k,
                   const float* v, int32_t pos0, int64_t n_rows, float* out) {
    run(pool, attend_ref, p, q, k, v, pos0, n_rows, out);
}

void attention(thread_pool& pool, const attention_params& p, const float* q, const float* k,
               const float* v, int32_t pos0, int64_t n_rows, float* out) {
    static const bool avx2 = cpu_supports(isa::avx2);
    run(pool, avx2 && p.head_dim % 16 == 0 ? attend_avx2 : attend_ref, p, q, k, v, pos0, n_rows, out);
}

}  // namespace sluice::kernels
