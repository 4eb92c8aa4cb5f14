// Tensor-core form of the quantised matmul for many rows (a prefill chunk, or up to 64 pairs of
// one expert), bit-identical to mm_quant_kernel and so to kernels::dot_ref (E1, E3). Included by
// matmul.cu only, after its device tables (device_tables()) and its helpers.
//
// Why it gives the same bits: dot_ref's output is a chain over the row's format blocks,
//   y = t0, y = y + t1, y = y + t2, ...      t_b = block_term(d_b, dmin_b, dx_b, sumi_b, summ_b)
// where sumi_b = sum over the block's 16-element groups g of sc_g * dot(q_g, x_g) and summ_b =
// sum of mn_g * sum(x_g): integers, so any order and any split gives the same values (every
// sub-block of every format is 16 or 32 elements, so a 16-element group has one sc and one mn).
// Here an int8 MMA (mma.sync m16n8k16 s8, exact int32 sums) makes dot(q_g, x_g) for a 16 x 8 tile
// of (row, column) at once; each thread multiplies its four results by sc_g and adds them to its
// sumi; at the end of a block it forms t_b with the same block_term and folds it into its y in
// block order. Only the integer part moved to the tensor cores; every float operation is the
// one the one-row kernel does, in the same order.
//
// Formats whose sub-blocks are 32 elements wide (Q4_K, Q5_K, IQ4_XS and every 32-wide block
// format: one sc and mn for both 16-element groups of a sub-block) take m16n8k32 MMAs: one MMA
// and one scale step per 32 elements, the integer sum sc * (dot(q_g, x_g) + dot(q_g+1, x_g+1))
// being the same integer as the two products added. (IQ2_XXS, IQ3_XXS and IQ3_S also carry one
// sc per 32 elements; they keep k16 until a GPU run of matmul_parity covers them at k32.)
//
// A block of 8 warps computes 64 rows x 64 columns. Per step of 256 elements (one K-quant or
// I-quant super-block, or eight 32-wide blocks) it copies the step's raw bytes of its 64 weight
// rows and 64 activation rows into shared memory (cp.async: every word in flight at once,
// issued while the step before runs its MMAs), decodes the weights there as int8 (by words for
// the K-quant mixes' formats, mma_decode_words, else the per-lane decode of quant_decode.cuh:
// each weight block is decoded once for all 64 rows, against once per 16 rows in
// mm_quant_kernel), with sc / mn per group and d / dmin per block, lays the activation rows'
// int8 values and scales beside them, then each warp runs its 16 rows x 32 columns (four 16 x 8
// MMAs per group of 16 elements, or of 32 at k32; a tile of up to 32 rows, 16 x 16 or 16 x 8 a
// warp). The decode used to read global memory
// directly, piece by piece: with the activation loads, 5-6 memory latencies a step (2 rounds of
// the unrolled weight loop, 2 of activation words, the scales), which left the prefill's expert
// launches at 28 TOPS (tests/gpu/decode_profile.h200.txt).
#pragma once

