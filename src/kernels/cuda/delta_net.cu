// Device Gated DeltaNet ops (delta_net.cuh), operation for operation the scalar reference of
// src/kernels/cpu/delta_net.cpp and the gate loop of models/hybrid_blocks.cpp.
#include "kernels/cuda/delta_net.cuh"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/act_quant_dev.cuh"

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
__device__ inline void l2_normalise_qk_warp(float* q, float* k, int n, float eps, float qscale) {
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

// Key head kh's q and k of one row of the conv output (row: [C]) into qs, ks [n] (shared memory),
// normalised by l2_normalise_qk_warp.
__device__ inline void stage_qk_warp(const float* row, const kernels::delta_net_shape& s, int kh, int n, float* qs, float* ks,
                                     float qscale) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float* q = row + static_cast<int64_t>(kh) * n;
    const float* k = row + s.key_dim() + static_cast<int64_t>(kh) * n;
    for (int i = lane; i < n; i += 32) {
        qs[i] = q[i];
        ks[i] = k[i];
    }
    __syncwarp();
    l2_normalise_qk_warp(qs, ks, n, s.eps, qscale);
}

// Row r's write strength b = sigmoid(beta logit) and decay exp(g), g = softplus(alpha logit +
// dt_bias) * a_coef, of value head h (hybrid_blocks.cpp's gate loop; rep value heads a key head).
__device__ inline void row_gates(const dn_gates& gates, int64_t r, int h, int64_t nv, int rep, float& b, float& decay) {
    float b_logit, a_logit;
    if (gates.alpha) {
        b_logit = gates.ba[r * nv + h];
        a_logit = gates.alpha[r * nv + h];
    } else {
        const int kq = h / rep, jr = h % rep;
        b_logit = gates.ba[r * 2 * nv + kq * 2 * rep + jr];
        a_logit = gates.ba[r * 2 * nv + kq * 2 * rep + rep + jr];
    }
    b = kernels::sigmoid_f32(b_logit);
    const float g = __fmul_rn(kernels::softplus_f32(__fadd_rn(a_logit, gates.dt_bias[h])), gates.a_coef[h]);
    decay = kernels::exp_f32(g);
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
        stage_qk_warp(qkv + r * C, s, kh, dk, qs, ks, qscale);
        float b, decay;
        row_gates(gates, r, h, nv, rep, b, decay);
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

// rule_kernel with the lane's state column in registers, for dk == DK (128: every Qwen hybrid
// shape; 64: the tests' small ones). The shared-memory form keeps one warp an SM (128 warps of
// the 35B / 80B shapes over 132 SMs) waiting a shared load's latency in every step of its i loops
// (a load, the product, a store, the broadcast load of k or q, then the add): with the column
// in registers and the loops unrolled, each step is the add of a dependent chain, k and q come by
// shuffles from registers loaded ahead, and the state's loads are issued before the wait for the
// conv kernel (the state was written by this layer's rule launch of an earlier forward, or by a
// copy before it: see launch.cuh's second rule). The same operations in the same order as
// rule_kernel and delta_net_rule_row: the same bits.
//   Warp w of a block takes value head blockIdx.x * hpb + w / wph and the state columns
// (blockIdx.y * wph + w % wph) * 32 + lane: one warp a block (hpb = wph = 1, grid (n_v, column
// groups)) for the rule alone, or (Norm) hpb whole heads a block, wph = ceil(dv / 32) warps each,
// so that the block also applies delta_net_gated_norm_row to its heads' outputs (gated_norm_kernel's
// expressions) and, with act, writes their int8 activation blocks (act_width wide: hpb * dv a
// whole number of them) for the output projection: two launches fewer than rule, gated norm and
// the projection's quantiser.
struct rule_norm_args {
    const float* z = nullptr;    // [rows, n_v * dv] the output gate (Norm)
    const float* w = nullptr;    // [dv] the norm's weights (Norm)
    std::byte* act = nullptr;    // [rows, act_row_bytes(n_v * dv)] or null
    int act_width = 0;           // 32 or 256 with act
    int hpb = 1;                 // value heads a block
};
// Warps a block at most (Norm): at 8, 255 registers a thread (254 used for dk 128, 16 bytes
// spilled, ptxas sm_90); at 16 the limit is 128 and the state column spilled 692 bytes.
constexpr int k_rule_norm_warps = 8;
template <int DK, bool Norm>
__global__ void __launch_bounds__(Norm ? 32 * k_rule_norm_warps : 32)
    rule_kernel_regs(kernels::delta_net_shape s, const float* qkv, dn_gates gates, float* state, float* out,
                     int64_t rows, float qscale, float* ck_slot0, int64_t ck_stride, int64_t ck_first, rule_norm_args nm) {
    constexpr int MW = Norm ? k_rule_norm_warps : 1;
    __shared__ __align__(16) float qs_all[MW][DK];   // [warps, dk] each warp's normalised q of the row
    __shared__ __align__(16) float ks_all[MW][DK];   // [warps, dk] ... and k
    __shared__ __align__(16) float so[Norm ? MW * 32 : 1];   // [hpb, dv] (Norm) the heads' outputs of the row
    __shared__ float s_scale[Norm ? MW : 1];                 // [hpb] their norms' scales
    const int dv = s.head_v_dim;
    const int wph = Norm ? (dv + 31) / 32 : 1;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int hb = warp / wph;   // the block's head
    const int h = static_cast<int>(blockIdx.x) * (Norm ? nm.hpb : 1) + hb;
    const int j = (static_cast<int>(blockIdx.y) * wph + warp % wph) * 32 + lane;
    const bool live = j < dv;
    float* qs = qs_all[warp];
    float* ks = ks_all[warp];
    const int64_t C = s.conv_channels(), nv = s.n_v_heads;
    const int kh = s.k_head_of(h);
    float* Sg = state + static_cast<int64_t>(h) * DK * dv + j;   // column j of [dk, dv]
    float S[DK];   // S[:, j]
#pragma unroll
    for (int i = 0; i < DK; ++i) S[i] = live ? Sg[static_cast<int64_t>(i) * dv] : 0.0f;
    wait_prior_grids();   // q, k, v and the gates: the conv kernel's and the projections' outputs
    const int rep = s.n_v_heads / s.n_k_heads;
    for (int64_t r = 0; r < rows; ++r) {
        stage_qk_warp(qkv + r * C, s, kh, DK, qs, ks, qscale);
        float b, decay;
        row_gates(gates, r, h, nv, rep, b, decay);
        const float vj = live ? qkv[r * C + 2 * s.key_dim() + static_cast<int64_t>(h) * dv + j] : 0.0f;
        if (live && ck_slot0 && r >= ck_first) {
            float* slot = ck_slot0 + (r - ck_first) * ck_stride + static_cast<int64_t>(h) * DK * dv + j;
#pragma unroll
            for (int i = 0; i < DK; ++i) slot[static_cast<int64_t>(i) * dv] = S[i];
        }
        // Lane l holds k[l + 32m] and q[l + 32m]: element i comes by a shuffle (loaded ahead of
        // the chain of adds, a register each, where whole float4 rows from shared memory took
        // 255 registers and spilled).
        float kr[DK / 32], qr[DK / 32];
#pragma unroll
        for (int m = 0; m < DK / 32; ++m) {
            kr[m] = ks[lane + 32 * m];
            qr[m] = qs[lane + 32 * m];
        }
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i) {
            S[i] = __fmul_rn(S[i], decay);
            acc = __fadd_rn(acc, __fmul_rn(S[i], __shfl_sync(k_full, kr[i / 32], i % 32)));
        }
        const float d = __fmul_rn(__fsub_rn(vj, acc), b);
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i) {
            S[i] = __fadd_rn(S[i], __fmul_rn(__shfl_sync(k_full, kr[i / 32], i % 32), d));
            o = __fadd_rn(o, __fmul_rn(S[i], __shfl_sync(k_full, qr[i / 32], i % 32)));
        }
        float* orow = out + r * nv * dv + static_cast<int64_t>(h) * dv;
        if constexpr (!Norm) {
            if (live) orow[j] = o;
            __syncwarp();   // qs/ks are rewritten by the next row
        } else {
            // The row's gated norm of each head (gated_norm_kernel's expressions), then its int8
            // blocks: the heads' outputs meet in shared memory.
            float* sh = so + hb * dv;   // this head's dv outputs
            if (live) sh[j] = o;
            __syncthreads();
            if (warp % wph == 0) {
                const float scale = rms_scale_warp(sh, dv, s.eps);
                if (lane == 0) s_scale[hb] = scale;
            }
            __syncthreads();
            float y = 0.0f;
            if (live) {
                const float zj = nm.z[r * nv * dv + static_cast<int64_t>(h) * dv + j];
                y = __fmul_rn(__fmul_rn(__fmul_rn(o, s_scale[hb]), nm.w[j]), kernels::silu_f32(zj));
                orow[j] = y;
            }
            if (nm.act) {
                __syncthreads();   // every head's norm has read its outputs
                if (live) sh[j] = y;
                __syncthreads();
                const int blocks = nm.hpb * dv / nm.act_width;   // activation blocks of the block's heads
                const int64_t b0 = static_cast<int64_t>(blockIdx.x) * blocks;
                const int64_t row_blocks = nv * dv / nm.act_width;
                for (int bb = warp; bb < blocks; bb += static_cast<int>(blockDim.x / 32)) {
                    if (nm.act_width == 256) {
                        quant::act_block256* dst = reinterpret_cast<quant::act_block256*>(nm.act) + r * row_blocks + b0 + bb;
                        quantize_block_warp<256>(so + bb * 256, &dst->d, dst->q, dst->bsums);
                    } else {
                        quant::act_block32* dst = reinterpret_cast<quant::act_block32*>(nm.act) + r * row_blocks + b0 + bb;
                        quantize_block_warp<32>(so + bb * 32, &dst->d, dst->q, nullptr);
                    }
                }
            }
            __syncthreads();   // so, qs and ks are rewritten by the next row
        }
    }
    if (live) {
#pragma unroll
        for (int i = 0; i < DK; ++i) Sg[static_cast<int64_t>(i) * dv] = S[i];
    }
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
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (s.head_k_dim == 128)
        launch(rule_kernel_regs<128, false>, grid, dim3(k_rule_cols), 0, st, s, qkv, gates, state, out, rows, qscale,
               ck.slot0, ck.slot_stride, ck.first, rule_norm_args{});
    else if (s.head_k_dim == 64)
        launch(rule_kernel_regs<64, false>, grid, dim3(k_rule_cols), 0, st, s, qkv, gates, state, out, rows, qscale,
               ck.slot0, ck.slot_stride, ck.first, rule_norm_args{});
    else
        launch(rule_kernel, grid, dim3(k_rule_cols), smem, st, s, qkv, gates, state, out, rows, qscale, ck.slot0,
               ck.slot_stride, ck.first);
    check_launch("delta_net_rule");
}

