// Causal attention on the device, operation for operation kernels::attention (cpu/attention.cpp):
// per (row, head) the KV positions in chunks of k_attn_chunk, each chunk's scores (16-lane dot,
// scale), its max, exponentials, exp sum and weighted V sum, merged into a running (max, sum,
// output) in chunk order with the CPU's expressions; exp from kernels/math.h, every float
// operation rounded on its own. Kernels with the same bits: the split pair (attention_split.cuh:
// a decode step or a verify window given split records, chunks over every SM, then their merge),
// attention_kernel (the same rows without records: a block per (row, head), chunks side by side)
// and attention_rows_kernel (a prefill chunk: a block per (KV head, rows), K and V staged once
// for its queries).
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

// One later chunk into the running value: v = v * a + c * bc (the CPU's merge step, for l with
// the chunk's exp sum, for o with its V sum).
__device__ inline float merge_step(float v, float a, float c, float bc) {
    return __fadd_rn(__fmul_rn(v, a), __fmul_rn(c, bc));
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
    l = merge_step(l, a, lc, bc);
#pragma unroll
    for (int u = 0; u < U; ++u)
        if (first + step * u < hd) o[u] = merge_step(o[u], a, oc(u), bc);
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

}  // namespace
}  // namespace sluice::cuda

// The rows kernel (prefill, long windows) and the split decode kernels, in this namespace.
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_split.cuh"

namespace sluice::cuda {
namespace {

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

// The split kernel and its merge for n_rows rows (q, out, act and gate: the window's first row's),
// in groups of the records' max_rows rows: a launch pair per group, the records reused (the stream
// orders the groups).
template <int U>
void launch_split(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
                  const int32_t* pos_dev, const attention_split& split, int64_t lanes, int64_t n_rows, float* out,
                  std::byte* act, int act_width, int act_heads, const float* gate, cudaStream_t stream) {
    constexpr size_t dyn = sizeof(rows_chunk_buffers<U>);
    const auto kernel = n_rows == 1 ? attention_split_kernel<U, false> : attention_split_kernel<U, true>;
    opt_in_shared(kernel, dyn, "split decode attention");
    // Heads a merge block: those of whole activation blocks where act is made (act_heads, from
    // attention_split_act_heads: >= 1 whenever act is set), else 256 threads' worth (eight warps
    // of 32 dimensions).
    const int warps_per_head = (p.head_dim + 31) / 32;
    const int heads_per_block = act ? act_heads : std::max(1, 8 / warps_per_head);
    const int64_t blocks = (p.n_head + heads_per_block - 1) / heads_per_block;
    const int64_t group = std::max<int64_t>(1, split.max_rows);
    for (int64_t row0 = 0; row0 < n_rows; row0 += group) {
        const auto rows = static_cast<unsigned>(std::min(group, n_rows - row0));
        launch(kernel, dim3(static_cast<unsigned>(p.n_kv_head), static_cast<unsigned>(lanes), rows),
               dim3(static_cast<unsigned>(p.n_head / p.n_kv_head * 32)), dyn, stream, p, q, kc, vc, pos0, pos_dev,
               split.records, split.max_chunks, static_cast<int>(row0));
        launch(attention_merge_kernel, dim3(static_cast<unsigned>(blocks), rows),
               dim3(static_cast<unsigned>(heads_per_block * warps_per_head * 32)), 0, stream, p, split.records,
               split.max_chunks, pos0, pos_dev, heads_per_block, out, act, act_width, gate, static_cast<int>(row0));
    }
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
    // query heads a KV head, or 32 where G is even; a decode step or a verify window (<= 16 rows)
    // keeps the split pair or the chunk-parallel kernel, whose blocks finish a single row sooner.
    // Head dims up to 128 (the MoE
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
    // A decode step or a verify window (up to k_split_max_rows rows) with the split records: all
    // SMs (see attention_split_kernel). A window took the one-block kernel before session 44,
    // whose blocks each walk every position (one row of the 30B shape's 32/4 heads at 4,096
    // positions: 114.6 us against 20.6 for the split pair, kernel_bench, H100, session 43).
    static_assert(k_split_max_rows <= k_rows_min, "a window the split pair takes is not a prefill chunk");
    int64_t lanes = split && n_rows <= k_split_max_rows ? attention_split_blocks(p, split->max_chunks) : 0;
    // A window at a position the host knows: no more lanes than its last row has chunks (the
    // others would exit at once; the chunks a lane takes change no bit). A decode step keeps the
    // lanes of its records, as its graphs replay at any position.
    if (lanes > 0 && n_rows > 1 && !pos_dev)
        lanes = std::min<int64_t>(lanes, (pos0 + n_rows - 1 + kernels::k_attn_chunk) / kernels::k_attn_chunk);
    if (lanes > 0) {
        if (!pos_dev && (pos0 + n_rows - 1 + kernels::k_attn_chunk) / kernels::k_attn_chunk > split->max_chunks)
            fail("cuda: attention: position {} needs more than the split records' {} chunks", pos0 + n_rows - 1,
                 split->max_chunks);
        const int width = act_out && act_out->act ? act_out->width : 0;
        const int act_heads = attention_split_act_heads(p, width);
        const bool quantise = act_heads > 0;
        std::byte* act = quantise ? act_out->act : nullptr;
        const float* gate = quantise ? act_out->gate : nullptr;   // applied with the blocks only (attention_act)
        if (p.head_dim <= k_rows_hd<4>)
            launch_split<4>(p, q, kc, vc, pos0, pos_dev, *split, lanes, n_rows, out, act, width, act_heads, gate, s);
        else
            launch_split<8>(p, q, kc, vc, pos0, pos_dev, *split, lanes, n_rows, out, act, width, act_heads, gate, s);
        return quantise;
    }
    // 4 dimensions a lane up to head_dim 128, 8 up to 256: fewer registers than the 16 of 512.
    auto kernel = p.head_dim <= 128 ? attention_kernel<4> : p.head_dim <= 256 ? attention_kernel<8> : attention_kernel<k_dims_per_lane>;
    launch(kernel, dim3(static_cast<unsigned>(total)), dim3(k_attn_warps * 32), 0, static_cast<cudaStream_t>(stream), p,
           q, kc, vc, pos0, pos_dev, n_rows, out);
    return false;
}

}  // namespace sluice::cuda
