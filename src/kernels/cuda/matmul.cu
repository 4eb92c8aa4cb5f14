// Quantised matmul with int8 activations (dp4a), bit-identical to kernels::dot_ref (E3).
//
// One warp computes one output column j (one weight row) for up to 16 activation rows (a
// verify window shares each decoded weight block between its rows), or for one (token, expert)
// pair in expert mode (the expert id read on the device: all routed experts of a layer are one
// launch, grid (column block, pair)). A block of QK elements is split into QK/8 pieces of 8
// elements (quant_decode.cuh), and a lane takes P consecutive pieces: with P = 1 (windows) a
// legacy block (QK 32) takes 4 lanes, so a warp step covers 8 blocks, and a K-quant/I-quant
// super-block (QK 256) the whole warp; one-row launches take P = 4 or 8 (one_row_kernel), so a
// step covers 32 legacy blocks or 4-8 super-blocks. Per row:
//   - each lane: si = sc * dot(q, qx) and sm = mn * sum(qx) over its pieces (dp4a, integers);
//   - the block's lanes add their si / sm (integer adds: exact in any order);
//   - every lane of the block computes the block's fp32 term with dot_ref's expression
//     (block_term: __fmul_rn/__fadd_rn, no contraction);
//   - the terms of the step's blocks are folded into y in block order, y = ((t0 + t1) + t2)..,
//     each lane reading them by shuffle, so every lane holds the same y.
// A row's bits depend only on its own data: no split of the reduction depends on the row count.
//
// Memory: the reduction is a serial chain per column, so a warp that fetched each block's bytes
// when it reached it paid one global-memory latency per block (~10 us for a 2048 x 768 expert,
// 2% of HBM, measured 2026-11-29). Instead the row is staged in chunks of k_chunk_elems
// elements: each warp copies its weight row's chunk into shared memory with 16-byte loads (all
// of them in flight at once), the block copies the chunk of its activation rows (shared by its
// warps) the same way, and the decode then reads shared memory. The arithmetic and its order
// are unchanged.
//
// Float weights (F32/F16/BF16): matmul_float.cu.
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/matmul_common.cuh"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/act_quant_dev.cuh"
#include "kernels/cuda/ops.cuh"

#include "core/error.h"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"
#include "quant/act.h"
#include "quant/iq_tables.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

