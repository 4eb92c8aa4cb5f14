// Typed, non-owning views of weight data. Shapes use GGML order: ne[0] is the innermost
// (contiguous) dimension, so a matrix with ne = {n_in, n_out} holds n_out rows of n_in values,
// exactly as a GGUF file stores it.
#pragma once

#include "core/dtype.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

inline constexpr int k_max_dims = 4;

struct tensor_view {
    std::string name;                    // canonical (llama.cpp GGUF) name
    dtype type = dtype::f32;
    int n_dims = 0;                      // 1..4
    std::array<int64_t, k_max_dims> ne{1, 1, 1, 1};  // unused dims are 1
    const std::byte* data = nullptr;     // points into a mapping owned by the model file
    uint64_t nbytes = 0;                 // validated: equals bytes_for(type, n_elems())

    int64_t n_elems() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // Bytes of one row along ne[0] (a whole number of blocks, checked at load).
    uint64_t row_bytes() const { return nbytes / static_cast<uint64_t>(ne[1] * ne[2] * ne[3]); }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    const std::byte* row(int64_t i) const { return data + static_cast<uint64_t>(i) * row_bytes(); }
    std::string shape_string() const;    // "[576, 49152]"
};

}  // namespace sluice
