// Simple quantisers of our own for formats whose quantiser the gguf package lacks:
// deterministic round-to-nearest per (sub-)block (K-quants, IQ4), nearest grid entry by
// exhaustive search (IQ2, IQ3); no importance weights, no scale search. They write valid GGML
// blocks (any GGML reader decodes them), good for synthetic models and tests; they are not
// llama.cpp's quantisers and make no promise of its quality or its bytes. Relative RMS error
// on gaussian rows, measured by tests/quant/test_quant_dequant.py: Q6_K 2%, Q5_K 4%, Q4_K and
// IQ4 9%, Q3_K 17%, IQ3_S 16%, IQ3_XXS 22%, IQ2_S 29%, IQ2_XS 33%, Q2_K 36%, IQ2_XXS 39%.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>

namespace sluice::quant {

// True for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S.
bool has_simple_quantizer(dtype t);
// n a multiple of the block size (checked by quantize_row, the public entry).
void quantize_row_simple(dtype t, const float* src, std::byte* dst, int64_t n);

}  // namespace sluice::quant
