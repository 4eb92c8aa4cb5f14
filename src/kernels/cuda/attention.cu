// Causal attention on the device, operation for operation kernels::attention (cpu/attention.cpp):
// per (row, head) the KV positions in chunks of k_attn_chunk, each chunk's scores (16-lane dot,
// scale), its max, exponentials, exp sum and weighted V sum, merged into a running (max, sum,
// output) in chunk order with the CPU's expressions; exp from kernels/math.h, every float
// operation rounded on its own. Two kernels with the same bits: attention_kernel (a decode step
// or a verify window: a block per (row, head), chunks side by side) and attention_rows_kernel
// (a prefill chunk: a block per (KV head, rows), K and V staged once for its queries).
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/act_quant_dev.cuh"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"
#include "quant/act.h"

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

// The scores of one position for a chunk's lane against QW queries: kernels::dot_f32_lanes(q, k)
// (16 fmaf chains, then fold16) times the scale, as the CPU computes it, for each query; the K
// values are loaded once for the QW queries (a warp that serves two queries of the same row
// reads the chunk's K rows once for both). kj: the position's K row (global or shared memory);
// qs: the first query, the others q_stride floats apart; with vec16 (head_dim % 16 == 0 and
// 16-byte aligned rows, queries included) K and the queries are read as float4.
template <int QW>
__device__ inline void chunk_scores(const float* kj, const float* qs, int q_stride, int hd, bool vec16, float scale,
                                    float (&score)[QW]) {
    float acc[QW][16];
#pragma unroll
    for (int w = 0; w < QW; ++w)
#pragma unroll
        for (int u = 0; u < 16; ++u) acc[w][u] = 0.0f;
    if (vec16) {
#pragma unroll(QW == 1 ? 4 : 2)
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
            for (int w = 0; w < QW; ++w)
#pragma unroll
                for (int u4 = 0; u4 < 4; ++u4) {   // the queries as float4 too (16-byte aligned: the callers' arrays)
                    const float4 qv = *reinterpret_cast<const float4*>(qs + w * q_stride + i0 + 4 * u4);
                    acc[w][4 * u4] = __fmaf_rn(qv.x, kv[4 * u4], acc[w][4 * u4]);
                    acc[w][4 * u4 + 1] = __fmaf_rn(qv.y, kv[4 * u4 + 1], acc[w][4 * u4 + 1]);
                    acc[w][4 * u4 + 2] = __fmaf_rn(qv.z, kv[4 * u4 + 2], acc[w][4 * u4 + 2]);
                    acc[w][4 * u4 + 3] = __fmaf_rn(qv.w, kv[4 * u4 + 3], acc[w][4 * u4 + 3]);
                }
        }
    } else {
        for (int i0 = 0; i0 < hd; i0 += 16) {
#pragma unroll
            for (int u = 0; u < 16; ++u)
                if (i0 + u < hd) {
                    const float k = kj[i0 + u];
#pragma unroll
                    for (int w = 0; w < QW; ++w) acc[w][u] = __fmaf_rn(qs[w * q_stride + i0 + u], k, acc[w][u]);
                }
        }
    }
#pragma unroll
    for (int w = 0; w < QW; ++w) score[w] = __fmul_rn(fold16(acc[w]), scale);
}

// A chunk's exp sums lc and weighted V sums oc for QW queries (lane owns dimensions lane + 32u):
// positions in order, lc += e_j and oc += e_j * V[j], the CPU's per-chunk sums, each query's on
// its own; the V values are loaded once for the QW queries. e[w]: lane j holds position j's
// exponential for query w (lanes j < n). v0: the chunk's first V row, rows v_stride floats apart
// (global or shared memory). The V rows of JB positions are loaded before their adds (a chunk
// pays a few memory latencies instead of one per position); the adds are the same whatever JB.
//   A whole chunk of heads 32 U wide (every chunk but a row's last, heads of 128 at U = 4 and of
// 256 at U = 8) takes a form with no bounds checks: the checks were most of the loop's
// instructions (a guard and a branch per load), and the split decode kernel, issue-bound at 4,096
// positions (Nsight Compute on an H100, session 33: 2.5 instructions a cycle an SM, 20 us), spent
// most of its instructions here. With the two staging changes below (kernel_bench on an H100,
// session 34, the same call): split decode attention at 4,096 positions 27.02 -> 22.96 us, at 512
// 7.82 -> 6.67; prefill attention of 2,048 rows at 0, 32/4 heads of 128, 4,031 -> 3,384 us, 16/2 of
// 256 3,972 -> 2,975. Same adds in the same order: the same bits. Whole: whether that
// form is compiled in (attention_kernel leaves it out: with its 16 V rows in flight from global
// memory, ptxas spilled 24-28 bytes more there).
template <int U, int JB, int QW, bool Whole = true>
__device__ inline void chunk_v_sums(const float* v0, int64_t v_stride, int n, const float (&e)[QW], int hd, int lane,
                                    float (&lc)[QW], float (&oc)[QW][U]) {
#pragma unroll
    for (int w = 0; w < QW; ++w) {
        lc[w] = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) oc[w][u] = 0.0f;
    }
    if (Whole && n == kernels::k_attn_chunk && hd == 32 * U) {   // uniform across the warp
        for (int j0 = 0; j0 < kernels::k_attn_chunk; j0 += JB) {
            float vv[JB][U];
#pragma unroll
            for (int jj = 0; jj < JB; ++jj)
#pragma unroll
                for (int u = 0; u < U; ++u) vv[jj][u] = v0[(j0 + jj) * v_stride + lane + 32 * u];
#pragma unroll
            for (int jj = 0; jj < JB; ++jj)
#pragma unroll
                for (int w = 0; w < QW; ++w) {
                    const float ej = __shfl_sync(k_full, e[w], j0 + jj);
                    lc[w] = __fadd_rn(lc[w], ej);
#pragma unroll
                    for (int u = 0; u < U; ++u) oc[w][u] = __fadd_rn(oc[w][u], __fmul_rn(ej, vv[jj][u]));
                }
        }
        return;
    }
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
#pragma unroll
            for (int w = 0; w < QW; ++w) {
                const float ej = __shfl_sync(k_full, e[w], j0 + jj);
                lc[w] = __fadd_rn(lc[w], ej);
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int d = lane + 32 * u;
                    if (d < hd) oc[w][u] = __fadd_rn(oc[w][u], __fmul_rn(ej, vv[jj][u]));
                }
            }
        }
    }
}

