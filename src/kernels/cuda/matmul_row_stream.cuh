// The one-row quantised matmul for launches of many waves (a decode step's routed experts, the
// LM head), bit-identical to mm_quant_kernel<T, 1, P> (E1, E3). Included by matmul.cu only,
// after its device tables and helpers (stage, stage_sizes, piece_sums, fold_step).
//
// Why: mm_quant_kernel gives each warp one output column; a block stages its columns' weight
// rows, waits for them, decodes, folds, writes and exits, and the next block on that SM starts
// the same way. A launch of several waves therefore pays, per wave, one memory latency plus the
// decode (the 30B-A3B shape's gate + up of 8 experts: 1,536 blocks, about 3 waves of 528 on the
// H200) with nothing overlapping them: 15.4 us for 14.2 MB (921 GB/s), the LM head 145 us at
// 1.77 TB/s (ncu, caches not flushed, tests/gpu/decode_profile_warm.h200.txt).
// Here the grid is one wave; each block keeps one activation row (staged once) and walks the
// column blocks vb = blockIdx.x, + gridDim.x, ...; each warp double-buffers its weight rows: the
// copy of the next column's row is issued before the current one is decoded, so the loads of
// one column overlap the arithmetic of the one before. Measured the same way after: gate + up
// 14.17 us, the experts' down 13.49 (was 15.62), the LM head 132.8 us (1.92 TB/s); a whole
// 48-layer decode step 4.387 -> 4.114 ms with the other two changes of that call (decode_bench,
// old and new tree in one call, tests/gpu/decode_bench.h200.log). A block walks only ~3 column
// blocks of a decode step's experts, so most of a launch is still its first latency.
//
// Before the wait for the kernel before (launch.cuh), where the rows are known without reading what
// that kernel may write (a plain matrix, or ids_settled: see mm_quant_kernel), the block stages its
// first column's weights. (Asking the L2 for each warp's next two columns as well, by sm_90's bulk
// prefetch, cost more than it saved: the 30B shape's whole-model decode 244.9 -> 237.5 tok/s, the
// 35B shape's 8 layers 857.3 -> 827.7, decode_bench on the H200, session 23.)
//
// With sw_gate / sw_up (matmul_swiglu) the activation row is not read from act: the block's warps
// make it from the pair's gate and up rows, block by block as swiglu_quant_kernel does (the same
// expression, quantize_block_values), into the shared memory the staged row would take; that
// saves the SwiGLU launch before a decode step's down projection.
//
// The bits: each column's terms and their fold are mm_quant_kernel's for a row that fits in
// one staged chunk (the only rows this kernel takes): the same decode, the same integer sums,
// block_term, and the fold t0, + t1, + t2, ... in block order.
#pragma once

