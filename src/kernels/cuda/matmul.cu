// Quantised matmul with int8 activations (dp4a), bit-identical to kernels::dot_ref (E3).
//
// One warp computes one output column j (one weight row) for up to 16 activation rows (a
// verify window shares each decoded weight block between its rows), or for one (token, expert)
// pair in expert mode. A block of QK elements is split into QK/8 pieces of 8 elements
// (quant_decode.cuh): a legacy block (QK 32) takes 4 lanes, so a warp step covers 8 blocks; a
// K-quant/I-quant super-block (QK 256) takes the whole warp. Per row:
//   - each lane: si = sc * dot(q, qx) and sm = mn * sum(qx) over its piece (dp4a, integers);
//   - the block's lanes add their si / sm (integer adds: exact in any order);
//   - every lane of the block computes the block's fp32 term with dot_ref's expression
//     (block_term: __fmul_rn/__fadd_rn, no contraction);
//   - the terms of the step's blocks are folded into y in block order, y = ((t0 + t1) + t2)..,
//     each lane reading them by shuffle, so every lane holds the same y.
// A row's bits depend only on its own data: no split of the reduction depends on the row count.
//
// Float weights (F32/F16/BF16): dot_f32_ref's rule, 16 lanes (a half warp), lane l accumulating
// __fmaf_rn(w[i], x[i], acc) for i % 16 == l in index order, then the pairwise fold 8, 4, 2, 1.
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_decode.cuh"

#include "core/error.h"
#include "quant/iq_tables.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>

