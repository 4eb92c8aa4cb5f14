// Kernel launches with optional programmatic dependent launch (PDL, sm_90): with it on, a
// kernel's blocks may be scheduled while the kernel before it in the stream is still running,
// so the launch latency between the ~700 dependent kernels of a decode step overlaps the work.
// Every kernel of src/kernels/cuda calls wait_prior_grids() before its first access to memory
// that the kernel just before it may write: it returns only when that kernel has completed and
// its memory is visible (griddepcontrol.wait waits for the prerequisite grid's completion and
// memory flush, not for its trigger), so the order of those accesses, and the bits, are those of
// a plain launch. Right after that wait, each block signals griddepcontrol.launch_dependents:
// once every block of a kernel has passed its wait, the next kernel's blocks may be launched and
// sit in their own wait, so the launch latency hides behind the running kernel.
// Two rules follow, which every kernel keeps:
//   - No block returns before its wait (a kernel whose blocks all left early would complete
//     before the kernel before it, and the one after would no longer be ordered after that one).
//   - Before its wait a block may read only what the kernel just before it cannot be writing:
//     model weights (no kernel writes them), and what a launch two or more before wrote (it has
//     completed: the launch just before passed its own wait before this one could start), e.g.
//     a down projection's expert ids (mm_args::ids_settled) or the KV rows of earlier steps.
// On by default on sm_90+ devices (off on older ones, and when the environment has
// SLUICE_CUDA_PDL=0); set_programmatic_launch switches it (graphs captured after that use
// programmatic edges or not). Include only from .cu files.
#pragma once

#include "core/error.h"
#ifdef SLUICE_STEP_TRACE
#include "kernels/cuda/step_trace.h"
#endif

#include <cuda_runtime.h>

#include <utility>

namespace sluice::cuda {

bool programmatic_launch();
void set_programmatic_launch(bool on);

#ifdef SLUICE_STEP_TRACE
// A build for bench/gpu/step_trace.cu only (step_trace.h): block (0, 0) of every kernel records,
// in wait_prior_grids, when it entered the wait and when the wait returned (%globaltimer).
namespace {
__device__ step_trace* g_step_trace = nullptr;   // this file's copy (no relocatable device code)
void set_this_file_trace(step_trace* t) { cudaMemcpyToSymbol(g_step_trace, &t, sizeof t); }
const bool g_step_trace_registered = (register_step_trace_setter(&set_this_file_trace), true);
}  // namespace

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif

__device__ __forceinline__ void wait_prior_grids() {
#ifdef SLUICE_STEP_TRACE
    const unsigned long long entered = global_ns();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef SLUICE_STEP_TRACE
    if (g_step_trace && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
        const unsigned long long waited = global_ns();
        const unsigned i = atomicAdd(&g_step_trace->n, 1u);
        if (i < g_step_trace->cap) g_step_trace->rec[i] = {entered, waited, gridDim.x, gridDim.y, blockDim.x, 0u};
    }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A STEP_TRACE build's mark inside a kernel: thread 0 of the calling block records the time with
// id (>= 1) in the record's last field, so that bench/gpu/step_trace can time the phases of a
// kernel (from its wait's return) as it runs in the step's graph. Nothing in other builds.
__device__ __forceinline__ void trace_mark(unsigned id) {
#ifdef SLUICE_STEP_TRACE
    if (g_step_trace && threadIdx.x == 0) {
        const unsigned long long t = global_ns();
        const unsigned i = atomicAdd(&g_step_trace->n, 1u);
        if (i < g_step_trace->cap) g_step_trace->rec[i] = {t, t, blockIdx.x, gridDim.x, blockDim.x, id};
    }
#else
    (void)id;
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when it is on; fails
// (throws) when the launch is refused.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    static_assert(sizeof...(KArgs) == sizeof...(Args), "one argument per kernel parameter");
    if (!programmatic_launch()) {
        kernel<<<grid, block, smem, stream>>>(static_cast<KArgs>(std::forward<Args>(args))...);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail("cuda: kernel launch: {}", cudaGetErrorString(e));
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(std::forward<Args>(args))...);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) fail("cuda: kernel launch (programmatic): {}", cudaGetErrorString(e));
}

// A kernel's dynamic shared memory past the default 48 KB needs its opt-in: a function attribute
// of the current device, not a stream operation, so it may be set while a stream is captured (the
// split attention runs inside decode graphs). The L1 / shared split is left to the driver: it
// already gives the split attention's 41 KB blocks the largest shared configuration (233 KB,
// Nsight Compute, H100, session 33), and a carveout hint changed nothing there.
template <class Kernel>
void opt_in_shared(Kernel kernel, size_t bytes, const char* what) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
        e != cudaSuccess)
        fail("cuda: {} bytes of shared memory for the {} kernel: {}", bytes, what, cudaGetErrorString(e));
}

}  // namespace sluice::cuda
