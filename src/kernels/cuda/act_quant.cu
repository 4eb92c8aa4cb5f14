// int8 activation blocks on the device. One warp per block: amax by a max-reduction (exact in
// any order), dx = amax / 127 with a correctly rounded division (__fdiv_rn), q = rint(x / dx)
// with the same division, round-to-nearest-even (__float2int_rn of an already integral value),
// NaN quotients to 0, clamp to [-127, 127]; 256-wide blocks add per-16 integer sums. This is
// src/quant/act.cpp's quantize_block, operation for operation (-fmad=false keeps nvcc from
// fusing anything).
#include "kernels/cuda/act_quant.cuh"

#include "core/error.h"

#include <cuda_runtime.h>

namespace sluice::cuda {
namespace {

template <int W>
__device__ void quantize_block_warp(const float* x, float* d_out, int8_t* q, int16_t* bsums) {
    const int lane = threadIdx.x & 31;
    constexpr int per_lane = W / 32;   // 1 (q8_32) or 8 (q8_256): lane handles [lane*per_lane, +per_lane)
    float v[per_lane];
    float amax = 0.0f;
    for (int i = 0; i < per_lane; ++i) {
        v[i] = x[lane * per_lane + i];
        amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float dx = __fdiv_rn(amax, 127.0f);
    int8_t qv[per_lane];
    for (int i = 0; i < per_lane; ++i) {
        float r = 0.0f;
        if (dx != 0.0f) {
            r = rintf(__fdiv_rn(v[i], dx));
            if (!(r == r)) r = 0.0f;
            r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
        }
        qv[i] = static_cast<int8_t>(r);
        q[lane * per_lane + i] = qv[i];
    }
    if (lane == 0) *d_out = dx == 0.0f ? 0.0f : dx;
    if constexpr (W == 256) {
        // Per-16 sums: lanes 2j and 2j+1 hold the 16 values of sum j.
        int s = 0;
        for (int i = 0; i < per_lane; ++i) s += qv[i];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if ((lane & 1) == 0) bsums[lane / 2] = static_cast<int16_t>(s);
    }
}

// grid: one warp per activation block; blockDim 128 = 4 warps.
template <int W, class Block>
__global__ void quantize_rows_kernel(const float* x, int64_t n_blocks_total, int64_t blocks_per_row, int64_t n,
                                     Block* dst) {
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
        quantize_rows_kernel<32><<<grid, 128, 0, s>>>(x, total, per_row, n, reinterpret_cast<quant::act_block32*>(dst));
    else
        quantize_rows_kernel<256>
            <<<grid, 128, 0, s>>>(x, total, per_row, n, reinterpret_cast<quant::act_block256*>(dst));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
        fail("cuda: quantize_act_rows: launch failed: {}", cudaGetErrorString(e));
}

}  // namespace sluice::cuda
