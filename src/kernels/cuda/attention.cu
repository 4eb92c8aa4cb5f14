// Causal attention on the device, operation for operation kernels::attention (cpu/attention.cpp):
// per (row, head) the KV positions in chunks of k_attn_chunk, each chunk's scores (16-lane dot,
// scale), its max, exponentials, exp sum and weighted V sum, merged into a running (max, sum,
// output) in chunk order with the CPU's expressions; exp from kernels/math.h, every float
// operation rounded on its own. Two kernels with the same bits: attention_kernel (a decode step
// or a verify window: a block per (row, head), chunks side by side) and attention_rows_kernel
// (a prefill chunk: a block per (KV head, rows), K and V staged once for its queries).
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::cuda {
namespace {

constexpr unsigned k_full = 0xffffffffu;
// Rows above which the rows kernel runs (a verify window has at most 16).
constexpr int64_t k_rows_min = 16;

constexpr int k_attn_warps = 16;   // warps per (row, head): chunks computed side by side (512 positions)
constexpr int k_dims_per_lane = kernels::k_max_head_dim / 32;   // 16
// V positions whose rows a lane loads before their adds (64 floats of registers per lane).
template <int U>
constexpr int k_attn_vbatch = U <= 4 ? 16 : 4;

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

// The score of one position for a chunk's lane: kernels::dot_f32_lanes(q, k) (16 fmaf chains,
// then fold16) times the scale, as the CPU computes it. kj: the position's K row (global or
// shared memory); with vec16 (head_dim % 16 == 0 and 16-byte aligned rows) read as float4.
__device__ inline float chunk_score(const float* kj, const float* qs, int hd, bool vec16, float scale) {
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
    return __fmul_rn(fold16(acc), scale);
}

// A chunk's exp sum lc and weighted V sum oc (lane owns dimensions lane + 32u): positions in
// order, lc += e_j and oc += e_j * V[j], the CPU's per-chunk sums. e: lane j holds position j's
// exponential (lanes j < n). v0: the chunk's first V row, rows v_stride floats apart (global or
// shared memory). The V rows of JB positions are loaded before their adds (a chunk pays a few
// memory latencies instead of one per position); the adds are the same whatever JB.
template <int U, int JB = k_attn_vbatch<U>>
__device__ inline void chunk_v_sum(const float* v0, int64_t v_stride, int n, float e, int hd, int lane, float& lc,
                                   float (&oc)[U]) {
    lc = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) oc[u] = 0.0f;
    for (int j0 = 0; j0 < n; j0 += JB) {   // n is uniform across the warp
        float vv[JB][U];   // V[j0 + jj][lane + 32u], loaded before the adds
#pragma unroll
        for (int jj = 0; jj < JB; ++jj) {
            const float* vj = v0 + (j0 + jj) * v_stride;
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
            const float* k0 = kc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd;
            const float score = lane < n ? chunk_score(k0 + lane * kv_stride, qs, hd, vec16, p.scale) : 0.0f;
            const float mc = chunk_max(score, n, lane);
            const float e = lane < n ? kernels::exp_f32(__fsub_rn(score, mc)) : 0.0f;
            float lc = 0.0f;
            float oc[U];
            chunk_v_sum<U>(vc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd, kv_stride, n, e, hd, lane, lc, oc);
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


// Prefill and long windows: one block per (KV head, tile of R rows), one warp per query (row r0 +
// w / G, head kvh * G + w % G, the G = n_head / n_kv_head query heads that share the KV head).
// Each chunk of k_attn_chunk KV positions is staged once in shared memory for the block's
// queries (attention_kernel reads every K and V row once per query head and row: for a 512-row
// prefill of a 32/4-head model that is 8 x 512 reads of each row, and the kernel was a third of
// the prefill on the H200, 1.46 ms a layer, tests/gpu/decode_profile.h200.txt). Each warp then
// does attention_kernel's per-chunk operations for its query (chunk_score, chunk_max, the
// exponentials, chunk_v_sum) and merges the chunk into its running (max, sum, output) at once
// with the merge expression, chunks in order: the serial walk whose bits attention_kernel's
// parallel merge reproduces. So both kernels give the CPU's bits for every row (ops_parity).
constexpr int k_rows_warps = 16;
constexpr int k_rows_max_hd = 128;
constexpr int k_rows_kstride = k_rows_max_hd + 4;   // K rows padded: float4 reads of 8 lanes hit distinct banks
// V rows loaded ahead of their adds: 4 from shared memory (16 from global memory in the one-row
// kernel). Two blocks an SM would need 64 registers a thread: ptxas then spills 28-72 bytes
// whatever this batch (1, 2, 4, 8 tried), so the kernel keeps one block (16 warps) an SM.
constexpr int k_rows_vbatch = 4;

__global__ void __launch_bounds__(k_rows_warps * 32)
    attention_rows_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                          int64_t n_rows, int rows_per_block, float* out) {
    wait_prior_grids();   // first: see launch.cuh
    __shared__ __align__(16) float sk[kernels::k_attn_chunk][k_rows_kstride];   // the chunk's K rows of this KV head
    __shared__ __align__(16) float sv[kernels::k_attn_chunk][k_rows_max_hd];    // its V rows
    __shared__ __align__(16) float sq[k_rows_warps][k_rows_max_hd];             // each warp's query
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int G = p.n_head / p.n_kv_head, hd = p.head_dim;
    const int kvh = static_cast<int>(blockIdx.y);
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
    const int64_t r = r0 + warp / G;
    const int h = kvh * G + warp % G;
    const bool active = warp < G * rows_per_block && r < n_rows;   // uniform in the warp
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    if (active)
        for (int d = lane; d < hd; d += 32) sq[warp][d] = q[(r * p.n_head + h) * hd + d];
    const int64_t r_last = (r0 + rows_per_block < n_rows ? r0 + rows_per_block : n_rows) - 1;
    const int64_t n_kv_tile = pos0 + r_last + 1;   // the tile's last row sees the most positions
    const int64_t n_kv = pos0 + r + 1;
    const bool vec16 = hd % 16 == 0;
    float o[4];
    float m = 0.0f, l = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) o[u] = 0.0f;
    for (int64_t c0 = 0; c0 < n_kv_tile; c0 += kernels::k_attn_chunk) {
        const int n_stage = static_cast<int>(n_kv_tile - c0 < kernels::k_attn_chunk ? n_kv_tile - c0 : kernels::k_attn_chunk);
        __syncthreads();   // the previous chunk's reads are done (and sq is written)
        const float* kg = kc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd;
        const float* vg = vc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd;
        for (int i = static_cast<int>(threadIdx.x); i < n_stage * hd; i += k_rows_warps * 32) {
            const int j = i / hd, d = i - j * hd;
            sk[j][d] = kg[j * kv_stride + d];
            sv[j][d] = vg[j * kv_stride + d];
        }
        __syncthreads();
        if (!active || c0 >= n_kv) continue;
        const int n = static_cast<int>(n_kv - c0 < kernels::k_attn_chunk ? n_kv - c0 : kernels::k_attn_chunk);
        const float score = lane < n ? chunk_score(sk[lane], sq[warp], hd, vec16, p.scale) : 0.0f;
        const float mc = chunk_max(score, n, lane);
        const float e = lane < n ? kernels::exp_f32(__fsub_rn(score, mc)) : 0.0f;
        float lc = 0.0f;
        float oc[4];
        chunk_v_sum<4, k_rows_vbatch>(&sv[0][0], k_rows_max_hd, n, e, hd, lane, lc, oc);
        if (c0 == 0) {
            m = mc;
            l = lc;
#pragma unroll
            for (int u = 0; u < 4; ++u) o[u] = oc[u];
        } else {
            const float m_after = mc > m ? mc : m;
            const float a = kernels::exp_f32(__fsub_rn(m, m_after)), bc = kernels::exp_f32(__fsub_rn(mc, m_after));
            l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, bc));
#pragma unroll
            for (int u = 0; u < 4; ++u) o[u] = __fadd_rn(__fmul_rn(o[u], a), __fmul_rn(oc[u], bc));
            m = m_after;
        }
    }
    if (active) {
        float* orow = out + (r * p.n_head + h) * hd;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int d = lane + 32 * u;
            if (d < hd) orow[d] = __fdiv_rn(o[u], l);
        }
    }
}

}  // namespace

