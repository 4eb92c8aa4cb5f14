// Device Gated DeltaNet ops (delta_net.cuh), operation for operation the scalar reference of
// src/kernels/cpu/delta_net.cpp and the gate loop of models/hybrid_blocks.cpp.
#include "kernels/cuda/delta_net.cuh"
#include "kernels/cuda/async_copy.cuh"

#include "core/error.h"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace sluice::cuda {
namespace {

constexpr unsigned k_full = 0xffffffffu;
// Columns of the state a rule block owns (one a lane), and the largest dk its shared memory
// holds: dk * (32 + 2) floats within 48 KB.
constexpr int k_rule_cols = 32;
constexpr int k_rule_max_dk = 320;

void check_launch(const char* what) {
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: {}: launch failed: {}", what, cudaGetErrorString(e));
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// A thread per channel, the rows in order (delta_net_conv_row): the weighted sum of the d_conv-1
// kept inputs and this row's, SiLU, then the shift. The state is read from global memory each row
// (d_conv - 1 floats, 3 in the Qwen models).
__global__ void conv_kernel(const float* w, float* state, const float* x, float* out, int64_t C, int K, int64_t rows,
                            float* ck_slot0, int64_t ck_stride, int64_t ck_first) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float* wc = w + c * K;
    for (int64_t r = 0; r < rows; ++r) {
        if (ck_slot0 && r >= ck_first) {
            float* slot = ck_slot0 + (r - ck_first) * ck_stride;
            for (int j = 0; j < K - 1; ++j) slot[j * C + c] = state[j * C + c];
        }
        const float xc = x[r * C + c];
        float acc = 0.0f;
        for (int j = 0; j < K - 1; ++j) acc = __fadd_rn(acc, __fmul_rn(wc[j], state[j * C + c]));
        acc = __fadd_rn(acc, __fmul_rn(wc[K - 1], xc));
        out[r * C + c] = kernels::silu_f32(acc);
        for (int j = 0; j + 1 < K - 1; ++j) state[j * C + c] = state[(j + 1) * C + c];
        state[static_cast<int64_t>(K - 2) * C + c] = xc;
    }
}

// q[i] = (q[i] * (1 / sqrt(sum q^2 + eps))) * qscale and the same for k with scale 1
// (delta_net.cpp's l2_normalise), q and k in shared memory: the two serial sums at once, q's by
// lane 0 and k's by lane 1 (they were one after the other), then every lane scales its share.
__device__ void l2_normalise_qk_warp(float* q, float* k, int n, float eps, float qscale) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    float ss = 0.0f;
    if (lane < 2) {
        const float* x = lane == 0 ? q : k;
        for (int i = 0; i < n; ++i) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
    }
    const float inv_q = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__shfl_sync(k_full, ss, 0), eps)));
    const float inv_k = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__shfl_sync(k_full, ss, 1), eps)));
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
        q[i] = __fmul_rn(__fmul_rn(q[i], inv_q), qscale);
        k[i] = __fmul_rn(__fmul_rn(k[i], inv_k), 1.0f);
    }
    __syncwarp();
}

// A warp per (value head h, group of 32 state columns), the rows in order. Column j of the state
// evolves on its own (the rule only mixes rows i of a column), so lane j keeps S[:, j] in shared
// memory [dk][32] and does delta_net_rule_row's loops for it: decay, the k-projection sum in i
// order, d_j, the update, the q-projection sum in i order. The column's dk words are copied in
// by cp.async, all in flight while the first row's q, k and gates are read and normalised: a
// load-then-store loop waited a memory latency every few words, 16.06 us a decode step's rule
// on the Qwen3.6-35B-A3B shape (ncu, caches not flushed), for 2 MB of state.
__global__ void __launch_bounds__(32)
    rule_kernel(kernels::delta_net_shape s, const float* qkv, dn_gates gates, float* state, float* out, int64_t rows,
                float qscale, float* ck_slot0, int64_t ck_stride, int64_t ck_first) {
    extern __shared__ float smem[];   // S [dk][32] | q [dk] | k [dk]
    wait_prior_grids();   // first: see launch.cuh
    const int dk = s.head_k_dim, dv = s.head_v_dim;
    const int h = static_cast<int>(blockIdx.x);
    const int lane = static_cast<int>(threadIdx.x);
    const int j = static_cast<int>(blockIdx.y) * k_rule_cols + lane;
    const bool live = j < dv;
    float* S = smem;
    float* qs = S + static_cast<int64_t>(dk) * k_rule_cols;
    float* ks = qs + dk;
    const int64_t C = s.conv_channels(), nv = s.n_v_heads;
    const int kh = s.k_head_of(h);
    float* Sg = state + static_cast<int64_t>(h) * dk * dv;   // [dk, dv]
    if (live)
        for (int i = 0; i < dk; ++i) copy4(S + i * k_rule_cols + lane, Sg + static_cast<int64_t>(i) * dv + j);
    const int rep = s.n_v_heads / s.n_k_heads;
    for (int64_t r = 0; r < rows; ++r) {
        const float* q = qkv + r * C + static_cast<int64_t>(kh) * dk;
        const float* k = qkv + r * C + s.key_dim() + static_cast<int64_t>(kh) * dk;
        for (int i = lane; i < dk; i += 32) {
            qs[i] = q[i];
            ks[i] = k[i];
        }
        __syncwarp();
        l2_normalise_qk_warp(qs, ks, dk, s.eps, qscale);
        float b_logit, a_logit;
        if (gates.alpha) {
            b_logit = gates.ba[r * nv + h];
            a_logit = gates.alpha[r * nv + h];
        } else {
            const int kq = h / rep, jr = h % rep;
            b_logit = gates.ba[r * 2 * nv + kq * 2 * rep + jr];
            a_logit = gates.ba[r * 2 * nv + kq * 2 * rep + rep + jr];
        }
        const float b = kernels::sigmoid_f32(b_logit);
        const float g = __fmul_rn(kernels::softplus_f32(__fadd_rn(a_logit, gates.dt_bias[h])), gates.a_coef[h]);
        const float decay = kernels::exp_f32(g);
        stage_wait();   // this lane's column (issued before the loop; nothing pending after row 0)
        if (live) {
            if (ck_slot0 && r >= ck_first) {
                float* slot = ck_slot0 + (r - ck_first) * ck_stride + static_cast<int64_t>(h) * dk * dv;
                for (int i = 0; i < dk; ++i) slot[static_cast<int64_t>(i) * dv + j] = S[i * k_rule_cols + lane];
            }
            float acc = 0.0f;
            for (int i = 0; i < dk; ++i) {
                const float v = __fmul_rn(S[i * k_rule_cols + lane], decay);
                S[i * k_rule_cols + lane] = v;
                acc = __fadd_rn(acc, __fmul_rn(v, ks[i]));
            }
            const float vj = qkv[r * C + 2 * s.key_dim() + static_cast<int64_t>(h) * dv + j];
            const float d = __fmul_rn(__fsub_rn(vj, acc), b);
            float o = 0.0f;
            for (int i = 0; i < dk; ++i) {
                const float v = __fadd_rn(S[i * k_rule_cols + lane], __fmul_rn(ks[i], d));
                S[i * k_rule_cols + lane] = v;
                o = __fadd_rn(o, __fmul_rn(v, qs[i]));
            }
            out[r * nv * dv + static_cast<int64_t>(h) * dv + j] = o;
        }
        __syncwarp();   // qs/ks are rewritten by the next row
    }
    if (live)
        for (int i = 0; i < dk; ++i) Sg[static_cast<int64_t>(i) * dv + j] = S[i * k_rule_cols + lane];
}