// The merge's factors for chunks cg .. cg + n_here - 1 (n_here <= 32); my_mc: lane w holds chunk
// cg + w's max (lanes w < n_here); m: the running max before them. The running max is a prefix of
// `mc > m ? mc : m` over the chunks, and chunk w's two factors exp(m_before - m_after),
// exp(mc - m_after) depend only on it, so lane w computes chunk w's factors a_w, bc_w, all chunks
// at once (chunk 0 of a row has none: 1, 1). Only l * a + lc * bc and o * a + oc * bc stay
// serial (merge_chunk). Returns the max after the n_here chunks.
//   The prefix: `keep the earlier unless the later is strictly greater` picks the first maximal
// element, which any bracketing finds when no value is NaN, so a 5-step shuffle scan gives the
// serial walk's values. With a NaN the bracketing matters (1, NaN, 2 walks to 2; NaN, 2 first gives
// NaN, then 1 against NaN keeps 1), so the serial walk runs (a compare a chunk; 32 chunks of it
// were ~1,000 cycles of the split kernel's merge).
__device__ inline float merge_factors(int64_t cg, int n_here, float my_mc, float m, int lane, float& a_w, float& bc_w) {
    float my_mb = 0.0f, my_ma = 0.0f, m_after = m;
    const bool nan = __any_sync(k_full, lane < n_here && my_mc != my_mc) || (cg != 0 && m != m);
    if (!nan) {
        float s = my_mc;   // the prefix over chunks cg .. cg + lane
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float earlier = __shfl_up_sync(k_full, s, off);
            if (lane >= off) s = s > earlier ? s : earlier;
        }
        my_ma = cg == 0 ? s : (s > m ? s : m);
        const float before = __shfl_up_sync(k_full, my_ma, 1);
        my_mb = lane == 0 ? m : before;
        m_after = __shfl_sync(k_full, my_ma, n_here - 1);
    } else {
        for (int w = 0; w < n_here; ++w) {
            const float mc = __shfl_sync(k_full, my_mc, w);
            const float mb = m_after;
            m_after = cg + w == 0 ? mc : (mc > mb ? mc : mb);
            if (lane == w) {   // selects, not work: the exponentials run once below
                my_mb = mb;
                my_ma = m_after;
            }
        }
    }
    a_w = 1.0f;
    bc_w = 1.0f;
    if (lane < n_here && cg + lane != 0) {
        a_w = kernels::exp_f32(__fsub_rn(my_mb, my_ma));
        bc_w = kernels::exp_f32(__fsub_rn(my_mc, my_ma));
    }
    return m_after;
}

// Chunk c = cg + w merged into the running (l, o) (the lane's dims first + step * u): the first
// chunk of the row sets them, each later one is l = l * a + lc * bc, o = o * a + oc * bc (the CPU's
// merge; each dimension on its own, so which lane owns which dimensions changes no bit).
// oc(u): the chunk's V sum at dim first + step * u (read only where that dim exists).
template <int U, class OC>
__device__ inline void merge_chunk(int64_t cg, int w, float lc, OC oc, float a_w, float bc_w, int hd, int first, int step,
                                   float& l, float (&o)[U]) {
    if (cg + w == 0) {
        l = lc;
#pragma unroll
        for (int u = 0; u < U; ++u) o[u] = first + step * u < hd ? oc(u) : 0.0f;
        return;
    }
    const float a = __shfl_sync(k_full, a_w, w), bc = __shfl_sync(k_full, bc_w, w);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, bc));
