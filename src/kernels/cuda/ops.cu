// Device forward-pass ops, operation for operation the CPU ops of src/kernels/cpu (norm.cpp,
// rope.cpp, attention.cpp), so that their bits match: reductions in the CPU's order (the
// 16-lane fmaf rule of dot_f32_lanes, serial sums where the CPU sums serially), explicit
// __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn, exp and SiLU from kernels/math.h.
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/act_quant_dev.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/math.h"

#include <cuda_runtime.h>

#include <cstdint>

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
    wait_prior_grids();   // first: see launch.cuh
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

// One block (8 warps) per row: the row staged in shared memory (rows up to 8192 floats; longer
// ones are read from global memory), warp 0 takes the sum of squares (warp_dot_lanes' chains,
// unrolled: the same terms in the same order), then each warp takes blocks of the row: scales
// its values (rmsnorm_kernel's expression) into registers, writes them to `out` and quantises
// them from the registers (quantize_block_values, quantize_rows_kernel's code). Measured on the
// H200 (kernel_bench, n 2048, q8_256): 4.9 us a launch; 6.9 us with 4 warps re-reading `out`
// through global memory to quantise it.
template <int W, class Block>
__global__ void __launch_bounds__(256)
    rmsnorm_quant_kernel(const float* x, const float* w, float* out, int64_t n, float eps, Block* act, bool staged) {
    wait_prior_grids();   // first: see launch.cuh
    __shared__ float s_scale;
    extern __shared__ float4 s_x4[];   // staged: the row x[r, :] (n floats), else unused
    const int64_t r = blockIdx.x;
    const float* xr = x + r * n;
    float* o = out + r * n;
    if (staged) {
        float* xs = reinterpret_cast<float*>(s_x4);
        if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0 && n % 4 == 0) {
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
    if (threadIdx.x < 32) {
        const int l = static_cast<int>(threadIdx.x & 15);
        float acc = 0.0f;
#pragma unroll 8
        for (int64_t i = l; i < n; i += 16) acc = __fmaf_rn(xr[i], xr[i], acc);
        for (int sft = 8; sft >= 1; sft >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(k_full, acc, sft, 16));
        acc = __shfl_sync(k_full, acc, 0);
        const float mean = __fdiv_rn(acc, static_cast<float>(n));
        if (threadIdx.x == 0) s_scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    }
    __syncthreads();   // x is read before out (which may be x) is written: each warp below reads
                       // and writes only its own blocks' elements
    const float scale = s_scale;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    constexpr int per_lane = W / 32;
    const int64_t per_row = n / W;
    for (int64_t b = warp; b < per_row; b += blockDim.x / 32) {
        float v[per_lane];
#pragma unroll
        for (int i = 0; i < per_lane; ++i) {
            const int64_t e = b * W + lane * per_lane + i;
            v[i] = w ? __fmul_rn(__fmul_rn(xr[e], scale), w[e]) : __fmul_rn(xr[e], scale);
        }
#pragma unroll
        for (int i = 0; i < per_lane; ++i) o[b * W + lane * per_lane + i] = v[i];
        Block* dst = act + r * per_row + b;
        int16_t* bsums = nullptr;
        if constexpr (W == 256) bsums = dst->bsums;
        quantize_block_values<W>(v, &dst->d, dst->q, bsums);
    }
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
__global__ void qk_norm_rope_store_kernel(const float* cs_table, int n_rot, bool neox, int32_t pos0, const int32_t* pos_dev,
                                          float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                          float eps, int64_t n_rows, int n_head, int n_kv_head, int head_dim, float* kc,
                                          float* vc) {
    wait_prior_grids();   // first: see launch.cuh
    if (pos_dev) pos0 = *pos_dev;
    const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int slots = n_head + 2 * n_kv_head;
    if (t >= n_rows * slots) return;   // whole warps leave together
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t r = t / slots;
    const int sl = static_cast<int>(t % slots);
    const int64_t kv_row = static_cast<int64_t>(n_kv_head) * head_dim;
    const int64_t cache_at = (static_cast<int64_t>(pos0) + r) * kv_row;
    if (sl >= n_head + n_kv_head) {   // v: stored as it is
        const int h = sl - n_head - n_kv_head;
        const float* src = v + r * kv_row + static_cast<int64_t>(h) * head_dim;
        float* dst = vc + cache_at + static_cast<int64_t>(h) * head_dim;
        for (int d = lane; d < head_dim; d += 32) dst[d] = src[d];
        return;
    }
    const bool is_q = sl < n_head;
    const int h = is_q ? sl : sl - n_head;
    float* xh = is_q ? q + (r * n_head + h) * head_dim : k + r * kv_row + static_cast<int64_t>(h) * head_dim;
    const float* nw = is_q ? q_norm : k_norm;
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

constexpr int k_attn_warps = 16;   // warps per (row, head): chunks computed side by side (512 positions)
constexpr int k_dims_per_lane = kernels::k_max_head_dim / 32;   // 16
// V positions whose rows a lane loads before their adds (64 floats of registers per lane).
template <int U>
constexpr int k_attn_vbatch = U <= 4 ? 16 : 4;

// dot_f32_lanes' pairwise fold of 16 lane sums: acc[u] += acc[u + s] for s = 8, 4, 2, 1, every
// index a constant. (As a loop over s, nvcc left acc in a 64-byte local-memory frame that the
// K loop stored to and the fold read back: 143k local sectors per attention launch, Nsight
// Compute, 2026-12-02.)
__device__ inline float fold16(float (&acc)[16]) {
#pragma unroll
    for (int u = 0; u < 8; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 8]);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 4]);
#pragma unroll
    for (int u = 0; u < 2; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 2]);
    return __fadd_rn(acc[0], acc[1]);
}

