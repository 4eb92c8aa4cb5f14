// Float-weight matmuls (F32/F16/BF16), bit-identical to kernels::dot_f32_ref: 16 lanes (a half
// warp, or 16 chains of one thread) per output column and row, chain l accumulating
// __fmaf_rn(w[i], x[i], acc) for i % 16 == l in index order, then the pairwise fold 8, 4, 2, 1.
// Three kernels with those bits: a half warp a column (mm_float_kernel), row x column tiles
// through shared memory (mm_float_tile_kernel: prefill chunks), and a block a column with the row
// staged whole (mm_float_col_kernel: the router, with its top-k fused for a decode step).
#include "kernels/cuda/matmul_common.cuh"
#include "kernels/cuda/act_quant_dev.cuh"
#include "kernels/cuda/async_copy.cuh"

#include "core/error.h"
#include "kernels/cuda/lanes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/route_warp.cuh"

#include "quant/act.h"

#include <cuda/atomic>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace sluice::cuda {
namespace {

using mm_detail::k_max_rows;
using mm_detail::k_warps;
using mm_detail::pick_matrix;

template <dtype T>
__device__ inline float load_w(const uint8_t* row, int64_t i) {
    if constexpr (T == dtype::f32) {
        return reinterpret_cast<const float*>(row)[i];
    } else {
        const uint16_t h = reinterpret_cast<const uint16_t*>(row)[i];
        if constexpr (T == dtype::f16) return __half2float(__ushort_as_half(h));
        else return __uint_as_float(static_cast<uint32_t>(h) << 16);
    }
}

constexpr int k_float_cols = k_warps * 2;   // half warps (output columns) per block of mm_float_kernel
constexpr int k_float_unroll = 32;          // loads in flight per lane before their FMAs

// Float weights: a half warp per output column, the rows of its group one after the other.
// The loads of k_float_unroll consecutive steps of a lane are issued before their FMAs (the
// FMA chain itself stays in index order: the same bits).
template <dtype T>
__global__ void __launch_bounds__(k_warps * 32)
    mm_float_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                    const int32_t* __restrict__ ids, size_t expert_stride, const uint8_t* __restrict__ act,
                    size_t act_stride, int act_div, int64_t n_rows, float* __restrict__ y, int64_t y_stride,
                    bool accumulate, int64_t n_cb1, const uint8_t* __restrict__ w2, int64_t n_out2,
                    float* __restrict__ y2, int64_t y2_stride) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);
    const int l = static_cast<int>(threadIdx.x & 15);
    const int64_t j = bx * (blockDim.x / 16) + threadIdx.x / 16;   // blockDim.x / 16 columns per block
    const bool live = j < n_out;   // every lane stays for the shuffles
    int64_t r0;
    int nr;
    if (ids && ids[blockIdx.y] < 0) return;   // another lane's pair (the whole block: no barriers here)
    const uint8_t* wrow = mm_detail::block_rows(w, ids, expert_stride, row_bytes, j, live, n_rows, r0, nr);
    for (int r = 0; r < nr; ++r) {   // nr is uniform across the block
        float a = 0.0f;
        if (live) {
            const float* x = reinterpret_cast<const float*>(act + static_cast<size_t>((r0 + r) / act_div) * act_stride);
            int64_t i = l;
            for (; i + 16 * (k_float_unroll - 1) < n_in; i += 16 * k_float_unroll) {
                float wv[k_float_unroll], xv[k_float_unroll];
#pragma unroll
                for (int u = 0; u < k_float_unroll; ++u) {
                    wv[u] = load_w<T>(wrow, i + 16 * u);
                    xv[u] = __ldg(x + i + 16 * u);
                }
#pragma unroll
                for (int u = 0; u < k_float_unroll; ++u) a = __fmaf_rn(wv[u], xv[u], a);
            }
            for (; i < n_in; i += 16) a = __fmaf_rn(load_w<T>(wrow, i), x[i], a);
        }
        // acc[l] += acc[l + s] for s = 8, 4, 2, 1, within each half warp.
        for (int s = 8; s >= 1; s >>= 1) {
            const float o = __shfl_down_sync(0xffffffffu, a, s, 16);
            a = __fadd_rn(a, o);
        }
        if (live && l == 0) {
            float* yy = y + (r0 + r) * y_stride + j;
            *yy = accumulate ? __fadd_rn(*yy, a) : a;
        }
    }
}

