// Tensor-core form of a verify window's matmul: 2..16 activation rows of a plain matrix (no
// expert ids), bit-identical to mm_quant_kernel and so to kernels::dot_ref (E1, E3). Included by
// matmul.cu only, after matmul_mma.cuh (its MMA wrappers and mma_group_span).
//
// Why: a window's products cost the dp4a kernel about a one-row launch per row (a 2048 x 8192
// Q4_K matrix: 9.8 us for 1 row, 28.8 for 4, 155 for 16 as Q8_0), and mm_mma_kernel, made for
// prefill tiles of 64 rows x 64 columns with a block-wide staging pipeline, takes ~47 us for
// any window on that matrix (bench/gpu/window_bench.cu, tests/gpu/window_bench.h200.log). Here
// every warp takes 8 output columns and all of K, one m16n8 MMA per 32 (or 16) elements, so the
// rows' products come from the tensor cores at once.
//
// Staging. The first form read its weights and activations from global memory at each MMA and
// waited for them each time: 36 us for any window on that matrix, 68 us at K = 4096, against
// 7.9 us for the dp4a kernel's one row (H100, window_bench, session 30: one memory latency an
// MMA). Now a block's 4 warps stage their 32 columns' weights and the window's activation rows
// into shared memory a chunk of K at a time (cp.async, all of a chunk's copies in flight at
// once), double-buffered: the next chunk's copies fly while this one is multiplied.
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

// One staging buffer of the window kernel: the block's 32 weight rows, then 16 activation rows,
// each a chunk of `blocks` format blocks. The chunk is the longest of 2048, 1024, ... elements
// whose two buffers fit the default 48 KB (Q4_K: 512, Q6_K: 512, Q8_0: 256).
template <dtype T>
struct window_stage {
    static constexpr int bytes_for(int elems) {
        return k_wmma_warps * 8 * stage_region(elems / fmt_traits<T>::qk * fmt_traits<T>::block_bytes) +
               k_wmma_rows * stage_region(elems / fmt_traits<T>::qk * fmt_traits<T>::act_bytes);
    }
    static constexpr int pick() {
        int e = 2048;
        while (e > fmt_traits<T>::qk && 2 * bytes_for(e) > 48 * 1024) e /= 2;
        return e;
    }
    static constexpr int blocks = pick() / fmt_traits<T>::qk;                           // per chunk
    static constexpr int w_region = stage_region(blocks * fmt_traits<T>::block_bytes);  // per column
    static constexpr int a_region = stage_region(blocks * fmt_traits<T>::act_bytes);    // per row
    static_assert(2 * bytes_for(pick()) <= 48 * 1024, "two buffers within the default shared memory");
};

// Dynamic shared memory of a window launch of `rows` rows: two buffers.
template <dtype T>
size_t window_smem_bytes(int rows) {
    using ws = window_stage<T>;
    return 2 * (static_cast<size_t>(k_wmma_warps) * 8 * ws::w_region + static_cast<size_t>(rows) * ws::a_region);
}

// The split form's staging (mm_window_split_kernel): each warp its own chunk of K for the
// block's 8 columns and the window's rows, then the chunk's terms. The chunk is the longest of
// 512, 256, ... elements (whole format blocks) that fits the default 48 KB for 16 rows.
template <dtype T>
struct window_split_stage {
    static constexpr int bytes_for(int elems) {
        const int blocks = elems / fmt_traits<T>::qk;
        return k_wmma_warps * (8 * stage_region(blocks * fmt_traits<T>::block_bytes) +
                               k_wmma_rows * stage_region(blocks * fmt_traits<T>::act_bytes)) +
               k_wmma_warps * blocks * 4 * 32 * 4;
    }
    static constexpr int pick() {
        int e = 512;
        while (e > fmt_traits<T>::qk && bytes_for(e) > 48 * 1024) e /= 2;
        return e;
    }
    static constexpr int blocks = pick() / fmt_traits<T>::qk;                           // per chunk
    static constexpr int w_region = stage_region(blocks * fmt_traits<T>::block_bytes);  // per column
    static constexpr int a_region = stage_region(blocks * fmt_traits<T>::act_bytes);    // per row
    static_assert(bytes_for(pick()) <= 48 * 1024, "within the default shared memory");
};

// Dynamic shared memory of a split window launch of `rows` rows: the warps' regions, then the terms.
template <dtype T>
size_t window_split_smem_bytes(int rows) {
    using ss = window_split_stage<T>;
    return static_cast<size_t>(k_wmma_warps) * (8 * ss::w_region + static_cast<size_t>(rows) * ss::a_region) +
           static_cast<size_t>(k_wmma_warps) * ss::blocks * 4 * 32 * sizeof(float);
}

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