// A warp per (row, value head): rmsnorm over dv (rmsnorm_kernel's expressions), times the norm
// weight, times silu(z).
__global__ void gated_norm_kernel(const float* o, const float* z, const float* w, float* out, int64_t n_rows, int nv,
                                  int dv, float eps) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (t >= n_rows * nv) return;   // whole warps leave together
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float* oh = o + t * dv;
    const float* zh = z + t * dv;
    float* dst = out + t * dv;
    const float sum = warp_dot_lanes(oh, oh, dv);
    const float mean = __fdiv_rn(sum, static_cast<float>(dv));
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    __syncwarp();
    for (int i = lane; i < dv; i += 32)
        dst[i] = __fmul_rn(__fmul_rn(__fmul_rn(oh[i], scale), w[i]), kernels::silu_f32(zh[i]));
}

}  // namespace

void delta_net_conv(const kernels::delta_net_shape& s, const float* w, float* state, const float* x, float* out,
                    int64_t rows, const dn_checkpoints& ck, void* stream) {
    if (s.d_conv < 2) fail("cuda: delta_net_conv: d_conv {}: expected >= 2", s.d_conv);
    const int64_t C = s.conv_channels();
    if (rows <= 0 || C <= 0) return;
    launch(conv_kernel, dim3(blocks_for(C, 128)), dim3(128), 0, static_cast<cudaStream_t>(stream), w, state, x, out, C,
           s.d_conv, rows, ck.slot0, ck.slot_stride, ck.first);
    check_launch("delta_net_conv");
}

void delta_net_rule(const kernels::delta_net_shape& s, const float* qkv, const dn_gates& gates, float* state,
                    float* out, int64_t rows, const dn_checkpoints& ck, void* stream) {
    if (s.head_k_dim < 1 || s.head_k_dim > k_rule_max_dk || s.head_v_dim < 1 || s.n_k_heads < 1 ||
        s.n_v_heads % s.n_k_heads != 0)
        fail("cuda: delta_net_rule: dk {} (expected 1..{}), dv {}, {} value heads over {} key heads", s.head_k_dim,
             k_rule_max_dk, s.head_v_dim, s.n_v_heads, s.n_k_heads);
    if (rows <= 0) return;
    // delta_net_rule_row's q scale, the same expression.
    const float qscale = 1.0f / std::sqrt(static_cast<float>(s.head_k_dim));
    const size_t smem = static_cast<size_t>(s.head_k_dim) * (k_rule_cols + 2) * sizeof(float);
    const dim3 grid(static_cast<unsigned>(s.n_v_heads), blocks_for(s.head_v_dim, k_rule_cols));
    launch(rule_kernel, grid, dim3(k_rule_cols), smem, static_cast<cudaStream_t>(stream), s, qkv, gates, state, out,
           rows, qscale, ck.slot0, ck.slot_stride, ck.first);
    check_launch("delta_net_rule");
}

void delta_net_gated_norm(const kernels::delta_net_shape& s, const float* o, const float* z, const float* w, float* out,
                          int64_t n_rows, void* stream) {
    const int64_t warps = n_rows * s.n_v_heads;
    if (warps <= 0) return;
    launch(gated_norm_kernel, dim3(blocks_for(warps * 32, 128)), dim3(128), 0, static_cast<cudaStream_t>(stream), o, z,
           w, out, n_rows, s.n_v_heads, s.head_v_dim, s.eps);
    check_launch("delta_net_gated_norm");
}

}  // namespace sluice::cuda
