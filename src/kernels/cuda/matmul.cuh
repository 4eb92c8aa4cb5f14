// Quantised and float matrix products on the device, returning kernels::dot_ref's bits for
// every output element (DESIGN.md E3) and row-exact (E1): a row's result never depends on the
// window it came in. Host-only declarations: included by C++ code compiled without nvcc.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>

namespace sluice::cuda {

// True when matmul supports weight format t (every format kernels::dot_ref has).
bool has_matmul(dtype t);

// Copies the I-quant grids and 4-bit level tables to the current device (once per device;
// later calls return at once). Call before the first matmul on a device, outside any stream
// capture (load_model_cuda does).
void upload_tables();

// y[r, j] = dot(weight row j, activation row r) for r < n_rows, j < n_out.
struct mm_args {
    dtype type = dtype::f32;
    const std::byte* w = nullptr;     // device: n_out rows of row_bytes (one matrix, or one per expert)
    size_t row_bytes = 0;             // bytes per weight row (n_in elements of `type`)
    int64_t n_in = 0;                 // multiple of the format's block width
    int64_t n_out = 0;
    // Expert mode (ids != nullptr): row r uses the matrix at w + ids[r] * expert_stride.
    const int32_t* ids = nullptr;     // device [n_rows], or nullptr for one plain matrix
    size_t expert_stride = 0;         // bytes between experts' matrices
    // Activations: row r reads activation row r / act_div (an expert pair (row, k) reads its
    // token's row with act_div = n_expert_used). Rows as quant::quantize_act_row lays them out
    // for act_format_for(type): int8 blocks, or fp32 rows for F32/F16/BF16 weights.
    const std::byte* act = nullptr;   // device
    size_t act_stride = 0;            // bytes between activation rows
    int act_div = 1;
    int64_t n_rows = 0;
    float* y = nullptr;               // device [n_rows, y_stride]
    int64_t y_stride = 0;             // floats between output rows (>= n_out)
};
// Enqueues the product on `stream` (a cudaStream_t). Fails on an unsupported format or bad
// sizes (a caller bug, checked before the launch).
void matmul(const mm_args& a, void* stream);

}  // namespace sluice::cuda