namespace sluice::cuda {

using mm_detail::k_max_rows;
using mm_detail::k_warps;
using mm_detail::launch_float_matmul;
using mm_detail::launch_router_topk;
using mm_detail::pick_matrix;

namespace {

__device__ uint8_t g_ksigns[128];
__device__ uint8_t g_iq2xxs[256 * 8];
__device__ uint8_t g_iq2xs[512 * 8];
__device__ uint8_t g_iq2s[1024 * 8];
__device__ uint8_t g_iq3xxs[256 * 4];
__device__ uint8_t g_iq3s[512 * 4];
__device__ int8_t g_kv_iq4nl[16];
__device__ int8_t g_kv_mxfp4[16];

__device__ inline iq_tables device_tables() {
    return iq_tables{g_ksigns, g_iq2xxs, g_iq2xs, g_iq2s, g_iq3xxs, g_iq3s, g_kv_iq4nl, g_kv_mxfp4};
}

constexpr int k_warps_max = 8;        // mm_quant_kernel: 4 or 8 warps a block (the launch picks)
constexpr int k_chunk_elems = 2048;   // elements of a row staged in shared memory at a time

// Bytes of shared memory that hold `len` bytes copied from any address by stage() below.
constexpr int stage_region(int len) { return ((len + 15) / 16 + 1) * 16; }

template <dtype T, int ELEMS = k_chunk_elems>
struct stage_sizes {
    static constexpr int blocks = ELEMS / fmt_traits<T>::qk;                           // per chunk
    static constexpr int w_region = stage_region(blocks * fmt_traits<T>::block_bytes);  // per warp
    static constexpr int a_region = stage_region(blocks * fmt_traits<T>::act_bytes);    // per row
    static_assert(blocks % (32 / (fmt_traits<T>::qk / 8)) == 0, "a chunk is whole warp steps");
};
// mm_quant_kernel's chunks for one row (MAXR 1): twice as long, so a 4,096-wide row (the 30B
// shape's wo) is staged whole before the kernel's wait, where in two chunks the second one's
// memory latency came after the first one's decode. Windows keep k_chunk_elems (16 activation
// regions).
template <dtype T, int MAXR>
using quant_stage = stage_sizes<T, MAXR == 1 ? 2 * k_chunk_elems : k_chunk_elems>;

// Copies bytes [src, src + len) into dst (16-byte aligned, stage_region(len) bytes) as the
// aligned 16-byte words that cover them (copy16: all of them in flight at once, so a stage costs
// one memory latency however many words a thread takes; batching the loads through registers
// instead spilled every kernel, 64 registers at 4 blocks of 256 threads), threads tid, tid + n,
// ... each taking words; returns where src[0] will land (dst + src % 16) once stage_wait() and a
// barrier have passed. The
// words may reach up to 15 bytes outside [src, src + len), never outside an aligned 16-byte
// granule holding one of its bytes (same page, same allocation granule).
__device__ inline const uint8_t* stage(const uint8_t* src, int len, uint4* dst, int tid, int n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(src);
    const uint4* s = reinterpret_cast<const uint4*>(a & ~static_cast<uintptr_t>(15));
    const int o = static_cast<int>(a & 15);
    const int words = (o + len + 15) / 16;
    for (int i = tid; i < words; i += n) copy16(dst + i, s + i);
    return reinterpret_cast<const uint8_t*>(dst) + o;
}

// Shared memory of one block of mm_quant_kernel<T> for up to `rows` activation rows.
template <dtype T>
size_t quant_smem_bytes(int rows, int warps) {
    if (rows == 1) return static_cast<size_t>(warps) * quant_stage<T, 1>::w_region + quant_stage<T, 1>::a_region;
    return static_cast<size_t>(warps) * stage_sizes<T>::w_region + static_cast<size_t>(rows) * stage_sizes<T>::a_region;
}

// Integer sum over the L lanes of a block (L = 1, 2, 4, 8 or 32; lanes of a block are consecutive).
template <int L>
__device__ inline int32_t group_sum(int32_t v) {
    if constexpr (L == 32) {
        return __reduce_add_sync(0xffffffffu, v);
    } else {
        for (int off = L / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        return v;
    }
}

// One piece's integer sums for a row: si += sc * dot(q, x) and, for formats with a min,
// sm += mn * sum(x), over the piece's 8 elements (ab: the row's activation block; pc: the piece).
template <dtype T>
__device__ inline void piece_sums(int32_t q0, int32_t q1, int sc, int mn, const uint8_t* ab, int pc, int32_t& si,
                                  int32_t& sm) {
    const int32_t x0 = *reinterpret_cast<const int32_t*>(ab + 4 + 8 * pc);
    const int32_t x1 = *reinterpret_cast<const int32_t*>(ab + 8 + 8 * pc);
    si += sc * __dp4a(q1, x1, __dp4a(q0, x0, 0));
    if constexpr (fmt_traits<T>::kind != term_kind::sym) sm += mn * __dp4a(x1, 0x01010101, __dp4a(x0, 0x01010101, 0));
}

// A lane's P consecutive pieces from piece * P of block b into si / sm (integer sums, so the
// block's sumi and summ are the same whatever the lanes' share of the pieces). Q4_K at 4 or 8
// pieces a lane (one or two whole sub-blocks) takes q4k_subblock_sums where b is 16-byte aligned:
// in mm_row_stream_kernel<Q4_K, 8>'s sm_90 SASS a lane's 8 pieces took about 30 instructions
// each (their scale unpacking branching on the sub-block), the whole-sub-block path 117 for all
// 8. A decode step's expert matmuls are issue-bound (tests/gpu/ncu_source.h200.txt): the 30B
// shape's whole-model decode 271.1 -> 301.2 tok/s at 512 positions, 203.1 -> 221.6 at 4,096,
// with hd_h2f's hardware conversion (decode_bench, H100, session 37, tests/gpu/parity.h100.log).
template <dtype T, int P>
__device__ inline void lane_sums(const uint8_t* b, int piece, const iq_tables& tb, bool w_aligned, const uint8_t* ab,
                                 int32_t& si, int32_t& sm) {
    if constexpr (T == dtype::q4_k && (P == 4 || P == 8)) {
        if ((reinterpret_cast<uintptr_t>(b) & 15) == 0) {
            q4k_subblock_sums<P / 4>(b, piece * (P / 4), ab, si, sm);
            return;
        }
    }
    if constexpr (T == dtype::q6_k && (P == 4 || P == 8)) {
        if (w_aligned) {
            q6k_segment_sums<P / 4>(b, piece, ab, si);
            return;
        }
    }
#pragma unroll
    for (int pp = 0; pp < P; ++pp) {
        const int pc = piece * P + pp;
        int32_t q0 = 0, q1 = 0;
        int sc = 0, mn = 0;
        decode_piece_packed<T>(b, pc, tb, w_aligned, q0, q1, sc, mn);
        piece_sums<T>(q0, q1, sc, mn, ab, pc, si, sm);
    }
}

// One warp step's terms folded into a row's y: the L lanes of each block add their si / sm
// (integers: any order), every lane forms its block's term with dot_ref's expression, and the
// step's 32 / L terms are taken in block order, y = t (the row's first block: first_block 0),
// then y + t; `left` blocks of the step are real. Every lane returns the same y.
template <dtype T, int L>
__device__ inline float fold_step(float y, int32_t si, int32_t sm, float d, float dmin, float dx, int64_t first_block,
                                  int left) {
    si = group_sum<L>(si);
    if constexpr (fmt_traits<T>::kind != term_kind::sym) sm = group_sum<L>(sm);
    const float t = block_term<fmt_traits<T>::kind>(d, dmin, dx, si, sm);
#pragma unroll
    for (int gg = 0; gg < 32 / L; ++gg) {
        const float tg = __shfl_sync(0xffffffffu, t, gg * L);
        if (gg < left) y = first_block + gg == 0 ? tg : __fadd_rn(y, tg);
    }
    return y;
}

// fold_step for a warp step that holds two columns' rows (row_stream_body's C = 2): groups
// [0, nb) are the first column's blocks in order, [nb, 2 nb) the second's (2 nb <= 32 / L). Each
// column's y is t0, then y + t1, ... (fold_step's order, so its bits); every lane returns both.
template <dtype T, int L>
__device__ inline void fold_columns(float& y0, float& y1, int32_t si, int32_t sm, float d, float dmin, float dx,
                                    int nb) {
    si = group_sum<L>(si);
    if constexpr (fmt_traits<T>::kind != term_kind::sym) sm = group_sum<L>(sm);
    const float t = block_term<fmt_traits<T>::kind>(d, dmin, dx, si, sm);
    for (int ib = 0; ib < nb; ++ib) {
        const float t0 = __shfl_sync(0xffffffffu, t, ib * L);
        const float t1 = __shfl_sync(0xffffffffu, t, (nb + ib) * L);
        y0 = ib == 0 ? t0 : __fadd_rn(y0, t0);
        y1 = ib == 0 ? t1 : __fadd_rn(y1, t1);
    }
}

// grid (ceil(n_out / warps), row groups), blocks of `warps` = blockDim.x / 32 warps (4 or 8);
// dynamic shared memory quant_smem_bytes<T>(rows of a group, warps): the warps' weight regions,
// then one activation region per row. MAXR: the most rows a block takes, k_max_rows, or 1 for
// one-row launches (a decode step's matmuls and every expert-mode launch): the same code for
// row 0, with registers for one accumulator instead of 16, so more blocks fit on an SM (those
// launches are latency-bound), and, at a piece a lane, two blocks' integer work unrolled side by
// side (the fold still takes the terms in block order). Launch bounds: 4 blocks of 8 warps per SM
// for one row (64 registers: ptxas for sm_90 fits every format at 1, 4 and 8 pieces a lane
// without spilling, but Q3_K at 8, which one_row_kernel never picks; 6 blocks would spill ~100
// bytes at a piece a lane), 3 for windows (~80).
// The first chunk of the block's weight rows is staged before the kernel waits for the one before
// it (launch.cuh: weights are written by no kernel) wherever the rows are known without reading
// what that kernel may write: a plain matrix, or expert mode with ids_settled (the ids were
// complete before the kernel before this one started: a decode step's down projection).
template <dtype T, int MAXR, int P>
__global__ void __launch_bounds__(k_warps_max * 32, MAXR == 1 ? 4 : 3)
    mm_quant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                    const int32_t* __restrict__ ids, size_t expert_stride, const uint8_t* __restrict__ act,
                    size_t act_stride, int act_div, int64_t n_rows, float* __restrict__ y, int64_t y_stride,
                    bool accumulate, int64_t n_cb1, const uint8_t* __restrict__ w2, int64_t n_out2,
                    float* __restrict__ y2, int64_t y2_stride, const int32_t* __restrict__ tiles,
                    const int32_t* __restrict__ n_tiles, const int32_t* __restrict__ perm, bool ids_settled) {
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);   // arguments only
    using tr = fmt_traits<T>;
    using ss = quant_stage<T, MAXR>;
    constexpr int L = tr::qk / 8 / P;   // lanes per block (each decodes P consecutive pieces)
    constexpr int BPW = 32 / L;         // blocks per warp step
    static_assert(P == 1 || MAXR <= 4, "several pieces a lane: one-row launches and windows of 4 rows only");
    static_assert(L >= 1 && ss::blocks % BPW == 0, "a chunk is whole warp steps");
    constexpr int AB = tr::act_bytes;   // bytes per activation block
    constexpr int BB = tr::block_bytes;
    constexpr int CB = ss::blocks;      // blocks per chunk
    extern __shared__ uint4 smem[];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int nw = static_cast<int>(blockDim.x / 32);
    const int64_t j = bx * nw + warp;
    // Warps past the last column still help stage the activations (every thread reaches the
    // block barriers); they decode nothing and write nothing.
    const bool live = j < n_out;
    uint4* sw = smem + warp * (ss::w_region / 16);
    uint4* sa = smem + nw * (ss::w_region / 16);
    // The block's rows: r0 + r (plain windows), one (token, expert) pair (expert mode), or
    // rows[r] (grouped expert mode: up to 16 pairs of one expert, a tile made by group_pairs).
    int64_t r0 = 0;
    int nr = 0;
    const int32_t* rows = nullptr;
    const uint8_t* wrow = nullptr;
    // The first chunk's weights, staged before the wait where the rows are known (see above).
    const uint8_t* wc_first = nullptr;
    const bool early = !tiles && (!ids || (ids_settled && ids[blockIdx.y] >= 0));
    if (early) {
        wrow = mm_detail::block_rows(w, ids, expert_stride, row_bytes, j, live, n_rows, r0, nr);
        if (live) wc_first = stage(wrow, static_cast<int>(n_blocks < CB ? n_blocks : CB) * BB, sw, lane, 32);
    }
    wait_prior_grids();   // see launch.cuh; no early return above it
    if (tiles) {
        const int64_t t = blockIdx.y;
        if (t >= *n_tiles) return;   // the whole block, before any barrier
        rows = perm + tiles[3 * t];
        nr = tiles[3 * t + 1];
        wrow = w + static_cast<size_t>(tiles[3 * t + 2]) * expert_stride + static_cast<size_t>(live ? j : 0) * row_bytes;
    } else if (!early) {
        if (ids && ids[blockIdx.y] < 0) return;   // another lane's pair: the whole block, before any barrier
        wrow = mm_detail::block_rows(w, ids, expert_stride, row_bytes, j, live, n_rows, r0, nr);
    }
    if (nr > MAXR) nr = MAXR;   // never: the launch picks MAXR >= the rows of a group
    const iq_tables tb = device_tables();
    const int g = lane / L, piece = lane % L;
    float acc[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; ++r) acc[r] = 0.0f;

