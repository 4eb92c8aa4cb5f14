// Helpers shared by the GPU decode benchmarks (decode_bench.cu, split_decode_bench.cu).
#pragma once

#include "kernels/cpu/ops.h"

#include <chrono>

namespace sluice::gpu_bench {

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The greedy pick as the keyed sampler makes it (kernels::argmax_first, SIMD); the scalar scan
// decode_bench used before cost 587-704 us a token on the GPU machine's host.
inline int argmax(const float* x, int n) { return static_cast<int>(kernels::argmax_first(x, n)); }

}  // namespace sluice::gpu_bench
