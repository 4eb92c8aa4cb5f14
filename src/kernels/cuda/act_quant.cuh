// Device-side int8 activation blocks (DESIGN.md E3): the same blocks src/quant/act.cpp makes on
// the CPU, bit for bit, so an expert computed on the GPU sees the activations the CPU sees.
#pragma once

#include "quant/act.h"

#include <cstdint>

namespace sluice::cuda {

// x: [n_rows, n] fp32 on the device (row stride n); dst: [n_rows, act_row_bytes(f, n)] on the
// device. f is q8_32 or q8_256; n a multiple of the block width. Enqueued on `stream`.
void quantize_act_rows(quant::act_format f, const float* x, int64_t n_rows, int64_t n, std::byte* dst,
                       void* stream);

}  // namespace sluice::cuda