    for (int64_t cb = 0; cb < n_blocks; cb += CB) {
        const int nb = static_cast<int>(n_blocks - cb < CB ? n_blocks - cb : CB);
        __syncthreads();   // the previous chunk is consumed
        const uint8_t* wc = nullptr;
        if (live) wc = cb == 0 && wc_first ? wc_first : stage(wrow + static_cast<size_t>(cb) * BB, nb * BB, sw, lane, 32);
        // Row r's chunk lands at sa_r + 4 * ((ao >> 2r) & 3): activation rows start at multiples
        // of 4 bytes, so two bits per row keep where (one register instead of 16 pointers).
        uint32_t ao = 0;
        for (int r = 0; r < nr; ++r) {
            const int64_t row = rows ? rows[r] : r0 + r;
            const uint8_t* p = stage(act + static_cast<size_t>(row / act_div) * act_stride + static_cast<size_t>(cb) * AB,
                                     nb * AB, sa + r * (ss::a_region / 16), static_cast<int>(threadIdx.x), nw * 32);
            ao |= static_cast<uint32_t>((p - reinterpret_cast<const uint8_t*>(sa + r * (ss::a_region / 16))) / 4) << (2 * r);
        }
        stage_wait();   // this thread's copies (the weights' and the rows'), all issued above
        __syncthreads();
        if (!live) continue;
        // The word path needs packed_alignment<T> of every block: the chunk's blocks have the
        // first one's alignment when the block size is a multiple of it.
        constexpr int A = packed_alignment<T> > 0 ? packed_alignment<T> : 1;
        const bool w_aligned = packed_aligned<T>(wc) && BB % A == 0;
#pragma unroll(MAXR == 1 && P == 1 ? 2 : 1)
        for (int ib0 = 0; ib0 < nb; ib0 += BPW) {
            const int ib = ib0 + g;   // block within the chunk
            const bool valid = ib < nb;
            int32_t q0 = 0, q1 = 0;
            int sc = 0, mn = 0;
            float d = 0.0f, dmin = 0.0f;
            const uint8_t* b = wc + ib * BB;
            if (valid) {
                if constexpr (P == 1) decode_piece_packed<T>(b, piece, tb, w_aligned, q0, q1, sc, mn);
                decode_scales<T>(b, d, dmin);
            }
#pragma unroll
            for (int r = 0; r < MAXR; ++r) {
                if (r >= nr) break;   // uniform across the block
                int32_t si = 0, sm = 0;
                float dx = 0.0f;
                if (valid) {
                    const uint8_t* ab = reinterpret_cast<const uint8_t*>(sa + r * (ss::a_region / 16)) +
                                        4 * ((ao >> (2 * r)) & 3u) + ib * AB;
                    if constexpr (P == 1) piece_sums<T>(q0, q1, sc, mn, ab, piece, si, sm);
                    else lane_sums<T, P>(b, piece, tb, w_aligned, ab, si, sm);
                    dx = *reinterpret_cast<const float*>(ab);
                }
                acc[r] = fold_step<T, L>(acc[r], si, sm, d, dmin, dx, cb + ib0, nb - ib0);
            }
        }
    }
    if (live && lane == 0) {
#pragma unroll
        for (int r = 0; r < MAXR; ++r)
            if (r < nr) {
                float* yy = y + (rows ? rows[r] : r0 + r) * y_stride + j;
                *yy = accumulate ? __fadd_rn(*yy, acc[r]) : acc[r];
            }
    }
}

// One block: counts per expert (shared-memory atomics), offsets by a serial scan, tiles of up
// to tile_rows pairs per expert, then each pair placed into its expert's range. The order of
// pairs inside an expert's range depends on the atomics' order, which changes nothing: every
// row's result depends on that row alone (E1).
__global__ void group_pairs_kernel(const int32_t* ids, int n_pairs, int n_expert, int tile_rows, int32_t* perm,
                                   int32_t* tiles, int32_t* n_tiles) {
    wait_prior_grids();   // first: see launch.cuh
    extern __shared__ int32_t gsh[];
    int32_t* cnt = gsh;                 // [n_expert]
    int32_t* off = gsh + n_expert;      // [n_expert]
    int32_t* fill = off + n_expert;     // [n_expert]: first tile, then the pairs placed
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int e = tid; e < n_expert; e += nt) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += nt) {
        const int e = ids[p];
        if (e >= 0 && e < n_expert) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int o = 0, tb = 0;
        for (int e = 0; e < n_expert; ++e) {
            off[e] = o;
            fill[e] = tb;
            o += cnt[e];
            tb += (cnt[e] + tile_rows - 1) / tile_rows;
        }
        *n_tiles = tb;
    }
    __syncthreads();
    for (int e = tid; e < n_expert; e += nt) {
        const int tb = fill[e];
        for (int i = 0; i * tile_rows < cnt[e]; ++i) {
            const int rest = cnt[e] - i * tile_rows;
            tiles[3 * (tb + i)] = off[e] + i * tile_rows;
            tiles[3 * (tb + i) + 1] = rest < tile_rows ? rest : tile_rows;
            tiles[3 * (tb + i) + 2] = e;
        }
    }
    __syncthreads();
    for (int e = tid; e < n_expert; e += nt) fill[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += nt) {
        const int e = ids[p];
        if (e >= 0 && e < n_expert) perm[off[e] + atomicAdd(&fill[e], 1)] = p;
    }
}

}  // namespace
}  // namespace sluice::cuda

