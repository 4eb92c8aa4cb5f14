// Tensor-core form of a verify window's matmul: 2..16 activation rows of a plain matrix (no
// expert ids), bit-identical to mm_quant_kernel and so to kernels::dot_ref (E1, E3). Included by
// matmul.cu only, after matmul_mma.cuh (its MMA wrappers and mma_group_span).
//
// Why: a window's products cost the dp4a kernel about a one-row launch per row (a 2048 x 8192
// Q4_K matrix: 9.8 us for 1 row, 28.8 for 4, 155 for 16 as Q8_0), and mm_mma_kernel, made for
// prefill tiles of 64 rows x 64 columns with a block-wide staging pipeline, takes ~47 us for
// any window on that matrix (bench/gpu/window_bench.cu, tests/gpu/window_bench.h200.log): one
// block an SM, each waiting on its own copies. Here every warp works alone, with no shared
// memory and no block barrier: 8 output columns, all of K, one m16n8 MMA per 32 (or 16)
// elements. The rows' products come from the tensor cores at once, so a window costs about
// its weight bytes, whatever its rows.
//
// The bits. dot_ref's output is a chain over the row's format blocks, y = t0, y = y + t1, ...,
// t_b = block_term(d_b, dmin_b, dx_b, sumi_b, summ_b), where sumi_b and summ_b are integers
// (sums over 16- or 32-element groups of sc_g * dot(q_g, x_g) and mn_g * sum(x_g)): any order of
// the products inside them gives the same values. Lane (g, t) of the warp (lane = 4 g + t)
// decodes column g's piece (8 elements) and holds, after the MMA, D[row g or g + 8][column 2t or
// 2t + 1]; it gets the scales of those columns from the lanes that decoded them (shuffles),
// adds sc * D to its sumi and mn * sum(x) to its summ, and at a block's end forms t_b with the
// same block_term and folds it into its y in block order: every float operation is the one the
// one-row kernel does, in the same order.
//
// The k order inside a 32-element MMA is a permutation, the same for both operands: lane t's
// piece t (elements 8t..8t+7 of the group) goes in as the MMA's k = 4t..4t+3 (b0, a0/a1) and
// 16 + 4t..16 + 4t + 3 (b1, a2/a3), so each lane decodes one piece and no element twice. Formats
// with a scale per 16 elements (Q2_K, Q3_K, Q6_K and the 2- and 3-bit I-quants) take one k16
// MMA per group in the natural order: lane t needs half of piece t / 2, which it decodes itself.
#pragma once