namespace sluice::cuda {
namespace {

// Per warp two weight regions (the current column and the next), then the activation row.
template <dtype T>
constexpr size_t row_stream_smem_bytes(int warps) {
    return static_cast<size_t>(2 * warps) * stage_sizes<T>::w_region + stage_sizes<T>::a_region;
}

// grid (blocks of one wave, pairs or 1), blocks of `warps` warps; n_cb column blocks in all,
// [0, n_cb1) the first matrix's (w, n_out, y), the rest the second's (w2, n_out2, y2). Rows of
// n_blocks <= stage_sizes<T>::blocks format blocks. Expert mode (ids): row blockIdx.y of the
// matrices of expert ids[blockIdx.y] (a negative id: another lane's pair, skipped), its
// activations row blockIdx.y / act_div; else row 0.
// The kernel's body for the block bx of gx blocks that walk the column blocks (the whole grid's
// blockIdx.x and gridDim.x, or one part's: mm_row_stream_two_kernel).
// C = 2 (short rows, row_stream_columns): each warp takes two adjacent columns of one matrix, a
// column block 2 x warps columns; both weight rows (contiguous: row_bytes = n_blocks whole format
// blocks) are staged as one copy and decoded in one warp step, groups [0, nb) the first column's
// blocks and [nb, 2 nb) the second's. A round's fixed cost (its staging, the wait, the fold's
// shuffles and the bookkeeping) was most of a short row's: the experts' down projection (768
// wide, 3 blocks a row) moved ~1.0 TB/s in a 4-row window where gate + up (2,048 wide) moved ~1.9
// (tests/gpu/window_trace.h100.log). Each column's terms and their fold are C = 1's. Measured on
// an H100 (tests/gpu/row_stream_two_columns.h100.log): the down launch of a one-row step 12.7 ->
// 10.3 us a layer, decode of the 48-layer 30B shape 357 -> 369 tok/s, an 8-row window 10.7 -> 9.9 ms.
template <dtype T, int P, int C = 1>
__device__ __forceinline__ void row_stream_body(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks,
                                                int64_t n_out, const int32_t* __restrict__ ids, size_t expert_stride,
                                                const uint8_t* __restrict__ act, size_t act_stride, int act_div,
                                                float* __restrict__ y, int64_t y_stride, bool accumulate, int64_t n_cb1,
                                                int64_t n_cb, const uint8_t* __restrict__ w2, int64_t n_out2,
                                                float* __restrict__ y2, int64_t y2_stride, bool ids_settled,
                                                const float* __restrict__ sw_gate, const float* __restrict__ sw_up,
                                                unsigned bx, unsigned gx) {
    using tr = fmt_traits<T>;
    using ss = stage_sizes<T>;
    constexpr int L = tr::qk / 8 / P;   // lanes per block (each decodes P consecutive pieces)
    constexpr int BPW = 32 / L;         // blocks per warp step
    static_assert(L >= 1 && ss::blocks % BPW == 0, "a chunk is whole warp steps");
    static_assert(C == 1 || (C == 2 && tr::qk == 256), "two columns a warp: 256-wide formats (row_stream_columns)");
    constexpr int AB = tr::act_bytes;
    constexpr int BB = tr::block_bytes;
    constexpr int A = packed_alignment<T> > 0 ? packed_alignment<T> : 1;
    extern __shared__ uint4 smem[];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int nw = static_cast<int>(blockDim.x / 32);
    const int nb = static_cast<int>(n_blocks);
    int64_t row = 0;
    // The pair's expert (expert mode), read before the wait only when settled; a negative id:
    // another lane's pair, the whole block returns (after the wait, before any barrier).
    const bool early = !ids || ids_settled;
    int32_t e = 0;
    auto take_expert = [&] {
        e = ids[blockIdx.y];
        if (e < 0) return;
        row = blockIdx.y;
        w += static_cast<size_t>(e) * expert_stride;
        if (w2) w2 += static_cast<size_t>(e) * expert_stride;
    };
    if (ids && early) take_expert();
    // This warp's two weight regions: the current column's and the next one's (swapped each
    // round; named pointers, not an array indexed at run time, which went to the stack).
    uint4* sw_cur = smem + (2 * warp) * (ss::w_region / 16);
    uint4* sw_next = sw_cur + ss::w_region / 16;
    uint4* const sa = smem + 2 * nw * (ss::w_region / 16);
    // Column block vb's weight row for this warp, and where its result goes (null: past the
    // last column of its matrix; the warp still takes part in the block's barrier).
    struct column {
        const uint8_t* wrow = nullptr;
        float* out = nullptr;
        int n = 0;   // columns from wrow / out: 1, or with C = 2 two unless the matrix ends
    };
    auto column_of = [&](int64_t vb) {
        const bool second = vb >= n_cb1;
        const int64_t j = ((second ? vb - n_cb1 : vb) * nw + warp) * C;
        const int64_t end = second ? n_out2 : n_out;
        column c;
        if (j < end) {
            c.wrow = (second ? w2 : w) + static_cast<size_t>(j) * row_bytes;
            c.out = second ? y2 + row * y2_stride + j : y + row * y_stride + j;
            c.n = C == 1 || j + 1 == end ? 1 : C;
        }
        return c;
    };
    // The first column's weights (one group of copies): before the wait where the rows are known,
    // else after it.
    column cur;
    const uint8_t* wc_cur = nullptr;
    auto first_column = [&] {
        cur = column_of(bx);
        wc_cur = cur.wrow ? stage(cur.wrow, cur.n * nb * BB, sw_cur, lane, 32) : nullptr;
        stage_commit();
    };
    if (early && e >= 0) first_column();
    wait_prior_grids();   // see launch.cuh; no early return above it
    if (!early) {
        take_expert();
        if (e >= 0) first_column();
    }
    if (e < 0) return;   // another lane's pair: the whole block, before any barrier
    // The activation row: the next group (the first column's is committed), or made here from the
    // SwiGLU's inputs (visible to the block after the first round's barrier).
    const uint8_t* ab;
    if (sw_gate) {
        constexpr int W = tr::qk;   // the activation blocks' width: the format's block
        using Block = std::conditional_t<W == 32, quant::act_block32, quant::act_block256>;
        static_assert(sizeof(Block) == AB, "activation blocks as the staged row lays them out");
        const int64_t n_in = static_cast<int64_t>(nb) * W;
        const float* g = sw_gate + (row / act_div) * n_in;
        const float* u = sw_up + (row / act_div) * n_in;
        Block* dst = reinterpret_cast<Block*>(sa);
        for (int b = warp; b < nb; b += nw) {
            float v[W / 32];
#pragma unroll
            for (int i = 0; i < W / 32; ++i) {
                const int64_t k = static_cast<int64_t>(b) * W + lane * (W / 32) + i;
                v[i] = __fmul_rn(kernels::silu_f32(g[k]), u[k]);
            }
            int16_t* bsums = nullptr;
            if constexpr (W == 256) bsums = dst[b].bsums;
            quantize_block_values<W>(v, &dst[b].d, dst[b].q, bsums);
        }
        ab = reinterpret_cast<const uint8_t*>(sa);
    } else {
        ab = stage(act + static_cast<size_t>(row / act_div) * act_stride, nb * AB, sa, static_cast<int>(threadIdx.x),
                   nw * 32);
    }
    const uint8_t* wc_next = nullptr;
    stage_commit();
    const iq_tables tb = device_tables();
    const int g = lane / L, piece = lane % L;
    for (int64_t vb = bx; vb < n_cb; vb += gx) {
        // The next column's copies go out before this one is decoded.
        column next;
        if (vb + gx < n_cb) {
            next = column_of(vb + gx);
            if (next.wrow) wc_next = stage(next.wrow, next.n * nb * BB, sw_next, lane, 32);
        }
        stage_commit();
        stage_wait_but<1>();   // all but the group just committed: this column's and the row's
        if (vb == static_cast<int64_t>(bx)) __syncthreads();   // the row, staged by the block
        else __syncwarp();                                               // the weights, by this warp
        if constexpr (C == 2) {
            if (cur.wrow) {   // one warp step: group g takes block g % nb of column g / nb (2 nb <= BPW)
                const uint8_t* wcur = wc_cur;
                const bool w_aligned = packed_aligned<T>(wcur) && BB % A == 0;
                const int ib = g % nb;
                int32_t si = 0, sm = 0;
                float d = 0.0f, dmin = 0.0f, dx = 0.0f;
                if (g < cur.n * nb) {
                    const uint8_t* b = wcur + g * BB;   // the two rows are contiguous
                    const uint8_t* abk = ab + ib * AB;
                    decode_scales<T>(b, d, dmin);
                    lane_sums<T, P>(b, piece, tb, w_aligned, abk, si, sm);
                    dx = *reinterpret_cast<const float*>(abk);
                }
                float y0 = 0.0f, y1 = 0.0f;
                fold_columns<T, L>(y0, y1, si, sm, d, dmin, dx, nb);
                if (lane == 0) {
                    cur.out[0] = accumulate ? __fadd_rn(cur.out[0], y0) : y0;
                    if (cur.n == 2) cur.out[1] = accumulate ? __fadd_rn(cur.out[1], y1) : y1;
                }
            }
        } else if (cur.wrow) {
            const uint8_t* wcur = wc_cur;
            const bool w_aligned = packed_aligned<T>(wcur) && BB % A == 0;
            float acc = 0.0f;
            for (int ib0 = 0; ib0 < nb; ib0 += BPW) {
                const int ib = ib0 + g;
                const bool valid = ib < nb;
                int32_t si = 0, sm = 0;
                float d = 0.0f, dmin = 0.0f, dx = 0.0f;
                if (valid) {
                    const uint8_t* b = wcur + ib * BB;
                    const uint8_t* abk = ab + ib * AB;
                    decode_scales<T>(b, d, dmin);
                    lane_sums<T, P>(b, piece, tb, w_aligned, abk, si, sm);
                    dx = *reinterpret_cast<const float*>(abk);
                }
                acc = fold_step<T, L>(acc, si, sm, d, dmin, dx, ib0, nb - ib0);
            }
            if (lane == 0) *cur.out = accumulate ? __fadd_rn(*cur.out, acc) : acc;
        }
        __syncwarp();   // every lane has read sw_cur before the next round's copy refills it
        cur = next;
        uint4* const sw_done = sw_cur;
        sw_cur = sw_next;
        sw_next = sw_done;
        wc_cur = wc_next;
    }
}

template <dtype T, int P, int C = 1>
__global__ void __launch_bounds__(k_warps_max * 32, 4)
    mm_row_stream_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                         const int32_t* __restrict__ ids, size_t expert_stride, const uint8_t* __restrict__ act,
                         size_t act_stride, int act_div, float* __restrict__ y, int64_t y_stride, bool accumulate,
                         int64_t n_cb1, int64_t n_cb, const uint8_t* __restrict__ w2, int64_t n_out2,
                         float* __restrict__ y2, int64_t y2_stride, bool ids_settled,
                         const float* __restrict__ sw_gate, const float* __restrict__ sw_up) {
    row_stream_body<T, P, C>(w, row_bytes, n_blocks, n_out, ids, expert_stride, act, act_stride, act_div, y, y_stride,
                          accumulate, n_cb1, n_cb, w2, n_out2, y2, y2_stride, ids_settled, sw_gate, sw_up, blockIdx.x,
                          gridDim.x);
}

// One plain one-row launch of two parts whose weights differ in format (matmul_mixed: a decode
// step's q and k with a v of another format, which took a launch of its own, 2.3 us a layer of
// the 30B decode step: bench/gpu/step_trace, H100, session 37). Blocks [0, ga) walk the first
// part's column blocks, the rest the second's; each column is the one-format kernel's.
struct row_stream_part {
    const uint8_t* w;   // [n_out, row_bytes], then w2's [n_out2, row_bytes] (n_cb1 column blocks first)
    size_t row_bytes;
    int64_t n_blocks, n_out;
    const uint8_t* act;   // the activation row
    float* y;             // [n_out]
    int64_t n_cb1, n_cb;
    const uint8_t* w2;
    int64_t n_out2;
    float* y2;   // [n_out2]
};

template <dtype T, int P, dtype T2, int P2>
__global__ void __launch_bounds__(k_warps_max * 32, 4) mm_row_stream_two_kernel(row_stream_part a, row_stream_part b, unsigned ga) {
    if (blockIdx.x < ga)
        row_stream_body<T, P>(a.w, a.row_bytes, a.n_blocks, a.n_out, nullptr, 0, a.act, 0, 1, a.y, a.n_out, false, a.n_cb1,
                              a.n_cb, a.w2, a.n_out2, a.y2, a.n_out2, false, nullptr, nullptr, blockIdx.x, ga);
    else
        row_stream_body<T2, P2>(b.w, b.row_bytes, b.n_blocks, b.n_out, nullptr, 0, b.act, 0, 1, b.y, b.n_out, false,
                                b.n_cb1, b.n_cb, b.w2, b.n_out2, b.y2, b.n_out2, false, nullptr, nullptr,
                                blockIdx.x - ga, gridDim.x - ga);
}

}  // namespace
}  // namespace sluice::cuda
