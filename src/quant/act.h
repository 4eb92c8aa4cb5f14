// int8 activation blocks: the activation side of every quantised dot product (DESIGN.md, E3).
// One activation block per weight (super)block:
//   - legacy formats and 32-wide I-quants (Q4_0..Q8_0, IQ4_NL, MXFP4): 32-wide blocks;
//   - K-quants and 256-wide I-quants: 256-wide blocks that also keep per-16 integer sums
//     (the per-32 sums are pairs of them), as Q8_K does.
// Scale: dx = amax / 127 in fp32 (0 when amax is 0); q = round-to-nearest-even(x / dx).
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>

namespace sluice::quant {

struct act_block32 {
    float d;         // dx
    int8_t q[32];
};

struct act_block256 {
    float d;             // dx
    int8_t q[256];
    int16_t bsums[16];   // sum of q over each 16 values
};

enum class act_format : uint8_t {
    f32,      // float weights (F32/F16/BF16): activations stay fp32
    q8_32,    // act_block32
    q8_256,   // act_block256
};

// Which activation form a weight format's dot product consumes.
act_format act_format_for(dtype weight);
// Bytes of one activation row of n elements (n a multiple of the block width).
size_t act_row_bytes(act_format f, int64_t n);
// Quantises one row x[0..n) into dst (act_row_bytes(f, n) bytes). For f32, copies. With AVX2
// where the CPU has it: the bytes of quantize_act_row_ref, the scalar definition.
void quantize_act_row(act_format f, const float* x, int64_t n, std::byte* dst);
void quantize_act_row_ref(act_format f, const float* x, int64_t n, std::byte* dst);

}  // namespace sluice::quant