namespace sluice::cuda {
namespace {

constexpr int k_wmma_warps = 4;   // warps a block (8 columns each)
constexpr int k_wmma_rows = 16;   // rows a launch takes (the m of m16n8)

// A row's 8 activation bytes of a group at element offset e (a multiple of 4) of block `ab`
// (the act block: its float scale, then the int8 values), as two words; zero past the window.
__device__ inline uint2 act_words(const uint8_t* ab, int e, bool live) {
    if (!live) return make_uint2(0u, 0u);
    const uint32_t* p = reinterpret_cast<const uint32_t*>(ab + 4 + e);
    return make_uint2(p[0], p[1]);
}

// Sum over the 4 lanes t of a column group (lanes 4g..4g+3) of an integer.
__device__ inline int32_t quad_sum(int32_t v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

template <dtype T>
__global__ void __launch_bounds__(k_wmma_warps * 32, 8)
    mm_window_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                         const uint8_t* __restrict__ act, size_t act_stride, int act_div, int n_rows,
                         float* __restrict__ y, int64_t y_stride, bool accumulate, int64_t n_cb1,
                         const uint8_t* __restrict__ w2, int64_t n_out2, float* __restrict__ y2, int64_t y2_stride) {
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);   // arguments only
    using tr = fmt_traits<T>;
    constexpr int QK = tr::qk, BB = tr::block_bytes, AB = tr::act_bytes;
    constexpr int GS = mma_group_span<T>;   // 16-element groups one MMA takes: 2 (k32) or 1 (k16)
    constexpr int KS = 16 * GS;             // elements per MMA
    constexpr int MPB = QK / KS;            // MMAs per format block
    constexpr bool has_min = tr::kind != term_kind::sym;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int g = lane >> 2, t = lane & 3;
    const int64_t col0 = (bx * k_wmma_warps + warp) * 8;   // the warp's first column
    const bool col_live = col0 + g < n_out;                 // this lane's decoded column
    const uint8_t* wrow = w + static_cast<size_t>(col_live ? col0 + g : 0) * row_bytes;
    // Weights are written by no kernel: the first blocks' lines go to L2 before the wait.
    if (col_live && static_cast<size_t>(64 * t) < row_bytes) asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow + 64 * t));
    wait_prior_grids();   // see launch.cuh; no return above it
    if (col0 >= n_out) return;   // a whole warp past the last column (after its wait)
    const iq_tables tb = device_tables();
    // The lane's two rows (g and g + 8) and their activation rows.
    const bool r0_live = g < n_rows, r1_live = g + 8 < n_rows;
    const uint8_t* x0 = act + static_cast<size_t>((r0_live ? g : 0) / act_div) * act_stride;
    const uint8_t* x1 = act + static_cast<size_t>((r1_live ? g + 8 : 0) / act_div) * act_stride;
    // Lanes whose decoded columns are the lane's D columns 2t and 2t + 1.
    const int src0 = 8 * t, src1 = 8 * t + 4;
    int32_t si[4] = {0, 0, 0, 0}, sm[4] = {0, 0, 0, 0};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t kb = 0; kb < n_blocks; ++kb) {
        const uint8_t* b = wrow + static_cast<size_t>(kb) * BB;
        // Two blocks ahead into L2: the loads below then wait on L2, not on HBM.
        if (col_live && kb + 2 < n_blocks && t * 64 < BB) asm volatile("prefetch.global.L2 [%0];" ::"l"(b + 2 * BB + 64 * t));
        const uint8_t* ab0 = x0 + static_cast<size_t>(kb) * AB;
        const uint8_t* ab1 = x1 + static_cast<size_t>(kb) * AB;
        const bool aligned = packed_aligned<T>(b);
#pragma unroll
        for (int m = 0; m < MPB; ++m) {
            int32_t q0 = 0, q1 = 0;
            int sc = 0, mn = 0;
            int32_t dd[4];
            int32_t xs0 = 0, xs1 = 0;   // the group's activation sums of rows g and g + 8 (min formats)
            if constexpr (GS == 2) {
                // Piece 4m + t of the block: the MMA's k 4t..4t+3 (q0) and 16+4t..16+4t+3 (q1).
                if (col_live) decode_piece_packed<T>(b, 4 * m + t, tb, aligned, q0, q1, sc, mn);
                const uint2 a0 = act_words(ab0, KS * m + 8 * t, r0_live);
                const uint2 a1 = act_words(ab1, KS * m + 8 * t, r1_live);
                mma_s8_16x8x32(dd, a0.x, a1.x, a0.y, a1.y, static_cast<uint32_t>(q0), static_cast<uint32_t>(q1));
                if constexpr (has_min) {
                    xs0 = quad_sum(__dp4a(static_cast<int32_t>(a0.y), 0x01010101, __dp4a(static_cast<int32_t>(a0.x), 0x01010101, 0)));
                    xs1 = quad_sum(__dp4a(static_cast<int32_t>(a1.y), 0x01010101, __dp4a(static_cast<int32_t>(a1.x), 0x01010101, 0)));
                }
            } else {
                // Group m: the MMA's k 4t..4t+3 are elements 4t..4t+3 of the group, half t % 2 of
                // its piece t / 2.
                if (col_live) decode_piece_packed<T>(b, 2 * m + t / 2, tb, aligned, q0, q1, sc, mn);
                const uint32_t bq = static_cast<uint32_t>((t & 1) ? q1 : q0);
                const uint32_t a0 = r0_live ? *reinterpret_cast<const uint32_t*>(ab0 + 4 + KS * m + 4 * t) : 0u;
                const uint32_t a1 = r1_live ? *reinterpret_cast<const uint32_t*>(ab1 + 4 + KS * m + 4 * t) : 0u;
                mma_s8_16x8x16(dd, a0, a1, bq);
                if constexpr (has_min) {
                    xs0 = quad_sum(__dp4a(static_cast<int32_t>(a0), 0x01010101, 0));
                    xs1 = quad_sum(__dp4a(static_cast<int32_t>(a1), 0x01010101, 0));
                }
            }
            // D's columns are 2t and 2t + 1: their group scales from the lanes that decoded them.
            const int32_t sc0 = __shfl_sync(0xffffffffu, sc, src0), sc1 = __shfl_sync(0xffffffffu, sc, src1);
            si[0] += sc0 * dd[0];
            si[1] += sc1 * dd[1];
            si[2] += sc0 * dd[2];
            si[3] += sc1 * dd[3];
            if constexpr (has_min) {
                const int32_t mn0 = __shfl_sync(0xffffffffu, mn, src0), mn1 = __shfl_sync(0xffffffffu, mn, src1);
                sm[0] += mn0 * xs0;
                sm[1] += mn1 * xs0;
                sm[2] += mn0 * xs1;
                sm[3] += mn1 * xs1;
            }
        }
        // The block's terms, folded in block order (y = t0, then y + t).
        float d = 0.0f, dmin = 0.0f;
        if (col_live) decode_scales<T>(b, d, dmin);
        const float d0 = __shfl_sync(0xffffffffu, d, src0), d1 = __shfl_sync(0xffffffffu, d, src1);
        float m0 = 0.0f, m1 = 0.0f;
        if constexpr (has_min) {
            m0 = __shfl_sync(0xffffffffu, dmin, src0);
            m1 = __shfl_sync(0xffffffffu, dmin, src1);
        }
        const float dx0 = r0_live ? *reinterpret_cast<const float*>(ab0) : 0.0f;
        const float dx1 = r1_live ? *reinterpret_cast<const float*>(ab1) : 0.0f;
        const float tt[4] = {block_term<tr::kind>(d0, m0, dx0, si[0], sm[0]), block_term<tr::kind>(d1, m1, dx0, si[1], sm[1]),
                             block_term<tr::kind>(d0, m0, dx1, si[2], sm[2]), block_term<tr::kind>(d1, m1, dx1, si[3], sm[3])};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            acc[c] = kb == 0 ? tt[c] : __fadd_rn(acc[c], tt[c]);
            si[c] = 0;
            sm[c] = 0;
        }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const int row = g + (c < 2 ? 0 : 8);
        const int64_t col = col0 + 2 * t + (c & 1);
        if (row >= n_rows || col >= n_out) continue;
        float* yy = y + static_cast<int64_t>(row) * y_stride + col;
        *yy = accumulate ? __fadd_rn(*yy, acc[c]) : acc[c];
    }
}

// Plain windows of 2..16 rows go here when mm_args::window_dp4a is off (window_bench times both).
inline bool window_mma_takes(const mm_args& a) {
    return !a.ids && !a.tiles && !a.window_dp4a && a.n_rows >= 2 && a.n_rows <= k_wmma_rows;
}

template <dtype T>
void launch_window_mma(const mm_args& a, cudaStream_t s) {
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    constexpr int cols = k_wmma_warps * 8;
    const int64_t cb1 = (a.n_out + cols - 1) / cols, cb2 = a.w2 ? (a.n_out2 + cols - 1) / cols : 0;
    launch(mm_window_mma_kernel<T>, dim3(static_cast<unsigned>(cb1 + cb2)), dim3(k_wmma_warps * 32), 0, s,
           reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out, reinterpret_cast<const uint8_t*>(a.act),
           a.act_stride, a.act_div, static_cast<int>(a.n_rows), a.y, a.y_stride, a.accumulate, cb1,
           reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride);
}

}  // namespace
}  // namespace sluice::cuda
