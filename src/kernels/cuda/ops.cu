// Device forward-pass ops, operation for operation the CPU ops of src/kernels/cpu (norm.cpp,
// rope.cpp, attention.cpp), so that their bits match: reductions in the CPU's order (the
// 16-lane fmaf rule of dot_f32_lanes, serial sums where the CPU sums serially), explicit
// __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn, exp and SiLU from kernels/math.h.
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/act_quant_dev.cuh"
#include "kernels/cuda/route_warp.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/math.h"

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::cuda {
namespace {

constexpr unsigned k_full = 0xffffffffu;

void check_launch(const char* what) {
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: {}: launch failed: {}", what, cudaGetErrorString(e));
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// One warp per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (r >= n_rows) return;
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float* xr = x + r * n;
    float* o = out + r * n;
    const float scale = rms_scale_warp(xr, n, eps);
    __syncwarp();
    for (int64_t i = lane; i < n; i += 32) o[i] = w ? __fmul_rn(__fmul_rn(xr[i], scale), w[i]) : __fmul_rn(xr[i], scale);
}

// The norm and the activation blocks of one row xr [n] (rmsnorm_quant_kernel's second half):
// warp 0 takes the sum of squares (rms_scale_warp), then each warp takes blocks of the row, scales
// its values (rmsnorm_kernel's expression) into registers, writes them to o and quantises them
// from the registers (quantize_block_values) into act_row. w_first: the norm weights of the warp's
// first block (loaded before the kernel's wait). Every thread of the block calls it.
template <int W, class Block>
__device__ inline void norm_quant_row(const float* xr, const float* w, const float (&w_first)[W / 32], float* o,
                                      int64_t n, float eps, Block* act_row) {
    constexpr int per_lane = W / 32;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int64_t per_row = n / W;
    __shared__ float s_scale;
    if (threadIdx.x < 32) {
        const float scale = rms_scale_warp(xr, n, eps);
        if (threadIdx.x == 0) s_scale = scale;
    }
    __syncthreads();   // x is read before out (which may be x) is written: each warp below reads
                       // and writes only its own blocks' elements
    trace_mark(2);   // the scale
    const float scale = s_scale;
    for (int64_t b = warp; b < per_row; b += blockDim.x / 32) {
        float v[per_lane];
#pragma unroll
        for (int i = 0; i < per_lane; ++i) {
            const int64_t e = b * W + lane * per_lane + i;
            v[i] = w ? __fmul_rn(__fmul_rn(xr[e], scale), b == warp ? w_first[i] : w[e]) : __fmul_rn(xr[e], scale);
        }
#pragma unroll
        for (int i = 0; i < per_lane; ++i) o[b * W + lane * per_lane + i] = v[i];
        Block* dst = act_row + b;
        int16_t* bsums = nullptr;
        if constexpr (W == 256) bsums = dst->bsums;
        quantize_block_values<W>(v, &dst->d, dst->q, bsums);
    }
    trace_mark(3);   // thread 0's blocks quantised
}

// One block (8 warps) per row: the row staged in shared memory (rows up to 8192 floats; longer
// ones are read from global memory), warp 0 takes the sum of squares (warp_dot_lanes' chains,
// unrolled: the same terms in the same order), then each warp takes blocks of the row: scales
// its values (rmsnorm_kernel's expression) into registers, writes them to `out` and quantises
// them from the registers (quantize_block_values, quantize_rows_kernel's code). Measured on the
// H200 (kernel_bench, n 2048, q8_256): 4.9 us a launch; 6.9 us with 4 warps re-reading `out`
// through global memory to quantise it.
// With res.ey set (staged rows only; x not aliasing out): the row staged is x's row plus the MoE
// block's sum (moe_residual, ops.cuh), which is also written back to x; launched with 1024
// threads then (k_residual_threads), so that each thread's expert rows' loads are few and all in
// flight at once: with 256 threads, one thread's 8 elements of 8 experts' rows one after another,
// the launch took 9.7 us in a decode step against 4.9 for the norm alone (bench/gpu/step_trace on
// the H200, the 30B shape, session 23).
constexpr int k_residual_threads = 1024;
template <int W, class Block>
__global__ void __launch_bounds__(k_residual_threads)
    rmsnorm_quant_kernel(const float* x, const float* w, float* out, int64_t n, float eps, Block* act, bool staged,
                         moe_residual res) {
    // The norm weights of the warp's first block, loaded before the wait: no kernel writes
    // weights, so with PDL their memory latency passes while the kernel before runs (the model
    // streams ~1.9 GB a token through the 50 MB L2, so they come from HBM).
    constexpr int per_lane = W / 32;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int64_t per_row = n / W;
    float w_first[per_lane];
    if (w && warp < per_row)
#pragma unroll
        for (int i = 0; i < per_lane; ++i) w_first[i] = __ldg(w + warp * W + lane * per_lane + i);
    wait_prior_grids();   // before the first read of x: see launch.cuh
    extern __shared__ float4 s_x4[];   // staged: the row x[r, :] (n floats), else unused
    const int64_t r = blockIdx.x;
    const float* xr = x + r * n;
    float* o = out + r * n;
    if (staged) {
        float* xs = reinterpret_cast<float*>(s_x4);
        if (res.ey) {
            // moe_combine_kernel's sum, add_gated's term, then the residual add, element by element.
            const float* wr = res.weights + r * res.K;
            const float* er = res.ey + r * res.K * n;
            const float g = res.sh ? kernels::sigmoid_f32(res.sh_gate[r]) : 0.0f;
            float* xw = const_cast<float*>(xr);   // the residual row, updated in place
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
                // The experts' values 8 at a time, loaded before the chain of adds uses them.
                float acc = 0.0f;
                for (int k0 = 0; k0 < res.K; k0 += 8) {
                    float e[8], wk[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        e[j] = k0 + j < res.K ? er[(k0 + j) * n + i] : 0.0f;
                        wk[j] = k0 + j < res.K ? wr[k0 + j] : 0.0f;
                    }
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        if (k0 + j < res.K) acc = __fadd_rn(acc, __fmul_rn(wk[j], e[j]));
                }
                if (res.sh) acc = __fadd_rn(acc, __fmul_rn(g, res.sh[r * n + i]));
                const float v = __fadd_rn(xr[i], acc);
                xs[i] = v;
                xw[i] = v;
            }
        } else if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0 && n % 4 == 0) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll 4
            for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) s_x4[i] = x4[i];
        } else {
#pragma unroll 4
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xs[i] = xr[i];
        }
        __syncthreads();
        xr = xs;
    }
    trace_mark(1);   // the row staged (and combined)
    norm_quant_row<W>(xr, w, w_first, o, n, eps, act + r * per_row);
}

