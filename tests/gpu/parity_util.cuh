// Helpers shared by the GPU parity tests (tests/gpu/*.cu): a CUDA call checked (a failure ends
// the test with a FAIL line), random inputs, a device copy of a host vector, and the bit-for-bit
// comparison line each test prints.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice::gpu_test {

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            std::printf("FAIL: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

// n normal values times scale plus shift, from seed.
inline std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng) * scale + shift;
    return v;
}

// A device copy of a host vector (or n zeroed floats); get() waits for the device and copies back.
struct dvec {
    float* p = nullptr;
    size_t n = 0;
    explicit dvec(const std::vector<float>& h) : n(h.size()) {
        CK(cudaMalloc(&p, n * 4 + 4));
        CK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
    }
    explicit dvec(size_t count) : n(count) {
        CK(cudaMalloc(&p, n * 4 + 4));
        CK(cudaMemset(p, 0, n * 4 + 4));
    }
    dvec(const dvec&) = delete;
    dvec& operator=(const dvec&) = delete;
    ~dvec() { cudaFree(p); }
    std::vector<float> get() const {
        std::vector<float> h(n);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
        return h;
    }
};

// PASS when every float of gpu has cpu's bits, else FAIL with the count and the first difference;
// returns the failures (0 or 1).
inline int report(const std::string& what, const std::vector<float>& cpu, const std::vector<float>& gpu) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
        if (std::memcmp(&cpu[i], &gpu[i], 4) != 0 && bad++ == 0) first = i;
    if (bad)
        std::printf("FAIL %-52s %zu of %zu differ (first at %zu: cpu %.9g gpu %.9g)\n", what.c_str(), bad, cpu.size(),
                    first, cpu[first], gpu[first]);
    else
        std::printf("PASS %-52s %zu values bit-identical\n", what.c_str(), cpu.size());
    return bad ? 1 : 0;
}

}  // namespace sluice::gpu_test