#pragma unroll
    for (int u = 0; u < U; ++u)
        if (first + step * u < hd) o[u] = __fadd_rn(__fmul_rn(o[u], a), __fmul_rn(oc(u), bc));
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
    __shared__ __align__(16) float qs[kernels::k_max_head_dim];
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
            float score[1] = {0.0f};
            if (lane < n) chunk_scores<1>(k0 + lane * kv_stride, qs, 0, hd, vec16, p.scale, score);
            const float mc = chunk_max(score[0], n, lane);
            const float e[1] = {lane < n ? kernels::exp_f32(__fsub_rn(score[0], mc)) : 0.0f};
            float lc[1], oc[1][U];
            chunk_v_sums<U, k_attn_vbatch<U>, 1, false>(vc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd, kv_stride, n, e, hd,
                                                 lane, lc, oc);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int d = lane + 32 * u;
                if (d < hd) s_oc[warp][d] = oc[0][u];
            }
            if (lane == 0) {
                s_mc[warp] = mc;
                s_lc[warp] = lc[0];
            }
        }
        __syncthreads();
        if (warp == 0) {
            const int n_here = static_cast<int>(n_chunks - cg < k_attn_warps ? n_chunks - cg : k_attn_warps);
            float a_w, bc_w;
            const float m_after = merge_factors(cg, n_here, lane < n_here ? s_mc[lane] : 0.0f, m, lane, a_w, bc_w);
            for (int w = 0; w < n_here; ++w)
                merge_chunk<U>(cg, w, s_lc[w], [&](int u) { return s_oc[w][lane + 32 * u]; }, a_w, bc_w, hd, lane, 32, l, o);
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


// Prefill and long windows: one block per (KV head, tile of R rows), one warp per query or per
// two (QW, attention_rows_kernel: block query q is row r0 + q / G, head kvh * G + q % G, the G =
// n_head / n_kv_head query heads that share the KV head).
// Each chunk of k_attn_chunk KV positions is staged once in shared memory for the block's
// queries (attention_kernel reads every K and V row once per query head and row: for a 512-row
// prefill of a 32/4-head model that is 8 x 512 reads of each row, and the kernel was a third of
// the prefill on the H200, 1.46 ms a layer, tests/gpu/decode_profile.h200.txt). Each warp then
// does attention_kernel's per-chunk operations for its queries (chunk_scores, chunk_max, the
// exponentials, chunk_v_sums) and merges the chunk into its running (max, sum, output) at once
// with the merge expression, chunks in order: the serial walk whose bits attention_kernel's
// parallel merge reproduces. So both kernels give the CPU's bits for every row (ops_parity).
// U: output dimensions a lane keeps, 4 (head_dim <= 128) or 8 (<= 256: the Qwen hybrids' gated
// attention); the staged rows are 32 U floats wide.
constexpr int k_rows_warps = 16;
template <int U>
constexpr int k_rows_hd = 32 * U;
template <int U>
constexpr int k_rows_kstride = k_rows_hd<U> + 4;   // K rows padded: float4 reads of 8 lanes hit distinct banks
// V rows loaded ahead of their adds: 4 from shared memory (16 from global memory in the one-row
// kernel). Two blocks an SM would need 64 registers a thread: ptxas then spills 28-72 bytes
// whatever this batch (1, 2, 4, 8 tried), so the kernel keeps one block (16 warps) an SM. With
// 16 output floats a lane or more (U x QW: heads of 256 at two queries a warp) 4 rows spilled
// 52-80 bytes at 128 registers whatever the K loop's unroll; 2 rows, with the K loop unrolled
// twice (chunk_scores), take 100 registers and spill none.
template <int U, int QW>
constexpr int k_rows_vbatch = U * QW < 16 ? 4 : 2;
// Blocks (chunk lanes) per KV head of attention_split_kernel: up to 4,096 positions (128 chunks)
// every block takes one chunk, so the chunks' K and V rows are all requested at once (4 KV heads
// x 128 = 512 blocks of the 30B shape; 41 KB of shared memory and 42 registers a thread each at
// U = 4). With 32 lanes a block took 4 chunks one after the other at 4,096 positions: 39.7 us
// against 10.0 at 512 (kernel_bench, H200, session 27), and sluice's split decode at 4K depth ran
// 3 ms a token slower than at 0 (bench/RESULTS.md, session 31). Lanes past the step's chunks
// return at once, so a short context pays only their launch.
constexpr int64_t k_split_lanes = 128;
// A record's V sum starts at this float (attention_split_record_floats).
constexpr int k_split_rec_v = 4;

// One chunk's K and V rows of a KV head in shared memory (attention_rows_kernel keeps two).
template <int U>
struct rows_chunk_buffers {
    float k[kernels::k_attn_chunk][k_rows_kstride<U>];   // [k_attn_chunk, head_dim (+ pad)]
    float v[kernels::k_attn_chunk][k_rows_hd<U>];        // [k_attn_chunk, head_dim]
};

// stage_chunk's asynchronous copies: Q4 16-byte words a row (0: q4, known at run time only).
template <int U, int Q4>
__device__ inline void stage_words(const float* kg, const float* vg, int64_t kv_stride, int j0, int n, int q4_run,
                                   rows_chunk_buffers<U>& b) {
    const int q4 = Q4 > 0 ? Q4 : q4_run;
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int i = j0 * q4 + tid; i < n * q4; i += nt) {
        const int j = i / q4, d = 4 * (i - j * q4);
        copy16(&b.k[j][d], kg + j * kv_stride + d);
        copy16(&b.v[j][d], vg + j * kv_stride + d);
    }
}