// One row's MoE combine over many blocks, then its norm (moe_residual with arrivals): thread i of
// the grid takes element i, moe_combine_kernel's sum, add_gated's term and the residual add (the
// staged path's expression above), written back to x; the last block to arrive (an
// acquire-release add on res.arrivals, which it resets) stages the new x through L2 and takes its
// norm and activation blocks (norm_quant_row). Why it was tried: in one block of 1,024 threads
// the staging of the experts' rows (8 x 2,048 floats for the 30B shape) ended 3.9 us into the
// launch's 7.8 (bench/gpu/step_trace's marks, H100, session 38). Measured: no gain (the launch
// 8.06 -> 8.02 us a layer, the last block holding the row 4.5 us after the wait), so the delay is
// not one SM's loads; what these reads likely wait behind is the next launch's early staging of
// q, k and v's weights (6.2 MB, launched as soon as these blocks pass their wait). Kept as the
// base of that experiment (the trigger moved after the combine); the bits are the one-block
// kernel's (ops_parity).
constexpr int k_combine_threads = 256;
template <int W, class Block>
__global__ void __launch_bounds__(k_combine_threads)
    combine_norm_quant_kernel(float* x, const float* w, float* out, int64_t n, float eps, Block* act, moe_residual res) {
    constexpr int per_lane = W / 32;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    float w_first[per_lane];   // as rmsnorm_quant_kernel: used by the last block
    if (w && warp < n / W)
#pragma unroll
        for (int i = 0; i < per_lane; ++i) w_first[i] = __ldg(w + warp * W + lane * per_lane + i);
    wait_prior_grids();   // the experts' rows: written by the launch before
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (int k0 = 0; k0 < res.K; k0 += 8) {
            float e[8], wk[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                e[j] = k0 + j < res.K ? res.ey[(k0 + j) * n + i] : 0.0f;
                wk[j] = k0 + j < res.K ? res.weights[k0 + j] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (k0 + j < res.K) acc = __fadd_rn(acc, __fmul_rn(wk[j], e[j]));
        }
        if (res.sh) acc = __fadd_rn(acc, __fmul_rn(kernels::sigmoid_f32(res.sh_gate[0]), res.sh[i]));
        x[i] = __fadd_rn(x[i], acc);
    }
    // The block's elements, written before the barrier, are released by thread 0's
    // acquire-release add (cumulative through the barrier); the last block acquires the others'.
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> arrived(*res.arrivals);
        last = arrived.fetch_add(1u, ::cuda::memory_order_acq_rel) == gridDim.x - 1;
        if (last) arrived.store(0u, ::cuda::memory_order_relaxed);   // every block has arrived: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    extern __shared__ float4 s_x4[];   // the new row x (n floats)
    float* xs = reinterpret_cast<float*>(s_x4);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) xs[k] = __ldcg(x + k);
    __syncthreads();
    trace_mark(1);   // the last block has the row
    norm_quant_row<W>(xs, w, w_first, out, n, eps, act);
}

