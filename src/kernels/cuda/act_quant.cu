// int8 activation blocks on the device. One warp per block (act_quant_dev.cuh: amax by a
// max-reduction, dx = amax / 127 correctly rounded, q = rint(x / dx), NaN to 0, clamp to
// [-127, 127], per-16 sums for 256-wide blocks): src/quant/act.cpp's quantize_block, operation
// for operation (-fmad=false keeps nvcc from fusing anything).
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/act_quant_dev.cuh"

#include "core/error.h"
#include "kernels/cuda/launch.cuh"

#include <cuda_runtime.h>

namespace sluice::cuda {
namespace {

// grid: one warp per activation block; blockDim 128 = 4 warps.
template <int W, class Block>
__global__ void quantize_rows_kernel(const float* x, int64_t n_blocks_total, int64_t blocks_per_row, int64_t n,
                                     Block* dst) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (b >= n_blocks_total) return;
    const int64_t row = b / blocks_per_row, col = b % blocks_per_row;
    Block* out = dst + b;
    int16_t* bsums = nullptr;
    if constexpr (W == 256) bsums = out->bsums;
    quantize_block_warp<W>(x + row * n + col * W, &out->d, out->q, bsums);
}

}  // namespace

void quantize_act_rows(quant::act_format f, const float* x, int64_t n_rows, int64_t n, std::byte* dst,
                       void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    const int width = f == quant::act_format::q8_32 ? 32 : 256;
    if (f == quant::act_format::f32) fail("cuda: quantize_act_rows: f32 activations are not quantised");
    if (n % width != 0) fail("cuda: quantize_act_rows: n = {} is not a multiple of {}", n, width);
    const int64_t per_row = n / width, total = per_row * n_rows;
    if (total == 0) return;
    const unsigned grid = static_cast<unsigned>((total * 32 + 127) / 128);
    if (f == quant::act_format::q8_32)
        launch(quantize_rows_kernel<32, quant::act_block32>, dim3(grid), dim3(128), 0, s, x, total, per_row, n,
               reinterpret_cast<quant::act_block32*>(dst));
    else
        launch(quantize_rows_kernel<256, quant::act_block256>, dim3(grid), dim3(128), 0, s, x, total, per_row, n,
               reinterpret_cast<quant::act_block256*>(dst));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
        fail("cuda: quantize_act_rows: launch failed: {}", cudaGetErrorString(e));
}

}  // namespace sluice::cuda
