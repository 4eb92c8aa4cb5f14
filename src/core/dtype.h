// Element and block formats, numbered as GGML numbers them (the ids stored in GGUF files).
// One table row per format: adding a format adds a row here and its block code in src/quant,
// not a switch in five places.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class dtype : uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
    q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
    iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
    iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
    tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
};

struct dtype_info {
    dtype type;
    std::string_view name;   // as gguf/llama.cpp print it: "Q4_K", "F32"
    uint32_t block_elems;    // elements per block (1 for plain types)
    uint32_t block_bytes;    // bytes per block
};

// The row for a raw id read from a file; nullopt for ids no GGML version defines.
std::optional<dtype_info> find_dtype(uint32_t id);
// The row for a known dtype (never fails).
const dtype_info& info(dtype t);
std::string_view name(dtype t);

// Bytes for n elements of t; nullopt when n is not a whole number of blocks or overflows.
std::optional<uint64_t> bytes_for(dtype t, uint64_t n_elems);

}  // namespace sluice