#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/matmul_window_mma.cuh"
#include "kernels/cuda/matmul_row_stream.cuh"

namespace sluice::cuda {
namespace {

std::mutex g_tables_mutex;
bool g_tables_done[64] = {};

// The one-row kernel for rows of nb blocks: pieces per lane chosen so that one warp step covers
// the row (or most of it). A warp walks its row's blocks serially, one step per BPW blocks, and
// a step's latency (staged loads, the lanes' integer sums, the term, the fold) is nearly the
// same whatever the lane's share: a 2048-wide Q4_K row (8 blocks) took 8 steps with a piece a
// lane, and takes 1 with 8 pieces a lane (4 lanes a block). Rows shorter than a step leave lanes
// idle and a lane's own work grows with P, so short rows take fewer pieces a lane (768 wide: 3
// blocks, 4 pieces, 3 of 4 groups). The cut-offs follow that reasoning; only the shapes of a
// Qwen3-30B-A3B layer were timed (kernel_bench on the H200, 2026-12-02: 8 blocks at P = 8, wq
// 8.51 -> 5.97 us; 3 blocks at P = 4, the experts' down rows 16.80 -> 14.17 us), not the others.
template <dtype T>
int one_row_pieces(int64_t nb) {
    if constexpr (fmt_traits<T>::qk == 256) {
        // Q3_K at 8 pieces a lane spills (248 bytes, ptxas for sm_90): 4 at most.
        if constexpr (T != dtype::q3_k)
            if (nb >= 6) return 8;
        if (nb >= 3) return 4;
    } else {
        if (nb >= 16) return 4;
    }
    return 1;
}

template <dtype T>
auto one_row_kernel(int64_t nb) {
    const int p = one_row_pieces<T>(nb);
    if constexpr (fmt_traits<T>::qk == 256 && T != dtype::q3_k)
        if (p == 8) return mm_quant_kernel<T, 1, 8>;
    return p == 4 ? mm_quant_kernel<T, 1, 4> : mm_quant_kernel<T, 1, 1>;
}

// Columns a warp of the one-wave form takes (matmul_row_stream.cuh, row_stream_body's C): two for
// rows of Q4_K, Q5_K or Q6_K short enough that both fit one warp step at 8 pieces a lane (up to 4
// blocks: 1,024 wide, the experts' down projections of the Qwen3 MoE shapes) in a launch of one
// matrix whose rows are packed (row_bytes whole blocks, so two rows are one contiguous copy).
template <dtype T>
int row_stream_columns(const mm_args& a, int64_t nb) {
    constexpr bool kquant = T == dtype::q4_k || T == dtype::q5_k || T == dtype::q6_k;
    if (!kquant || a.w2 || nb > 4) return 1;
    return a.row_bytes == static_cast<size_t>(nb) * fmt_traits<T>::block_bytes ? 2 : 1;
}

// The same pieces a lane for the one-wave form (matmul_row_stream.cuh); two columns a warp at 8.
template <dtype T>
auto row_stream_kernel(int64_t nb, int columns) {
    if constexpr (T == dtype::q4_k || T == dtype::q5_k || T == dtype::q6_k)
        if (columns == 2) return mm_row_stream_kernel<T, 8, 2>;
    const int p = one_row_pieces<T>(nb);
    if constexpr (fmt_traits<T>::qk == 256 && T != dtype::q3_k)
        if (p == 8) return mm_row_stream_kernel<T, 8>;
    return p == 4 ? mm_row_stream_kernel<T, 4> : mm_row_stream_kernel<T, 1>;
}

// Blocks of 8 warps resident at once (4 an SM: the kernels' launch bounds): one wave. On a
// card with fewer SMs than the H200's 132, a grid sized for 132 would leave a second, nearly
// empty wave that doubles the launch's time.
int64_t wave_blocks(const mm_args& a) { return 4 * static_cast<int64_t>(a.sm_count); }

// A one-row (or one-pair) launch of more than one wave whose rows fit one staged chunk: the
// one-wave kernel instead (matmul_row_stream.cuh), each block walking its share of the column
// blocks with the next column's weights in flight. False (nothing launched) otherwise.
// sw_gate / sw_up: the activation rows made in the blocks from the SwiGLU's inputs (matmul_swiglu).
template <dtype T>
bool launch_row_stream(const mm_args& a, unsigned pairs, cudaStream_t s, const float* sw_gate = nullptr,
                       const float* sw_up = nullptr) {
    static_assert(2 * k_warps_max * stage_sizes<T>::w_region + stage_sizes<T>::a_region <= 48 * 1024,
                  "shared memory within the default limit");
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    if (a.tiles || (!a.ids && a.n_rows != 1) || nb > stage_sizes<T>::blocks) return false;
    const int columns = row_stream_columns<T>(a, nb);
    const int64_t block_cols = k_warps_max * columns;   // columns of a column block
    const int64_t cb1 = (a.n_out + block_cols - 1) / block_cols;
    const int64_t n_cb = cb1 + (a.w2 ? (a.n_out2 + block_cols - 1) / block_cols : 0);
    if (n_cb * pairs <= wave_blocks(a)) return false;
    // Rounded down, so the grid stays one wave; from 133 pairs on (a wide verify window's
    // ungrouped experts) a block row would get 3 blocks or fewer and leave up to a third of the
    // wave idle: the many-wave kernel instead.
    const int64_t gx = std::min<int64_t>(n_cb, wave_blocks(a) / pairs);
    if (gx < 4) return false;
    launch(row_stream_kernel<T>(nb, columns), dim3(static_cast<unsigned>(gx), pairs), dim3(k_warps_max * 32),
           row_stream_smem_bytes<T>(k_warps_max), s, reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out,
           a.ids, a.expert_stride, reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.act_div, a.y, a.y_stride,
           a.accumulate, cb1, n_cb, reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride, a.ids_settled,
           sw_gate, sw_up);
    return true;
}

// matmul_mixed's launch: one wave's blocks shared between the parts in proportion to their
// column blocks (the 30B shape's q + k and v: 576 and 64 column blocks, 475 and 53 blocks of a
// 528-block wave, so no block walks more than two).
template <dtype T, int P, dtype T2, int P2>
void launch_row_stream_two(const mm_args& a, const mm_args& b, cudaStream_t s) {
    constexpr size_t smem = std::max(row_stream_smem_bytes<T>(k_warps_max), row_stream_smem_bytes<T2>(k_warps_max));
    static_assert(smem <= 48 * 1024, "shared memory within the default limit");
    auto part = [](const mm_args& m) {
        row_stream_part r{};
        r.w = reinterpret_cast<const uint8_t*>(m.w);
        r.row_bytes = m.row_bytes;
        r.n_blocks = m.n_in / 256;
        r.n_out = m.n_out;
        r.act = reinterpret_cast<const uint8_t*>(m.act);
        r.y = m.y;
        r.n_cb1 = (m.n_out + k_warps_max - 1) / k_warps_max;
        r.n_cb = r.n_cb1 + (m.w2 ? (m.n_out2 + k_warps_max - 1) / k_warps_max : 0);
        r.w2 = reinterpret_cast<const uint8_t*>(m.w2);
        r.n_out2 = m.w2 ? m.n_out2 : 0;
        r.y2 = m.y2;
        return r;
    };
    const row_stream_part pa = part(a), pb = part(b);
    const int64_t wave = wave_blocks(a);
    int64_t ga = pa.n_cb, gb = pb.n_cb;
    if (ga + gb > wave) {
        ga = std::clamp<int64_t>((wave * pa.n_cb + (pa.n_cb + pb.n_cb) / 2) / (pa.n_cb + pb.n_cb), 1, wave - 1);
        gb = std::min<int64_t>(pb.n_cb, wave - ga);
        ga = std::min<int64_t>(pa.n_cb, ga);
    }
    launch(mm_row_stream_two_kernel<T, P, T2, P2>, dim3(static_cast<unsigned>(ga + gb)), dim3(k_warps_max * 32), smem, s, pa,
           pb, static_cast<unsigned>(ga));
}

// Windows of 2..4 rows of Q4_K or Q8_0: the one-row kernel's pieces a lane with an
// accumulator a row (each piece decoded again for each row); each row's terms are the one-row
// kernel's, so the same bits. Measured on the H200 (bench/gpu/window_bench, 2026-12-03), against
// the 16-row kernel at a piece a lane, 4 rows: 2048 x 8192 Q4_K 30.6 -> 28.8 us, 4096 x 2048 Q4_K
// 25.6 -> 20.3, 2048 x 8192 Q8_0 41.2 -> 38.1. Not for Q6_K (the 2048 x 248320 head: 604 -> 729
// us at 4 rows: its decode is the dearer part), not past 4 rows (8 accumulators at 4 pieces: 48
// -> 69 us at 8 rows), and not for the formats nobody timed.
template <dtype T>
auto window_kernel(int64_t nb, int rows) {
    if constexpr (T == dtype::q4_k) {
        if (rows <= 4 && nb >= 6) return mm_quant_kernel<T, 4, 8>;
    } else if constexpr (T == dtype::q8_0) {
        if (rows <= 4 && nb >= 16) return mm_quant_kernel<T, 4, 4>;
    }
    return mm_quant_kernel<T, k_max_rows, 1>;
}

template <dtype T>
void launch_quant(const mm_args& a, dim3 grid, cudaStream_t s) {
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    const int rows = a.tiles ? k_max_rows : a.ids ? 1 : static_cast<int>(a.n_rows < k_max_rows ? a.n_rows : k_max_rows);
    if (rows == 1 && launch_row_stream<T>(a, grid.y, s)) return;
    // At most 4 x 2.2 KB of weights + 16 x 2.4 KB of activations (windows), or 8 x 2.2 KB + 2.4 KB
    // (one row): within the default 48 KB.
    static_assert(k_warps * stage_sizes<T>::w_region + k_max_rows * stage_sizes<T>::a_region <= 48 * 1024,
                  "shared memory within the default limit");
    static_assert(k_warps_max * quant_stage<T, 1>::w_region + quant_stage<T, 1>::a_region <= 48 * 1024,
                  "shared memory within the default limit");
    // One-row launches: 8 columns a block (the activation chunk staged once for 8 weight rows)
    // where that still leaves a wave's worth of blocks (4 an SM), else 4; windows: 4.
    const int64_t cols = a.n_out + (a.w2 ? a.n_out2 : 0);
    const int warps = rows == 1 && (cols / k_warps_max) * static_cast<int64_t>(grid.y) >= wave_blocks(a) ? k_warps_max : k_warps;
    const int64_t cb1 = (a.n_out + warps - 1) / warps, cb2 = a.w2 ? (a.n_out2 + warps - 1) / warps : 0;
    grid.x = static_cast<unsigned>(cb1 + cb2);
    auto kernel = rows == 1 ? one_row_kernel<T>(nb) : a.tiles ? mm_quant_kernel<T, k_max_rows, 1> : window_kernel<T>(nb, rows);
    launch(kernel, dim3(grid), dim3(warps * 32), quant_smem_bytes<T>(rows, warps), s,
           reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out, a.ids, a.expert_stride,
           reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.act_div, a.n_rows, a.y, a.y_stride, a.accumulate,
           cb1, reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride, a.tiles, a.n_tiles, a.perm,
           a.ids_settled);
}

// Calls f(std::integral_constant<dtype, T>{}) for an int8-activation format T (the caller has
// checked has_matmul and excluded the float formats).
template <class F>
void with_int8_format(dtype t, F&& f) {
    switch (t) {
    case dtype::q8_0: f(std::integral_constant<dtype, dtype::q8_0>{}); break;
    case dtype::q4_0: f(std::integral_constant<dtype, dtype::q4_0>{}); break;
    case dtype::q4_1: f(std::integral_constant<dtype, dtype::q4_1>{}); break;
    case dtype::q5_0: f(std::integral_constant<dtype, dtype::q5_0>{}); break;
    case dtype::q5_1: f(std::integral_constant<dtype, dtype::q5_1>{}); break;
    case dtype::iq4_nl: f(std::integral_constant<dtype, dtype::iq4_nl>{}); break;
    case dtype::mxfp4: f(std::integral_constant<dtype, dtype::mxfp4>{}); break;
    case dtype::q2_k: f(std::integral_constant<dtype, dtype::q2_k>{}); break;
    case dtype::q3_k: f(std::integral_constant<dtype, dtype::q3_k>{}); break;
    case dtype::q4_k: f(std::integral_constant<dtype, dtype::q4_k>{}); break;
    case dtype::q5_k: f(std::integral_constant<dtype, dtype::q5_k>{}); break;
    case dtype::q6_k: f(std::integral_constant<dtype, dtype::q6_k>{}); break;
    case dtype::iq4_xs: f(std::integral_constant<dtype, dtype::iq4_xs>{}); break;
    case dtype::iq2_xxs: f(std::integral_constant<dtype, dtype::iq2_xxs>{}); break;
    case dtype::iq2_xs: f(std::integral_constant<dtype, dtype::iq2_xs>{}); break;
    case dtype::iq2_s: f(std::integral_constant<dtype, dtype::iq2_s>{}); break;
    case dtype::iq3_xxs: f(std::integral_constant<dtype, dtype::iq3_xxs>{}); break;
    case dtype::iq3_s: f(std::integral_constant<dtype, dtype::iq3_s>{}); break;
    default: fail("cuda: matmul: weight format {} has no dot product", name(t));
    }
}

}  // namespace

bool has_matmul(dtype t) {
    switch (t) {
    case dtype::f32: case dtype::f16: case dtype::bf16: case dtype::q8_0: case dtype::q4_0:
    case dtype::q4_1: case dtype::q5_0: case dtype::q5_1: case dtype::q2_k: case dtype::q3_k:
    case dtype::q4_k: case dtype::q5_k: case dtype::q6_k: case dtype::iq4_nl: case dtype::iq4_xs:
    case dtype::iq3_s: case dtype::iq3_xxs: case dtype::iq2_xxs: case dtype::iq2_xs:
    case dtype::iq2_s: case dtype::mxfp4:
        return true;
    default:
        return false;
    }
}

int64_t group_tiles_max(int64_t n_pairs, int n_expert, int tile_rows) {
    return (n_pairs + tile_rows - 1) / tile_rows + n_expert;
}

void group_pairs(const int32_t* ids, int64_t n_pairs, int n_expert, int tile_rows, int32_t* perm, int32_t* tiles,
                 int32_t* n_tiles, void* stream) {
    if (n_pairs < 1 || n_pairs > 65535 || n_expert < 1 || n_expert > k_group_max_experts)
        fail("cuda: group_pairs: {} pairs (1..65535), {} experts (1..{})", n_pairs, n_expert, k_group_max_experts);
    if (tile_rows != k_tile_rows_window && tile_rows != k_tile_rows_mma)
        fail("cuda: group_pairs: tiles of {} rows (expected {} or {})", tile_rows, k_tile_rows_window, k_tile_rows_mma);
    launch(group_pairs_kernel, dim3(1), dim3(1024), static_cast<size_t>(n_expert) * 3 * 4,
           static_cast<cudaStream_t>(stream), ids, static_cast<int>(n_pairs), n_expert, tile_rows, perm, tiles, n_tiles);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: group_pairs: launch failed: {}", cudaGetErrorString(e));
}

void upload_tables() {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) fail("cuda: upload_tables: no current device");
    std::lock_guard<std::mutex> lock(g_tables_mutex);
    if (dev < 0 || dev >= 64) fail("cuda: upload_tables: device {} out of range", dev);
    if (g_tables_done[dev]) return;
    using namespace sluice::quant;
    cudaError_t e = cudaSuccess;
    auto put = [&](const void* sym, const void* src, size_t n) {
        if (e == cudaSuccess) e = cudaMemcpyToSymbol(sym, src, n);
    };
    put(g_ksigns, k_ksigns_iq2xs, sizeof k_ksigns_iq2xs);
    put(g_iq2xxs, k_iq2xxs_grid, sizeof k_iq2xxs_grid);
    put(g_iq2xs, k_iq2xs_grid, sizeof k_iq2xs_grid);
    put(g_iq2s, k_iq2s_grid, sizeof k_iq2s_grid);
    put(g_iq3xxs, k_iq3xxs_grid, sizeof k_iq3xxs_grid);
    put(g_iq3s, k_iq3s_grid, sizeof k_iq3s_grid);
    put(g_kv_iq4nl, k_kvalues_iq4nl, sizeof k_kvalues_iq4nl);
    put(g_kv_mxfp4, k_kvalues_mxfp4, sizeof k_kvalues_mxfp4);
    if (e != cudaSuccess) fail("cuda: upload_tables: {}", cudaGetErrorString(e));
    g_tables_done[dev] = true;
}