// One warp per activation block of swiglu(gate, up).
template <int W, class Block>
__global__ void swiglu_quant_kernel(const float* gate, const float* up, int64_t n_blocks_total, Block* act) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (b >= n_blocks_total) return;   // whole warps leave together
    const int lane = static_cast<int>(threadIdx.x & 31);
    constexpr int per_lane = W / 32;
    float v[per_lane];
#pragma unroll
    for (int i = 0; i < per_lane; ++i) {
        const int64_t k = b * W + lane * per_lane + i;   // rows are whole blocks: the flat index
        v[i] = __fmul_rn(kernels::silu_f32(gate[k]), up[k]);
    }
    Block* dst = act + b;
    int16_t* bsums = nullptr;
    if constexpr (W == 256) bsums = dst->bsums;
    quantize_block_values<W>(v, &dst->d, dst->q, bsums);
}

// One thread per rotated pair.
__global__ void rope_kernel(const float* cs_table, int n_rot, bool neox, int32_t pos0, const int32_t* pos_dev, float* x,
                            int64_t n_rows, int n_head, int head_dim) {
    wait_prior_grids();   // first: see launch.cuh
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

// One warp per (row, slot): slots [0, n_head) are q heads, [n_head, n_head + n_kv_head) k heads
// (both: optional per-head RMSNorm, then RoPE, k also stored), the rest v heads (stored).
// M > 0 (neox RoPE over the whole head, head_dim = 32 M): lane l holds the head's elements
// l + 32 u (u < M) in registers, so each RoPE pair (i, i + 16 M) is one lane's slots u and
// u + M / 2; the norm weights and the position's cos / sin are loaded before the wait (weights
// and the table are written by no kernel, the position before the step's first launch), and
// after it the head is read once and written once. M = 0: any shape, through memory.
// Why: the launch took 4.6 us a layer of the 30B decode step for ~1 us of work: its chain of
// dependent loads (the position, then its table row; the head, the norm, the head read back)
// came after the wait (bench/gpu/step_trace, H100, session 37).
template <int M>
__global__ void qk_norm_rope_store_kernel(const float* cs_table, int n_rot, bool neox, int32_t pos0, const int32_t* pos_dev,
                                          float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                          float eps, int64_t n_rows, int n_head, int n_kv_head, int head_dim, float* kc,
                                          float* vc) {
    if (pos_dev) pos0 = *pos_dev;   // settled before the step's first launch
    const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int slots = n_head + 2 * n_kv_head;
    const bool live = t < n_rows * slots;   // whole warps
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t r = live ? t / slots : 0;
    const int sl = static_cast<int>(t % slots);
    const bool is_v = sl >= n_head + n_kv_head, is_q = sl < n_head;
    const float* nw = is_q ? q_norm : k_norm;
    float nwr[M > 0 ? M : 1], cr[M > 0 ? M / 2 : 1], sr[M > 0 ? M / 2 : 1];
    if constexpr (M > 0) {
        if (live && !is_v) {
            const float* cs = cs_table + (pos0 + r) * n_rot;
#pragma unroll
            for (int u = 0; u < M; ++u) nwr[u] = nw ? __ldg(nw + lane + 32 * u) : 1.0f;
#pragma unroll
            for (int u = 0; u < M / 2; ++u) {
                cr[u] = __ldg(cs + 2 * (lane + 32 * u));
                sr[u] = __ldg(cs + 2 * (lane + 32 * u) + 1);
            }
        }
    }
    wait_prior_grids();   // q, k and v: written by the launches before
    if (!live) return;
    const int64_t kv_row = static_cast<int64_t>(n_kv_head) * head_dim;
    const int64_t cache_at = (static_cast<int64_t>(pos0) + r) * kv_row;
    if (is_v) {   // v: stored as it is
        const int h = sl - n_head - n_kv_head;
        const float* src = v + r * kv_row + static_cast<int64_t>(h) * head_dim;
        float* dst = vc + cache_at + static_cast<int64_t>(h) * head_dim;
        for (int d = lane; d < head_dim; d += 32) dst[d] = src[d];
        return;
    }
    const int h = is_q ? sl : sl - n_head;
    float* xh = is_q ? q + (r * n_head + h) * head_dim : k + r * kv_row + static_cast<int64_t>(h) * head_dim;
    if constexpr (M > 0) {
        float x[M];
#pragma unroll
        for (int u = 0; u < M; ++u) x[u] = xh[lane + 32 * u];
        if (nw) {
            // warp_dot_lanes(xh, xh, head_dim): chain c < 16 takes c, c + 16, c + 32, ... in order,
            // i.e. lane c's slot 0, lane c + 16's slot 0, lane c's slot 1, ...; then the fold.
            float hi[M];
#pragma unroll
            for (int u = 0; u < M; ++u) hi[u] = __shfl_down_sync(k_full, x[u], 16);
            float acc = 0.0f;
#pragma unroll
            for (int u = 0; u < M; ++u) {
                acc = __fmaf_rn(x[u], x[u], acc);
                acc = __fmaf_rn(hi[u], hi[u], acc);
            }
            for (int s = 8; s >= 1; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(k_full, acc, s, 16));
            const float sum = __shfl_sync(k_full, acc, 0);
            const float mean = __fdiv_rn(sum, static_cast<float>(head_dim));
            const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
#pragma unroll
            for (int u = 0; u < M; ++u) x[u] = __fmul_rn(__fmul_rn(x[u], scale), nwr[u]);
        }
        // rope_kernel's neox pairs (i, i + head_dim / 2), i = lane + 32 u.
#pragma unroll
        for (int u = 0; u < M / 2; ++u) {
            const float x0 = x[u], x1 = x[u + M / 2];
            x[u] = __fsub_rn(__fmul_rn(x0, cr[u]), __fmul_rn(x1, sr[u]));
            x[u + M / 2] = __fadd_rn(__fmul_rn(x0, sr[u]), __fmul_rn(x1, cr[u]));
        }
#pragma unroll
        for (int u = 0; u < M; ++u) xh[lane + 32 * u] = x[u];
        if (!is_q) {
            float* dst = kc + cache_at + static_cast<int64_t>(h) * head_dim;
#pragma unroll
            for (int u = 0; u < M; ++u) dst[lane + 32 * u] = x[u];
        }
        return;
    }
    if (nw) {   // rmsnorm_kernel over one head
        const float sum = warp_dot_lanes(xh, xh, head_dim);
        const float mean = __fdiv_rn(sum, static_cast<float>(head_dim));
        const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
        __syncwarp();
        for (int d = lane; d < head_dim; d += 32) xh[d] = __fmul_rn(__fmul_rn(xh[d], scale), nw[d]);
        __syncwarp();
    }
    // rope_kernel's pairs.
    const int half = n_rot / 2;
    const float* cs = cs_table + (pos0 + r) * n_rot;
    for (int i = lane; i < half; i += 32) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = xh[i0], x1 = xh[i1];
        xh[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        xh[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
    if (!is_q) {
        __syncwarp();
        float* dst = kc + cache_at + static_cast<int64_t>(h) * head_dim;
        for (int d = lane; d < head_dim; d += 32) dst[d] = xh[d];
    }
}

__global__ void kv_store_kernel(const float* k, const float* v, float* kc, float* vc, int32_t pos0, const int32_t* pos_dev,
                                int64_t total, int64_t row_floats) {
    wait_prior_grids();   // first: see launch.cuh
    if (pos_dev) pos0 = *pos_dev;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t dst = static_cast<int64_t>(pos0) * row_floats + i;
    kc[dst] = k[i];
    vc[dst] = v[i];
}

constexpr int k_route_warps = 4;

template <int PL>
__global__ void __launch_bounds__(k_route_warps * 32)
    route_topk_warp_kernel(kernels::router_params p, float* logits, int64_t n_rows, int32_t* ids, float* weights) {
    wait_prior_grids();   // first: see launch.cuh
    __shared__ float s_exp[k_route_warps][32 * k_route_per_lane];
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t r = static_cast<int64_t>(blockIdx.x) * k_route_warps + threadIdx.x / 32;
    if (r >= n_rows) return;   // whole warps leave together
    route_topk_warp_pl<PL>(p, logits + r * p.n_expert, ids + r * p.n_used, weights + r * p.n_used, lane,
                           s_exp[threadIdx.x / 32]);
}

// One thread per row: softmax and the repeated-argmax selection of kernels::route_topk, serially,
// as the CPU does them (route_topk_row). The row, its ids and weights are staged in shared
// memory: the selection reads each value n_used times and the ids on every step, and from
// global memory that serial chain of L2 round trips cost about 1 ms per layer for 128 experts
// top-8 on the H200 (55 ms per decode token of a 48-layer model, 2026-11-29). Rows are padded
// to an odd stride so the threads of a warp hit different banks.
__global__ void route_topk_smem_kernel(kernels::router_params p, float* logits, int64_t n_rows, int32_t* ids,
                                       float* weights, int stride) {
    wait_prior_grids();   // first: see launch.cuh
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
    wait_prior_grids();   // first: see launch.cuh
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    route_topk_row(p.n_expert, p.n_used, p.renormalize, logits + r * p.n_expert, ids + r * p.n_used,
                   weights + r * p.n_used);
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmul_rn(kernels::silu_f32(gate[i]), up[i]);
}

__global__ void add_kernel(float* y, const float* b, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fadd_rn(y[i], b[i]);
}

__global__ void add_rows_kernel(float* y, const float* b, int64_t total, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) y[i] = __fadd_rn(y[i], b[i % n]);
}

__global__ void moe_combine_kernel(const float* ey, const float* w, int K, int64_t n_rows, int64_t n, float* out,
                                   bool accumulate) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n) return;
    const int64_t r = i / n, c = i % n;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = __fadd_rn(acc, __fmul_rn(w[r * K + k], ey[(r * K + k) * n + c]));
    out[i] = accumulate ? __fadd_rn(out[i], acc) : acc;
}