// The block's threads copy K and V rows j0..n-1 of a chunk (kg, vg: the chunk's first row of this
// KV head, rows kv_stride floats apart) into b: as asynchronous 16-byte copies where every row
// is 16-byte aligned (head_dim and the stride multiples of 4: every model here; the caller then
// calls stage_wait before its barrier), else float by float. Copies only. The copies of a thread
// are all in flight at once: a float4 load-then-store loop took a memory latency per iteration
// (4 a thread for a 32-position chunk of 128-wide heads at 256 threads).
template <int U>
__device__ inline void stage_chunk(const float* kg, const float* vg, int64_t kv_stride, int j0, int n, int hd,
                                   rows_chunk_buffers<U>& b) {
    auto& sk = b.k;
    auto& sv = b.v;
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    const bool vec4 = hd % 4 == 0 && kv_stride % 4 == 0 && ((reinterpret_cast<uintptr_t>(kg) | reinterpret_cast<uintptr_t>(vg)) & 15) == 0;
    if (vec4) {
        // Heads as wide as the buffer's rows (128 at U = 4, 256 at 8) split the index with a
        // shift: a division by a run-time width is a few dozen instructions, once per copy.
        if (hd == k_rows_hd<U>)
            stage_words<U, k_rows_hd<U> / 4>(kg, vg, kv_stride, j0, n, hd / 4, b);
        else
            stage_words<U, 0>(kg, vg, kv_stride, j0, n, hd / 4, b);
        return;
    }
    for (int i = j0 * hd + tid; i < n * hd; i += nt) {
        const int j = i / hd, d = i - j * hd;
        sk[j][d] = kg[j * kv_stride + d];
        sv[j][d] = vg[j * kv_stride + d];
    }
}

// QW queries' chunk of n staged positions (the warp's part of a staged chunk; qs: the first
// query, the others k_rows_hd<U> floats apart): for each, its max mc, exp sum lc and V sum oc
// (dims lane + 32u), attention_kernel's per-chunk operations on shared memory. The K and V
// values are read from shared memory once for the QW queries.
template <int U, int QW>
__device__ inline void staged_chunk(const rows_chunk_buffers<U>& b, const float* qs, int n, int hd, bool vec16, float scale,
                                    int lane, float (&mc)[QW], float (&lc)[QW], float (&oc)[QW][U]) {
    float score[QW], e[QW];
#pragma unroll
    for (int w = 0; w < QW; ++w) score[w] = 0.0f;
    if (lane < n) chunk_scores<QW>(b.k[lane], qs, k_rows_hd<U>, hd, vec16, scale, score);
#pragma unroll
    for (int w = 0; w < QW; ++w) {
        mc[w] = chunk_max(score[w], n, lane);
        e[w] = lane < n ? kernels::exp_f32(__fsub_rn(score[w], mc[w])) : 0.0f;
    }
    chunk_v_sums<U, k_rows_vbatch<U, QW>, QW>(&b.v[0][0], k_rows_hd<U>, n, e, hd, lane, lc, oc);
}

