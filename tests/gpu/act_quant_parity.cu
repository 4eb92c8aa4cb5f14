// cpu_activation_blocks_equal_gpu_activation_blocks: the device quantiser
// (src/kernels/cuda/act_quant.cu) against the CPU one (src/quant/act.cpp), bit for bit, on
// random rows and on the edge cases (zero blocks, one huge value, tiny values, exact .5 ties,
// NaN, infinities). Exit 0 on equality, 1 on a difference, 77 (skipped) without a GPU.
#include "kernels/cuda/act_quant.cuh"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace sluice;

namespace {

std::vector<float> make_rows(int64_t n_rows, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_rows * n));
    for (auto& v : x) v = normal(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20));
    // Row 0: special blocks in the first four 32-wide pieces.
    if (n_rows > 0 && n >= 256) {
        for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = 0.0f;                 // all zero
        x[40] = 1e30f;                                                                 // one huge
        for (int i = 64; i < 96; ++i) x[static_cast<size_t>(i)] = 1e-40f * (i - 80);   // subnormal
        for (int i = 96; i < 128; ++i) x[static_cast<size_t>(i)] = (i - 112) + 0.5f;   // .5 ties when dx = 1
        x[96] = 127.0f;
        x[130] = std::numeric_limits<float>::quiet_NaN();
        x[200] = std::numeric_limits<float>::infinity();
    }
    return x;
}

int check(quant::act_format f, const char* name, int64_t n_rows, int64_t n, uint32_t seed) {
    const auto x = make_rows(n_rows, n, seed);
    const size_t row_bytes = quant::act_row_bytes(f, n);
    std::vector<std::byte> cpu(row_bytes * static_cast<size_t>(n_rows)), gpu(cpu.size());
    for (int64_t r = 0; r < n_rows; ++r)
        quant::quantize_act_row(f, x.data() + r * n, n, cpu.data() + static_cast<size_t>(r) * row_bytes);
    float* dx = nullptr;
    std::byte* dq = nullptr;
    cudaMalloc(&dx, x.size() * sizeof(float));
    cudaMalloc(&dq, gpu.size());
    cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
    cuda::quantize_act_rows(f, dx, n_rows, n, dq, nullptr);
    cudaMemcpy(gpu.data(), dq, gpu.size(), cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(dq);
    const bool same = std::memcmp(cpu.data(), gpu.data(), cpu.size()) == 0;
    size_t first = 0;
    if (!same)
        while (first < cpu.size() && cpu[first] == gpu[first]) ++first;
    std::printf("%s %-6s rows %4lld n %6lld: %s", same ? "PASS" : "FAIL", name, static_cast<long long>(n_rows),
                static_cast<long long>(n), same ? "bit-identical\n" : "");
    if (!same) std::printf("first differing byte %zu (row %zu)\n", first, first / row_bytes);
    return same ? 0 : 1;
}

}  // namespace

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    int failures = 0;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
        failures += check(quant::act_format::q8_32, "q8_32", 16, 4096, seed);
        failures += check(quant::act_format::q8_256, "q8_256", 16, 4096, seed);
    }
    failures += check(quant::act_format::q8_32, "q8_32", 512, 2048, 99);
    failures += check(quant::act_format::q8_256, "q8_256", 512, 2048, 99);
    failures += check(quant::act_format::q8_256, "q8_256", 3, 18944, 7);
    std::printf("%d passed, %d failed\n", 11 - failures, failures);
    return failures == 0 ? 0 : 1;
}