namespace {
// matmul's argument checks; returns the launch's row groups (grid rows).
int64_t checked_row_groups(const mm_args& a) {
    if (!has_matmul(a.type)) fail("cuda: matmul: weight format {} has no dot product", name(a.type));
    const uint32_t qk = info(a.type).block_elems;
    if (a.n_in <= 0 || a.n_in % qk != 0) fail("cuda: matmul: n_in = {} is not a positive multiple of {}", a.n_in, qk);
    if (a.n_out <= 0 || a.n_rows < 0 || a.y_stride < a.n_out || a.act_div < 1)
        fail("cuda: matmul: bad sizes (n_out {}, n_rows {}, y_stride {}, act_div {})", a.n_out, a.n_rows, a.y_stride, a.act_div);
    // Activation blocks are read as 4-byte words (d, then the int8 values four at a time).
    if (a.type != dtype::f32 && a.type != dtype::f16 && a.type != dtype::bf16 &&
        ((reinterpret_cast<uintptr_t>(a.act) | a.act_stride) & 3) != 0)
        fail("cuda: matmul: activation rows at {} with stride {}: expected 4-byte alignment", static_cast<const void*>(a.act),
             a.act_stride);
    if (a.sm_count < 1) fail("cuda: matmul: sm_count = {}: expected the device's SM count", a.sm_count);
    if (a.ids && a.n_rows > 65535) fail("cuda: matmul: {} expert rows exceed one launch (65535)", a.n_rows);
    const bool is_float = a.type == dtype::f32 || a.type == dtype::f16 || a.type == dtype::bf16;
    if (a.tiles && (!a.ids || !a.perm || !a.n_tiles || a.max_tiles < 1 || is_float))
        fail("cuda: matmul: grouped expert mode needs ids, perm, tiles, n_tiles, max_tiles and an int8 format");
    if (a.tiles && a.tile_rows != k_tile_rows_window && a.tile_rows != k_tile_rows_mma)
        fail("cuda: matmul: grouped tiles of {} rows (expected {} or {})", a.tile_rows, k_tile_rows_window, k_tile_rows_mma);
    const int64_t row_groups = a.tiles ? a.max_tiles : a.ids ? a.n_rows : (a.n_rows + k_max_rows - 1) / k_max_rows;
    if (row_groups > 65535) fail("cuda: matmul: {} rows exceed one launch ({})", a.n_rows, 65535 * k_max_rows);
    if (a.w2 && (a.n_out2 <= 0 || !a.y2 || a.y2_stride < a.n_out2))
        fail("cuda: matmul: second matrix: bad sizes (n_out2 {}, y2_stride {})", a.n_out2, a.y2_stride);
    if ((a.n_out + (a.w2 ? a.n_out2 : 0)) / k_warps + 2 > 0x7fffffff) fail("cuda: matmul: {} columns exceed one launch", a.n_out);
    return row_groups;
}
}  // namespace