// QW: queries a warp (1, or 2 where G is even: two heads of one row, which see the same
// positions, so the chunk's K and V values read from shared memory serve both; the kernel was
// bound by those reads: a 2048-row chunk at 0 and 30,720 positions ran at 6.1-6.7 TFLOP/s with
// one query a warp, 8.5-9.5 with two, kernel_bench session 18, heads of 128 and of 256).
template <int U, int QW>
__global__ void __launch_bounds__(k_rows_warps * 32)
    attention_rows_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                          int64_t n_rows, int rows_per_block, float* out) {
    wait_prior_grids();   // first: see launch.cuh
    // Two chunk buffers (rows_chunk_buffers), dynamic shared memory: the next chunk's K and V
    // rows are copied while the block computes this one.
    extern __shared__ float4 rows_dyn[];
    rows_chunk_buffers<U>* bufs = reinterpret_cast<rows_chunk_buffers<U>*>(rows_dyn);
    __shared__ __align__(16) float sq[k_rows_warps * QW][k_rows_hd<U>];   // [warps x QW, head_dim] the queries
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int G = p.n_head / p.n_kv_head, hd = p.head_dim;
    const int kvh = static_cast<int>(blockIdx.y);
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
    const int qi = warp * QW;   // the warp's first query of the block: row r0 + qi / G, head kvh * G + qi % G (+ w)
    const int64_t r = r0 + qi / G;
    const int h = kvh * G + qi % G;
    const bool active = qi < G * rows_per_block && r < n_rows;   // uniform in the warp
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    if (active)
        for (int w = 0; w < QW; ++w)
            for (int d = lane; d < hd; d += 32) sq[qi + w][d] = q[(r * p.n_head + h + w) * hd + d];
    const int64_t r_last = (r0 + rows_per_block < n_rows ? r0 + rows_per_block : n_rows) - 1;
    const int64_t n_kv_tile = pos0 + r_last + 1;   // the tile's last row sees the most positions
    const int64_t n_kv = pos0 + r + 1;
    const bool vec16 = hd % 16 == 0;
    float o[QW][U], m[QW], l[QW];
#pragma unroll
    for (int w = 0; w < QW; ++w) {
        m[w] = 0.0f;
        l[w] = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) o[w][u] = 0.0f;
    }
    auto issue = [&](int64_t c0, rows_chunk_buffers<U>& b) {
        const int n_stage = static_cast<int>(n_kv_tile - c0 < kernels::k_attn_chunk ? n_kv_tile - c0 : kernels::k_attn_chunk);
        stage_chunk(kc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd, vc + c0 * kv_stride + static_cast<int64_t>(kvh) * hd,
                    kv_stride, 0, n_stage, hd, b);
    };
    issue(0, bufs[0]);
    for (int64_t c0 = 0, ib = 0; c0 < n_kv_tile; c0 += kernels::k_attn_chunk, ib ^= 1) {
        stage_wait();
        __syncthreads();   // chunk c0 is in bufs[ib] (and sq is written); the previous chunk's reads are done
        if (c0 + kernels::k_attn_chunk < n_kv_tile) issue(c0 + kernels::k_attn_chunk, bufs[ib ^ 1]);
        if (!active || c0 >= n_kv) continue;
        const int n = static_cast<int>(n_kv - c0 < kernels::k_attn_chunk ? n_kv - c0 : kernels::k_attn_chunk);
        float mc[QW], lc[QW], oc[QW][U];
        staged_chunk<U, QW>(bufs[ib], sq[qi], n, hd, vec16, p.scale, lane, mc, lc, oc);
#pragma unroll
        for (int w = 0; w < QW; ++w) {
            if (c0 == 0) {
                m[w] = mc[w];
                l[w] = lc[w];
#pragma unroll
                for (int u = 0; u < U; ++u) o[w][u] = oc[w][u];
            } else {
                const float m_after = mc[w] > m[w] ? mc[w] : m[w];
                const float a = kernels::exp_f32(__fsub_rn(m[w], m_after)), bc = kernels::exp_f32(__fsub_rn(mc[w], m_after));
                l[w] = __fadd_rn(__fmul_rn(l[w], a), __fmul_rn(lc[w], bc));
#pragma unroll
                for (int u = 0; u < U; ++u) o[w][u] = __fadd_rn(__fmul_rn(o[w][u], a), __fmul_rn(oc[w][u], bc));
                m[w] = m_after;
            }
        }
    }
    if (active) {
#pragma unroll
        for (int w = 0; w < QW; ++w) {
            float* orow = out + (r * p.n_head + h + w) * hd;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int d = lane + 32 * u;
                if (d < hd) orow[d] = __fdiv_rn(o[w][u], l[w]);
            }
        }
    }
}


