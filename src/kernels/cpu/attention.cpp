// Causal GQA attention over the KV cache, reduced in fixed chunks of KV positions (E1).
#include "kernels/cpu/ops.h"
#include "kernels/math.h"

namespace sluice::kernels {

void attention(thread_pool& pool, const attention_params& p, const float* q, const float* k,
               const float* v, int32_t pos0, int64_t n_rows, float* out) {
    const int hd = p.head_dim;
    const int group = p.n_head / p.n_kv_head;      // query heads per KV head
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;  // floats per position
    pool.parallel_for(n_rows * p.n_head, [&](int64_t b, int64_t e) {
        float score[k_attn_chunk];   // this chunk's scores, then their exponentials
        float oc[k_max_head_dim];    // this chunk's weighted sum of V
        for (int64_t t = b; t < e; ++t) {
            const int64_t r = t / p.n_head;
            const int h = static_cast<int>(t % p.n_head);
            const int kvh = h / group;
            const float* qh = q + (r * p.n_head + h) * hd;
            float* o = out + (r * p.n_head + h) * hd;
            const int64_t n_kv = pos0 + r + 1;       // causal: positions 0..pos0+r
            float m = 0.0f, l = 0.0f;                 // running max and sum of exponentials
            for (int64_t c0 = 0; c0 < n_kv; c0 += k_attn_chunk) {
                const int n = static_cast<int>(n_kv - c0 < k_attn_chunk ? n_kv - c0 : k_attn_chunk);
                float mc = 0.0f;
                for (int j = 0; j < n; ++j) {
                    score[j] = dot_f32_lanes(qh, k + (c0 + j) * kv_stride + kvh * hd, hd) * p.scale;
                    mc = (j == 0 || score[j] > mc) ? score[j] : mc;
                }
                float lc = 0.0f;
                for (int d = 0; d < hd; ++d) oc[d] = 0.0f;
                for (int j = 0; j < n; ++j) {
                    score[j] = exp_f32(score[j] - mc);
                    lc += score[j];
                    const float* vj = v + (c0 + j) * kv_stride + kvh * hd;
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
    });
}

}  // namespace sluice::kernels
