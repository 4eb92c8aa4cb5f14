// Part 4 of matmul_parity.cu (GPU, timing): one-row matmul GB/s on expert-sized and large dense
// matrices, prefill chunks through the tensor-core kernel, the router and a layer's routed
// experts, for a few formats. Run after the parity parts pass (skipped with --no-bench).
#pragma once

#include "kernels/cuda/matmul.cuh"

#include "quant/act.h"
#include "quant/quant.h"

#include "matmul_parity_data.cuh"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

namespace sluice::matmul_test {

void bench(dtype t, int64_t n_in, int64_t n_out, int n_copies, int n_rows, const char* what) {
    const size_t wrb = *bytes_for(t, n_in), mat = wrb * static_cast<size_t>(n_out);
    // 256 quantised rows tiled over the matrix: the values do not change the time, and
    // quantising 67M values per format would dominate the run.
    const int64_t uniq = n_out < 256 ? n_out : 256;
    const auto w0 = make_weights(t, n_in, uniq, 31);
    std::vector<std::byte> w(mat);
    for (int64_t j = 0; j < n_out; ++j) std::memcpy(w.data() + j * wrb, w0.data() + (j % uniq) * wrb, wrb);
    const auto a = make_act(t, n_in, n_rows, 32);
    dev_buf dw(mat * n_copies), da(a.size()), dy(static_cast<size_t>(n_out * n_rows) * 4);
    for (int c = 0; c < n_copies; ++c) CK(cudaMemcpy(dw.as<std::byte>() + c * mat, w.data(), mat, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice));
    cuda::mm_args m = plain_args(t, nullptr, wrb, n_in, n_out, da.as<std::byte>(),
                                 quant::act_row_bytes(quant::act_format_for(t), n_in), n_rows, dy.as<float>());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 200;
    for (int i = 0; i < 20; ++i) {
        m.w = dw.as<std::byte>() + (i % n_copies) * mat;
        cuda::matmul(m, nullptr);
    }
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) {
        m.w = dw.as<std::byte>() + (i % n_copies) * mat;
        cuda::matmul(m, nullptr);
    }
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1000.0 * ms / iters;
    // Multiply-adds per second: what bounds a many-row (prefill) launch, where weights are reused.
    const double macs = static_cast<double>(n_in) * static_cast<double>(n_out) * n_rows;
    std::printf("BENCH %-8s %-14s %6lld x %-6lld rows %3d: %8.2f us/launch, %7.1f GB/s of weights (%.2f MB), %6.1f TMAC/s\n",
                std::string(name(t)).c_str(), what, static_cast<long long>(n_in), static_cast<long long>(n_out), n_rows, us,
                static_cast<double>(mat) / (us * 1e3), static_cast<double>(mat) / 1e6, macs / (us * 1e6));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

// The decode shape of a MoE layer: K experts of one token in one launch (expert mode, ids on the
// device), gate and up as two matrices of the launch when `paired`; the ids move on each launch
// over n_exp experts so the weights come from HBM.
void bench_experts(dtype t, int64_t n_in, int64_t n_out, int n_exp, int K, bool paired, const char* what) {
    const size_t wrb = *bytes_for(t, n_in), mat = wrb * static_cast<size_t>(n_out);
    const int64_t uniq = n_out < 256 ? n_out : 256;
    const auto w0 = make_weights(t, n_in, uniq, 41);
    std::vector<std::byte> w(mat);
    for (int64_t j = 0; j < n_out; ++j) std::memcpy(w.data() + j * wrb, w0.data() + (j % uniq) * wrb, wrb);
    const auto a = make_act(t, n_in, 1, 42);
    const int n_sets = 16;
    std::vector<int32_t> ids(static_cast<size_t>(n_sets * K));
    for (int i = 0; i < n_sets * K; ++i) ids[static_cast<size_t>(i)] = (i * 37 + i / K) % n_exp;
    dev_buf dw(mat * n_exp), dw2(paired ? mat * n_exp : 1), da(a.size()), dy(static_cast<size_t>(n_out * K) * 4),
        dy2(static_cast<size_t>(n_out * K) * 4), dids(ids.size() * 4);
    for (int e = 0; e < n_exp; ++e) {
        CK(cudaMemcpy(dw.as<std::byte>() + e * mat, w.data(), mat, cudaMemcpyHostToDevice));
        if (paired) CK(cudaMemcpy(dw2.as<std::byte>() + e * mat, w.data(), mat, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dids.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    cuda::mm_args m = plain_args(t, dw.as<std::byte>(), wrb, n_in, n_out, da.as<std::byte>(),
                                 quant::act_row_bytes(quant::act_format_for(t), n_in), K, dy.as<float>());
    m.expert_stride = mat;
    m.act_div = K;
    if (paired) {
        m.w2 = dw2.as<std::byte>();
        m.n_out2 = n_out;
        m.y2 = dy2.as<float>();
        m.y2_stride = n_out;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 200;
    for (int i = 0; i < iters + 20; ++i) {
        if (i == 20) CK(cudaEventRecord(e0));
        m.ids = dids.as<int32_t>() + (i % n_sets) * K;
        cuda::matmul(m, nullptr);
    }
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1000.0 * ms / iters, bytes = static_cast<double>(mat) * K * (paired ? 2 : 1);
    std::printf("BENCH %-8s %-14s %6lld x %-6lld x %d experts%s: %8.2f us/launch, %7.1f GB/s of weights (%.2f MB)\n",
                std::string(name(t)).c_str(), what, static_cast<long long>(n_in), static_cast<long long>(n_out), K,
                paired ? " x 2 matrices" : "", us, bytes / (us * 1e3), bytes / 1e6);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

}  // namespace sluice::matmul_test
