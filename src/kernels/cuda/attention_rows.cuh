// The prefill / long-window attention kernel (attention_rows_kernel) and its staging helpers,
// also used by the split decode kernel (attention_split.cuh). Included by attention.cu only,
// after the chunk helpers it calls (chunk_scores, chunk_max, chunk_v_sums, merge_chunk), into the
// same anonymous namespace (as matmul_row_stream.cuh into matmul.cu's).
#pragma once

namespace sluice::cuda {
namespace {

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
    // Blocks in decreasing order of work: a causal tile sees more positions the later its rows,
    // so block b (blockIdx.x + gridDim.x blockIdx.y, the order blocks are dispatched in) takes
    // tile gridDim.x - 1 - b / n_kv_head of KV head b % n_kv_head. In index order the heaviest
    // tiles came last and ran as a tail on part of the SMs. Which block takes a tile moves no
    // arithmetic.
    const int64_t b = static_cast<int64_t>(blockIdx.x) + static_cast<int64_t>(gridDim.x) * blockIdx.y;
    const int kvh = static_cast<int>(b % p.n_kv_head);
    const int64_t r0 = (static_cast<int64_t>(gridDim.x) - 1 - b / p.n_kv_head) * rows_per_block;
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

}  // namespace
}  // namespace sluice::cuda
