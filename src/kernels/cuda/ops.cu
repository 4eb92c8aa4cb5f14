// Device forward-pass ops, operation for operation the CPU ops of src/kernels/cpu (norm.cpp,
// rope.cpp, attention.cpp), so that their bits match: reductions in the CPU's order (the
// 16-lane fmaf rule of dot_f32_lanes, serial sums where the CPU sums serially), explicit
// __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn, exp and SiLU from kernels/math.h.
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/router.cuh"
#include "kernels/math.h"

#include <cuda_runtime.h>

namespace sluice::cuda {
namespace {

constexpr unsigned k_full = 0xffffffffu;

void check_launch(const char* what) {
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: {}: launch failed: {}", what, cudaGetErrorString(e));
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// kernels::dot_f32_lanes(a, b, n) inside one warp: lanes 0..15 hold the 16 accumulators (lane l
// takes i % 16 == l in index order), then the pairwise fold 8, 4, 2, 1. Lanes 16..31 mirror
// lanes 0..15 (they compute the same values), so the result is valid in every lane after the
// final broadcast.
__device__ inline float warp_dot_lanes(const float* a, const float* b, int64_t n) {
    const int l = static_cast<int>(threadIdx.x & 15);
    float acc = 0.0f;
    for (int64_t i = l; i < n; i += 16) acc = __fmaf_rn(a[i], b[i], acc);
    for (int s = 8; s >= 1; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(k_full, acc, s, 16));
    return __shfl_sync(k_full, acc, 0);
}

// One warp per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps) {
    const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (r >= n_rows) return;
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float* xr = x + r * n;
    float* o = out + r * n;
    const float sum = warp_dot_lanes(xr, xr, n);
    const float mean = __fdiv_rn(sum, static_cast<float>(n));
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    __syncwarp();
    for (int64_t i = lane; i < n; i += 32) o[i] = w ? __fmul_rn(__fmul_rn(xr[i], scale), w[i]) : __fmul_rn(xr[i], scale);
}

// One thread per rotated pair.
__global__ void rope_kernel(const float* cs_table, int n_rot, bool neox, int32_t pos0, const int32_t* pos_dev, float* x,
                            int64_t n_rows, int n_head, int head_dim) {
    if (pos_dev) pos0 = *pos_dev;
    const int half = n_rot / 2;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_head * half) return;
    const int i = static_cast<int>(t % half);
    const int64_t rh = t / half;   // row * n_head + head
    const int64_t r = rh / n_head;
    const float* cs = cs_table + (pos0 + r) * n_rot;
    float* xh = x + rh * head_dim;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = xh[i0], x1 = xh[i1];
    xh[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    xh[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

__global__ void kv_store_kernel(const float* k, const float* v, float* kc, float* vc, int32_t pos0, const int32_t* pos_dev,
                                int64_t total, int64_t row_floats) {
    if (pos_dev) pos0 = *pos_dev;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t dst = static_cast<int64_t>(pos0) * row_floats + i;
    kc[dst] = k[i];
    vc[dst] = v[i];
}

constexpr int k_attn_warps = 4;
constexpr int k_dims_per_lane = kernels::k_max_head_dim / 32;   // 16

// One warp per (row, head). Lane j of a chunk computes the score of position c0 + j (the whole
// 16-lane dot on its own, in the CPU's order); lanes then own output dimensions d = lane + 32u.
__global__ void __launch_bounds__(k_attn_warps * 32)
    attention_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                     const int32_t* pos_dev, int64_t n_rows, float* out) {
    if (pos_dev) pos0 = *pos_dev;
    __shared__ float qs[k_attn_warps][kernels::k_max_head_dim];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int64_t t = static_cast<int64_t>(blockIdx.x) * k_attn_warps + warp;
    if (t >= n_rows * p.n_head) return;
    const int hd = p.head_dim;
    const int64_t r = t / p.n_head;
    const int h = static_cast<int>(t % p.n_head);
    const int kvh = h / (p.n_head / p.n_kv_head);
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    const float* qh = q + (r * p.n_head + h) * hd;
    for (int d = lane; d < hd; d += 32) qs[warp][d] = qh[d];
    __syncwarp();
    const int64_t n_kv = pos0 + r + 1;
    float o[k_dims_per_lane], oc[k_dims_per_lane];
    float m = 0.0f, l = 0.0f;
    for (int64_t c0 = 0; c0 < n_kv; c0 += kernels::k_attn_chunk) {
        const int n = static_cast<int>(n_kv - c0 < kernels::k_attn_chunk ? n_kv - c0 : kernels::k_attn_chunk);
        float score = 0.0f;
        if (lane < n) {
            const float* kj = kc + (c0 + lane) * kv_stride + static_cast<int64_t>(kvh) * hd;
            float acc[16];
#pragma unroll
            for (int u = 0; u < 16; ++u) acc[u] = 0.0f;
            for (int i0 = 0; i0 < hd; i0 += 16) {
#pragma unroll
                for (int u = 0; u < 16; ++u)
                    if (i0 + u < hd) acc[u] = __fmaf_rn(qs[warp][i0 + u], kj[i0 + u], acc[u]);
            }
#pragma unroll
            for (int s = 8; s >= 1; s >>= 1)
#pragma unroll
                for (int u = 0; u < s; ++u) acc[u] = __fadd_rn(acc[u], acc[u + s]);
            score = __fmul_rn(acc[0], p.scale);
        }
        // The chunk's max, in position order (the CPU's j == 0 || s > mc rule).
        float mc = 0.0f;
        for (int j = 0; j < n; ++j) {
            const float sj = __shfl_sync(k_full, score, j);
            mc = (j == 0 || sj > mc) ? sj : mc;
        }
        const float e = lane < n ? kernels::exp_f32(__fsub_rn(score, mc)) : 0.0f;
        float lc = 0.0f;
#pragma unroll
        for (int u = 0; u < k_dims_per_lane; ++u) oc[u] = 0.0f;
        for (int j = 0; j < n; ++j) {
            const float ej = __shfl_sync(k_full, e, j);
            lc = __fadd_rn(lc, ej);
            const float* vj = vc + (c0 + j) * kv_stride + static_cast<int64_t>(kvh) * hd;
#pragma unroll
            for (int u = 0; u < k_dims_per_lane; ++u) {
                const int d = lane + 32 * u;
                if (d < hd) oc[u] = __fadd_rn(oc[u], __fmul_rn(ej, vj[d]));
            }
        }
        if (c0 == 0) {
            m = mc;
            l = lc;
#pragma unroll
            for (int u = 0; u < k_dims_per_lane; ++u) o[u] = oc[u];
        } else {
            const float mn = mc > m ? mc : m;
            const float a = kernels::exp_f32(__fsub_rn(m, mn)), bc = kernels::exp_f32(__fsub_rn(mc, mn));
            l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, bc));
#pragma unroll
            for (int u = 0; u < k_dims_per_lane; ++u) o[u] = __fadd_rn(__fmul_rn(o[u], a), __fmul_rn(oc[u], bc));
            m = mn;
        }
    }
    float* orow = out + (r * p.n_head + h) * hd;
#pragma unroll
    for (int u = 0; u < k_dims_per_lane; ++u) {
        const int d = lane + 32 * u;
        if (d < hd) orow[d] = __fdiv_rn(o[u], l);
    }
}

// One thread per row: softmax and the repeated-argmax selection of kernels::route_topk, serially,
// as the CPU does them (route_topk_row). The row, its ids and weights are staged in shared
// memory: the selection reads each value n_used times and the ids on every step, and from
// global memory that serial chain of L2 round trips cost about 1 ms per layer for 128 experts
// top-8 on the H200 (55 ms per decode token of a 48-layer model, 2026-11-29). Rows are padded
// to an odd stride so the threads of a warp hit different banks.
__global__ void route_topk_smem_kernel(kernels::router_params p, float* logits, int64_t n_rows, int32_t* ids,
                                       float* weights, int stride) {
    extern __shared__ float smem[];
    const int t = static_cast<int>(threadIdx.x);
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + t;
    if (r >= n_rows) return;
    float* sx = smem + static_cast<int64_t>(t) * stride;              // [n_expert]
    int32_t* sid = reinterpret_cast<int32_t*>(sx + p.n_expert);        // [n_used]
    float* swt = sx + p.n_expert + p.n_used;                           // [n_used]
    float* x = logits + r * p.n_expert;
    for (int i = 0; i < p.n_expert; ++i) sx[i] = x[i];
    route_topk_row(p.n_expert, p.n_used, p.renormalize, sx, sid, swt);
    for (int i = 0; i < p.n_expert; ++i) x[i] = sx[i];
    for (int k = 0; k < p.n_used; ++k) {
        ids[r * p.n_used + k] = sid[k];
        weights[r * p.n_used + k] = swt[k];
    }
}

// The same in global memory, for routers too wide for shared memory.
__global__ void route_topk_kernel(kernels::router_params p, float* logits, int64_t n_rows, int32_t* ids, float* weights) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    route_topk_row(p.n_expert, p.n_used, p.renormalize, logits + r * p.n_expert, ids + r * p.n_used,
                   weights + r * p.n_used);
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmul_rn(kernels::silu_f32(gate[i]), up[i]);
}

