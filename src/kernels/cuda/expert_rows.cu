// copy_cpu_pair_rows (expert_rows.cuh): one thread per element of the pairs' rows; and the
// routing doorbell of a split layer.
#include "kernels/cuda/expert_rows.cuh"

#include "kernels/cuda/launch.cuh"

#include <algorithm>

namespace sluice::cuda {
namespace {

__global__ void copy_cpu_pair_rows_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                          const int32_t* __restrict__ slot, int64_t n_pairs, int64_t n) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_pairs * n) return;
    if (slot[i / n] < 0) dst[i] = src[i];
}

// Grid-stride copies; the last block to finish (state[0] counts them) rings. Each block's
// threads fence their writes to the system scope before the block counts itself, so the last
// block's bell follows every write of every block (the threadfence-reduction pattern).
__global__ void ring_routing_bell_kernel(routing_bell b) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < b.xn_count; i += stride) b.host_xn[i] = b.xn[i];
    for (int64_t p = first; p < b.pairs; p += stride) {
        const int32_t e = b.ids[p];
        b.host_ids[p] = e;
        b.mm_ids[p] = e >= 0 && e < b.n_expert ? b.local_slot[e] : -1;
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (atomicAdd(&b.state[0], 1u) != gridDim.x - 1) return;
    b.state[0] = 0;   // the next ring's count; no block of this one reads it again
    const uint32_t ring = b.state[1] + 1;
    b.state[1] = ring;
    __threadfence_system();
    *static_cast<volatile uint32_t*>(b.bell) = ring;
}

__global__ void split_streamed_pairs_kernel(const int32_t* __restrict__ ids, int64_t pairs,
                                            const int32_t* __restrict__ local_slot, int n_expert,
                                            int32_t* __restrict__ slot_ids, int32_t* __restrict__ rest_ids) {
    wait_prior_grids();   // first: see launch.cuh
    const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const int32_t e = ids[p];
    const int32_t s = e >= 0 && e < n_expert ? local_slot[e] : -1;
    slot_ids[p] = s;
    rest_ids[p] = e >= 0 && e < n_expert && s < 0 ? e : -1;
}

}  // namespace

void split_streamed_pairs(const int32_t* ids, int64_t pairs, const int32_t* local_slot, int n_expert, int32_t* slot_ids,
                          int32_t* rest_ids, void* stream) {
    if (pairs <= 0) return;
    const int64_t blocks = (pairs + 255) / 256;
    if (blocks > 0x7fffffff) fail("cuda: split_streamed_pairs: {} pairs exceed one launch", pairs);
    launch(split_streamed_pairs_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, static_cast<cudaStream_t>(stream),
           ids, pairs, local_slot, n_expert, slot_ids, rest_ids);
}

void ring_routing_bell(const routing_bell& b, void* stream) {
    if (b.pairs <= 0 || b.xn_count < 0) fail("cuda: ring_routing_bell: {} pairs, {} input values", b.pairs, b.xn_count);
    // Enough blocks that a decode step's row (2,048-4,096 values) is one block and a prefill
    // chunk's input does not crawl through one SM's writes over PCIe.
    const int64_t blocks = std::clamp<int64_t>((std::max(b.xn_count, b.pairs) + 2047) / 2048, 1, 132);
    launch(ring_routing_bell_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, static_cast<cudaStream_t>(stream), b);
}

void copy_cpu_pair_rows(float* dst, const float* src, const int32_t* slot, int64_t n_pairs, int64_t n, void* stream) {
    if (n_pairs * n <= 0) return;
    const int64_t blocks = (n_pairs * n + 255) / 256;
    if (blocks > 0x7fffffff) fail("cuda: copy_cpu_pair_rows: {} x {} elements exceed one launch", n_pairs, n);
    launch(copy_cpu_pair_rows_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, static_cast<cudaStream_t>(stream),
           dst, src, slot, n_pairs, n);
}

}  // namespace sluice::cuda