// Float weights, many rows (a prefill's router, a float model's matrices in a prefill): a
// block computes a tile of k_ft_rows rows x k_ft_cols columns, a thread one column for k_ft_rpt
// rows, keeping each output's 16 chains in registers (element i goes to chain i % 16, as lane
// i % 16 of mm_float_kernel's half warp takes it) and folding them 8, 4, 2, 1 at the end (that
// half warp's shuffles): the same terms in the same order, so the same bits. Weights and
// activations go through shared memory in chunks of k_ft_k elements, so each weight is read
// once per tile of rows instead of once per row. The next chunk's loads are issued into
// registers before this chunk's FMAs and stored after them: one memory latency a launch
// instead of one a chunk (the prefill's 2048 x 128 F32 router at 512 rows, ncu: 80.6 us a
// launch on an H200 and 79.4 on an H100 before, 39.5 after on an H100; tests/gpu/
// prefill_profile.txt). The registers that holds (143 for sm_90, against 73) leave one block
// an SM: enough for a 512-row prefill's 128 blocks; capped at two an SM, ptxas spills 60 bytes.
constexpr int k_ft_cols = 32;     // columns per block: a warp's lanes
constexpr int k_ft_rpt = 2;       // rows per thread
constexpr int k_ft_threads = 256;
constexpr int k_ft_rows = k_ft_threads / k_ft_cols * k_ft_rpt;   // 16 rows per block
constexpr int k_ft_k = 64;        // elements per staged chunk (a multiple of 16: chains stay aligned)
constexpr int k_ft_w_per_thread = k_ft_cols * k_ft_k / k_ft_threads;   // a chunk's weights a thread loads: 8
constexpr int k_ft_x_per_thread = k_ft_rows * k_ft_k / k_ft_threads;   // ... and activations: 4
static_assert(k_ft_w_per_thread * k_ft_threads == k_ft_cols * k_ft_k &&
                  k_ft_x_per_thread * k_ft_threads == k_ft_rows * k_ft_k,
              "a chunk is whole loads a thread");
// Rows padded by 4 floats: the float4 reads of 8 consecutive lanes (columns) hit distinct banks.
constexpr int k_ft_stride = k_ft_k + 4;

template <dtype T>
__global__ void __launch_bounds__(k_ft_threads)
    mm_float_tile_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                         const uint8_t* __restrict__ act, size_t act_stride, int64_t n_rows, float* __restrict__ y,
                         int64_t y_stride, bool accumulate, int64_t n_cb1, const uint8_t* __restrict__ w2,
                         int64_t n_out2, float* __restrict__ y2, int64_t y2_stride) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t bx = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);
    __shared__ __align__(16) float sw[k_ft_cols][k_ft_stride];   // the chunk of each column's weights
    __shared__ __align__(16) float sx[k_ft_rows][k_ft_stride];   // the chunk of each row's activations
    const int tid = static_cast<int>(threadIdx.x), c = tid % k_ft_cols, rg = tid / k_ft_cols;
    const int64_t col0 = bx * k_ft_cols, r0 = static_cast<int64_t>(blockIdx.y) * k_ft_rows;
    float acc[k_ft_rpt][16];
#pragma unroll
    for (int rr = 0; rr < k_ft_rpt; ++rr)
