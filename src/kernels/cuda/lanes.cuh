// Device helpers of the 16-lane float rule (kernels::dot_f32_lanes: element i goes to chain
// i % 16, the chains folded pairwise 8, 4, 2, 1), shared by the kernels that keep all 16 chains
// in one thread's registers (attention's scores, the tiled float matmul). Include from .cu files.
#pragma once

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

}  // namespace sluice::cuda