// A lane's place in a window warp (lane = 4 g + t): its decoded column and its two rows (g and
// g + 8) live or not, those rows' activations in global memory (where a staged chunk of them lands
// depends on the source's address modulo 16), and the lanes whose decoded columns are its D
// columns 2t and 2t + 1.
struct window_lane {
    int t, src0, src1;
    bool col_live, r0_live, r1_live;
    const uint8_t* x0;
    const uint8_t* x1;
};

__device__ inline window_lane make_window_lane(int lane, bool col_live, int n_rows, const uint8_t* act, size_t act_stride,
                                               int act_div) {
    const int g = lane >> 2, t = lane & 3;
    const bool r0_live = g < n_rows, r1_live = g + 8 < n_rows;
    return {t,
            8 * t,
            8 * t + 4,
            col_live,
            r0_live,
            r1_live,
            act + static_cast<size_t>((r0_live ? g : 0) / act_div) * act_stride,
            act + static_cast<size_t>((r1_live ? g + 8 : 0) / act_div) * act_stride};
}

// The four terms of one format block a lane holds after the block's MMAs (rows g and g + 8,
// columns 2t and 2t + 1), each dot_ref's block_term of that (row, column): b, the lane's column's
// block (shared or global memory); ab0 / ab1, its rows' activation blocks.
template <dtype T>
__device__ inline void window_block_terms(const uint8_t* b, const uint8_t* ab0, const uint8_t* ab1, const window_lane& ln,
                                          const iq_tables& tb, float tt[4]) {
    using tr = fmt_traits<T>;
    constexpr int GS = mma_group_span<T>;   // 16-element groups one MMA takes: 2 (k32) or 1 (k16)
    constexpr int KS = 16 * GS;             // elements per MMA
    constexpr int MPB = tr::qk / KS;        // MMAs per format block
    constexpr bool has_min = tr::kind != term_kind::sym;
    const int t = ln.t, src0 = ln.src0, src1 = ln.src1;
    const bool col_live = ln.col_live, r0_live = ln.r0_live, r1_live = ln.r1_live;
    int32_t si[4] = {0, 0, 0, 0}, sm[4] = {0, 0, 0, 0};
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
    // The block's terms (its format block's dot_ref term for rows g, g + 8 and columns 2t, 2t + 1).
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
    tt[0] = block_term<tr::kind>(d0, m0, dx0, si[0], sm[0]);
    tt[1] = block_term<tr::kind>(d1, m1, dx0, si[1], sm[1]);
    tt[2] = block_term<tr::kind>(d0, m0, dx1, si[2], sm[2]);
    tt[3] = block_term<tr::kind>(d1, m1, dx1, si[3], sm[3]);
}

// A lane's four results (rows g and g + 8, columns col0 + 2t and + 1) into y, those inside the
// window and the matrix.
__device__ inline void window_store(const float acc[4], int g, int t, int64_t col0, int n_rows, int64_t n_out, float* y,
                                    int64_t y_stride, bool accumulate) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int row = g + (k < 2 ? 0 : 8);
        const int64_t col = col0 + 2 * t + (k & 1);
        if (row >= n_rows || col >= n_out) continue;
        float* yy = y + static_cast<int64_t>(row) * y_stride + col;
        *yy = accumulate ? __fadd_rn(*yy, acc[k]) : acc[k];
    }
}