#pragma unroll
        for (int u = 0; u < 16; ++u) acc[rr][u] = 0.0f;
    // The chunk at k0 into registers (zeros past the matrix's columns, the tile's rows, the row's
    // end): thread tid takes items tid, tid + k_ft_threads, ... of the chunk's weights and rows.
    float rw[k_ft_w_per_thread], rx[k_ft_x_per_thread];
    auto load_chunk = [&](int64_t k0) {
        const int nk = static_cast<int>(n_in - k0 < k_ft_k ? n_in - k0 : k_ft_k);
#pragma unroll
        for (int u = 0; u < k_ft_w_per_thread; ++u) {
            const int i = tid + u * k_ft_threads, cc = i / k_ft_k, kk = i - cc * k_ft_k;
            const int64_t col = col0 + cc;
            rw[u] = col < n_out && kk < nk ? load_w<T>(w + static_cast<size_t>(col) * row_bytes, k0 + kk) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < k_ft_x_per_thread; ++u) {
            const int i = tid + u * k_ft_threads, rr = i / k_ft_k, kk = i - rr * k_ft_k;
            const int64_t row = r0 + rr;
            rx[u] = row < n_rows && kk < nk
                        ? reinterpret_cast<const float*>(act + static_cast<size_t>(row) * act_stride)[k0 + kk]
                        : 0.0f;
        }
    };
    load_chunk(0);
    for (int64_t k0 = 0; k0 < n_in; k0 += k_ft_k) {
        const int nk = static_cast<int>(n_in - k0 < k_ft_k ? n_in - k0 : k_ft_k);
        __syncthreads();   // the previous chunk is consumed
#pragma unroll
        for (int u = 0; u < k_ft_w_per_thread; ++u) {
            const int i = tid + u * k_ft_threads;
            sw[i / k_ft_k][i % k_ft_k] = rw[u];
        }
#pragma unroll
        for (int u = 0; u < k_ft_x_per_thread; ++u) {
            const int i = tid + u * k_ft_threads;
            sx[i / k_ft_k][i % k_ft_k] = rx[u];
        }
        __syncthreads();
        if (k0 + k_ft_k < n_in) load_chunk(k0 + k_ft_k);   // in flight while this chunk is used
        if (nk == k_ft_k) {
#pragma unroll
            for (int i0 = 0; i0 < k_ft_k; i0 += 4) {
                const float4 wv = *reinterpret_cast<const float4*>(&sw[c][i0]);
#pragma unroll
                for (int rr = 0; rr < k_ft_rpt; ++rr) {
                    const float4 xv = *reinterpret_cast<const float4*>(&sx[rg * k_ft_rpt + rr][i0]);
                    float* a = &acc[rr][i0 % 16];
                    a[0] = __fmaf_rn(wv.x, xv.x, a[0]);
                    a[1] = __fmaf_rn(wv.y, xv.y, a[1]);
                    a[2] = __fmaf_rn(wv.z, xv.z, a[2]);
                    a[3] = __fmaf_rn(wv.w, xv.w, a[3]);
                }
            }
        } else {   // the row's last, partial chunk: only its elements
            for (int i0 = 0; i0 < nk; i0 += 16)
#pragma unroll
                for (int u = 0; u < 16; ++u)
                    if (i0 + u < nk)
#pragma unroll
                        for (int rr = 0; rr < k_ft_rpt; ++rr)
                            acc[rr][u] = __fmaf_rn(sw[c][i0 + u], sx[rg * k_ft_rpt + rr][i0 + u], acc[rr][u]);
        }
    }
    const int64_t col = col0 + c;
    if (col >= n_out) return;
#pragma unroll
    for (int rr = 0; rr < k_ft_rpt; ++rr) {
        const int64_t row = r0 + rg * k_ft_rpt + rr;
        if (row >= n_rows) continue;
        const float v = fold16(acc[rr]);
        float* yy = y + row * y_stride + col;
        *yy = accumulate ? __fadd_rn(*yy, v) : v;
    }
}

