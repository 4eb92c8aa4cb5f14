// The canonical dot products (DESIGN.md, E3): the scalar definitions every SIMD and CUDA
// kernel must match bit for bit.
//
// Quantised weights: per weight block, integer sums only (exact in any order); then one fp32
// term per block, t = (d * dx) * float(sumi) - (dmin * dx) * float(summ) (the form depends on
// the format: see dot_ref.cpp), each operation rounded on its own; y = ((t0 + t1) + t2) + ...
// in block order.
//
// Float weights (F32, F16, BF16): 16 lanes, lane l accumulates fmaf(w[i], x[i], acc[l]) for
// i % 16 == l in index order; then the lanes fold pairwise (acc[l] += acc[l + s] for s = 8, 4,
// 2, 1). An AVX-512 FMA loop and a CUDA loop can reproduce this exactly.
#pragma once

#include "core/dtype.h"
#include "quant/act.h"

#include <cstddef>
#include <cstdint>

namespace sluice::kernels {

// True when dot_ref supports weight format t.
bool has_dot(dtype t);
// One weight row (n elements of format wt) against one activation row prepared with
// quant::quantize_act_row(quant::act_format_for(wt), ...).
// For F32/F16/BF16 weights the activation row is the fp32 row (act_format::f32) and the result
// is dot_f32_ref's.
float dot_ref(dtype wt, const std::byte* w_row, const std::byte* act_row, int64_t n);
// Float weights (F32, F16, BF16; F16/BF16 widened exactly) against fp32 activations x[0..n),
// with the 16-lane fmaf rule above; x must be float-aligned.
float dot_f32_ref(dtype wt, const std::byte* w_row, const float* x, int64_t n);

}  // namespace sluice::kernels
