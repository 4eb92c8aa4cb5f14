// Scalar conversions between f32 and the 16-bit float formats, bit-exact and shared by every
// layer that meets F16 / BF16 values (quant's block formats, io's converter transforms).
#pragma once

#include <cstdint>

namespace sluice {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   // round to nearest even, as gguf/ggml and torch do

}  // namespace sluice