template <dtype T>
__global__ void __launch_bounds__(k_wmma_warps * 32, 4)
    mm_window_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                         const uint8_t* __restrict__ act, size_t act_stride, int act_div, int n_rows,
                         float* __restrict__ y, int64_t y_stride, bool accumulate, int64_t n_cb1,
                         const uint8_t* __restrict__ w2, int64_t n_out2, float* __restrict__ y2, int64_t y2_stride) {
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);   // arguments only
    using tr = fmt_traits<T>;
    using ws = window_stage<T>;
    constexpr int BB = tr::block_bytes, AB = tr::act_bytes;
    constexpr int CB = ws::blocks;          // format blocks per chunk
    constexpr int WR = ws::w_region / 16, AR = ws::a_region / 16;   // regions in 16-byte words
    extern __shared__ uint4 smem[];
    // Buffer b: smem + b * buf_words; in it the 4 warps' 8 weight rows each, then the n_rows
    // activation rows.
    const int buf_words = k_wmma_warps * 8 * WR + n_rows * AR;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int g = lane >> 2, t = lane & 3;
    const int64_t col0 = (bx * k_wmma_warps + warp) * 8;   // the warp's first column
    // Warps past the last column still stage the block's activation rows and reach every barrier.
    const bool warp_live = col0 < n_out;
    const bool col_live = col0 + g < n_out;                 // this lane's decoded column
    const uint8_t* wrow = w + static_cast<size_t>(col_live ? col0 + g : 0) * row_bytes;
    const int64_t n_chunks = (n_blocks + CB - 1) / CB;
    auto chunk_blocks = [&](int64_t c) { return static_cast<int>(n_blocks - c * CB < CB ? n_blocks - c * CB : CB); };
    // The warp's 8 weight rows of chunk c into buffer b (the lanes share each row's words).
    auto stage_weights = [&](int64_t c, int b) {
        uint4* sw = smem + b * buf_words + warp * 8 * WR;
        for (int k = 0; k < 8 && col0 + k < n_out; ++k)
            stage(w + static_cast<size_t>(col0 + k) * row_bytes + static_cast<size_t>(c) * CB * BB, chunk_blocks(c) * BB,
                  sw + k * WR, lane, 32);
    };
    // The window's activation rows of chunk c into buffer b (the block's threads share them).
    auto stage_rows = [&](int64_t c, int b) {
        uint4* sa = smem + b * buf_words + k_wmma_warps * 8 * WR;
        for (int r = 0; r < n_rows; ++r)
            stage(act + static_cast<size_t>(r / act_div) * act_stride + static_cast<size_t>(c) * CB * AB, chunk_blocks(c) * AB,
                  sa + r * AR, static_cast<int>(threadIdx.x), k_wmma_warps * 32);
    };
    // Weights are written by no kernel: the first chunk's copies start before the wait.
    if (warp_live) stage_weights(0, 0);
    wait_prior_grids();   // see launch.cuh; no return in this kernel (block barriers below)
    stage_rows(0, 0);
    stage_commit();
    const iq_tables tb = device_tables();
    const window_lane ln = make_window_lane(lane, col_live, n_rows, act, act_stride, act_div);
    const bool r0_live = ln.r0_live, r1_live = ln.r1_live;
    const uint8_t *x0 = ln.x0, *x1 = ln.x1;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t c = 0; c < n_chunks; ++c) {
        const int buf = static_cast<int>(c & 1);
        if (c + 1 < n_chunks) {
            // The other buffer was consumed: the barrier that ended the last chunk.
            if (warp_live) stage_weights(c + 1, buf ^ 1);
            stage_rows(c + 1, buf ^ 1);
            stage_commit();
            stage_wait_but<1>();   // chunk c's group has landed, chunk c + 1's flies
        } else {
            stage_wait_but<0>();
        }
        __syncthreads();
        if (warp_live) {
            const size_t wo = static_cast<size_t>(c) * CB * BB, ao = static_cast<size_t>(c) * CB * AB;
            const uint4* base = smem + buf * buf_words;
            const uint8_t* wc = reinterpret_cast<const uint8_t*>(base + warp * 8 * WR + g * WR) +
                                (reinterpret_cast<uintptr_t>(wrow + wo) & 15);
            const uint8_t* a0c = reinterpret_cast<const uint8_t*>(base + k_wmma_warps * 8 * WR + (r0_live ? g : 0) * AR) +
                                 (reinterpret_cast<uintptr_t>(x0 + ao) & 15);
            const uint8_t* a1c = reinterpret_cast<const uint8_t*>(base + k_wmma_warps * 8 * WR + (r1_live ? g + 8 : 0) * AR) +
                                 (reinterpret_cast<uintptr_t>(x1 + ao) & 15);
            const int nb = chunk_blocks(c);
            for (int ib = 0; ib < nb; ++ib) {
                const uint8_t* b = wc + ib * BB;
                const uint8_t* ab0 = a0c + ib * AB;
                const uint8_t* ab1 = a1c + ib * AB;
                float tt[4];
                window_block_terms<T>(b, ab0, ab1, ln, tb, tt);
                const bool first = c == 0 && ib == 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) acc[k] = first ? tt[k] : __fadd_rn(acc[k], tt[k]);
            }
        }
        __syncthreads();   // buffer `buf` consumed: chunk c + 2 may land in it
    }
    if (warp_live) window_store(acc, g, t, col0, n_rows, n_out, y, y_stride, accumulate);
}