// A decode step (one row) split over the GPU in two launches.
// 1. attention_split_kernel: one block per (KV head, chunk lane s), grid (n_kv_head, S); the
// block's G = n_head / n_kv_head warps are the query heads sharing the KV head. Block s takes
// chunks s, s + S, s + 2S, ...: it stages each chunk's K and V rows in shared memory once for its
// G queries (as attention_rows_kernel), and each warp computes its head's chunk (chunk_scores,
// chunk_max, the exponentials, chunk_v_sums: attention_kernel's operations) into a record in
// global memory (the chunk's max, exp sum and V sum). The rows of the block's first chunk before
// the step's position were written by earlier steps: they are staged before the wait for the
// kernel before (launch.cuh), which writes only the row at the position (and q).
// 2. attention_merge_kernel merges every chunk of a head in chunk order with attention_kernel's
// merge (the prefix of maxima, then the serial l / o updates), so the bits are the one-block
// kernel's, which are the CPU's.
// Why: attention_kernel gives a decode step one block per head, 32 blocks on 132 SMs reading
// every K/V row once per query head; at 512 positions that took 16.3 us a layer (kernel_bench,
// session 9); this reads each row once per KV head from all SMs. Until session 32 the last chunk
// block of a KV head to arrive (an atomic counter) merged its G heads: one SM read every record
// of the KV head (540 KB at 4,096 positions), and with 128 chunk lanes the kernel took 31.3 us
// there against 9.1 at 512 (kernel_bench, H100, records in L2). In two launches: 26.9 against
// 7.6 us (kernel_bench, H200), and the 30B shape's whole-GPU decode at 4,096 positions 4.88 ms a
// token against 5.75 before session 32 and 3.67 at 512 (decode_bench, H200, bench/RESULTS.md).
// The rest of the difference from 512 positions points to the chunk kernel's instruction count:
// at 4,096 positions it runs in one wave (5 blocks an SM), 41.7% of warps resident, ~2.5
// instructions issued a cycle an SM, DRAM at 25% of peak (Nsight Compute, H100, session 33): about
// 2,000 instructions a warp per chunk (an estimate from those figures) against ~500 loads and
// operations (the PTX has a bounds check and a branch before each of chunk_v_sums' loads, and
// stage_chunk divides by the run-time width).
//   rec: [n_head, max_chunks, attention_split_record_floats(head_dim)] (max, exp sum, 2 unused,
//   V sum from float 4).
//   The chunk's K and V rows (rows_chunk_buffers<U>) are dynamic shared memory: 66 KB at U = 8.
template <int U>
__global__ void __launch_bounds__(k_rows_warps * 32)
    attention_split_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                           const int32_t* pos_dev, float* rec, int64_t max_chunks) {
    // The position: copied in before the step's first launch (pos_dev), so settled here.
    if (pos_dev) pos0 = *pos_dev;
    extern __shared__ float4 split_dyn[];
    rows_chunk_buffers<U>& chunk = *reinterpret_cast<rows_chunk_buffers<U>*>(split_dyn);   // this KV head's chunk rows
    __shared__ __align__(16) float sq[k_rows_warps][k_rows_hd<U>];   // [warps, head_dim] each warp's query
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int G = p.n_head / p.n_kv_head, hd = p.head_dim;
    const int kvh = static_cast<int>(blockIdx.x);
    const int h = kvh * G + warp;
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    const int64_t rs = attention_split_record_floats(hd);   // floats per record
    float* hrec = rec + static_cast<int64_t>(h) * max_chunks * rs;
    const int64_t n_kv = static_cast<int64_t>(pos0) + 1;
    const int64_t n_chunks = (n_kv + kernels::k_attn_chunk - 1) / kernels::k_attn_chunk;
    if (n_chunks > max_chunks) __trap();   // the caller sizes rec for its cache: never
    if (blockIdx.y >= n_chunks) return;    // a lane with no chunk at this position
    const bool vec16 = hd % 16 == 0;
    auto rows_of = [&](int64_t c) {
        return static_cast<int>(n_kv - c * kernels::k_attn_chunk < kernels::k_attn_chunk ? n_kv - c * kernels::k_attn_chunk
                                                                                          : kernels::k_attn_chunk);
    };
    auto k_rows = [&](int64_t c) { return kc + c * kernels::k_attn_chunk * kv_stride + static_cast<int64_t>(kvh) * hd; };
    auto v_rows = [&](int64_t c) { return vc + c * kernels::k_attn_chunk * kv_stride + static_cast<int64_t>(kvh) * hd; };
    // The first chunk's rows before the position, staged before the wait (above).
    const int64_t first_row = static_cast<int64_t>(blockIdx.y) * kernels::k_attn_chunk;
    const int early_rows = static_cast<int>(pos0 - first_row < rows_of(blockIdx.y) ? pos0 - first_row : rows_of(blockIdx.y));
    if (early_rows > 0) stage_chunk<U>(k_rows(blockIdx.y), v_rows(blockIdx.y), kv_stride, 0, early_rows, hd, chunk);
    wait_prior_grids();   // see launch.cuh
    for (int d = lane; d < hd; d += 32) sq[warp][d] = q[static_cast<int64_t>(h) * hd + d];
    for (int64_t c = blockIdx.y; c < n_chunks; c += gridDim.y) {
        const int n = rows_of(c);
        __syncthreads();   // the previous chunk's reads are done (and sq is written)
        stage_chunk<U>(k_rows(c), v_rows(c), kv_stride, c == blockIdx.y ? early_rows : 0, n, hd, chunk);
        stage_wait();
        __syncthreads();
        float mc[1], lc[1], oc[1][U];
        staged_chunk<U, 1>(chunk, sq[warp], n, hd, vec16, p.scale, lane, mc, lc, oc);
        float* r = hrec + c * rs;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int d = lane + 32 * u;
            if (d < hd) r[k_split_rec_v + d] = oc[0][u];
        }
        if (lane == 0) {
            r[0] = mc[0];
            r[1] = lc[0];
        }
    }
}