// Float weights, one column a block (plain matrices with few columns: the router): the block's
// 128 threads copy the column's weight row into shared memory, all their 16-byte loads issued
// before any store (one memory latency instead of one per few elements, which left
// mm_float_kernel at 35 us for a 128 x 2048 F32 router on the H200: kernel_bench), then lanes
// 0..15 run mm_float_kernel's FMA chains (same terms, same order: the same bits) for each row
// of the group. With stage_x (one row, a decode step's router) the row x is copied into shared
// memory beside the weights in the same round, so the chain reads only shared memory; else x is
// read from global memory (the rows every block shares), and then each batch of the chain's
// loads waited an L2 latency: 13.45 us a router launch with its top-k in the 30B decode profile
// (ncu, caches not flushed).
constexpr int k_col_threads = 128;
// The router's top-k fused into its matmul's launch (router_topk): when arrivals is set, the
// last block to finish runs route_topk_warp_pl on the one row y holds.
struct route_tail {
    kernels::router_params p;
    int32_t* ids = nullptr;        // [n_used]
    float* weights = nullptr;      // [n_used]
    unsigned* arrivals = nullptr;  // zero before and after the launch; null: no top-k here
};

// The router's input row made in its own launch (norm_router_topk): every block stages the
// residual row x, takes its RMSNorm with w into the staged row (rmsnorm_quant_kernel's
// operations: rms_scale_warp, then (x * scale) * w element by element), block 0 also writes that
// row to xn, and the blocks share its int8 activation blocks (width act_width: 32, 256, or 0 for
// none) into act, with quantize_block_values, for the expert launches after it. Saves the norm's
// launch before a decode step's router: 4.9 us of its ~85 us a layer (bench/gpu/step_trace, the
// 30B shape).
struct norm_in {
    const float* x = nullptr;    // [n_in]; null: the input is the activation row, as staged
    const float* w = nullptr;    // [n_in] or null
    float eps = 0.0f;
    float* xn = nullptr;         // [n_in]
    std::byte* act = nullptr;    // act_row_bytes(act_width's format, n_in)
    int act_width = 0;
};
constexpr int k_norm_regs = 16;   // norm weights a thread loads before the wait (n_in <= 2,048 all of them)

// This block's share of the staged row's activation blocks: b = blockIdx.x, + gridDim.x, ..., by
// warps 1..3 while warp 0 runs the row's dot (a one-row launch's dot takes lanes 0..15 alone).
// Block 0 quantised all of them before its dot: the 30B shape's 8 blocks of 256, two a warp, a
// division per value, so the last block to arrive (the top-k's) was block 0, late by them.
template <int W>
__device__ inline void quantize_row_share(const float* xs, int64_t n, std::byte* act) {
    using Block = std::conditional_t<W == 32, quant::act_block32, quant::act_block256>;
    Block* dst = reinterpret_cast<Block*>(act);
    const int warp = static_cast<int>(threadIdx.x / 32);
    constexpr int helpers = k_col_threads / 32 - 1;
    if (warp == 0) return;
    for (int64_t b = blockIdx.x + static_cast<int64_t>(warp - 1) * gridDim.x; b < n / W;
         b += static_cast<int64_t>(helpers) * gridDim.x) {
        int16_t* bsums = nullptr;
        if constexpr (W == 256) bsums = dst[b].bsums;
        quantize_block_warp<W>(xs + b * W, &dst[b].d, dst[b].q, bsums);
    }
}