namespace sluice::cuda {
namespace {

constexpr int k_mma_rows = k_tile_rows_mma;   // activation rows per block (group_pairs' tiles in this mode)
constexpr int k_mma_cols = 64;      // output columns per block
constexpr int k_mma_k = 256;        // elements of a row per step
constexpr int k_mma_warps = 8;      // 4 row groups of 16 x 2 column groups of 32
// Bytes per staged row: 272 = 68 words, so the fragment loads of a warp (8 rows x 4 words) fall in
// 32 different banks (68 = 4 mod 32).
constexpr int k_mma_stride = k_mma_k + 16;
constexpr int k_mma_groups = k_mma_k / 16;   // 16-element groups per step

struct __align__(16) mma_smem {
    int8_t w[k_mma_cols][k_mma_stride];    // decoded weights of the step, one row per output column
    int8_t x[k_mma_rows][k_mma_stride];    // activation int8 values of the step, one row per row
    int8_t sc[k_mma_groups][k_mma_cols];   // each group's integer scale, per column
    union {
        int8_t mn[k_mma_groups][k_mma_cols];   // ... and integer min (formats with a min term)
        int8_t mn_t[k_mma_cols][8];            // mma_min_term formats: each sub-block's min, per column
    };
    float d[8][k_mma_cols];                // each block's d, per column (up to 8 blocks a step)
    float dmin[8][k_mma_cols];             // ... and dmin
    float dx[8][k_mma_rows];               // each activation block's scale, per row
    union {
        int32_t xs[k_mma_groups][k_mma_rows];   // sum of each group's int8 activations, per row
        struct {                                // mma_min_term formats: each sub-block's sum
            int8_t hi[k_mma_rows][8];           // as 128 hi + lo, per row
            int8_t lo[k_mma_rows][8];
        } xs_split;
    };
    const uint8_t* arow[k_mma_rows];       // each row's activation row (act + row / act_div * act_stride)
};
constexpr int k_mma_threads = k_mma_warps * 32;
static_assert(sizeof(mma_smem) <= 48 * 1024, "static shared memory within the default limit");

// The raw bytes of a step in dynamic shared memory: per weight row (output column) the step's
// format blocks, per activation row its activation blocks, each in a region of 16-byte words as
// stage() lays them (the copy starts at the source's 16-byte granule).
template <dtype T>
struct mma_raw {
    static constexpr int w_words = stage_region(k_mma_k / fmt_traits<T>::qk * fmt_traits<T>::block_bytes) / 16;
    static constexpr int x_words = stage_region(k_mma_k / fmt_traits<T>::qk * fmt_traits<T>::act_bytes) / 16;
    static constexpr size_t bytes = 16 * static_cast<size_t>(k_mma_cols * w_words + k_mma_rows * x_words);
};

// d[0..3] = A (16 x 16 int8, rows of the row-major tile) . B (16 x 8 int8) with int32 sums.
// Fragments (PTX ISA, mma.m16n8k16 with .s8): lane = 4 * g + t; a0 = A[g][4t..4t+3],
// a1 = A[g+8][4t..4t+3], b0 = B[4t..4t+3][g] (column g of B is output column g); d0, d1 =
// D[g][2t], D[g][2t+1], d2, d3 = D[g+8][2t], D[g+8][2t+1].
__device__ inline void mma_s8_16x8x16(int32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
#else
    __trap();   // the builds are sm_80 and newer (CMakeLists.txt); matmul() checks the device
#endif
}

// The same for k = 32 (a0..a3, b0, b1): a0 = A[g][4t..4t+3], a1 = A[g+8][4t..4t+3], a2 =
// A[g][16+4t..], a3 = A[g+8][16+4t..]; b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]; d as above.
__device__ inline void mma_s8_16x8x32(int32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
#else
    __trap();
#endif
}

// Formats whose step mma_decode_words decodes by 4-byte words of the staged block (the K-quant
// mixes' formats), when every block is packed_alignment<T>-aligned. The per-piece decoder
// (decode_piece_packed, one (column, 8 elements) item a thread with its scale unpacking and
// alignment cases) ran ~140 warp instructions per item and held 57% of the stall samples of the
// prefill's experts gate + up launch (ncu source counters, H100, session 35, 512 rows: 239 of its
// 464 M warp instructions).
template <dtype T>
inline constexpr bool mma_word_decoder = T == dtype::q4_k || T == dtype::q5_k || T == dtype::q6_k;

// Column c's step block in the staged bytes: it landed at raw_w + c * rw words, at its global
// address mod 16 (w_lo: the low bits of column 0's block address; row_bytes: the column stride).
__device__ inline const uint8_t* staged_block(const uint4* raw_w, int rw, uint32_t w_lo, uint32_t row_bytes, int c) {
    return reinterpret_cast<const uint8_t*>(raw_w + c * rw) + ((w_lo + static_cast<uint32_t>(c) * row_bytes) & 15u);
}

// The step's weights (one 256-element super-block per column) as int8 into s.w, with the
// groups' sc / mn and the block's d / dmin, by quant_decode.cuh's word decoders: items of one
// 4-byte word of a column's quants (Q4_K, Q5_K: 8 weights; one sc and mn per 32 elements,
// written to both groups) or of a (half, word) of Q6_K (16 weights; one int8 sc per 16).
template <dtype T>
__device__ inline void mma_decode_words(mma_smem& s, const uint4* raw_w, int rw, uint32_t w_lo, uint32_t row_bytes,
                                        int ncols, int tid, int nthr) {
    if constexpr (T == dtype::q4_k || T == dtype::q5_k) {
        for (int it = tid; it < ncols * 32; it += nthr) {
            const int c = it >> 5, w = it & 31;
            uint32_t lo, hi;
            decode_word_k4<T>(staged_block(raw_w, rw, w_lo, row_bytes, c), w, lo, hi);
            int8_t* dst = &s.w[c][64 * (w >> 3) + 4 * (w & 7)];
            *reinterpret_cast<uint32_t*>(dst) = lo;
            *reinterpret_cast<uint32_t*>(dst + 32) = hi;
        }
        // The scales by (column, sub-block) items, over all the block's threads: one thread a
        // column (8 scale_min_k4 and the header each) left the block's other 192 threads waiting
        // at the barrier behind those 64.
        for (int it = tid; it < k_mma_cols * 8; it += nthr) {
            const int c = it & (k_mma_cols - 1), j = it / k_mma_cols;
            if (c >= ncols) continue;
            const uint8_t* b = staged_block(raw_w, rw, w_lo, row_bytes, c);
            if (j == 0) decode_scales<T>(b, s.d[0][c], s.dmin[0][c]);
            int sc, mn;
            scale_min_k4(j, b + 4, sc, mn);
            s.sc[2 * j][c] = s.sc[2 * j + 1][c] = static_cast<int8_t>(sc);
            s.mn_t[c][j] = static_cast<int8_t>(mn);   // mma_min_term<T>
        }
    } else {
        static_assert(T == dtype::q6_k, "mma_word_decoder formats");
        for (int it = tid; it < ncols * 16; it += nthr) {
            const int c = it >> 4, h = (it >> 3) & 1, l = 4 * (it & 7);
            uint32_t q[4];
            decode_words_q6k(staged_block(raw_w, rw, w_lo, row_bytes, c), h, l, q);
            int8_t* dst = &s.w[c][128 * h + l];
#pragma unroll
            for (int m = 0; m < 4; ++m) *reinterpret_cast<uint32_t*>(dst + 32 * m) = q[m];
        }
        for (int it = tid; it < ncols * 4; it += nthr) {
            const int c = it >> 2, g4 = it & 3;
            const uint8_t* b = staged_block(raw_w, rw, w_lo, row_bytes, c);
            const uint32_t v = ld_u32_aligned2(b + 192 + 4 * g4);
#pragma unroll
            for (int e = 0; e < 4; ++e) s.sc[4 * g4 + e][c] = static_cast<int8_t>(v >> (8 * e));
            if (g4 == 0) decode_scales<T>(b, s.d[0][c], s.dmin[0][c]);
        }
    }
}

// 16-element groups one MMA takes for format T: 2 where a sub-block's 32 elements share sc, mn.
template <dtype T>
inline constexpr int mma_group_span =
    T == dtype::q4_k || T == dtype::q5_k || T == dtype::iq4_xs || fmt_traits<T>::qk == 32 ? 2 : 1;

// Formats whose min term's integers (summ = sum over the block's 8 sub-blocks of mn * xs, xs the
// sub-block's activation sum) come from tensor-core MMAs at the block's end: with xs = 128 hi + lo
// (hi = xs >> 7 in [-32, 31], lo = xs & 127: |xs| <= 32 * 128), summ = 128 (mn . hi) + (mn . lo),
// two m16n8k16 int8 MMAs a tile over k = the 8 sub-blocks (k 8..15 zero), instead of 4
// multiply-adds a tile and sub-block, with their loads, in the group loop. The same integer.
// With the scales decoded over all the block's threads (mma_decode_words), decode_bench's prefill
// of 512 went 8,695.1 -> 9,547.3 tok/s on an H100 (same call, session 36; 4,096: 4,488.6 ->
// 4,669.7); the Q4_K kernel's SASS 4,096 -> 3,664 instructions, 122 registers, no spills.
template <dtype T>
inline constexpr bool mma_min_term = T == dtype::q4_k || T == dtype::q5_k;

// grid (column blocks of the one or two matrices, row tiles): row tiles of 64 rows (plain), or
// group_pairs' tiles of up to 64 pairs of one expert (grouped expert mode).
template <dtype T>
__global__ void __launch_bounds__(k_mma_warps * 32, 2)
    mm_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out, size_t expert_stride,
                  const uint8_t* __restrict__ act, size_t act_stride, int act_div, int64_t n_rows, float* __restrict__ y,
                  int64_t y_stride, bool accumulate, int64_t n_cb1, const uint8_t* __restrict__ w2, int64_t n_out2,
                  float* __restrict__ y2, int64_t y2_stride, const int32_t* __restrict__ tiles,
                  const int32_t* __restrict__ n_tiles, const int32_t* __restrict__ perm) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);
    using tr = fmt_traits<T>;
    constexpr int QK = tr::qk, BB = tr::block_bytes, AB = tr::act_bytes;
    constexpr int CB = k_mma_k / QK;   // format blocks per step: 1 or 8
    constexpr int PPB = QK / 8;        // pieces (8 elements) per block
    constexpr int GPB = QK / 16;       // groups per block
    constexpr bool has_min = tr::kind != term_kind::sym;
    constexpr bool min_mma = mma_min_term<T>;   // else the min term by multiply-adds per group
    __shared__ mma_smem s;
    extern __shared__ uint4 mma_dyn[];   // mma_raw<T>::bytes: the raw weight rows, then the activation rows
    constexpr int RW = mma_raw<T>::w_words, RX = mma_raw<T>::x_words;
    uint4* raw_w = mma_dyn;
    uint4* raw_x = mma_dyn + k_mma_cols * RW;
    const int tid = static_cast<int>(threadIdx.x), nthr = static_cast<int>(blockDim.x);
    const int warp = tid / 32, lane = tid & 31;
    const int64_t col0 = bx * k_mma_cols;
    int nr;
    int64_t r0 = 0;
    const int32_t* rows = nullptr;
    const uint8_t* wm = w;
    if (tiles) {
        const int64_t t = blockIdx.y;
        if (t >= *n_tiles) return;   // the whole block, before any barrier
        rows = perm + tiles[3 * t];
        nr = tiles[3 * t + 1];
        wm = w + static_cast<size_t>(tiles[3 * t + 2]) * expert_stride;
    } else {
        r0 = static_cast<int64_t>(blockIdx.y) * k_mma_rows;
        nr = static_cast<int>(n_rows - r0 < k_mma_rows ? n_rows - r0 : k_mma_rows);
    }
    const int ncols = static_cast<int>(n_out - col0 < k_mma_cols ? n_out - col0 : k_mma_cols);
    const iq_tables tb = device_tables();
    // Every block of the launch aligned for the word decoder (uniform: the matrix's base and row
    // stride, block sizes being multiples of the alignment).
    constexpr int WA = packed_alignment<T> > 0 ? packed_alignment<T> : 1;
    const bool word_path =
        mma_word_decoder<T> && ((reinterpret_cast<uintptr_t>(wm) | row_bytes) & static_cast<uintptr_t>(WA - 1)) == 0;
    static_assert(!mma_word_decoder<T> || (BB % WA == 0 && QK == k_mma_k), "one word-aligned super-block a step");
    const int g8 = lane >> 2, t4 = lane & 3;
    // The warps' layout follows the tile's rows: rg groups of 16 rows by 8 / rg groups of ni = rg
    // 8-column MMA tiles, so that a tile of up to 32 rows (an expert's pairs in a 512-token
    // prefill: 32 on average) keeps all 8 warps on MMAs instead of 4. Each output is still one
    // thread's, by the same operations in the same order: the layout moves no arithmetic.
    const int rg = nr <= 16 ? 1 : nr <= 32 ? 2 : 4, ni = rg;
    const int wr = 16 * (warp % rg), wc = 8 * rg * (warp / rg);   // the warp's first row and column in the tile
    const bool live = wr < nr && wc < ncols;                       // uniform across the warp
    int32_t si[4][4], sm[4][4];
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            si[i][c] = 0;
            sm[i][c] = 0;
            acc[i][c] = 0.0f;
        }

    // Each row's activation row, once (the staging loops would otherwise read perm per word).
    for (int r = tid; r < nr; r += nthr) {
        const int64_t row = rows ? rows[r] : r0 + r;
        s.arow[r] = act + static_cast<size_t>(row / act_div) * act_stride;
    }
    // The raw bytes of the step at kb: each weight row's nb blocks and each activation row's nb
    // blocks (contiguous in both), every word in flight at once. Issued one step ahead: the next
    // step's copies land while this step's MMAs run (the raw buffer is free once decoded).
    auto issue_raw = [&](int64_t kb) {
        const int nb = static_cast<int>(n_blocks - kb < CB ? n_blocks - kb : CB);
        for (int it = tid; it < ncols * RW; it += nthr) {
            const int c = it / RW, i = it - c * RW;
            const uintptr_t a = reinterpret_cast<uintptr_t>(wm + static_cast<size_t>(col0 + c) * row_bytes + static_cast<size_t>(kb) * BB);
            if (i < (static_cast<int>(a & 15) + nb * BB + 15) / 16)
                copy16(raw_w + it, reinterpret_cast<const uint4*>(a & ~static_cast<uintptr_t>(15)) + i);
        }
        for (int it = tid; it < nr * RX; it += nthr) {
            const int r = it / RX, i = it - r * RX;
            const uintptr_t a = reinterpret_cast<uintptr_t>(s.arow[r] + static_cast<size_t>(kb) * AB);
            if (i < (static_cast<int>(a & 15) + nb * AB + 15) / 16)
                copy16(raw_x + it, reinterpret_cast<const uint4*>(a & ~static_cast<uintptr_t>(15)) + i);
        }
    };
    __syncthreads();   // s.arow
    issue_raw(0);
    for (int64_t kb = 0; kb < n_blocks; kb += CB) {
        const int nb = static_cast<int>(n_blocks - kb < CB ? n_blocks - kb : CB);
        stage_wait();
        __syncthreads();   // the step's raw bytes are in; the previous step's MMAs are done with s
        // Weights: by words (mma_decode_words) where the format has a word decoder, else (column,
        // piece) items, consecutive threads on consecutive pieces of a column, decoded from the
        // staged bytes (the same alignment mod 16 as in global memory, so the same word paths).
        const int ppc = word_path ? 0 : nb * PPB;   // pieces per column this step
        if constexpr (mma_word_decoder<T>) {
            if (word_path)
                mma_decode_words<T>(s, raw_w, RW,
                                    static_cast<uint32_t>(reinterpret_cast<uintptr_t>(
                                        wm + static_cast<size_t>(col0) * row_bytes + static_cast<size_t>(kb) * BB)),
                                    static_cast<uint32_t>(row_bytes), ncols, tid, nthr);
        }
        for (int it = tid; it < ncols * ppc; it += nthr) {
            const int c = it / ppc, p = it - c * ppc;
            const int blk = p / PPB, piece = p - blk * PPB;
            const int o = static_cast<int>(
                reinterpret_cast<uintptr_t>(wm + static_cast<size_t>(col0 + c) * row_bytes + static_cast<size_t>(kb) * BB) & 15);
            const uint8_t* b = reinterpret_cast<const uint8_t*>(raw_w + c * RW) + o + blk * BB;
            int32_t q0, q1;
            int sc, mn;
            decode_piece_packed<T>(b, piece, tb, packed_aligned<T>(b), q0, q1, sc, mn);
            *reinterpret_cast<int2*>(&s.w[c][8 * p]) = make_int2(q0, q1);
            if ((piece & 1) == 0) {   // the two pieces of a group share sc and mn
                s.sc[p / 2][c] = static_cast<int8_t>(sc);
                if constexpr (min_mma) {
                    if ((piece & 3) == 0) s.mn_t[c][piece / 4] = static_cast<int8_t>(mn);   // 32-element sub-blocks
                } else if constexpr (has_min) {
                    s.mn[p / 2][c] = static_cast<int8_t>(mn);
                }
            }
            if (piece == 0) {
                float d, dmin;
                decode_scales<T>(b, d, dmin);
                s.d[blk][c] = d;
                s.dmin[blk][c] = dmin;
            }
        }
        // Activations: the int8 values 16 bytes an item, as words (blocks are 4-byte aligned:
        // matmul() checks; one item never crosses a block, whose 16 or 256 values are whole
        // items), and each block's scale, from the staged rows. 256-wide blocks also give their
        // groups' sums (bsums: the integer the min term takes; dot_ref reads the same field).
        constexpr int CPR = k_mma_k / 16;   // 16-byte items per row of a whole step
        const int cpr_live = nb * QK / 16;  // ... of this step
        for (int it = tid; it < nr * CPR; it += nthr) {
            const int r = it / CPR, q = it - r * CPR;
            if (q >= cpr_live) continue;
            const int blk = (16 * q) / QK, off = 16 * q - blk * QK;
            const int o = static_cast<int>(reinterpret_cast<uintptr_t>(s.arow[r] + static_cast<size_t>(kb) * AB) & 15);
            const uint32_t* xr =
                reinterpret_cast<const uint32_t*>(reinterpret_cast<const uint8_t*>(raw_x + r * RX) + o + blk * AB + 4 + off);
            *reinterpret_cast<uint4*>(&s.x[r][16 * q]) = make_uint4(xr[0], xr[1], xr[2], xr[3]);
        }
        for (int it = tid; it < nr * nb; it += k_mma_threads) {
            const int r = it / nb, blk = it - r * nb;
            const int o = static_cast<int>(reinterpret_cast<uintptr_t>(s.arow[r] + static_cast<size_t>(kb) * AB) & 15);
            s.dx[blk][r] = *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(raw_x + r * RX) + o + blk * AB);
        }
        constexpr bool xs_from_bsums = has_min && QK == 256;
        if constexpr (min_mma) {   // each 32-element sub-block's sum, split for the MMAs
            for (int it = tid; it < nr * 8; it += nthr) {
                const int r = it >> 3, k = it & 7;
                const int o = static_cast<int>(reinterpret_cast<uintptr_t>(s.arow[r] + static_cast<size_t>(kb) * AB) & 15);
                const int16_t* bs =
                    reinterpret_cast<const int16_t*>(reinterpret_cast<const uint8_t*>(raw_x + r * RX) + o + 4 + QK) + 2 * k;
                const int32_t xs = static_cast<int32_t>(bs[0]) + static_cast<int32_t>(bs[1]);
                s.xs_split.hi[r][k] = static_cast<int8_t>(xs >> 7);
                s.xs_split.lo[r][k] = static_cast<int8_t>(xs & 127);
            }
        } else if constexpr (xs_from_bsums) {
            for (int it = tid; it < nr * k_mma_groups; it += nthr) {
                const int r = it / k_mma_groups, g = it - r * k_mma_groups;
                const int o = static_cast<int>(reinterpret_cast<uintptr_t>(s.arow[r] + static_cast<size_t>(kb) * AB) & 15);
                s.xs[g][r] = *reinterpret_cast<const int16_t*>(reinterpret_cast<const uint8_t*>(raw_x + r * RX) + o + 4 + QK + 2 * g);
            }
        }
        __syncthreads();   // s holds the step; the raw buffer is free
        if (kb + CB < n_blocks) issue_raw(kb + CB);
        if constexpr (has_min && !xs_from_bsums) {   // per-group activation sums (the min term's integer)
            const int gpr = nb * GPB;
            for (int it = tid; it < nr * gpr; it += nthr) {
                const int r = it / gpr, g = it - r * gpr;
                const uint32_t* xw = reinterpret_cast<const uint32_t*>(&s.x[r][16 * g]);
                int32_t sum = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) sum = __dp4a(static_cast<int32_t>(xw[k]), 0x01010101, sum);
                s.xs[g][r] = sum;
            }
            __syncthreads();
        }
        if (!live) continue;
        constexpr int GS = mma_group_span<T>;
        // One MMA step (GS groups) for the warp's NI tiles, and at the end of a format block its
        // terms, folded in order.
        auto mma_group = [&](int g, auto ni_c) {
            constexpr int NI = decltype(ni_c)::value;
            const uint32_t a0 = *reinterpret_cast<const uint32_t*>(&s.x[wr + g8][16 * g + 4 * t4]);
            const uint32_t a1 = *reinterpret_cast<const uint32_t*>(&s.x[wr + g8 + 8][16 * g + 4 * t4]);
            [[maybe_unused]] uint32_t a2 = 0, a3 = 0;   // GS == 2 only
            if constexpr (GS == 2) {
                a2 = *reinterpret_cast<const uint32_t*>(&s.x[wr + g8][16 * g + 16 + 4 * t4]);
                a3 = *reinterpret_cast<const uint32_t*>(&s.x[wr + g8 + 8][16 * g + 16 + 4 * t4]);
            }
            [[maybe_unused]] int32_t xs0 = 0, xs1 = 0;   // formats with a min only
            if constexpr (has_min && !min_mma) {
                xs0 = s.xs[g][wr + g8];
                xs1 = s.xs[g][wr + g8 + 8];
                if constexpr (GS == 2) {
                    xs0 += s.xs[g + 1][wr + g8];
                    xs1 += s.xs[g + 1][wr + g8 + 8];
                }
            }
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int cc = wc + 8 * i;
                const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&s.w[cc + g8][16 * g + 4 * t4]);
                int32_t dd[4];
                if constexpr (GS == 2) {
                    const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&s.w[cc + g8][16 * g + 16 + 4 * t4]);
                    mma_s8_16x8x32(dd, a0, a1, a2, a3, b0, b1);
                } else {
                    mma_s8_16x8x16(dd, a0, a1, b0);
                }
                const int c0 = cc + 2 * t4;
                const int32_t sc0 = s.sc[g][c0], sc1 = s.sc[g][c0 + 1];
                si[i][0] += sc0 * dd[0];
                si[i][1] += sc1 * dd[1];
                si[i][2] += sc0 * dd[2];
                si[i][3] += sc1 * dd[3];
                if constexpr (has_min && !min_mma) {
                    const int32_t mn0 = s.mn[g][c0], mn1 = s.mn[g][c0 + 1];
                    sm[i][0] += mn0 * xs0;
                    sm[i][1] += mn1 * xs0;
                    sm[i][2] += mn0 * xs1;
                    sm[i][3] += mn1 * xs1;
                }
            }
            if ((g + GS) % GPB == 0) {   // the end of a format block: its terms, folded in order
                const int blk = g / GPB;
                const bool first = kb + blk == 0;
                const float dx0 = s.dx[blk][wr + g8], dx1 = s.dx[blk][wr + g8 + 8];
                if constexpr (min_mma) {   // summ = 128 (mn . hi) + (mn . lo): lanes t = 2, 3 hold k 8..15 (zero)
                    const bool kl = t4 < 2;
                    const uint32_t h0 = kl ? *reinterpret_cast<const uint32_t*>(&s.xs_split.hi[wr + g8][4 * t4]) : 0u;
                    const uint32_t h1 = kl ? *reinterpret_cast<const uint32_t*>(&s.xs_split.hi[wr + g8 + 8][4 * t4]) : 0u;
                    const uint32_t l0 = kl ? *reinterpret_cast<const uint32_t*>(&s.xs_split.lo[wr + g8][4 * t4]) : 0u;
                    const uint32_t l1 = kl ? *reinterpret_cast<const uint32_t*>(&s.xs_split.lo[wr + g8 + 8][4 * t4]) : 0u;
#pragma unroll
                    for (int i = 0; i < NI; ++i) {
                        const uint32_t m0 = kl ? *reinterpret_cast<const uint32_t*>(&s.mn_t[wc + 8 * i + g8][4 * t4]) : 0u;
                        int32_t dh[4], dl[4];
                        mma_s8_16x8x16(dh, h0, h1, m0);
                        mma_s8_16x8x16(dl, l0, l1, m0);
#pragma unroll
                        for (int c = 0; c < 4; ++c) sm[i][c] = dh[c] * 128 + dl[c];
                    }
                }
#pragma unroll
                for (int i = 0; i < NI; ++i) {
                    const int c0 = wc + 8 * i + 2 * t4;
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int col = c0 + (c & 1);
                        const float dmin = has_min ? s.dmin[blk][col] : 0.0f;
                        const float t = block_term<tr::kind>(s.d[blk][col], dmin, c < 2 ? dx0 : dx1, si[i][c], sm[i][c]);
                        acc[i][c] = first ? t : __fadd_rn(acc[i][c], t);
                        si[i][c] = 0;
                        sm[i][c] = 0;
                    }
                }
            }
        };
        // The tile count is a constant of each loop below (one loop per layout), and a whole
        // step of the K-quant mixes' formats (every step of their matrices) runs its groups
        // unrolled, with no branch between groups: the MMAs of the next group can issue while
        // the scale products of the one before wait on their results (in the rolled loop, with
        // the run-time tile count, each group's integer work waited on its own MMA; ncu on the
        // gate + up launch: "wait" 29% of stall samples, session 35). With the prefill router's
        // prefetch (matmul_float.cu), decode_bench's prefill of 512 went 7,637.9 -> 8,755.4 tok/s
        // on an H100 (same call); ncu there put the gate + up launch at 423.0 us (485.6 on an
        // H200 before, tests/gpu/prefill_profile.txt). The same operations in the same order for
        // every output either way.
        const int ng = nb * GPB;
        auto run_groups = [&](auto ni_c) {
            if (mma_word_decoder<T> && ng == k_mma_groups) {
#pragma unroll
                for (int g = 0; g < k_mma_groups; g += GS) mma_group(g, ni_c);
            } else {
                for (int g = 0; g < ng; g += GS) mma_group(g, ni_c);
            }
        };
        if (ni == 1) run_groups(std::integral_constant<int, 1>{});
        else if (ni == 2) run_groups(std::integral_constant<int, 2>{});
        else run_groups(std::integral_constant<int, 4>{});
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int r = wr + g8 + (c < 2 ? 0 : 8), col = wc + 8 * i + 2 * t4 + (c & 1);
            if (i >= ni || r >= nr || col >= ncols) continue;
            const int64_t row = rows ? rows[r] : r0 + r;
            float* yy = y + row * y_stride + col0 + col;
            *yy = accumulate ? __fadd_rn(*yy, acc[i][c]) : acc[i][c];
        }
}

template <dtype T>
void launch_mma(const mm_args& a, cudaStream_t s) {
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    const int64_t cb1 = (a.n_out + k_mma_cols - 1) / k_mma_cols;
    const int64_t cb2 = a.w2 ? (a.n_out2 + k_mma_cols - 1) / k_mma_cols : 0;
    const int64_t row_tiles = a.tiles ? a.max_tiles : (a.n_rows + k_mma_rows - 1) / k_mma_rows;
    // Static (mma_smem) and dynamic shared memory together pass the default 48 KB: the kernel
    // opts in (set at each launch, which are few: prefill chunks and grouped expert tiles, never
    // a captured step).
    opt_in_shared(mm_mma_kernel<T>, mma_raw<T>::bytes, "tensor-core matmul");
    launch(mm_mma_kernel<T>, dim3(static_cast<unsigned>(cb1 + cb2), static_cast<unsigned>(row_tiles)),
           dim3(k_mma_warps * 32), mma_raw<T>::bytes, s, reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out,
           a.expert_stride, reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.act_div, a.n_rows, a.y, a.y_stride,
           a.accumulate, cb1, reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride, a.tiles, a.n_tiles,
           a.perm);
}

}  // namespace
}  // namespace sluice::cuda