// The max of a chunk's scores (lane j holds position j's, lanes j < n): the value the CPU's
// serial scan keeps (mc = j == 0 || s_j > mc ? s_j : mc), which is the first maximal score in
// position order. Without NaN a tree that keeps the lower position unless the higher one is
// strictly greater finds that element (5 steps instead of n); with a NaN the order of the
// comparisons matters, so the serial scan runs.
__device__ inline float chunk_max(float score, int n, int lane) {
    if (__any_sync(k_full, lane < n && score != score)) {
        float mc = 0.0f;
        for (int j = 0; j < n; ++j) {
            const float sj = __shfl_sync(k_full, score, j);
            mc = (j == 0 || sj > mc) ? sj : mc;
        }
        return mc;
    }
    float v = score;
    bool valid = lane < n;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float ov = __shfl_down_sync(k_full, v, off);
        const bool ovalid = __shfl_down_sync(k_full, valid, off) && lane + off < 32;
        // lane holds positions [lane, lane + off), the other [lane + off, lane + 2 off)
        if (ovalid && (!valid || ov > v)) v = ov;
        valid = valid || ovalid;
    }
    return __shfl_sync(k_full, v, 0);
}

// One block per (row, head), k_attn_warps warps. The KV chunks are taken k_attn_warps at a time:
// warp w computes chunk c0 + w on its own (its scores, its max, its exp sum and its weighted V
// sum, exactly the serial kernel's per-chunk operations) into shared memory; then warp 0 merges
// those chunks into the running (max, sum, output) one after the other in chunk order, with the
// CPU's merge expression. The chunks' values and the merge order are those of the one-warp
// serial walk, so the bits are the same; only the chunks' work runs in parallel.
//   Score: lane j of a chunk computes the score of position c0 + j (the whole 16-lane dot on its
//   own, in the CPU's order); for the V sum lanes own output dimensions d = lane + 32u.
//   Memory: the K dot of a lane and the V sum of a chunk issue their loads ahead of the
//   arithmetic (unrolled K steps; the V rows of k_attn_vbatch positions loaded before their
//   adds), so a chunk pays a few global latencies instead of one per position; the adds run in
//   the same order on the same values, so the bits are unchanged. U: dimensions per lane the
//   kernel keeps (4 for head_dim <= 128, else k_dims_per_lane).
template <int U>
__global__ void __launch_bounds__(k_attn_warps * 32)
    attention_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                     const int32_t* pos_dev, int64_t n_rows, float* out) {
    wait_prior_grids();   // first: see launch.cuh
    if (pos_dev) pos0 = *pos_dev;
    __shared__ float qs[kernels::k_max_head_dim];
    __shared__ float s_oc[k_attn_warps][kernels::k_max_head_dim];   // each warp's chunk: V sum
    __shared__ float s_mc[k_attn_warps], s_lc[k_attn_warps];        // its max and exp sum
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int64_t t = blockIdx.x;   // row * n_head + head
    const int hd = p.head_dim;
    const int64_t r = t / p.n_head;
    const int h = static_cast<int>(t % p.n_head);
    const int kvh = h / (p.n_head / p.n_kv_head);
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    const float* qh = q + (r * p.n_head + h) * hd;
    for (int d = static_cast<int>(threadIdx.x); d < hd; d += k_attn_warps * 32) qs[d] = qh[d];
    __syncthreads();
    const int64_t n_kv = pos0 + r + 1;
    const int64_t n_chunks = (n_kv + kernels::k_attn_chunk - 1) / kernels::k_attn_chunk;
    const bool vec16 = hd % 16 == 0;   // K rows as float4 loads (16-byte aligned rows)
    float o[U];          // warp 0: the running output, dims lane + 32u
    float m = 0.0f, l = 0.0f;
    for (int64_t cg = 0; cg < n_chunks; cg += k_attn_warps) {
        const int64_t ci = cg + warp;
        if (ci < n_chunks) {
            const int64_t c0 = ci * kernels::k_attn_chunk;
            const int n = static_cast<int>(n_kv - c0 < kernels::k_attn_chunk ? n_kv - c0 : kernels::k_attn_chunk);
            float score = 0.0f;
            if (lane < n) {
                const float* kj = kc + (c0 + lane) * kv_stride + static_cast<int64_t>(kvh) * hd;
                float acc[16];
#pragma unroll
                for (int u = 0; u < 16; ++u) acc[u] = 0.0f;
                if (vec16) {
#pragma unroll 4
                    for (int i0 = 0; i0 < hd; i0 += 16) {
                        float kv[16];
#pragma unroll
                        for (int u4 = 0; u4 < 4; ++u4) {
                            const float4 f = *reinterpret_cast<const float4*>(kj + i0 + 4 * u4);
                            kv[4 * u4] = f.x;
                            kv[4 * u4 + 1] = f.y;
                            kv[4 * u4 + 2] = f.z;
                            kv[4 * u4 + 3] = f.w;
                        }
#pragma unroll
                        for (int u = 0; u < 16; ++u) acc[u] = __fmaf_rn(qs[i0 + u], kv[u], acc[u]);
                    }
                } else {
                    for (int i0 = 0; i0 < hd; i0 += 16) {
#pragma unroll
                        for (int u = 0; u < 16; ++u)
                            if (i0 + u < hd) acc[u] = __fmaf_rn(qs[i0 + u], kj[i0 + u], acc[u]);
                    }
                }
                score = __fmul_rn(fold16(acc), p.scale);
            }
            const float mc = chunk_max(score, n, lane);
            const float e = lane < n ? kernels::exp_f32(__fsub_rn(score, mc)) : 0.0f;
            float lc = 0.0f;
            float oc[U];
#pragma unroll
            for (int u = 0; u < U; ++u) oc[u] = 0.0f;
            constexpr int JB = k_attn_vbatch<U>;
            for (int j0 = 0; j0 < n; j0 += JB) {   // n is uniform across the warp
                float vv[JB][U];   // V[c0 + j0 + jj][lane + 32u], loaded before the adds
#pragma unroll
                for (int jj = 0; jj < JB; ++jj) {
                    const float* vj = vc + (c0 + j0 + jj) * kv_stride + static_cast<int64_t>(kvh) * hd;
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int d = lane + 32 * u;
                        vv[jj][u] = j0 + jj < n && d < hd ? vj[d] : 0.0f;
                    }
                }
#pragma unroll
                for (int jj = 0; jj < JB; ++jj) {
                    if (j0 + jj >= n) break;   // uniform
                    const float ej = __shfl_sync(k_full, e, j0 + jj);
                    lc = __fadd_rn(lc, ej);
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int d = lane + 32 * u;
                        if (d < hd) oc[u] = __fadd_rn(oc[u], __fmul_rn(ej, vv[jj][u]));
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int d = lane + 32 * u;
                if (d < hd) s_oc[warp][d] = oc[u];
            }
            if (lane == 0) {
                s_mc[warp] = mc;
                s_lc[warp] = lc;
            }
        }
        __syncthreads();
        if (warp == 0) {
            const int n_here = static_cast<int>(n_chunks - cg < k_attn_warps ? n_chunks - cg : k_attn_warps);
            // The merge's running max is a prefix of `mc > m ? mc : m` over the chunks, and
            // chunk w's two factors exp(m_before - m_after), exp(mc - m_after) depend only on
            // it: the prefix is walked by every lane (a compare a chunk), then lane w computes
            // chunk w's factors, all chunks at once. Only l * a + lc * bc and o * a + oc * bc stay
            // serial. Same operands, same operations, same order: the serial merge's bits.
            float m_after = m, my_mb = 0.0f, my_ma = 0.0f, my_mc = 0.0f;
            for (int w = 0; w < n_here; ++w) {
                const float mc = s_mc[w];
                const float mb = m_after;
                m_after = cg + w == 0 ? mc : (mc > mb ? mc : mb);
                if (lane == w) {   // selects, not work: the exponentials run once below
                    my_mb = mb;
                    my_ma = m_after;
                    my_mc = mc;
                }
            }
            float a_w = 1.0f, bc_w = 1.0f;
            if (lane < n_here && cg + lane != 0) {
                a_w = kernels::exp_f32(__fsub_rn(my_mb, my_ma));
                bc_w = kernels::exp_f32(__fsub_rn(my_mc, my_ma));
            }
            for (int w = 0; w < n_here; ++w) {
                const float lc = s_lc[w];
                if (cg + w == 0) {
                    l = lc;
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int d = lane + 32 * u;
                        o[u] = d < hd ? s_oc[w][d] : 0.0f;
                    }
                } else {
                    const float a = __shfl_sync(k_full, a_w, w), bc = __shfl_sync(k_full, bc_w, w);
                    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, bc));
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int d = lane + 32 * u;
                        if (d < hd) o[u] = __fadd_rn(__fmul_rn(o[u], a), __fmul_rn(s_oc[w][d], bc));
                    }
                }
            }
            m = m_after;
        }
        __syncthreads();   // the chunk slots are free again
    }
    if (warp == 0) {
        float* orow = out + (r * p.n_head + h) * hd;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int d = lane + 32 * u;
            if (d < hd) orow[d] = __fdiv_rn(o[u], l);
        }
    }
}