void matmul(const mm_args& a, void* stream) {
    const int64_t row_groups = checked_row_groups(a);
    if (a.n_rows == 0) return;
    auto s = static_cast<cudaStream_t>(stream);
    switch (a.type) {
    case dtype::f32:
    case dtype::f16:
    case dtype::bf16: launch_float_matmul(a, row_groups, s); break;
    default: {
        // Many rows (a prefill chunk, or grouped pairs in tiles of 64): the tensor-core kernel;
        // a plain window of 2..16 rows: the tensor-core window kernel where mm_args::window picks
        // it (by default: the shapes it was measured faster on), else, with one-row and one-pair
        // launches, the dp4a kernel. The same bits either way.
        const int64_t mma_from = a.mma_from_rows > 0 ? a.mma_from_rows : k_tile_rows_window + 1;
        const bool mma = a.tiles ? a.tile_rows == k_tile_rows_mma : !a.ids && a.n_rows >= mma_from;
        with_int8_format(a.type, [&](auto fmt) {
            constexpr dtype T = decltype(fmt)::value;
            if (mma) launch_mma<T>(a, s);
            else if (window_mma_takes(a)) launch_window_mma<T>(a, s);
            else launch_quant<T>(a, dim3(1, static_cast<unsigned>(row_groups)), s);
        });
    }
    }
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: matmul: launch failed: {}", cudaGetErrorString(e));
}

