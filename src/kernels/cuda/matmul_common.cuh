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

// Float weights (matmul_float.cu): a's product for row_groups groups of k_max_rows rows.
void launch_float_matmul(const mm_args& a, int64_t row_groups, cudaStream_t s);
// The router's product and its top-k in one launch (the column kernel's last block routes the
// row) when a is one row of a float router the column kernel takes; false (nothing launched)
// otherwise. arrivals: the device counter, zero.
bool launch_router_topk(const mm_args& a, const kernels::router_params& p, int32_t* ids, float* weights,
                        unsigned* arrivals, cudaStream_t s);

}  // namespace sluice::cuda::mm_detail
