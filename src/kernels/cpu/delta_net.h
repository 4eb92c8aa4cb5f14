// Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6-MoE linear-attention layers), one row at a time: the
// causal depthwise conv1d over the conv state, the gated delta rule with a decay per value head,
// and the gated RMSNorm of its output. A scalar reference; every reduction runs in index order
// with each operation rounded on its own (-ffp-contract=off), so a row's bits depend only on its
// inputs and the state it starts from (E1: a window of 1 and of 16 run this same code row after
// row; E2: threads split value heads, never a sum).
#pragma once

#include "core/hd.h"
#include "core/thread_pool.h"
#include "kernels/math.h"   // softplus_f32

#include <cstdint>

namespace sluice::kernels {

// Methods are host and device functions (the CUDA kernels take the shape by value).
struct delta_net_shape {
    int n_k_heads = 0;    // key/query heads (ssm.group_count)
    int n_v_heads = 0;    // value heads (ssm.time_step_rank), a multiple of n_k_heads
    int head_k_dim = 0;   // ssm.state_size
    int head_v_dim = 0;   // ssm.inner_size / n_v_heads
    int d_conv = 0;       // conv kernel width (ssm.conv_kernel), >= 2
    // Which key head value head h reads: tiled (h % n_k_heads, the order llama.cpp's converter
    // writes Qwen3.5 files in) or grouped (h / (n_v_heads / n_k_heads), Qwen3-Next and HF order).
    bool v_tiled = false;
    float eps = 1e-6f;    // of the q/k L2 norms and the gated RMSNorm

    SLUICE_HD int64_t key_dim() const { return int64_t{n_k_heads} * head_k_dim; }
    SLUICE_HD int64_t value_dim() const { return int64_t{n_v_heads} * head_v_dim; }
    SLUICE_HD int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }      // q | k | v
    SLUICE_HD int64_t conv_state_floats() const { return (d_conv - 1) * conv_channels(); }
    SLUICE_HD int64_t ssm_state_floats() const { return int64_t{n_v_heads} * head_k_dim * head_v_dim; }
    SLUICE_HD int k_head_of(int h) const { return v_tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads); }
};

// Causal conv1d for one row, then SiLU.
//   w:     [conv_channels, d_conv] (GGML ne {d_conv, channels}): tap d_conv-1 is the current row
//   state: [d_conv-1, conv_channels] the previous inputs, oldest first; shifted, x appended
//   x:     [conv_channels] this row's q|k|v projection; out: [conv_channels] (may not alias x)
// out[c] = silu(((w[c,0]*s0[c] + w[c,1]*s1[c]) + ...) + w[c,K-1]*x[c]).
void delta_net_conv_row(const delta_net_shape& s, const float* w, float* state, const float* x, float* out);

// The gated delta rule for one row, all value heads (threads split the heads).
//   qkv:   [conv_channels] the conv output: q [n_k, dk] | k [n_k, dk] | v [n_v, dv]; q and k are
//          L2-normalised here (x / sqrt(sum x^2 + eps)) and q scaled by 1/sqrt(dk), in place
//   g:     [n_v] log-decay (<= 0): the state is multiplied by exp(g) first
//   beta:  [n_v] write strength in (0, 1)
//   state: [n_v, dk, dv], S[h][i][j]
//   out:   [n_v, dv] o[h][j] = sum_i S'[h][i][j] * q[i] with S' the updated state:
//          S *= exp(g); d[j] = (v[j] - sum_i S[i][j] k[i]) * beta; S[i][j] += k[i] d[j]
void delta_net_rule_row(thread_pool& pool, const delta_net_shape& s, float* qkv, const float* g,
                        const float* beta, float* state, float* out);

// Gated RMSNorm per value head: out[h] = rmsnorm(o[h]) * w * silu(z[h]).
//   o, z, out: [n_v, dv] (out may alias o); w: [dv]
void delta_net_gated_norm_row(const delta_net_shape& s, const float* o, const float* z, const float* w, float* out);

}  // namespace sluice::kernels