__global__ void add_gated_kernel(float* out, const float* sh, const float* gate, int64_t n_rows, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_rows * n) return;
    const float g = kernels::sigmoid_f32(gate[i / n]);
    out[i] = __fadd_rn(out[i], __fmul_rn(g, sh[i]));
}

__global__ void gated_query_kernel(const float* qg, float* q, int64_t total, int head_dim) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t head = i / head_dim, d = i % head_dim;   // head: row * n_head + h
    q[i] = qg[head * 2 * head_dim + d];
}

__global__ void output_gate_kernel(float* y, const float* qg, int64_t total, int head_dim) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t head = i / head_dim, d = i % head_dim;
    y[i] = __fmul_rn(y[i], kernels::sigmoid_f32(qg[head * 2 * head_dim + head_dim + d]));
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps, void* stream) {
    if (n_rows <= 0) return;
    launch(rmsnorm_kernel, dim3(blocks_for(n_rows * 32, 128)), dim3(128), 0, static_cast<cudaStream_t>(stream), x, w,
           out, n_rows, n, eps);
    check_launch("rmsnorm");
}

namespace {
void launch_rmsnorm_quant(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps,
                          quant::act_format f, std::byte* act, void* stream, const moe_residual& res) {
    if (n_rows <= 0) return;
    if (n_rows > 0x7fffffff) fail("cuda: rmsnorm_quant: {} rows exceed one launch", n_rows);
    auto s = static_cast<cudaStream_t>(stream);
    const unsigned grid = static_cast<unsigned>(n_rows);
    // Rows up to 8192 floats (32 KB) are staged in shared memory (see the kernel).
    const bool staged = n <= 8192;
    if (res.ey && (!staged || x == out || res.K < 1 || (res.sh && !res.sh_gate)))
        fail("cuda: moe_residual_rmsnorm_quant: rows of {} floats (at most 8192), x {} out, K {}, shared expert {} gate",
             n, x == out ? "aliasing" : "apart from", res.K, res.sh && !res.sh_gate ? "without" : "with");
    const size_t smem = staged ? static_cast<size_t>(n) * 4 : 0;
    if (res.ey && res.arrivals && n_rows == 1) {   // one row: the combine over blocks, the last one normalises
        const dim3 grid_c(static_cast<unsigned>((n + k_combine_threads - 1) / k_combine_threads));
        if (f == quant::act_format::q8_32 && n % 32 == 0)
            launch(combine_norm_quant_kernel<32, quant::act_block32>, grid_c, dim3(k_combine_threads), smem, s,
                   const_cast<float*>(x), w, out, n, eps, reinterpret_cast<quant::act_block32*>(act), res);
        else if (f == quant::act_format::q8_256 && n % 256 == 0)
            launch(combine_norm_quant_kernel<256, quant::act_block256>, grid_c, dim3(k_combine_threads), smem, s,
                   const_cast<float*>(x), w, out, n, eps, reinterpret_cast<quant::act_block256*>(act), res);
        else
            fail("cuda: moe_residual_rmsnorm_quant: activation format {} for rows of {} floats", static_cast<int>(f), n);
        check_launch("combine_norm_quant");
        return;
    }
    const unsigned threads = res.ey ? k_residual_threads : 256;
    if (f == quant::act_format::q8_32) {
        if (n % 32 != 0) fail("cuda: rmsnorm_quant: n = {} is not a multiple of 32", n);
        launch(rmsnorm_quant_kernel<32, quant::act_block32>, dim3(grid), dim3(threads), smem, s, x, w, out, n, eps,
               reinterpret_cast<quant::act_block32*>(act), staged, res);
    } else if (f == quant::act_format::q8_256) {
        if (n % 256 != 0) fail("cuda: rmsnorm_quant: n = {} is not a multiple of 256", n);
        launch(rmsnorm_quant_kernel<256, quant::act_block256>, dim3(grid), dim3(threads), smem, s, x, w, out, n, eps,
               reinterpret_cast<quant::act_block256*>(act), staged, res);
    } else {
        fail("cuda: rmsnorm_quant: f32 activations are not quantised");
    }
    check_launch("rmsnorm_quant");
}
}  // namespace

