// Scalar reference of the Gated DeltaNet row ops (see delta_net.h).
#include "kernels/cpu/delta_net.h"

#include "kernels/cpu/ops.h"
#include "kernels/math.h"

#include <cmath>

namespace sluice::kernels {

void delta_net_conv_row(const delta_net_shape& s, const float* w, float* state, const float* x, float* out) {
    const int64_t C = s.conv_channels();
    const int K = s.d_conv;
    for (int64_t c = 0; c < C; ++c) {
        const float* wc = w + c * K;
        float acc = 0.0f;
        for (int j = 0; j < K - 1; ++j) acc = acc + wc[j] * state[j * C + c];
        acc = acc + wc[K - 1] * x[c];
        out[c] = silu_f32(acc);
    }
    // Shift: the oldest input leaves, this row's joins at the end.
    for (int j = 0; j + 1 < K - 1; ++j)
        for (int64_t c = 0; c < C; ++c) state[j * C + c] = state[(j + 1) * C + c];
    for (int64_t c = 0; c < C; ++c) state[static_cast<int64_t>(K - 2) * C + c] = x[c];
}

namespace {

// x *= 1 / sqrt(sum x^2 + eps) (the sum in index order), then * scale.
void l2_normalise(float* x, int n, float eps, float scale) {
    float ss = 0.0f;
    for (int i = 0; i < n; ++i) ss = ss + x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss + eps);
    for (int i = 0; i < n; ++i) x[i] = (x[i] * inv) * scale;
}

}  // namespace

void delta_net_rule_row(thread_pool& pool, const delta_net_shape& s, float* qkv, const float* g,
                        const float* beta, float* state, float* out) {
    const int dk = s.head_k_dim, dv = s.head_v_dim;
    float* q = qkv;
    float* k = qkv + s.key_dim();
    const float* v = qkv + 2 * s.key_dim();
    const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (int h = 0; h < s.n_k_heads; ++h) {
        l2_normalise(q + h * dk, dk, s.eps, qscale);
        l2_normalise(k + h * dk, dk, s.eps, 1.0f);
    }
    pool.parallel_for(s.n_v_heads, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
            const int kh = s.k_head_of(static_cast<int>(h));
            const float* qh = q + kh * dk;
            const float* kk = k + kh * dk;
            const float* vh = v + h * dv;
            float* S = state + h * dk * dv;   // [dk, dv]
            float* o = out + h * dv;
            const float decay = exp_f32(g[h]);
            const float b = beta[h];
            for (int64_t i = 0; i < int64_t{dk} * dv; ++i) S[i] = S[i] * decay;
            // d[j] = (v[j] - sum_i S[i][j] k[i]) * beta, kept in o (overwritten below).
            for (int j = 0; j < dv; ++j) o[j] = 0.0f;
            for (int i = 0; i < dk; ++i)
                for (int j = 0; j < dv; ++j) o[j] = o[j] + S[i * dv + j] * kk[i];
            for (int j = 0; j < dv; ++j) o[j] = (vh[j] - o[j]) * b;
            for (int i = 0; i < dk; ++i)
                for (int j = 0; j < dv; ++j) S[i * dv + j] = S[i * dv + j] + kk[i] * o[j];
            for (int j = 0; j < dv; ++j) o[j] = 0.0f;
            for (int i = 0; i < dk; ++i)
                for (int j = 0; j < dv; ++j) o[j] = o[j] + S[i * dv + j] * qh[i];
        }
    });
}

void delta_net_gated_norm_row(const delta_net_shape& s, const float* o, const float* z, const float* w, float* out) {
    const int dv = s.head_v_dim;
    for (int h = 0; h < s.n_v_heads; ++h) {
        rmsnorm(o + h * dv, w, out + h * dv, dv, s.eps);
        for (int j = 0; j < dv; ++j) out[h * dv + j] = out[h * dv + j] * silu_f32(z[h * dv + j]);
    }
}

}  // namespace sluice::kernels
