// The GPU bandwidth probe of runtime/roofline.h. Only SLUICE_HAVE_CUDA builds talk to the CUDA
// runtime; a CPU-only build says "no GPU" and never needs CUDA headers.
//
// With SLUICE_GPU_PROBE_MAIN defined this file is also a program of its own that prints the probe
// as JSON, so bench/run_gpu.sh gets the GPU's figures in seconds even when sluice is built
// without CUDA:
//   g++ -std=c++20 -O2 -DSLUICE_HAVE_CUDA -DSLUICE_GPU_PROBE_MAIN -DFMT_HEADER_ONLY -Isrc
//       -I/usr/local/cuda/include src/runtime/roofline_cuda.cpp -L/usr/local/cuda/lib64 -lcudart
#include "runtime/roofline.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime.h>

#include <fmt/core.h>

#include <algorithm>
#endif

namespace sluice {

#ifndef SLUICE_HAVE_CUDA

gpu_probe measure_gpu() {
    gpu_probe g;
    g.note = "no GPU (built without CUDA)";
    return g;
}

#else

namespace {

// Seconds of the fastest of `reps` runs of `copy` (CUDA events around each).
template <class F>
float best_ms(int reps, F&& copy) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 0.0f;
    for (int r = 0; r < reps; ++r) {
        cudaEventRecord(a);
        copy();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        if (r == 0 || ms < best) best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

}  // namespace

gpu_probe measure_gpu() {
    gpu_probe g;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        g.note = "no GPU (no CUDA device)";
        return g;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    g.name = prop.name;
    // 1 GiB copies: large enough that launch and setup cost vanish (GPU-MACHINE.md: 55 GB/s).
    const size_t bytes = size_t(1) << 30;
    void* host = nullptr;
    void* dev_a = nullptr;
    void* dev_b = nullptr;
    if (cudaMallocHost(&host, bytes) != cudaSuccess || cudaMalloc(&dev_a, bytes) != cudaSuccess ||
        cudaMalloc(&dev_b, bytes) != cudaSuccess) {
        cudaGetLastError();
        g.note = "GPU found but the probe's 1 GiB buffers could not be allocated";
        if (host) cudaFreeHost(host);
        if (dev_a) cudaFree(dev_a);
        return g;
    }
    std::fill_n(static_cast<unsigned char*>(host), bytes, static_cast<unsigned char>(1));
    cudaMemset(dev_a, 1, bytes);
    cudaDeviceSynchronize();
    const float h2d = best_ms(3, [&] { cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice); });
    const float d2d = best_ms(5, [&] { cudaMemcpyAsync(dev_b, dev_a, bytes, cudaMemcpyDeviceToDevice); });
    g.present = true;
    g.pcie_h2d_gb_s = h2d > 0 ? double(bytes) / (double(h2d) * 1e-3) / 1e9 : 0.0;
    g.hbm_copy_gb_s = d2d > 0 ? 2.0 * double(bytes) / (double(d2d) * 1e-3) / 1e9 : 0.0;
    // A copy's reads and writes share one memory bus: the sum is what a kernel that only reads
    // weights can approach, so the read ceiling uses it.
    g.hbm_read_gb_s = g.hbm_copy_gb_s;
    g.note = fmt::format("{}: PCIe host-to-device (pinned) and device-to-device copies of 1 GiB", g.name);
    cudaFreeHost(host);
    cudaFree(dev_a);
    cudaFree(dev_b);
    return g;
}

#endif

}  // namespace sluice

#ifdef SLUICE_GPU_PROBE_MAIN
#include <cstdio>

int main() {
    const sluice::gpu_probe g = sluice::measure_gpu();
    std::printf("{\"present\": %s, \"name\": \"%s\", \"pcie_h2d_gb_s\": %.3f, \"hbm_copy_gb_s\": %.3f, "
                "\"hbm_read_gb_s\": %.3f}\n",
                g.present ? "true" : "false", g.name.c_str(), g.pcie_h2d_gb_s, g.hbm_copy_gb_s, g.hbm_read_gb_s);
    return g.present ? 0 : 1;
}
#endif