void rmsnorm_quant(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps,
                   quant::act_format f, std::byte* act, void* stream) {
    launch_rmsnorm_quant(x, w, out, n_rows, n, eps, f, act, stream, moe_residual{});
}

void moe_residual_rmsnorm_quant(const moe_residual& m, float* x, const float* w, float* out, int64_t n_rows, int64_t n,
                                float eps, quant::act_format f, std::byte* act, void* stream) {
    if (!m.ey || !m.weights) fail("cuda: moe_residual_rmsnorm_quant: no expert rows");
    launch_rmsnorm_quant(x, w, out, n_rows, n, eps, f, act, stream, m);
}

void swiglu_quant(const float* gate, const float* up, int64_t n_rows, int64_t n, quant::act_format f, std::byte* act,
                  void* stream) {
    const int width = f == quant::act_format::q8_32 ? 32 : 256;
    if (f == quant::act_format::f32) fail("cuda: swiglu_quant: f32 activations are not quantised");
    if (n % width != 0) fail("cuda: swiglu_quant: n = {} is not a multiple of {}", n, width);
    const int64_t total = n_rows * (n / width);
    if (total <= 0) return;
    auto s = static_cast<cudaStream_t>(stream);
    const unsigned grid = blocks_for(total * 32, 128);
    if (width == 32)
        launch(swiglu_quant_kernel<32, quant::act_block32>, dim3(grid), dim3(128), 0, s, gate, up, total,
               reinterpret_cast<quant::act_block32*>(act));
    else
        launch(swiglu_quant_kernel<256, quant::act_block256>, dim3(grid), dim3(128), 0, s, gate, up, total,
               reinterpret_cast<quant::act_block256*>(act));
    check_launch("swiglu_quant");
}