namespace sluice::cuda {
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

constexpr int k_warps = 4;      // warps (output columns) per thread block
constexpr int k_max_rows = 16;  // activation rows per warp (a verify window)

__device__ inline int32_t pack4(const int8_t* q) {
    return static_cast<int32_t>(static_cast<uint8_t>(q[0]) | (static_cast<uint32_t>(static_cast<uint8_t>(q[1])) << 8) |
                                (static_cast<uint32_t>(static_cast<uint8_t>(q[2])) << 16) |
                                (static_cast<uint32_t>(static_cast<uint8_t>(q[3])) << 24));
}

// Integer sum over the L lanes of a block (L = 4 or 32; lanes of a block are consecutive).
template <int L>
__device__ inline int32_t group_sum(int32_t v) {
    if constexpr (L == 32) {
        return __reduce_add_sync(0xffffffffu, v);
    } else {
        for (int off = L / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        return v;
    }
}

template <dtype T>
__global__ void __launch_bounds__(k_warps * 32)
    mm_quant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_blocks, int64_t n_out,
                    const int32_t* __restrict__ ids, size_t expert_stride, const uint8_t* __restrict__ act,
                    size_t act_stride, int act_div, int64_t n_rows, float* __restrict__ y, int64_t y_stride) {
    using tr = fmt_traits<T>;
    constexpr int L = tr::qk / 8;       // lanes per block
    constexpr int BPW = 32 / L;         // blocks per warp step
    constexpr int AB = tr::act_bytes;   // bytes per activation block
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t j = static_cast<int64_t>(blockIdx.x) * k_warps + threadIdx.x / 32;
    if (j >= n_out) return;   // whole warps leave together
    int64_t r0;
    int nr;
    const uint8_t* wrow;
    if (ids) {
        r0 = blockIdx.y;
        nr = 1;
        wrow = w + static_cast<size_t>(ids[r0]) * expert_stride + static_cast<size_t>(j) * row_bytes;
    } else {
        r0 = static_cast<int64_t>(blockIdx.y) * k_max_rows;
        nr = static_cast<int>(n_rows - r0 < k_max_rows ? n_rows - r0 : k_max_rows);
        wrow = w + static_cast<size_t>(j) * row_bytes;
    }
    const iq_tables tb = device_tables();
    const int g = lane / L, piece = lane % L;
    float acc[k_max_rows];
#pragma unroll
    for (int r = 0; r < k_max_rows; ++r) acc[r] = 0.0f;

    // Unrolled so that the next blocks' weight loads are in flight while this one is reduced
    // (one warp per column leaves few warps per SM on expert-sized matrices).
#pragma unroll 2
    for (int64_t ib0 = 0; ib0 < n_blocks; ib0 += BPW) {
        const int64_t ib = ib0 + g;
        const bool valid = ib < n_blocks;
        int8_t q[8];
        int sc = 0, mn = 0;
        float d = 0.0f, dmin = 0.0f;
        if (valid) {
            const uint8_t* b = wrow + static_cast<size_t>(ib) * tr::block_bytes;
            decode_piece<T>(b, piece, tb, q, sc, mn);
            decode_scales<T>(b, d, dmin);
        } else {
            for (int e = 0; e < 8; ++e) q[e] = 0;
        }
        const int32_t q0 = pack4(q), q1 = pack4(q + 4);
#pragma unroll
        for (int r = 0; r < k_max_rows; ++r) {
            if (r >= nr) break;   // uniform across the warp
            const uint8_t* ab = act + static_cast<size_t>((r0 + r) / act_div) * act_stride + static_cast<size_t>(ib) * AB;
            int32_t si = 0, sm = 0;
            float dx = 0.0f;
            if (valid) {
                const int32_t x0 = *reinterpret_cast<const int32_t*>(ab + 4 + 8 * piece);
                const int32_t x1 = *reinterpret_cast<const int32_t*>(ab + 8 + 8 * piece);
                si = sc * __dp4a(q1, x1, __dp4a(q0, x0, 0));
                if constexpr (tr::kind != term_kind::sym) sm = mn * __dp4a(x1, 0x01010101, __dp4a(x0, 0x01010101, 0));
                dx = *reinterpret_cast<const float*>(ab);
            }
            si = group_sum<L>(si);
            if constexpr (tr::kind != term_kind::sym) sm = group_sum<L>(sm);
            const float t = block_term<tr::kind>(d, dmin, dx, si, sm);
#pragma unroll
            for (int gg = 0; gg < BPW; ++gg) {
                const float tg = __shfl_sync(0xffffffffu, t, gg * L);
                if (ib0 + gg < n_blocks) acc[r] = ib0 + gg == 0 ? tg : __fadd_rn(acc[r], tg);
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < k_max_rows; ++r)
            if (r < nr) y[(r0 + r) * y_stride + j] = acc[r];
    }
}

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

// Float weights: a warp per output column, each half warp one activation row at a time.
template <dtype T>
__global__ void __launch_bounds__(k_warps * 32)
    mm_float_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                    const int32_t* __restrict__ ids, size_t expert_stride, const uint8_t* __restrict__ act,
                    size_t act_stride, int act_div, int64_t n_rows, float* __restrict__ y, int64_t y_stride) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t j = static_cast<int64_t>(blockIdx.x) * k_warps + threadIdx.x / 32;
    if (j >= n_out) return;
    int64_t r0;
    int nr;
    const uint8_t* wrow;
    if (ids) {
        r0 = blockIdx.y;
        nr = 1;
        wrow = w + static_cast<size_t>(ids[r0]) * expert_stride + static_cast<size_t>(j) * row_bytes;
    } else {
        r0 = static_cast<int64_t>(blockIdx.y) * k_max_rows;
        nr = static_cast<int>(n_rows - r0 < k_max_rows ? n_rows - r0 : k_max_rows);
        wrow = w + static_cast<size_t>(j) * row_bytes;
    }
    const int half = lane / 16, l = lane % 16;
    for (int rr = 0; rr < nr; rr += 2) {
        const int r = rr + half;
        float a = 0.0f;
        if (r < nr) {
            const float* x = reinterpret_cast<const float*>(act + static_cast<size_t>((r0 + r) / act_div) * act_stride);
            for (int64_t i = l; i < n_in; i += 16) a = __fmaf_rn(load_w<T>(wrow, i), x[i], a);
        }
        // acc[l] += acc[l + s] for s = 8, 4, 2, 1, within each half warp.
        for (int s = 8; s >= 1; s >>= 1) {
            const float o = __shfl_down_sync(0xffffffffu, a, s, 16);
            a = __fadd_rn(a, o);
        }
        if (l == 0 && r < nr) y[(r0 + r) * y_stride + j] = a;
    }
}

std::mutex g_tables_mutex;
bool g_tables_done[64] = {};