bool delta_net_rule_norm(const kernels::delta_net_shape& s, const float* qkv, const dn_gates& gates, float* state,
                         const float* z, const float* w, float* out, int64_t rows, const dn_checkpoints& ck,
                         quant::act_format f, std::byte* act, void* stream) {
    const int wph = (s.head_v_dim + 31) / 32;
    const bool fits = (s.head_k_dim == 128 || s.head_k_dim == 64) && s.head_v_dim >= 1 && wph <= k_rule_norm_warps &&
                      s.n_k_heads >= 1 && s.n_v_heads % s.n_k_heads == 0;
    if (!fits) {   // the rule kernel's shared-memory form, then the norm's launch
        delta_net_rule(s, qkv, gates, state, out, rows, ck, stream);
        delta_net_gated_norm(s, out, z, w, out, rows, stream);
        return false;
    }
    if (rows <= 0) return false;
    rule_norm_args nm;
    nm.z = z;
    nm.w = w;
    // Heads a block: the fewest whose outputs are whole activation blocks (with act), else one.
    const int width = f == quant::act_format::q8_256 ? 256 : f == quant::act_format::q8_32 ? 32 : 0;
    if (act && width > 0)
        for (int hpb = 1; hpb * wph <= k_rule_norm_warps; ++hpb)
            if (s.n_v_heads % hpb == 0 && (hpb * s.head_v_dim) % width == 0) {
                nm.hpb = hpb;
                nm.act = act;
                nm.act_width = width;
                break;
            }
    const float qscale = 1.0f / std::sqrt(static_cast<float>(s.head_k_dim));
    const dim3 grid(static_cast<unsigned>(s.n_v_heads / nm.hpb));
    const dim3 block(static_cast<unsigned>(32 * wph * nm.hpb));
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (s.head_k_dim == 128)
        launch(rule_kernel_regs<128, true>, grid, block, 0, st, s, qkv, gates, state, out, rows, qscale, ck.slot0,
               ck.slot_stride, ck.first, nm);
    else
        launch(rule_kernel_regs<64, true>, grid, block, 0, st, s, qkv, gates, state, out, rows, qscale, ck.slot0,
               ck.slot_stride, ck.first, nm);
    check_launch("delta_net_rule_norm");
    return nm.act != nullptr;
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