void rope(const kernels::rope_params& p, const float* cs_table, int32_t pos0, float* x, int64_t n_rows, int n_head,
          int head_dim, void* stream, const int32_t* pos_dev) {
    const int64_t total = n_rows * n_head * (p.n_rot / 2);
    if (total <= 0) return;
    launch(rope_kernel, dim3(blocks_for(total, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), cs_table,
           p.n_rot, p.mode == kernels::rope_mode::neox, pos0, pos_dev, x, n_rows, n_head, head_dim);
    check_launch("rope");
}

void qk_norm_rope_store(const kernels::rope_params& p, const float* cs_table, int32_t pos0, float* q, float* k, const float* v,
                        const float* q_norm, const float* k_norm, float eps, int64_t n_rows, int n_head, int n_kv_head,
                        int head_dim, float* kc, float* vc, void* stream, const int32_t* pos_dev) {
    if (n_head < 1 || n_kv_head < 1 || head_dim < 1 || p.n_rot < 0 || p.n_rot > head_dim || p.n_rot % 2 != 0)
        fail("cuda: qk_norm_rope_store: n_head {}, n_kv_head {}, head_dim {}, n_rot {}", n_head, n_kv_head, head_dim, p.n_rot);
    const int64_t warps = n_rows * (n_head + 2 * n_kv_head);
    if (warps <= 0) return;
    const bool neox = p.mode == kernels::rope_mode::neox;
    const int m = neox && p.n_rot == head_dim && (head_dim == 64 || head_dim == 128 || head_dim == 256) ? head_dim / 32 : 0;
    auto kernel = m == 2 ? qk_norm_rope_store_kernel<2>
                : m == 4 ? qk_norm_rope_store_kernel<4>
                : m == 8 ? qk_norm_rope_store_kernel<8>
                         : qk_norm_rope_store_kernel<0>;
    launch(kernel, dim3(blocks_for(warps * 32, 128)), dim3(128), 0, static_cast<cudaStream_t>(stream), cs_table, p.n_rot,
           neox, pos0, pos_dev, q, k, v, q_norm, k_norm, eps, n_rows, n_head, n_kv_head, head_dim, kc, vc);
    check_launch("qk_norm_rope_store");
}

void kv_store(const float* k, const float* v, float* kc, float* vc, int32_t pos0, int64_t n_rows, int64_t row_floats,
              void* stream, const int32_t* pos_dev) {
    const int64_t total = n_rows * row_floats;
    if (total <= 0) return;
    launch(kv_store_kernel, dim3(blocks_for(total, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), k, v, kc, vc,
           pos0, pos_dev, total, row_floats);
    check_launch("kv_store");
}

void route_topk(const kernels::router_params& p, float* logits, int64_t n_rows, int32_t* ids, float* weights,
                void* stream) {
    if (n_rows <= 0) return;
    if (p.n_expert < 1 || p.n_used < 1 || p.n_used > p.n_expert)
        fail("cuda: route_topk: n_used {} of n_expert {}", p.n_used, p.n_expert);
    auto s = static_cast<cudaStream_t>(stream);
    if (p.n_expert <= 32 * k_route_per_lane && p.n_used <= 32) {
        launch(route_slots(p.n_expert) == 4 ? route_topk_warp_kernel<4> : route_topk_warp_kernel<k_route_per_lane>,
               dim3(blocks_for(n_rows, k_route_warps)), dim3(k_route_warps * 32), 0, s, p, logits, n_rows, ids, weights);
        check_launch("route_topk");
        return;
    }
    // Wider rows, one thread per row. Per thread: the row, its ids and weights, padded to an odd
    // number of words.
    const int stride = (p.n_expert + 2 * p.n_used) | 1;
    const int per_block_max = 40 * 1024 / (4 * stride);   // within the default 48 KB
    if (per_block_max >= 1) {
        const int tpb = per_block_max < 64 ? per_block_max : 64;
        launch(route_topk_smem_kernel, dim3(blocks_for(n_rows, tpb)), dim3(tpb), static_cast<size_t>(tpb) * stride * 4,
               s, p, logits, n_rows, ids, weights, stride);
    } else {
        launch(route_topk_kernel, dim3(blocks_for(n_rows, 64)), dim3(64), 0, s, p, logits, n_rows, ids, weights);
    }
    check_launch("route_topk");
}

void gated_query(const float* qg, float* q, int64_t n_rows, int n_head, int head_dim, void* stream) {
    const int64_t total = n_rows * n_head * head_dim;
    if (total <= 0) return;
    launch(gated_query_kernel, dim3(blocks_for(total, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), qg, q,
           total, head_dim);
    check_launch("gated_query");
}

void output_gate(float* y, const float* qg, int64_t n_rows, int n_head, int head_dim, void* stream) {
    const int64_t total = n_rows * n_head * head_dim;
    if (total <= 0) return;
    launch(output_gate_kernel, dim3(blocks_for(total, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), y, qg,
           total, head_dim);
    check_launch("output_gate");
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream) {
    if (n <= 0) return;
    launch(swiglu_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), gate, up, out, n);
    check_launch("swiglu");
}

void add(float* y, const float* b, int64_t n, void* stream) {
    if (n <= 0) return;
    launch(add_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), y, b, n);
    check_launch("add");
}

void add_rows(float* y, const float* b, int64_t n_rows, int64_t n, void* stream) {
    if (n_rows * n <= 0) return;
    launch(add_rows_kernel, dim3(blocks_for(n_rows * n, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), y, b,
           n_rows * n, n);
    check_launch("add_rows");
}

void moe_combine(const float* ey, const float* w, int K, int64_t n_rows, int64_t n, float* out, void* stream,
                 bool accumulate) {
    if (n_rows * n <= 0) return;
    launch(moe_combine_kernel, dim3(blocks_for(n_rows * n, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), ey,
           w, K, n_rows, n, out, accumulate);
    check_launch("moe_combine");
}

void add_gated(float* out, const float* sh, const float* gate, int64_t n_rows, int64_t n, void* stream) {
    if (n_rows * n <= 0) return;
    launch(add_gated_kernel, dim3(blocks_for(n_rows * n, 256)), dim3(256), 0, static_cast<cudaStream_t>(stream), out,
           sh, gate, n_rows, n);
    check_launch("add_gated");
}

}  // namespace sluice::cuda
