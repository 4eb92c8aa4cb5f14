// copy_cpu_pair_rows (expert_rows.cuh): one thread per element of the pairs' rows.
#include "kernels/cuda/expert_rows.cuh"

#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

__global__ void copy_cpu_pair_rows_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                          const int32_t* __restrict__ slot, int64_t n_pairs, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_pairs * n) return;
    if (slot[i / n] < 0) dst[i] = src[i];
}

}  // namespace

void copy_cpu_pair_rows(float* dst, const float* src, const int32_t* slot, int64_t n_pairs, int64_t n, void* stream) {
    if (n_pairs * n <= 0) return;
    const int64_t blocks = (n_pairs * n + 255) / 256;
    if (blocks > 0x7fffffff) fail("cuda: copy_cpu_pair_rows: {} x {} elements exceed one launch", n_pairs, n);
    launch(copy_cpu_pair_rows_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, static_cast<cudaStream_t>(stream),
           dst, src, slot, n_pairs, n);
}

}  // namespace sluice::cuda
