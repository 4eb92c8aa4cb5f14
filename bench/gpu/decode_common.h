// Helpers shared by the GPU decode benchmarks (decode_bench.cu, split_decode_bench.cu).
#pragma once

#include "kernels/cpu/ops.h"

#include "models/model.h"

#include <chrono>
#include <vector>

namespace sluice::gpu_bench {

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The greedy pick as the keyed sampler makes it (kernels::argmax_first, SIMD); the scalar scan
// decode_bench used before cost 587-704 us a token on the GPU machine's host.
inline int argmax(const float* x, int n) { return static_cast<int>(kernels::argmax_first(x, n)); }

// The benchmarks' prompt: n ids spread over the vocabulary (the same in every program, so their
// figures are for the same tokens).
inline std::vector<token_id> synthetic_prompt(int n, int n_vocab) {
    std::vector<token_id> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (i * 7919 + 13) % n_vocab;
    return p;
}

}  // namespace sluice::gpu_bench
