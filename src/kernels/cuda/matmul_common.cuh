// What the quantised and the float matmul files share (matmul.cu, matmul_float.cu): the launch
// shapes' constants, the two-matrices-in-one-launch column split, and the float launches that
// matmul() and router_topk() dispatch to. Internal to src/kernels/cuda (nvcc only).
#pragma once

#include "kernels/cpu/ops.h"
#include "kernels/cuda/matmul.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::cuda::mm_detail {

constexpr int k_warps = 4;            // warps (output columns) per thread block (mm_float_kernel, windows)
constexpr int k_max_rows = 16;        // activation rows per warp (a verify window)

// Column blocks [0, n_cb1) of a launch are the first matrix's, the rest the second's (gate and
// up, k and v computed from the same activations in one launch): points w, n_out, y and y_stride
// at the block's matrix and returns the block's column-block index within it.
__device__ inline int64_t pick_matrix(int64_t n_cb1, const uint8_t* __restrict__& w, int64_t& n_out,
                                      float* __restrict__& y, int64_t& y_stride, const uint8_t* w2, int64_t n_out2,
                                      float* y2, int64_t y2_stride) {
    int64_t bx = blockIdx.x;
    if (bx >= n_cb1) {
        bx -= n_cb1;
        w = w2;
        n_out = n_out2;
        y = y2;
        y_stride = y2_stride;
    }
    return bx;
}

// The rows a block of a one-pair or plain launch takes and its weight row (column j): expert mode
// (ids) is one (token, expert) pair, row blockIdx.y of the matrix of expert ids[row]; else up to
// k_max_rows rows from blockIdx.y * k_max_rows of one matrix. live: j is a real column (else row 0
// is read, never used).
__device__ inline const uint8_t* block_rows(const uint8_t* w, const int32_t* ids, size_t expert_stride, size_t row_bytes,
                                            int64_t j, bool live, int64_t n_rows, int64_t& r0, int& nr) {
    const size_t col = static_cast<size_t>(live ? j : 0) * row_bytes;
    if (ids) {
        r0 = blockIdx.y;
        nr = 1;
        return w + static_cast<size_t>(ids[r0]) * expert_stride + col;
    }
    r0 = static_cast<int64_t>(blockIdx.y) * k_max_rows;
    nr = static_cast<int>(n_rows - r0 < k_max_rows ? n_rows - r0 : k_max_rows);
    return w + col;
}

// Float weights (matmul_float.cu): a's product for row_groups groups of k_max_rows rows.
void launch_float_matmul(const mm_args& a, int64_t row_groups, cudaStream_t s);
// The router's product and its top-k in one launch (the column kernel's last block routes the
// row) when a is one row of a float router the column kernel takes; false (nothing launched)
// otherwise. arrivals: the device counter, zero.
// Whether launch_router_topk takes a in one launch (with the norm when given).
bool router_fuses(const mm_args& a, const kernels::router_params& p, const router_norm* norm);
bool launch_router_topk(const mm_args& a, const kernels::router_params& p, int32_t* ids, float* weights,
                        unsigned* arrivals, cudaStream_t s, const router_norm* norm = nullptr);

}  // namespace sluice::cuda::mm_detail