bool matmul_mixed(const mm_args& a, const mm_args& b, void* stream) {
    checked_row_groups(a);
    checked_row_groups(b);
    auto one_plain_row = [](const mm_args& m) {
        return !m.ids && !m.tiles && m.n_rows == 1 && !m.accumulate && m.n_in % 256 == 0 && m.n_in / 256 >= 6 &&
               m.n_in / 256 <= stage_sizes<dtype::q4_k>::blocks && m.n_in / 256 <= stage_sizes<dtype::q6_k>::blocks;
    };
    if (a.type != dtype::q4_k || (b.type != dtype::q6_k && b.type != dtype::q4_k) || !one_plain_row(a) ||
        !one_plain_row(b) || b.w2 || a.act != b.act || !a.act)
        return false;
    static_assert(fmt_traits<dtype::q4_k>::qk == 256 && fmt_traits<dtype::q6_k>::qk == 256, "rows of 256-blocks");
    // The pieces a lane the one-format launches take for these rows (one_row_pieces: 8 from 6 blocks).
    if (b.type == dtype::q6_k) launch_row_stream_two<dtype::q4_k, 8, dtype::q6_k, 8>(a, b, static_cast<cudaStream_t>(stream));
    else launch_row_stream_two<dtype::q4_k, 8, dtype::q4_k, 8>(a, b, static_cast<cudaStream_t>(stream));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: matmul_mixed: launch failed: {}", cudaGetErrorString(e));
    return true;
}