// The split form, for windows on matrices of few columns, where each warp of the form above
// walks all of K alone (a floor of ~18 us at K = 2048 on 512 columns, session 30): a block takes
// 8 columns and its 4 warps take K's chunks in turn, round by round (warp w chunk 4r + w). Each
// warp stages its own chunk (the 8 weight rows and the window's rows), computes its blocks'
// terms with the same lanes as above and leaves them in shared memory; then warp 0 folds the
// round's terms in block order into its y, so the bits are the form above's (matmul_parity on the
// H100, session 31: tests/gpu/parity.h100.log). by_shape picks it wherever window_mma_pays; the
// form above runs only when forced (mm_args::window_kernel::tensor_cores).
template <dtype T>
__global__ void __launch_bounds__(k_wmma_warps * 32, 4)
    mm_window_split_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                           const uint8_t* __restrict__ act, size_t act_stride, int act_div, int n_rows,
                           float* __restrict__ y, int64_t y_stride, bool accumulate, int64_t n_cb1,
                           const uint8_t* __restrict__ w2, int64_t n_out2, float* __restrict__ y2, int64_t y2_stride) {
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);   // arguments only
    using tr = fmt_traits<T>;
    using ss = window_split_stage<T>;
    constexpr int BB = tr::block_bytes, AB = tr::act_bytes;
    constexpr int CB = ss::blocks;                                   // format blocks per chunk
    constexpr int WR = ss::w_region / 16, AR = ss::a_region / 16;    // regions in 16-byte words
    extern __shared__ uint4 smem[];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int g = lane >> 2, t = lane & 3;
    const int64_t col0 = bx * 8;                 // the block's first column (pick_matrix: whole blocks)
    const bool col_live = col0 + g < n_out;      // this lane's decoded column
    const uint8_t* wrow = w + static_cast<size_t>(col_live ? col0 + g : 0) * row_bytes;
    // The warp's region: 8 weight rows, then the n_rows activation rows; after all four, the
    // terms [warp][block of the chunk][4][lane].
    const int warp_words = 8 * WR + n_rows * AR;
    uint4* mine = smem + warp * warp_words;
    float* terms = reinterpret_cast<float*>(smem + k_wmma_warps * warp_words);
    const int64_t n_chunks = (n_blocks + CB - 1) / CB;
    const int64_t n_rounds = (n_chunks + k_wmma_warps - 1) / k_wmma_warps;
    auto chunk_blocks = [&](int64_t c) { return static_cast<int>(n_blocks - c * CB < CB ? n_blocks - c * CB : CB); };
    auto stage_weights = [&](int64_t c) {
        for (int k = 0; k < 8 && col0 + k < n_out; ++k)
            stage(w + static_cast<size_t>(col0 + k) * row_bytes + static_cast<size_t>(c) * CB * BB, chunk_blocks(c) * BB,
                  mine + k * WR, lane, 32);
    };
    auto stage_rows = [&](int64_t c) {
        for (int r = 0; r < n_rows; ++r)
            stage(act + static_cast<size_t>(r / act_div) * act_stride + static_cast<size_t>(c) * CB * AB, chunk_blocks(c) * AB,
                  mine + 8 * WR + r * AR, lane, 32);
    };
    // Weights are written by no kernel: the first round's copies start before the wait.
    if (warp < n_chunks) stage_weights(warp);
    wait_prior_grids();   // see launch.cuh; no return in this kernel (block barriers below)
    const iq_tables tb = device_tables();
    const window_lane ln = make_window_lane(lane, col_live, n_rows, act, act_stride, act_div);
    const bool r0_live = ln.r0_live, r1_live = ln.r1_live;
    const uint8_t *x0 = ln.x0, *x1 = ln.x1;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t r = 0; r < n_rounds; ++r) {
        const int64_t c = r * k_wmma_warps + warp;   // this warp's chunk
        if (c < n_chunks) {
            if (r > 0) stage_weights(c);
            stage_rows(c);
            stage_wait();
            __syncwarp();   // the lanes' copies, visible to the whole warp (its own region only)
            const size_t wo = static_cast<size_t>(c) * CB * BB, ao = static_cast<size_t>(c) * CB * AB;
            const uint8_t* wc = reinterpret_cast<const uint8_t*>(mine + g * WR) + (reinterpret_cast<uintptr_t>(wrow + wo) & 15);
            const uint8_t* a0c = reinterpret_cast<const uint8_t*>(mine + 8 * WR + (r0_live ? g : 0) * AR) +
                                 (reinterpret_cast<uintptr_t>(x0 + ao) & 15);
            const uint8_t* a1c = reinterpret_cast<const uint8_t*>(mine + 8 * WR + (r1_live ? g + 8 : 0) * AR) +
                                 (reinterpret_cast<uintptr_t>(x1 + ao) & 15);
            const int nb = chunk_blocks(c);
            for (int ib = 0; ib < nb; ++ib) {
                float tt[4];
                window_block_terms<T>(wc + ib * BB, a0c + ib * AB, a1c + ib * AB, ln, tb, tt);
#pragma unroll
                for (int k = 0; k < 4; ++k) terms[((warp * CB + ib) * 4 + k) * 32 + lane] = tt[k];
            }
        }
        __syncthreads();   // the round's terms are in shared memory
        if (warp == 0)
            for (int ww = 0; ww < k_wmma_warps; ++ww) {
                const int64_t cw = r * k_wmma_warps + ww;
                if (cw >= n_chunks) break;
                const int nb = chunk_blocks(cw);
                for (int ib = 0; ib < nb; ++ib)
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const float v = terms[((ww * CB + ib) * 4 + k) * 32 + lane];
                        acc[k] = cw == 0 && ib == 0 ? v : __fadd_rn(acc[k], v);
                    }
            }
        __syncthreads();   // the terms are folded and every region is free for the next round
    }
    if (warp == 0) window_store(acc, g, t, col0, n_rows, n_out, y, y_stride, accumulate);
}

