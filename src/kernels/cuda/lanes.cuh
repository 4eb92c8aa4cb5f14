// Device helpers of the 16-lane float rule (kernels::dot_f32_lanes: element i goes to chain
// i % 16, the chains folded pairwise 8, 4, 2, 1), shared by the kernels that keep all 16 chains
// in one thread's registers (attention's scores, the tiled float matmul) and by those that give
// each chain a lane (the norms). Include from .cu files.
#pragma once

#include <cstdint>

namespace sluice::cuda {

// dot_f32_lanes' pairwise fold of 16 lane sums: acc[u] += acc[u + s] for s = 8, 4, 2, 1, every
// index a constant. (As a loop over s, nvcc left acc in a 64-byte local-memory frame that the
// K loop stored to and the fold read back: 143k local sectors per attention launch, Nsight
// Compute, 2026-12-02.)
__device__ inline float fold16(float (&acc)[16]) {
#pragma unroll
    for (int u = 0; u < 8; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 8]);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 4]);
#pragma unroll
    for (int u = 0; u < 2; ++u) acc[u] = __fadd_rn(acc[u], acc[u + 2]);
    return __fadd_rn(acc[0], acc[1]);
}

// kernels::dot_f32_lanes(a, b, n) inside one warp: lanes 0..15 hold the 16 accumulators (lane l
// takes i % 16 == l in index order), then the pairwise fold 8, 4, 2, 1. Lanes 16..31 mirror
// lanes 0..15 (they compute the same values), so the result is valid in every lane after the
// final broadcast.
__device__ inline float warp_dot_lanes(const float* a, const float* b, int64_t n) {
    const int l = static_cast<int>(threadIdx.x & 15);
    float acc = 0.0f;
#pragma unroll 8
    for (int64_t i = l; i < n; i += 16) acc = __fmaf_rn(a[i], b[i], acc);
    for (int s = 8; s >= 1; s >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, s, 16));
    return __shfl_sync(0xffffffffu, acc, 0);
}

// kernels::rmsnorm's scale of the row x [n], 1 / sqrt(mean(x * x) + eps), the squares summed by
// warp_dot_lanes; every lane of the calling warp returns it.
__device__ inline float rms_scale_warp(const float* x, int64_t n, float eps) {
    const float mean = __fdiv_rn(warp_dot_lanes(x, x, n), static_cast<float>(n));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

}  // namespace sluice::cuda
