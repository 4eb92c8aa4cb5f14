// Asynchronous 16-byte copies from global to shared memory (cp.async, sm_80+: no register in
// between, every copy a thread issues in flight until stage_wait), for the kernels that stage
// rows in shared memory (matmul.cu, matmul_mma.cuh, attention.cu). A load-then-store loop left
// nvcc's remainder iterations one after another, a memory latency each (the PTX of 11fac76).
// Device code only (nvcc).
#pragma once

#include <cuda_runtime.h>

namespace sluice::cuda {

// One aligned 16-byte word global -> shared (a plain load and store before sm_80).
__device__ inline void copy16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
#else
    *static_cast<uint4*>(dst) = __ldg(static_cast<const uint4*>(src));
#endif
}

// One aligned 4-byte word global -> shared (cp.async.ca: the only size under 16 bytes it takes),
// for rows whose words are scattered (a column of a row-major matrix).
__device__ inline void copy4(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
#else
    *static_cast<float*>(dst) = __ldg(static_cast<const float*>(src));
#endif
}

// Closes the calling thread's copies issued since the last commit into a group, for
// stage_wait_but<N>() (a thread with no copies commits an empty group, which is complete at once).
__device__ inline void stage_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of the calling thread's committed groups are still in flight: the older
// ones have landed (a barrier then makes them visible to the threads that read them). Double
// buffering: stage the next group, commit, wait_but<1>, and the current one is there.
template <int N>
__device__ inline void stage_wait_but() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Waits for the calling thread's copy16 copies (then a barrier makes them visible to the block).
__device__ inline void stage_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

}  // namespace sluice::cuda