// The merge of attention_split_kernel's records: a block per heads_per_block heads, a warp per 32
// dimensions of a head (the lane: one dimension), so the records of a 4,096-position step are read
// by 16 SMs (32 heads of 128) rather than by one block of each KV head. Each warp walks its head's
// chunks in groups of 32: the group's maxima and exp sums give every chunk's factors at once
// (merge_factors), then its 32 V sums are merged one after the other; the next group's records
// are loaded while this one is merged (64 floats of registers a lane: a block of this kernel
// needs no company on its SM).
// With act (act_width 32 or 256, a whole number of blocks in the block's heads: heads_per_block
// heads of head_dim floats) the block also writes those heads' int8 activation blocks of the
// output row (quantize_block_warp, as quantize_act_rows makes them from the same floats) for the
// output projection, which then skips its quantiser launch (2.2 us, bench/gpu/step_trace, H200,
// session 27).
constexpr int k_merge_group = 32;
constexpr int k_merge_max_floats = kernels::k_max_head_dim;   // a block's heads' outputs (act)
__global__ void __launch_bounds__(k_merge_max_floats)
    attention_merge_kernel(kernels::attention_params p, const float* rec, int64_t max_chunks, int32_t pos0,
                           const int32_t* pos_dev, int heads_per_block, float* out, std::byte* act, int act_width) {
    if (pos_dev) pos0 = *pos_dev;   // settled before the step's first launch
    __shared__ float heads[k_merge_max_floats];   // [heads_per_block, head_dim] the block's outputs (act)
    wait_prior_grids();   // the records: written by the launch before
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int hd = p.head_dim;
    const int warps_per_head = (hd + 31) / 32;
    const int hb = warp / warps_per_head;   // the block's head
    const int h = static_cast<int>(blockIdx.x) * heads_per_block + hb;
    const int d = (warp % warps_per_head) * 32 + lane;
    const int64_t rs = attention_split_record_floats(hd);
    const float* hrec = rec + static_cast<int64_t>(h < p.n_head ? h : 0) * max_chunks * rs;
    const int64_t n_chunks = (static_cast<int64_t>(pos0) + kernels::k_attn_chunk) / kernels::k_attn_chunk;
    const bool mine = h < p.n_head && d < hd;
    // Records read from L2 (__ldcg: written by the launch before, on other SMs).
    auto load_group = [&](int64_t cg, float& mc, float& lc, float (&v)[k_merge_group]) {
        const bool stats = cg + lane < n_chunks;
        mc = stats ? __ldcg(hrec + (cg + lane) * rs) : 0.0f;
        lc = stats ? __ldcg(hrec + (cg + lane) * rs + 1) : 0.0f;
#pragma unroll
        for (int w = 0; w < k_merge_group; ++w)
            v[w] = mine && cg + w < n_chunks ? __ldcg(hrec + (cg + w) * rs + k_split_rec_v + d) : 0.0f;
    };
    float group_mc, group_lc, group_v[k_merge_group], next_mc = 0.0f, next_lc = 0.0f, next_v[k_merge_group];
    load_group(0, group_mc, group_lc, group_v);
    float o[1] = {0.0f};
    float m = 0.0f, l = 0.0f;
    for (int64_t cg = 0; cg < n_chunks; cg += k_merge_group) {
        if (cg + k_merge_group < n_chunks) load_group(cg + k_merge_group, next_mc, next_lc, next_v);
        const int n_here = static_cast<int>(n_chunks - cg < k_merge_group ? n_chunks - cg : k_merge_group);
        float a_w, bc_w;
        const float m_after = merge_factors(cg, n_here, group_mc, m, lane, a_w, bc_w);
#pragma unroll
        for (int w = 0; w < k_merge_group; ++w) {
            if (w >= n_here) break;   // uniform
            merge_chunk<1>(cg, w, __shfl_sync(k_full, group_lc, w), [&](int) { return group_v[w]; }, a_w, bc_w, hd, d, 32,
                           l, o);
        }
        m = m_after;
        group_mc = next_mc;
        group_lc = next_lc;
#pragma unroll
        for (int w = 0; w < k_merge_group; ++w) group_v[w] = next_v[w];
    }
    if (mine) {
        const float r = __fdiv_rn(o[0], l);
        out[static_cast<int64_t>(h) * hd + d] = r;
        if (act) heads[hb * hd + d] = r;
    }
    if (!act) return;
    __syncthreads();
    const int blocks = heads_per_block * hd / act_width;   // activation blocks of the block's heads
    const int n_warps = static_cast<int>(blockDim.x / 32);
    for (int b = warp; b < blocks; b += n_warps) {
        const int64_t gb = static_cast<int64_t>(blockIdx.x) * blocks + b;
        if (act_width == 256) {
            quant::act_block256* dst = reinterpret_cast<quant::act_block256*>(act) + gb;
            quantize_block_warp<256>(heads + b * 256, &dst->d, dst->q, dst->bsums);
        } else {
            quant::act_block32* dst = reinterpret_cast<quant::act_block32*>(act) + gb;
            quantize_block_warp<32>(heads + b * 32, &dst->d, dst->q, nullptr);
        }
    }
}

// A tile of R rows a block (R = k_rows_warps x QW / G): two chunk buffers, 67 KB at U = 4, 132 KB
// at 8.
template <int U, int QW>
void launch_rows(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
                 int64_t n_rows, float* out, cudaStream_t stream) {
    const int R = k_rows_warps * QW / (p.n_head / p.n_kv_head);
    const int64_t tiles = (n_rows + R - 1) / R;
    if (tiles > 0x7fffffff) fail("cuda: attention: {} row tiles exceed one launch", tiles);
    constexpr size_t dyn = 2 * sizeof(rows_chunk_buffers<U>);
    opt_in_shared(attention_rows_kernel<U, QW>, dyn, "attention rows");
    launch(attention_rows_kernel<U, QW>, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(p.n_kv_head)),
           dim3(k_rows_warps * 32), dyn, stream, p, q, kc, vc, pos0, n_rows, R, out);
}

// Two queries a warp where the query heads of a KV head pair up (G even, at most 32), else one.
template <int U>
void launch_rows(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
                 int64_t n_rows, float* out, cudaStream_t stream) {
    const int G = p.n_head / p.n_kv_head;
    if (G % 2 == 0 && G <= 2 * k_rows_warps)
        launch_rows<U, 2>(p, q, kc, vc, pos0, n_rows, out, stream);
    else
        launch_rows<U, 1>(p, q, kc, vc, pos0, n_rows, out, stream);
}

