#include "core/dtype.h"

#include "core/checked.h"

#include <array>

namespace sluice {
namespace {

// Sizes checked against gguf.GGML_QUANT_SIZES in tests/unit/test_dtype_table.py.
constexpr std::array<dtype_info, 32> k_table{{
    {dtype::f32, "F32", 1, 4},          {dtype::f16, "F16", 1, 2},
    {dtype::q4_0, "Q4_0", 32, 18},      {dtype::q4_1, "Q4_1", 32, 20},
    {dtype::q5_0, "Q5_0", 32, 22},      {dtype::q5_1, "Q5_1", 32, 24},
    {dtype::q8_0, "Q8_0", 32, 34},      {dtype::q8_1, "Q8_1", 32, 40},
    {dtype::q2_k, "Q2_K", 256, 84},     {dtype::q3_k, "Q3_K", 256, 110},
    {dtype::q4_k, "Q4_K", 256, 144},    {dtype::q5_k, "Q5_K", 256, 176},
    {dtype::q6_k, "Q6_K", 256, 210},    {dtype::q8_k, "Q8_K", 256, 292},
    {dtype::iq2_xxs, "IQ2_XXS", 256, 66}, {dtype::iq2_xs, "IQ2_XS", 256, 74},
    {dtype::iq3_xxs, "IQ3_XXS", 256, 98}, {dtype::iq1_s, "IQ1_S", 256, 50},
    {dtype::iq4_nl, "IQ4_NL", 32, 18},  {dtype::iq3_s, "IQ3_S", 256, 110},
    {dtype::iq2_s, "IQ2_S", 256, 82},   {dtype::iq4_xs, "IQ4_XS", 256, 136},
    {dtype::i8, "I8", 1, 1},            {dtype::i16, "I16", 1, 2},
    {dtype::i32, "I32", 1, 4},          {dtype::i64, "I64", 1, 8},
    {dtype::f64, "F64", 1, 8},          {dtype::iq1_m, "IQ1_M", 256, 56},
    {dtype::bf16, "BF16", 1, 2},        {dtype::tq1_0, "TQ1_0", 256, 54},
    {dtype::tq2_0, "TQ2_0", 256, 66},   {dtype::mxfp4, "MXFP4", 32, 17},
}};

}  // namespace

std::optional<dtype_info> find_dtype(uint32_t id) {
    for (const auto& row : k_table)
        if (static_cast<uint32_t>(row.type) == id) return row;
    return std::nullopt;
}

const dtype_info& info(dtype t) {
    for (const auto& row : k_table)
        if (row.type == t) return row;
    return k_table[0];  // unreachable for valid enum values
}

std::string_view name(dtype t) { return info(t).name; }

std::optional<uint64_t> bytes_for(dtype t, uint64_t n_elems) {
    const auto& i = info(t);
    if (n_elems % i.block_elems != 0) return std::nullopt;
    return checked_mul(n_elems / i.block_elems, i.block_bytes);
}

}  // namespace sluice