void attention(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
               int64_t n_rows, float* out, void* stream, const int32_t* pos_dev) {
    if (p.head_dim < 1 || p.head_dim > kernels::k_max_head_dim || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0)
        fail("cuda: attention: head_dim {} (1..{}), n_head {}, n_kv_head {}", p.head_dim, kernels::k_max_head_dim,
             p.n_head, p.n_kv_head);
    const int64_t total = n_rows * p.n_head;
    if (total <= 0) return;
    if (total > 0x7fffffff) fail("cuda: attention: {} (row, head) pairs exceed one launch", total);
    // Many rows (a prefill chunk): the rows kernel, K and V staged once per block for up to 16
    // queries; same bits (see there). It takes head_dim <= 128 and at most 16 query heads a KV
    // head; a decode step or a verify window (<= 16 rows) keeps the chunk-parallel kernel, whose
    // one block per (row, head) finishes a single row sooner.
    const int G = p.n_head / p.n_kv_head;
    if (!pos_dev && n_rows > k_rows_min && p.head_dim <= k_rows_max_hd && G <= k_rows_warps) {
        const int R = k_rows_warps / G;
        const int64_t tiles = (n_rows + R - 1) / R;
        if (tiles > 0x7fffffff) fail("cuda: attention: {} row tiles exceed one launch", tiles);
        launch(attention_rows_kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(p.n_kv_head)),
               dim3(k_rows_warps * 32), 0, static_cast<cudaStream_t>(stream), p, q, kc, vc, pos0, n_rows, R, out);
        return;
    }
    // head_dim <= 128 (every model here): 4 dimensions per lane, fewer registers.
    auto kernel = p.head_dim <= 128 ? attention_kernel<4> : attention_kernel<k_dims_per_lane>;
    launch(kernel, dim3(static_cast<unsigned>(total)), dim3(k_attn_warps * 32), 0, static_cast<cudaStream_t>(stream), p,
           q, kc, vc, pos0, pos_dev, n_rows, out);
}

}  // namespace sluice::cuda