// One warp per row, the row in registers (lane l holds experts l, l + 32, ...): route_topk_row's
// bits with the serial chains only where the order matters.
//   - max: each lane's first maximum, then the warp's, ties to the lower index: the element the
//     serial scan (x[i] > mx) keeps, so the same value bits;
//   - exp_f32(x - max) per element (independent), the sum added in index order (every lane
//     adds the same shuffled values in the same order), the division per element;
//   - top-k: each round the warp's largest not-yet-taken probability, ties to the lower id:
//     with no NaN this is the serial repeated argmax's pick;
//   - renormalisation: the weights summed in rank order, then divided.
// A NaN anywhere (logits or probabilities) makes the order of comparisons matter: lane 0 then
// runs the serial code itself, so the result is route_topk_row's in every case.
constexpr int k_route_per_lane = 16;   // experts per lane: rows of up to 512 experts
constexpr int k_route_warps = 4;

__global__ void __launch_bounds__(k_route_warps * 32)
    route_topk_warp_kernel(kernels::router_params p, float* logits, int64_t n_rows, int32_t* ids, float* weights) {
    wait_prior_grids();   // first: see launch.cuh
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t r = static_cast<int64_t>(blockIdx.x) * k_route_warps + threadIdx.x / 32;
    if (r >= n_rows) return;   // whole warps leave together
    const int n = p.n_expert;
    float* x = logits + r * n;
    int32_t* rid = ids + r * p.n_used;
    float* rwt = weights + r * p.n_used;
    float v[k_route_per_lane];
    bool nan = false;
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k) {
        const int i = 32 * k + lane;
        v[k] = i < n ? x[i] : 0.0f;
        nan = nan || v[k] != v[k];
    }
    if (__any_sync(k_full, nan)) {
        if (lane == 0) route_topk_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    // Max, ties to the lower index.
    float mv = v[0];
    int mi = lane;   // lane < 32 <= ... : element `lane` exists when n > lane
#pragma unroll
    for (int k = 1; k < k_route_per_lane; ++k) {
        const int i = 32 * k + lane;
        if (i < n && v[k] > mv) {
            mv = v[k];
            mi = i;
        }
    }
    if (lane >= n) mi = 0x7fffffff;   // a lane with no element never wins
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(k_full, mv, off);
        const int oi = __shfl_xor_sync(k_full, mi, off);
        if (oi != 0x7fffffff && (mi == 0x7fffffff || ov > mv || (ov == mv && oi < mi))) {
            mv = ov;
            mi = oi;
        }
    }
    const float mx = mv;
    // exp, the sum in index order, the division.
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k)
        if (32 * k + lane < n) v[k] = kernels::exp_f32(v[k] - mx);
    // The sum in index order by every lane, from shared memory: a chain of adds whose loads are
    // issued ahead (a shuffle per term put its latency in the chain: 128 x ~30 cycles).
    __shared__ float s_exp[k_route_warps][32 * k_route_per_lane];
    float* se = s_exp[threadIdx.x / 32];
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k)
        if (32 * k + lane < n) se[32 * k + lane] = v[k];
    __syncwarp();
    float sum = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n; ++i) sum = sum + se[i];
    nan = false;
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k) {
        const int i = 32 * k + lane;
        if (i < n) {
            v[k] = v[k] / sum;
            x[i] = v[k];
            nan = nan || v[k] != v[k];
        }
    }
    if (__any_sync(k_full, nan)) {
        __syncwarp();   // the probabilities written above are visible to lane 0
        if (lane == 0) route_select_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    // Top-k: lane k keeps rank k's id and weight.
    uint32_t taken = 0;   // bit k: this lane's element 32k + lane is taken
    int my_id = 0;
    float my_wt = 0.0f;
    for (int k = 0; k < p.n_used; ++k) {
        float bv = 0.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int u = 0; u < k_route_per_lane; ++u) {
            const int i = 32 * u + lane;
            if (i < n && !((taken >> u) & 1u) && (bi == 0x7fffffff || v[u] > bv)) {
                bv = v[u];
                bi = i;
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(k_full, bv, off);
            const int oi = __shfl_xor_sync(k_full, bi, off);
            if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        if ((bi & 31) == lane) taken |= 1u << (bi / 32);
        if (lane == k) {
            my_id = bi;
            my_wt = bv;
        }
    }
    if (p.renormalize) {
        float s = 0.0f;
        for (int k = 0; k < p.n_used; ++k) s = s + __shfl_sync(k_full, my_wt, k);
        my_wt = my_wt / s;
    }
    if (lane < p.n_used) {
        rid[lane] = my_id;
        rwt[lane] = my_wt;
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

}  // namespace

void rmsnorm(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps, void* stream) {
    if (n_rows <= 0) return;
    launch(rmsnorm_kernel, dim3(blocks_for(n_rows * 32, 128)), dim3(128), 0, static_cast<cudaStream_t>(stream), x, w,
           out, n_rows, n, eps);
    check_launch("rmsnorm");
}

void rmsnorm_quant(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps,
                   quant::act_format f, std::byte* act, void* stream) {
    if (n_rows <= 0) return;
    if (n_rows > 0x7fffffff) fail("cuda: rmsnorm_quant: {} rows exceed one launch", n_rows);
    auto s = static_cast<cudaStream_t>(stream);
    const unsigned grid = static_cast<unsigned>(n_rows);
    // Rows up to 8192 floats (32 KB) are staged in shared memory (see the kernel).
    const bool staged = n <= 8192;
    const size_t smem = staged ? static_cast<size_t>(n) * 4 : 0;
    if (f == quant::act_format::q8_32) {
        if (n % 32 != 0) fail("cuda: rmsnorm_quant: n = {} is not a multiple of 32", n);
        launch(rmsnorm_quant_kernel<32, quant::act_block32>, dim3(grid), dim3(256), smem, s, x, w, out, n, eps,
               reinterpret_cast<quant::act_block32*>(act), staged);
    } else if (f == quant::act_format::q8_256) {
        if (n % 256 != 0) fail("cuda: rmsnorm_quant: n = {} is not a multiple of 256", n);
        launch(rmsnorm_quant_kernel<256, quant::act_block256>, dim3(grid), dim3(256), smem, s, x, w, out, n, eps,
               reinterpret_cast<quant::act_block256*>(act), staged);
    } else {
        fail("cuda: rmsnorm_quant: f32 activations are not quantised");
    }
    check_launch("rmsnorm_quant");
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
    launch(qk_norm_rope_store_kernel, dim3(blocks_for(warps * 32, 128)), dim3(128), 0,
           static_cast<cudaStream_t>(stream), cs_table, p.n_rot, p.mode == kernels::rope_mode::neox, pos0, pos_dev, q,
           k, v, q_norm, k_norm, eps, n_rows, n_head, n_kv_head, head_dim, kc, vc);
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

void attention(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
               int64_t n_rows, float* out, void* stream, const int32_t* pos_dev) {
    if (p.head_dim < 1 || p.head_dim > kernels::k_max_head_dim || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0)
        fail("cuda: attention: head_dim {} (1..{}), n_head {}, n_kv_head {}", p.head_dim, kernels::k_max_head_dim,
             p.n_head, p.n_kv_head);
    const int64_t total = n_rows * p.n_head;
    if (total <= 0) return;
    if (total > 0x7fffffff) fail("cuda: attention: {} (row, head) pairs exceed one launch", total);
    // head_dim <= 128 (every model here): 4 dimensions per lane, fewer registers.
    auto kernel = p.head_dim <= 128 ? attention_kernel<4> : attention_kernel<k_dims_per_lane>;
    launch(kernel, dim3(static_cast<unsigned>(total)), dim3(k_attn_warps * 32), 0, static_cast<cudaStream_t>(stream), p,
           q, kc, vc, pos0, pos_dev, n_rows, out);
    check_launch("attention");
}

void route_topk(const kernels::router_params& p, float* logits, int64_t n_rows, int32_t* ids, float* weights,
                void* stream) {
    if (n_rows <= 0) return;
    if (p.n_expert < 1 || p.n_used < 1 || p.n_used > p.n_expert)
        fail("cuda: route_topk: n_used {} of n_expert {}", p.n_used, p.n_expert);
    auto s = static_cast<cudaStream_t>(stream);
    if (p.n_expert <= 32 * k_route_per_lane && p.n_used <= 32) {
        launch(route_topk_warp_kernel, dim3(blocks_for(n_rows, k_route_warps)), dim3(k_route_warps * 32), 0, s, p,
               logits, n_rows, ids, weights);
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