// PL: the top-k's slots a lane (route_slots; the launch picks it, k_route_per_lane without a top-k).
// One block an SM is all the launch bounds promise (the router's 128 blocks fill an H100's 132 SMs
// once): with the default, ptxas held the 128-expert form to 48 registers and spilled 40 bytes of
// the norm's weights across the norm's division (route_topk_block's ranking added to it).
template <dtype T, int PL>
__global__ void __launch_bounds__(k_col_threads, 1)
    mm_float_col_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                        const uint8_t* __restrict__ act, size_t act_stride, int64_t n_rows, float* __restrict__ y,
                        int64_t y_stride, bool accumulate, int64_t n_cb1, const uint8_t* __restrict__ w2, int64_t n_out2,
                        float* __restrict__ y2, int64_t y2_stride, route_tail rt, bool stage_x, norm_in nrm) {
    extern __shared__ uint4 col_smem[];   // the weight row (row_bytes), then x (n_in floats) when staged
    // The top-k reads the first matrix's row (the router's logits) whichever matrix this block's
    // column is of: a second matrix (w2) is a shared expert's gate row in the same launch.
    float* const y_route = y;
    const int64_t j = pick_matrix(n_cb1, w, n_out, y, y_stride, w2, n_out2, y2, y2_stride);   // arguments only
    // Rows are 16-byte aligned (the launch checks): whole words. The weights' words before the
    // wait for the kernel before (no kernel writes weights: launch.cuh), then x's (stage_x: the
    // launch checked its alignment and n_in % 4 == 0), all in flight at once.
    const uint4* src = reinterpret_cast<const uint4*>(w + static_cast<size_t>(j) * row_bytes);
    const int w_words = static_cast<int>(row_bytes / 16);
    for (int i = static_cast<int>(threadIdx.x); i < w_words; i += k_col_threads) copy16(col_smem + i, src + i);
    float nw[k_norm_regs];   // the norm's weights of this thread's elements, also before the wait
#pragma unroll
    for (int k = 0; k < k_norm_regs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * k_col_threads;
        nw[k] = nrm.x && nrm.w && i < n_in ? __ldg(nrm.w + i) : 1.0f;
    }
    wait_prior_grids();   // see launch.cuh
    if (stage_x) {
        const uint4* xsrc = nrm.x ? reinterpret_cast<const uint4*>(nrm.x)
                                  : reinterpret_cast<const uint4*>(act + static_cast<size_t>(blockIdx.y) * k_max_rows * act_stride);
        for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(n_in / 4); i += k_col_threads)
            copy16(col_smem + w_words + i, xsrc + i);
    }
    stage_wait();
    __syncthreads();
    if (blockIdx.x == 0) trace_mark(1);   // the rows staged
    if (nrm.x) {   // the staged residual row becomes its RMSNorm (stage_x: the launch checked)
        float* xs = reinterpret_cast<float*>(col_smem + w_words);
        __shared__ float s_scale;
        if (threadIdx.x < 32) {
            const float scale = rms_scale_warp(xs, n_in, nrm.eps);
            if (threadIdx.x == 0) s_scale = scale;
        }
        __syncthreads();
        if (blockIdx.x == 0) trace_mark(2);   // the norm's scale
        const float scale = s_scale;
        auto normed = [&](int64_t i, float wv) {
            const float v = nrm.w ? __fmul_rn(__fmul_rn(xs[i], scale), wv) : __fmul_rn(xs[i], scale);
            xs[i] = v;
            if (blockIdx.x == 0) nrm.xn[i] = v;
        };
#pragma unroll
        for (int k = 0; k < k_norm_regs; ++k) {
            const int64_t i = threadIdx.x + static_cast<int64_t>(k) * k_col_threads;
            if (i < n_in) normed(i, nw[k]);
        }
        for (int64_t i = threadIdx.x + static_cast<int64_t>(k_norm_regs) * k_col_threads; i < n_in; i += k_col_threads)
            normed(i, nrm.w ? __ldg(nrm.w + i) : 1.0f);
        __syncthreads();
        if (nrm.act_width == 32) quantize_row_share<32>(xs, n_in, nrm.act);
        else if (nrm.act_width == 256) quantize_row_share<256>(xs, n_in, nrm.act);
    }
    // Half warp h computes rows h, h + 8, ... of the block's (a window's rows in parallel: 8 rows
    // took 51.5 us one after the other in a half warp, against 9.3 us for one row; the 30B
    // profile, tests/gpu/decode_profile.h200.txt); each row's chains and fold are the same.
    {
        const uint8_t* ws = reinterpret_cast<const uint8_t*>(col_smem);
        const int l = static_cast<int>(threadIdx.x & 15);
        const int h = static_cast<int>(threadIdx.x >> 4);
        const unsigned half = 0xffffu << (threadIdx.x & 16);   // this half warp's lanes
        const int64_t r0 = static_cast<int64_t>(blockIdx.y) * k_max_rows;
        const int nr = static_cast<int>(n_rows - r0 < k_max_rows ? n_rows - r0 : k_max_rows);
        for (int r = h; r < nr; r += k_col_threads / 16) {
            float a = 0.0f;
            if (stage_x) {   // nr == 1
                const float* xs = reinterpret_cast<const float*>(col_smem + w_words);
#pragma unroll 16
                for (int64_t i = l; i < n_in; i += 16) a = __fmaf_rn(load_w<T>(ws, i), xs[i], a);
            } else {
                const float* x = reinterpret_cast<const float*>(act + static_cast<size_t>(r0 + r) * act_stride);
#pragma unroll 8
                for (int64_t i = l; i < n_in; i += 16) a = __fmaf_rn(load_w<T>(ws, i), __ldg(x + i), a);
            }
            for (int s = 8; s >= 1; s >>= 1) a = __fadd_rn(a, __shfl_down_sync(half, a, s, 16));
            if (l == 0) {
                float* yy = y + (r0 + r) * y_stride + j;
                *yy = accumulate ? __fadd_rn(*yy, a) : a;
            }
        }
    }
    if (blockIdx.x == 0) trace_mark(3);   // thread 0's column written
    if (!rt.arrivals) return;
    // The last block to arrive routes. The block's column, written before the barrier, is
    // released by thread 0's acquire-release add (cumulative through the barrier), and the last
    // block acquires every other block's column with the same add; the top-k reads them through
    // L2 (__ldcg). One acquire-release add instead of a sequentially consistent fence on each side
    // of a relaxed one: Nsight Compute put ~1,350 of the router's ~6,000 warp samples at the branch
    // after those fences (tests/gpu/ncu_source.h200.txt, session 27); the add alone took the
    // launch with its top-k from 8.00 to 7.56 us (kernel_bench, H100, session 33).
    __shared__ bool last;
    __shared__ alignas(16) float s_exp[32 * k_route_per_lane];   // route_topk_block reads it as float4
    __shared__ int s_cand[32];   // route_topk_block's candidates
    __syncthreads();
    if (threadIdx.x == 0) {
        ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> arrived(*rt.arrivals);
        last = arrived.fetch_add(1u, ::cuda::memory_order_acq_rel) == gridDim.x * gridDim.y - 1;
        if (last) arrived.store(0u, ::cuda::memory_order_relaxed);   // every block has arrived: ready for the next launch
    }
    __syncthreads();
    if (last) trace_mark(4);   // the last block knows it is
    if (last && route_block_form(rt.p)) route_topk_block<PL>(rt.p, y_route, rt.ids, rt.weights, s_exp, s_cand);
    else if (last && threadIdx.x < 32)
        route_topk_warp_pl<PL>(rt.p, y_route, rt.ids, rt.weights, static_cast<int>(threadIdx.x), s_exp);
    if (last) trace_mark(5);   // routed
}