template <int U>
void launch_split(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
                  const int32_t* pos_dev, const attention_split& split, int64_t lanes, float* out, std::byte* act,
                  int act_width, int act_heads, cudaStream_t stream) {
    constexpr size_t dyn = sizeof(rows_chunk_buffers<U>);
    opt_in_shared(attention_split_kernel<U>, dyn, "split decode attention");
    launch(attention_split_kernel<U>, dim3(static_cast<unsigned>(p.n_kv_head), static_cast<unsigned>(lanes)),
           dim3(static_cast<unsigned>(p.n_head / p.n_kv_head * 32)), dyn, stream, p, q, kc, vc, pos0, pos_dev,
           split.records, split.max_chunks);
    // Heads a merge block: those of whole activation blocks where act is made (act_heads, from
    // attention_split_act_heads: >= 1 whenever act is set), else 256 threads' worth (eight warps
    // of 32 dimensions).
    const int warps_per_head = (p.head_dim + 31) / 32;
    const int heads_per_block = act ? act_heads : std::max(1, 8 / warps_per_head);
    const int64_t blocks = (p.n_head + heads_per_block - 1) / heads_per_block;
    launch(attention_merge_kernel, dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(heads_per_block * warps_per_head * 32)),
           0, stream, p, split.records, split.max_chunks, pos0, pos_dev, heads_per_block, out, act, act_width);
}

}  // namespace

int attention_split_act_heads(const kernels::attention_params& p, int width) {
    const int hd = p.head_dim;
    if ((width != 32 && width != 256) || hd < 1 || p.n_head < 1) return 0;
    const int heads = width % hd == 0 ? width / hd : hd % width == 0 ? 1 : 0;
    if (heads == 0 || p.n_head % heads != 0) return 0;
    // The merge block's threads: a warp per 32 dimensions of each head.
    return heads * ((hd + 31) / 32) * 32 <= k_merge_max_floats ? heads : 0;
}

int64_t attention_split_blocks(const kernels::attention_params& p, int64_t max_chunks) {
    if (p.head_dim > k_rows_hd<8> || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0 ||
        p.n_head / p.n_kv_head > k_rows_warps)
        return 0;
    return max_chunks < k_split_lanes ? max_chunks : k_split_lanes;
}

bool attention(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
               int64_t n_rows, float* out, void* stream, const int32_t* pos_dev, const attention_split* split,
               const attention_act* act_out) {
    if (p.head_dim < 1 || p.head_dim > kernels::k_max_head_dim || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0)
        fail("cuda: attention: head_dim {} (1..{}), n_head {}, n_kv_head {}", p.head_dim, kernels::k_max_head_dim,
             p.n_head, p.n_kv_head);
    const int64_t total = n_rows * p.n_head;
    if (total <= 0) return false;
    if (total > 0x7fffffff) fail("cuda: attention: {} (row, head) pairs exceed one launch", total);
    // Many rows (a prefill chunk): the rows kernel, K and V staged once per block for up to 32
    // queries (16 where G is odd); same bits (see there). It takes head_dim <= 256 and at most 16
    // query heads a KV head, or 32 where G is even; a decode step or a verify window (<= 16 rows) keeps the chunk-parallel kernel, whose
    // one block per (row, head) finishes a single row sooner. Head dims up to 128 (the MoE
    // families, SmolLM2) keep 4 output dimensions a lane, up to 256 (the hybrids' gated attention)
    // 8: before session 18 a head of 256 took the one-block-per-(row, head) kernel, and the
    // 35B shape's 32K prefill ran at a quarter of its 2K rate (bench/RESULTS.md, session 17).
    const int G = p.n_head / p.n_kv_head;
    const auto s = static_cast<cudaStream_t>(stream);
    if (!pos_dev && n_rows > k_rows_min && p.head_dim <= k_rows_hd<8> && (G <= k_rows_warps || (G % 2 == 0 && G <= 2 * k_rows_warps))) {
        if (p.head_dim <= k_rows_hd<4>)
            launch_rows<4>(p, q, kc, vc, pos0, n_rows, out, s);
        else
            launch_rows<8>(p, q, kc, vc, pos0, n_rows, out, s);
        return false;
    }
    // A decode step with the split records: all SMs (see attention_split_kernel).
    const int64_t lanes = split && n_rows == 1 ? attention_split_blocks(p, split->max_chunks) : 0;
    if (lanes > 0) {
        if (!pos_dev && (pos0 + kernels::k_attn_chunk) / kernels::k_attn_chunk > split->max_chunks)
            fail("cuda: attention: position {} needs more than the split records' {} chunks", pos0, split->max_chunks);
        const int width = act_out && act_out->act ? act_out->width : 0;
        const int act_heads = attention_split_act_heads(p, width);
        const bool quantise = act_heads > 0;
        std::byte* act = quantise ? act_out->act : nullptr;
        if (p.head_dim <= k_rows_hd<4>)
            launch_split<4>(p, q, kc, vc, pos0, pos_dev, *split, lanes, out, act, width, act_heads, s);
        else
            launch_split<8>(p, q, kc, vc, pos0, pos_dev, *split, lanes, out, act, width, act_heads, s);
        return quantise;
    }
    // 4 dimensions a lane up to head_dim 128, 8 up to 256: fewer registers than the 16 of 512.
    auto kernel = p.head_dim <= 128 ? attention_kernel<4> : p.head_dim <= 256 ? attention_kernel<8> : attention_kernel<k_dims_per_lane>;
    launch(kernel, dim3(static_cast<unsigned>(total)), dim3(k_attn_warps * 32), 0, static_cast<cudaStream_t>(stream), p,
           q, kc, vc, pos0, pos_dev, n_rows, out);
    return false;
}

}  // namespace sluice::cuda