void matmul_swiglu(const mm_args& a, const float* gate, const float* up, void* stream) {
    const int64_t row_groups = checked_row_groups(a);
    const auto f = quant::act_format_for(a.type);
    if (f == quant::act_format::f32 || a.w2)
        fail("cuda: matmul_swiglu: {} weights{}: expected one int8-format matrix", name(a.type),
             a.w2 ? " with a second matrix" : "");
    if (a.n_rows == 0) return;
    auto s = static_cast<cudaStream_t>(stream);
    bool done = false;
    if (!a.tiles && (a.ids || a.n_rows == 1))
        with_int8_format(a.type, [&](auto fmt) {
            constexpr dtype T = decltype(fmt)::value;
            done = launch_row_stream<T>(a, static_cast<unsigned>(row_groups), s, gate, up);
        });
    if (done) {
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: matmul_swiglu: launch failed: {}", cudaGetErrorString(e));
        return;
    }
    swiglu_quant(gate, up, a.ids ? a.n_rows / a.act_div : a.n_rows, a.n_in, f, const_cast<std::byte*>(a.act), stream);
    matmul(a, stream);
}

bool router_one_launch(const mm_args& a, const kernels::router_params& p, const router_norm* norm) {
    return mm_detail::router_fuses(a, p, norm);
}

void norm_router_topk(const mm_args& a, const router_norm& norm, const kernels::router_params& p, int32_t* ids,
                      float* weights, unsigned* arrivals, void* stream) {
    checked_row_groups(a);
    if (a.type != dtype::f32 && a.type != dtype::f16 && a.type != dtype::bf16)
        fail("cuda: norm_router_topk: a {} router (expected F32, F16 or BF16: its input is the float row)", name(a.type));
    if (!norm.x || !a.act || a.n_rows != 1) fail("cuda: norm_router_topk: expected one residual row and its output buffer");
    auto s = static_cast<cudaStream_t>(stream);
    if (arrivals && launch_router_topk(a, p, ids, weights, arrivals, s, &norm)) {
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: norm_router_topk: launch failed: {}", cudaGetErrorString(e));
        return;
    }
    float* xn = const_cast<float*>(reinterpret_cast<const float*>(a.act));
    if (norm.f == quant::act_format::f32) rmsnorm(norm.x, norm.w, xn, 1, a.n_in, norm.eps, stream);
    else rmsnorm_quant(norm.x, norm.w, xn, 1, a.n_in, norm.eps, norm.f, norm.act, stream);
    router_topk(a, p, ids, weights, arrivals, stream);
}

void router_topk(const mm_args& a, const kernels::router_params& p, int32_t* ids, float* weights, unsigned* arrivals,
                 void* stream) {
    checked_row_groups(a);
    if (arrivals && launch_router_topk(a, p, ids, weights, arrivals, static_cast<cudaStream_t>(stream))) {
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: router_topk: launch failed: {}", cudaGetErrorString(e));
        return;
    }
    matmul(a, stream);
    route_topk(p, a.y, a.n_rows, ids, weights, stream);
}

}  // namespace sluice::cuda
