// Device code of the int8 activation blocks (src/quant/act.cpp's quantize_block, operation for
// operation), shared by act_quant.cu and the kernels that quantise what they have just computed
// (rmsnorm + quantise, SwiGLU + quantise in ops.cu): one implementation, so the blocks are the
// same bits wherever they are made. Include only from .cu files.
#pragma once

#include <cstdint>

namespace sluice::cuda {

// One warp quantises one block of W values (W = 32 or 256); lane l holds the values
// [l * W/32, (l + 1) * W/32) in v. amax by a max-reduction (exact in any order), dx = amax / 127
// with a correctly rounded division (__fdiv_rn), q = rint(x / dx) with the same division,
// round-to-nearest-even, NaN quotients to 0, clamp to [-127, 127]; 256-wide blocks add per-16
// integer sums. Writes d_out (lane 0), q[W] and, for W = 256, bsums[16].
template <int W>
__device__ inline void quantize_block_values(const float (&v)[W / 32], float* d_out, int8_t* q, int16_t* bsums) {
    const int lane = threadIdx.x & 31;
    constexpr int per_lane = W / 32;   // 1 (q8_32) or 8 (q8_256)
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) amax = fmaxf(amax, fabsf(v[i]));
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float dx = __fdiv_rn(amax, 127.0f);
    int8_t qv[per_lane];
#pragma unroll
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
#pragma unroll
        for (int i = 0; i < per_lane; ++i) s += qv[i];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if ((lane & 1) == 0) bsums[lane / 2] = static_cast<int16_t>(s);
    }
}

// The same block read from x[0..W).
template <int W>
__device__ inline void quantize_block_warp(const float* x, float* d_out, int8_t* q, int16_t* bsums) {
    const int lane = threadIdx.x & 31;
    float v[W / 32];
#pragma unroll
    for (int i = 0; i < W / 32; ++i) v[i] = x[lane * (W / 32) + i];
    quantize_block_values<W>(v, d_out, q, bsums);
}

}  // namespace sluice::cuda