// Whether the window kernel beats the dp4a kernel on a plain window; where it does, its split
// form runs (bench/gpu/window_bench on the H100, session 31: tests/gpu/window_bench.h100.log,
// split against dp4a us). The staged form's warps each walk all of K, which set a floor of
// ~18 us at K = 2048 (~37 at 4096) however few the columns; the split form shares K among a
// block's 4 warps and is faster than the staged one at every shape timed, so by_shape never
// picks the staged form. From 3 rows the split form is the faster at every shape timed:
//   Q4_K 2048 x 8192: 19.7 / 26.7 at 3 rows, 21.5 / 51.1 at 8; 4096 x 2048: 14.1 / 15.8 at 3,
//     15.4 / 37.4 at 8; 2048 x 512: 6.4 / 6.8 at 3, 6.8 / 11.6 at 8;
//   Q6_K 512 x 2048: 5.2 / 7.2 at 3; the 2048 x 248320 head 491 / 580 at 3, 531 / 1014 at 8;
//   Q8_0 2048 x 8192: 29.4 / 31.7 at 3, 34.0 / 71.7 at 8.
// At 2 rows only where the columns are at least twice K: Q4_K 2048 x 8192 16.1 / 20.8 and
// 2048 x 4096 10.6 / 12.3, but 4096 x 2048 13.9 / 12.8, 2048 x 512 6.1 / 5.1, Q6_K 512 x 2048
// 5.0 / 4.5 and the head 479 / 475, Q8_0 2048 x 8192 25.4 / 22.0. The other formats were not
// timed: dp4a.
inline bool window_mma_pays(const mm_args& a) {
    const int64_t cols = a.n_out + (a.w2 ? a.n_out2 : 0);
    switch (a.type) {
    case dtype::q4_k: return a.n_rows >= 3 || (a.n_rows == 2 && cols >= 2 * a.n_in);
    case dtype::q6_k:
    case dtype::q8_0: return a.n_rows >= 3;
    default: return false;   // not timed
    }
}

// Plain windows of 2..16 rows that go to the window kernel (mm_args::window).
inline bool window_mma_takes(const mm_args& a) {
    if (a.ids || a.tiles || a.n_rows < 2 || a.n_rows > k_wmma_rows) return false;
    switch (a.window) {
    case mm_args::window_kernel::dp4a: return false;
    case mm_args::window_kernel::tensor_cores:
    case mm_args::window_kernel::tensor_cores_split: return true;
    case mm_args::window_kernel::by_shape: break;
    }
    return window_mma_pays(a);
}

template <dtype T>
void launch_window_mma(const mm_args& a, cudaStream_t s) {
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    // by_shape reaches here only where window_mma_pays, and there the split form is the faster.
    const bool split = a.window != mm_args::window_kernel::tensor_cores;
    const int cols = split ? 8 : k_wmma_warps * 8;   // a block's columns
    const int64_t cb1 = (a.n_out + cols - 1) / cols, cb2 = a.w2 ? (a.n_out2 + cols - 1) / cols : 0;
    const int rows = static_cast<int>(a.n_rows);
    launch(split ? mm_window_split_kernel<T> : mm_window_mma_kernel<T>, dim3(static_cast<unsigned>(cb1 + cb2)),
           dim3(k_wmma_warps * 32), split ? window_split_smem_bytes<T>(rows) : window_smem_bytes<T>(rows), s,
           reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out, reinterpret_cast<const uint8_t*>(a.act),
           a.act_stride, a.act_div, static_cast<int>(a.n_rows), a.y, a.y_stride, a.accumulate, cb1,
           reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride);
}

}  // namespace
}  // namespace sluice::cuda