// Few columns of a plain float matrix whose row fits in shared memory (the router): a block a
// column (mm_float_col_kernel), with rt's top-k in the same launch when rt.arrivals is set.
// Returns false (launching nothing) where the kernel does not apply (col_plan).
struct col_plan {
    bool applies = false;
    bool stage_x = false;
};
col_plan plan_float_col(const mm_args& a, unsigned row_groups, const float* norm_x) {
    col_plan c;
    const int64_t all_cols = a.n_out + (a.w2 ? a.n_out2 : 0);
    if (a.ids || all_cols * row_groups >= 4 * static_cast<int64_t>(a.sm_count) * k_float_cols || a.row_bytes % 16 != 0 || a.row_bytes > 32 * 1024 ||
        reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || (a.w2 && reinterpret_cast<uintptr_t>(a.w2) % 16 != 0))
        return c;
    // One row (a decode step) whose floats fit beside the weight row in the default 48 KB, less
    // the kernel's own static shared memory (the top-k's 2 KB: ptxas reports 2,064 bytes; 4 KB
    // kept for it, else the launch is refused): x staged too.
    c.stage_x = a.n_rows == 1 && a.n_in % 4 == 0 && reinterpret_cast<uintptr_t>(a.act) % 16 == 0 &&
                a.row_bytes + static_cast<size_t>(a.n_in) * 4 + 4 * 1024 <= 48 * 1024;
    // A norm in the launch needs the staged row, the residual row 16-byte aligned for its copies.
    c.applies = !norm_x || (c.stage_x && reinterpret_cast<uintptr_t>(norm_x) % 16 == 0);
    return c;
}