__global__ void add_kernel(float* y, const float* b, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fadd_rn(y[i], b[i]);
}

__global__ void add_rows_kernel(float* y, const float* b, int64_t total, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) y[i] = __fadd_rn(y[i], b[i % n]);
}

__global__ void moe_combine_kernel(const float* ey, const float* w, int K, int64_t n_rows, int64_t n, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n) return;
    const int64_t r = i / n, c = i % n;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = __fadd_rn(acc, __fmul_rn(w[r * K + k], ey[(r * K + k) * n + c]));
    out[i] = acc;
}

__global__ void add_gated_kernel(float* out, const float* sh, const float* gate, int64_t n_rows, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n) return;
    const float g = kernels::sigmoid_f32(gate[i / n]);
    out[i] = __fadd_rn(out[i], __fmul_rn(g, sh[i]));
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps, void* stream) {
    if (n_rows <= 0) return;
    rmsnorm_kernel<<<blocks_for(n_rows * 32, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(x, w, out, n_rows, n, eps);
    check_launch("rmsnorm");
}

void rope(const kernels::rope_params& p, const float* cs_table, int32_t pos0, float* x, int64_t n_rows, int n_head,
          int head_dim, void* stream, const int32_t* pos_dev) {
    const int64_t total = n_rows * n_head * (p.n_rot / 2);
    if (total <= 0) return;
    rope_kernel<<<blocks_for(total, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        cs_table, p.n_rot, p.mode == kernels::rope_mode::neox, pos0, pos_dev, x, n_rows, n_head, head_dim);
    check_launch("rope");
}

void kv_store(const float* k, const float* v, float* kc, float* vc, int32_t pos0, int64_t n_rows, int64_t row_floats,
              void* stream, const int32_t* pos_dev) {
    const int64_t total = n_rows * row_floats;
    if (total <= 0) return;
    kv_store_kernel<<<blocks_for(total, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(k, v, kc, vc, pos0, pos_dev,
                                                                                           total, row_floats);
    check_launch("kv_store");
}

void attention(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
               int64_t n_rows, float* out, void* stream, const int32_t* pos_dev) {
    if (p.head_dim < 1 || p.head_dim > kernels::k_max_head_dim || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0)
        fail("cuda: attention: head_dim {} (1..{}), n_head {}, n_kv_head {}", p.head_dim, kernels::k_max_head_dim,
             p.n_head, p.n_kv_head);
    const int64_t total = n_rows * p.n_head;
    if (total <= 0) return;
    attention_kernel<<<blocks_for(total, k_attn_warps), k_attn_warps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
        p, q, kc, vc, pos0, pos_dev, n_rows, out);
    check_launch("attention");
}

void route_topk(const kernels::router_params& p, float* logits, int64_t n_rows, int32_t* ids, float* weights,
                void* stream) {
    if (n_rows <= 0) return;
    if (p.n_expert < 1 || p.n_used < 1 || p.n_used > p.n_expert)
        fail("cuda: route_topk: n_used {} of n_expert {}", p.n_used, p.n_expert);
    auto s = static_cast<cudaStream_t>(stream);
    // Per thread: the row, its ids and weights, padded to an odd number of words.
    const int stride = (p.n_expert + 2 * p.n_used) | 1;
    const int per_block_max = 40 * 1024 / (4 * stride);   // within the default 48 KB
    if (per_block_max >= 1) {
        const int tpb = per_block_max < 64 ? per_block_max : 64;
        route_topk_smem_kernel<<<blocks_for(n_rows, tpb), tpb, static_cast<size_t>(tpb) * stride * 4, s>>>(
            p, logits, n_rows, ids, weights, stride);
    } else {
        route_topk_kernel<<<blocks_for(n_rows, 64), 64, 0, s>>>(p, logits, n_rows, ids, weights);
    }
    check_launch("route_topk");
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
    if (n <= 0) return;
    swiglu_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, out, n);
    check_launch("swiglu");
}

void add(float* y, const float* b, int64_t n, void* stream) {
    if (n <= 0) return;
    add_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, b, n);
    check_launch("add");
}

void add_rows(float* y, const float* b, int64_t n_rows, int64_t n, void* stream) {
    if (n_rows * n <= 0) return;
    add_rows_kernel<<<blocks_for(n_rows * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, b, n_rows * n, n);
    check_launch("add_rows");
}

void moe_combine(const float* ey, const float* w, int K, int64_t n_rows, int64_t n, float* out, void* stream) {
    if (n_rows * n <= 0) return;
    moe_combine_kernel<<<blocks_for(n_rows * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(ey, w, K, n_rows, n, out);
    check_launch("moe_combine");
}

void add_gated(float* out, const float* sh, const float* gate, int64_t n_rows, int64_t n, void* stream) {
    if (n_rows * n <= 0) return;
    add_gated_kernel<<<blocks_for(n_rows * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, sh, gate, n_rows, n);
    check_launch("add_gated");
}

}  // namespace sluice::cuda
