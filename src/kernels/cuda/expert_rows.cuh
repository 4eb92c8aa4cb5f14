// The join of a split MoE layer (issue 10): the GPU wrote its (row, rank) pairs' expert outputs
// into the layer's [pairs, n] buffer; the CPU lane wrote the other pairs' rows into host memory.
// This copies the CPU's rows into the device buffer, so the combine kernel then sums each row in
// rank order exactly as for an all-GPU layer. A copy moves bits unchanged: no float arithmetic.
// Host-only declarations: included by C++ code compiled without nvcc.
#pragma once

#include <cstdint>

namespace sluice::cuda {

// dst[p, :] = src[p, :] for every pair p < n_pairs with slot[p] < 0 (a CPU pair); other rows of
// dst are left alone.
//   dst:  device [n_pairs, n] f32
//   src:  [n_pairs, n] f32 the device can read: device memory, or mapped pinned host memory
//         (cudaHostAllocMapped; read over PCIe by the kernel, only the rows it copies)
//   slot: device [n_pairs] the pair's GPU cache slot, or < 0 when the CPU computed it
// Enqueued on `stream` (a cudaStream_t).
void copy_cpu_pair_rows(float* dst, const float* src, const int32_t* slot, int64_t n_pairs, int64_t n, void* stream);

}  // namespace sluice::cuda