template <dtype T>
bool launch_float_col(const mm_args& a, dim3 grid, cudaStream_t s, route_tail rt, const norm_in& nrm = {}) {
    const col_plan c = plan_float_col(a, grid.y, nrm.x);
    if (!c.applies) return false;
    grid.x = static_cast<unsigned>(a.n_out + (a.w2 ? a.n_out2 : 0));
    const bool stage_x = c.stage_x;
    const size_t smem = a.row_bytes + (stage_x ? static_cast<size_t>(a.n_in) * 4 : 0);
    auto kernel = rt.arrivals && route_slots(rt.p.n_expert) == 4 ? mm_float_col_kernel<T, 4>
                                                                  : mm_float_col_kernel<T, k_route_per_lane>;
    launch(kernel, dim3(grid), dim3(k_col_threads), smem, s,
           reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, a.n_in, a.n_out,
           reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.n_rows, a.y, a.y_stride, a.accumulate, a.n_out,
           reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride, rt, stage_x, nrm);
    return true;
}

template <dtype T>
void launch_float(const mm_args& a, dim3 grid, cudaStream_t s) {
    // Many rows of a plain matrix (a prefill): tiles of rows and columns through shared memory.
    // For the 2048 x 128 F32 router of Qwen3-30B-A3B on the H200 (bench/gpu/profile.sh,
    // 2026-12-02): 82 us at 512 rows (413 us in the 2026-12-01 profile, mm_float_kernel then);
    // but 84 us for an 8-row window (4 blocks) against 50 for the column kernel below, so
    // windows stay there.
    if (!a.ids && a.act_div == 1 && a.n_rows > k_max_rows) {
        const int64_t cb1 = (a.n_out + k_ft_cols - 1) / k_ft_cols;
        const int64_t cb2 = a.w2 ? (a.n_out2 + k_ft_cols - 1) / k_ft_cols : 0;
        const int64_t row_tiles = (a.n_rows + k_ft_rows - 1) / k_ft_rows;
        launch(mm_float_tile_kernel<T>, dim3(static_cast<unsigned>(cb1 + cb2), static_cast<unsigned>(row_tiles)),
               dim3(k_ft_threads), 0, s, reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, a.n_in, a.n_out,
               reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.n_rows, a.y, a.y_stride, a.accumulate, cb1,
               reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2, a.y2_stride);
        return;
    }
    if (launch_float_col<T>(a, grid, s, route_tail{})) return;
    // A small grid (the router: 128 columns, one row) would leave most SMs idle with 8 columns a
    // block: then one warp (2 columns) a block, 4x the blocks pulling weights at once. Each
    // column's arithmetic is the same either way.
    const int64_t groups = grid.y;
    int cols = k_float_cols;
    if (((a.n_out + (a.w2 ? a.n_out2 : 0)) / k_float_cols) * groups < 4 * static_cast<int64_t>(a.sm_count)) cols = 2;
    const int64_t cb1 = (a.n_out + cols - 1) / cols;
    const int64_t cb2 = a.w2 ? (a.n_out2 + cols - 1) / cols : 0;
    grid.x = static_cast<unsigned>(cb1 + cb2);
    launch(mm_float_kernel<T>, dim3(grid), dim3(cols * 16), 0, s, reinterpret_cast<const uint8_t*>(a.w), a.row_bytes,
           a.n_in, a.n_out, a.ids, a.expert_stride, reinterpret_cast<const uint8_t*>(a.act), a.act_stride, a.act_div,
           a.n_rows, a.y, a.y_stride, a.accumulate, cb1, reinterpret_cast<const uint8_t*>(a.w2), a.n_out2, a.y2,
           a.y2_stride);
}

}  // namespace

