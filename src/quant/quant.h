// Block formats: reference dequantisation (the definition of each format's values) and the
// quantisers that llama.cpp's gguf package also implements. Layouts are GGML's, bit for bit.
#pragma once

#include "core/dtype.h"
#include "core/half.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::quant {

// True when dequantize_row supports t (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K,
// IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, MXFP4).
bool can_dequantize(dtype t);
// dst[0..n) = values of n elements stored at src in format t. n is a multiple of the block size.
void dequantize_row(dtype t, const std::byte* src, float* dst, int64_t n);

// True when quantize_row supports t: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 (the
// formats whose quantiser the gguf package has; output equals its bytes), and Q2_K..Q6_K,
// IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S with simple quantisers of our own
// (quant_simple.h: valid blocks for synthetic models and tests, not llama.cpp's bytes).
bool can_quantize(dtype t);
// True when quantize_row's bytes equal the gguf package's quantize() for t.
bool quantize_matches_gguf(dtype t);
void quantize_row(dtype t, const float* src, std::byte* dst, int64_t n);

// Scalar conversions shared by every format (core/half.h).
using ::sluice::bf16_to_fp32;
using ::sluice::fp16_to_fp32;
using ::sluice::fp32_to_bf16;
using ::sluice::fp32_to_fp16;
// The f32 bits of e8m0_to_fp32_half(e).
constexpr uint32_t e8m0_half_bits(uint8_t e) {
    // 2^(e - 128): e < 2 gives the f32 subnormals 2^-128 and 2^-127.
    return e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
}
// MXFP4's e8m0 scale times 1/2 (2^(e-128)): the levels are stored doubled so they are integers.
// Inline: the CPU kernels call it once per 32-element block (as an out-of-line call it took 7% of
// an MXFP4 model's decode on the 2-core EPYC, perf, 2026-12-02). memcpy, not std::bit_cast: the
// CUDA tests include this header as C++17.
inline float e8m0_to_fp32_half(uint8_t e) {
    const uint32_t bits = e8m0_half_bits(e);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace sluice::quant
