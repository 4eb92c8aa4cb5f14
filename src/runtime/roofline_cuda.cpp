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

// The tensor-rate table is here rather than in roofline.cpp so that the standalone probe program
// (SLUICE_GPU_PROBE_MAIN, this file alone) has it too.
const gpu_tensor_rate* gpu_tensor_rate_for(int cc_major, int cc_minor) {
    // Dense tensor-core rates per SM per clock = the vendor's peak / (SMs x the clock it quotes):
    //  8.0 A100 SXM: 624 TOPS int8, 312 TFLOPS fp16, 108 SMs at 1410 MHz (NVIDIA A100 Tensor Core
    //      GPU Architecture whitepaper, 2020): 4096 and 2048.
    //  8.6 A40: 299.3 TOPS int8, 149.7 TFLOPS fp16, 84 SMs at 1740 MHz (NVIDIA A40 datasheet):
    //      2048 and 1024.
    //  8.9 L40S: 733 TOPS int8, 362 TFLOPS fp16, 142 SMs at 2520 MHz (NVIDIA L40S datasheet):
    //      2048 and 1024.
    //  9.0 H100 SXM5: 1978.9 TOPS int8, 989.4 TFLOPS fp16, 132 SMs at 1830 MHz (NVIDIA H100 Tensor
    //      Core GPU Architecture whitepaper, 2022); H200 is the same chip: 8192 and 4096.
    // The device reports its highest boost clock (1980 MHz on H100/H200 SXM), above the clock the
    // tensor figures are quoted at: the peak it gives is an upper bound, as a ceiling should be.
    static const gpu_tensor_rate k_table[] = {
        {8, 0, 4096.0, 2048.0, "A100 whitepaper: 624 TOPS int8 / (108 SMs x 1.41 GHz)"},
        {8, 6, 2048.0, 1024.0, "A40 datasheet: 299.3 TOPS int8 / (84 SMs x 1.74 GHz)"},
        {8, 9, 2048.0, 1024.0, "L40S datasheet: 733 TOPS int8 / (142 SMs x 2.52 GHz)"},
        {9, 0, 8192.0, 4096.0, "H100 whitepaper: 1978.9 TOPS int8 / (132 SMs x 1.83 GHz)"},
    };
    for (const gpu_tensor_rate& r : k_table)
        if (r.cc_major == cc_major && r.cc_minor == cc_minor) return &r;
    return nullptr;
}

double gpu_peak_ops_s(int sm_count, double clock_ghz, double ops_per_clk_sm) {
    if (sm_count <= 0 || !(clock_ghz > 0.0) || !(ops_per_clk_sm > 0.0)) return 0.0;
    return double(sm_count) * clock_ghz * 1e9 * ops_per_clk_sm;
}

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
    // The compute peak: attributes rather than cudaDeviceProp::clockRate, which CUDA 13 removed.
    int sms = 0, clock_khz = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&g.cc_major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&g.cc_minor, cudaDevAttrComputeCapabilityMinor, 0);
    cudaGetLastError();
    g.sm_count = sms;
    g.clock_ghz = double(clock_khz) * 1e-6;
    if (const gpu_tensor_rate* r = gpu_tensor_rate_for(g.cc_major, g.cc_minor)) {
        g.peak_int8_ops_s = gpu_peak_ops_s(g.sm_count, g.clock_ghz, r->int8_ops_per_clk_sm);
        g.peak_fp16_flops_s = gpu_peak_ops_s(g.sm_count, g.clock_ghz, r->fp16_flops_per_clk_sm);
        g.peak_source = fmt::format("{} SMs x {:.3f} GHz x rate per SM per clock ({})", g.sm_count, g.clock_ghz,
                                    r->source);
    } else {
        g.peak_source = fmt::format("compute capability {}.{} is not in the tensor-rate table: no compute bound",
                                    g.cc_major, g.cc_minor);
    }
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
                "\"hbm_read_gb_s\": %.3f, \"sm_count\": %d, \"cc\": \"%d.%d\", \"clock_ghz\": %.3f, "
                "\"peak_int8_ops_s\": %.6g, \"peak_fp16_flops_s\": %.6g}\n",
                g.present ? "true" : "false", g.name.c_str(), g.pcie_h2d_gb_s, g.hbm_copy_gb_s, g.hbm_read_gb_s,
                g.sm_count, g.cc_major, g.cc_minor, g.clock_ghz, g.peak_int8_ops_s, g.peak_fp16_flops_s);
    return g.present ? 0 : 1;
}
#endif