namespace mm_detail {

void launch_float_matmul(const mm_args& a, int64_t row_groups, cudaStream_t s) {
    const dim3 grid(1, static_cast<unsigned>(row_groups));
    switch (a.type) {
    case dtype::f32: launch_float<dtype::f32>(a, grid, s); break;
    case dtype::f16: launch_float<dtype::f16>(a, grid, s); break;
    case dtype::bf16: launch_float<dtype::bf16>(a, grid, s); break;
    default: fail("cuda: matmul: {} is not a float format", name(a.type));
    }
}

bool router_fuses(const mm_args& a, const kernels::router_params& p, const router_norm* norm) {
    const bool is_float = a.type == dtype::f32 || a.type == dtype::f16 || a.type == dtype::bf16;
    // A second matrix (a shared expert's gate row) is computed by blocks of its own; the top-k
    // reads the first's.
    const bool fusable = is_float && a.n_rows == 1 && !a.ids && !a.accumulate && a.n_out == p.n_expert &&
                         p.n_used >= 1 && p.n_used <= p.n_expert && p.n_expert <= 32 * k_route_per_lane && p.n_used <= 32;
    if (!fusable) return false;
    if (norm) {
        const int width = norm->f == quant::act_format::q8_32 ? 32 : norm->f == quant::act_format::q8_256 ? 256 : 1;
        if (!norm->x || a.n_in % width != 0) return false;
    }
    return plan_float_col(a, 1, norm ? norm->x : nullptr).applies;
}

bool launch_router_topk(const mm_args& a, const kernels::router_params& p, int32_t* ids, float* weights,
                        unsigned* arrivals, cudaStream_t s, const router_norm* norm) {
    if (!router_fuses(a, p, norm)) return false;
    route_tail rt;
    rt.p = p;
    rt.ids = ids;
    rt.weights = weights;
    rt.arrivals = arrivals;
    norm_in nrm;
    if (norm) {
        nrm.x = norm->x;
        nrm.w = norm->w;
        nrm.eps = norm->eps;
        nrm.xn = const_cast<float*>(reinterpret_cast<const float*>(a.act));
        nrm.act = norm->act;
        nrm.act_width = norm->f == quant::act_format::q8_32 ? 32 : norm->f == quant::act_format::q8_256 ? 256 : 0;
    }
    switch (a.type) {
    case dtype::f32: return launch_float_col<dtype::f32>(a, dim3(1, 1), s, rt, nrm);
    case dtype::f16: return launch_float_col<dtype::f16>(a, dim3(1, 1), s, rt, nrm);
    case dtype::bf16: return launch_float_col<dtype::bf16>(a, dim3(1, 1), s, rt, nrm);
    default: return false;
    }
}

}  // namespace mm_detail
}  // namespace sluice::cuda
