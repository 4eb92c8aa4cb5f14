// Test data and device buffers shared by matmul_parity.cu's parts (matmul_parity_host.cuh, the
// device checks, matmul_parity_bench.cuh): the formats under test, random weights and activation
// rows prepared as the CPU prepares them, and a device buffer freed with its scope.
#pragma once

#include "kernels/cuda/matmul.cuh"

#include "core/dtype.h"
#include "quant/act.h"
#include "quant/quant.h"

#include "parity_util.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace sluice::matmul_test {

const dtype k_formats[] = {dtype::q8_0,   dtype::q4_0,    dtype::q4_1,   dtype::q5_0,  dtype::q5_1,    dtype::q4_k,
                           dtype::q5_k,   dtype::q6_k,    dtype::iq4_xs, dtype::mxfp4, dtype::iq4_nl,  dtype::iq3_s,
                           dtype::iq3_xxs, dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s, dtype::q2_k,    dtype::q3_k,
                           dtype::f32,    dtype::f16,     dtype::bf16};

bool is_float(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }

uint32_t f2u(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng) * scale;
    return v;
}

// Weights [n_out, n_in] quantised row by row with src/quant.
std::vector<std::byte> make_weights(dtype t, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto x = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
    const size_t rb = *bytes_for(t, static_cast<uint64_t>(n_in));
    std::vector<std::byte> w(rb * static_cast<size_t>(n_out));
    for (int64_t j = 0; j < n_out; ++j) quant::quantize_row(t, x.data() + j * n_in, w.data() + j * rb, n_in);
    return w;
}

// Activation rows prepared as the CPU prepares them; row 0 gets a zero block and a spike.
std::vector<std::byte> make_act(dtype t, int64_t n_in, int64_t n_rows, uint32_t seed) {
    auto x = random_floats(static_cast<size_t>(n_in * n_rows), seed, 1.0f);
    for (int i = 0; i < 32 && i < n_in; ++i) x[static_cast<size_t>(i)] = 0.0f;
    if (n_in > 300) x[300] = 40.0f;
    const auto f = quant::act_format_for(t);
    const size_t rb = quant::act_row_bytes(f, n_in);
    std::vector<std::byte> a(rb * static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) quant::quantize_act_row(f, x.data() + r * n_in, n_in, a.data() + r * rb);
    return a;
}

struct dev_buf {
    void* p = nullptr;
    explicit dev_buf(size_t n) { CK(cudaMalloc(&p, n ? n : 1)); }
    ~dev_buf() { cudaFree(p); }
    template <class T>
    T* as() const { return static_cast<T*>(p); }
};

// A matmul of format t: weights w [n_out rows of row_bytes, n_in elements each], n_rows activation
// rows act_stride apart from act, results to y with rows n_out apart. The tests set the rest
// (ids, pairing, accumulate, the window kernel) on the copy they get.
inline cuda::mm_args plain_args(dtype t, const std::byte* w, size_t row_bytes, int64_t n_in, int64_t n_out,
                                const std::byte* act, size_t act_stride, int64_t n_rows, float* y) {
    cuda::mm_args m;
    m.type = t;
    m.w = w;
    m.row_bytes = row_bytes;
    m.n_in = n_in;
    m.n_out = n_out;
    m.act = act;
    m.act_stride = act_stride;
    m.n_rows = n_rows;
    m.y = y;
    m.y_stride = n_out;
    return m;
}

}  // namespace sluice::matmul_test