template <dtype T>
void launch_quant(const mm_args& a, dim3 grid, cudaStream_t s) {
    const int64_t nb = a.n_in / fmt_traits<T>::qk;
    mm_quant_kernel<T><<<grid, k_warps * 32, 0, s>>>(reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, nb, a.n_out,
                                                     a.ids, a.expert_stride, reinterpret_cast<const uint8_t*>(a.act),
                                                     a.act_stride, a.act_div, a.n_rows, a.y, a.y_stride);
}

template <dtype T>
void launch_float(const mm_args& a, dim3 grid, cudaStream_t s) {
    mm_float_kernel<T><<<grid, k_warps * 32, 0, s>>>(reinterpret_cast<const uint8_t*>(a.w), a.row_bytes, a.n_in, a.n_out,
                                                     a.ids, a.expert_stride, reinterpret_cast<const uint8_t*>(a.act),
                                                     a.act_stride, a.act_div, a.n_rows, a.y, a.y_stride);
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

void matmul(const mm_args& a, void* stream) {
    if (!has_matmul(a.type)) fail("cuda: matmul: weight format {} has no dot product", name(a.type));
    const uint32_t qk = info(a.type).block_elems;
    if (a.n_in <= 0 || a.n_in % qk != 0) fail("cuda: matmul: n_in = {} is not a positive multiple of {}", a.n_in, qk);
    if (a.n_out <= 0 || a.n_rows < 0 || a.y_stride < a.n_out || a.act_div < 1)
        fail("cuda: matmul: bad sizes (n_out {}, n_rows {}, y_stride {}, act_div {})", a.n_out, a.n_rows, a.y_stride, a.act_div);
    if (a.n_rows == 0) return;
    if (a.ids && a.n_rows > 65535) fail("cuda: matmul: {} expert rows exceed one launch (65535)", a.n_rows);
    const int64_t row_groups = a.ids ? a.n_rows : (a.n_rows + k_max_rows - 1) / k_max_rows;
    if (row_groups > 65535) fail("cuda: matmul: {} rows exceed one launch ({})", a.n_rows, 65535 * k_max_rows);
    const dim3 grid(static_cast<unsigned>((a.n_out + k_warps - 1) / k_warps), static_cast<unsigned>(row_groups));
    auto s = static_cast<cudaStream_t>(stream);
    switch (a.type) {
    case dtype::f32: launch_float<dtype::f32>(a, grid, s); break;
    case dtype::f16: launch_float<dtype::f16>(a, grid, s); break;
    case dtype::bf16: launch_float<dtype::bf16>(a, grid, s); break;
    case dtype::q8_0: launch_quant<dtype::q8_0>(a, grid, s); break;
    case dtype::q4_0: launch_quant<dtype::q4_0>(a, grid, s); break;
    case dtype::q4_1: launch_quant<dtype::q4_1>(a, grid, s); break;
    case dtype::q5_0: launch_quant<dtype::q5_0>(a, grid, s); break;
    case dtype::q5_1: launch_quant<dtype::q5_1>(a, grid, s); break;
    case dtype::iq4_nl: launch_quant<dtype::iq4_nl>(a, grid, s); break;
    case dtype::mxfp4: launch_quant<dtype::mxfp4>(a, grid, s); break;
    case dtype::q2_k: launch_quant<dtype::q2_k>(a, grid, s); break;
    case dtype::q3_k: launch_quant<dtype::q3_k>(a, grid, s); break;
    case dtype::q4_k: launch_quant<dtype::q4_k>(a, grid, s); break;
    case dtype::q5_k: launch_quant<dtype::q5_k>(a, grid, s); break;
    case dtype::q6_k: launch_quant<dtype::q6_k>(a, grid, s); break;
    case dtype::iq4_xs: launch_quant<dtype::iq4_xs>(a, grid, s); break;
    case dtype::iq2_xxs: launch_quant<dtype::iq2_xxs>(a, grid, s); break;
    case dtype::iq2_xs: launch_quant<dtype::iq2_xs>(a, grid, s); break;
    case dtype::iq2_s: launch_quant<dtype::iq2_s>(a, grid, s); break;
    case dtype::iq3_xxs: launch_quant<dtype::iq3_xxs>(a, grid, s); break;
    case dtype::iq3_s: launch_quant<dtype::iq3_s>(a, grid, s); break;
    default: fail("cuda: matmul: weight format {} has no dot product", name(a.type));
    }
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: matmul: launch failed: {}", cudaGetErrorString(e));
}

}  // namespace sluice::cuda
