// Fast exact CPU dot products: AVX2 and AVX-512 (VNNI) versions of dot_ref (DESIGN.md E3), for
// one weight row against a window of 1..16 activation rows, chosen at run time by CPU support.
//
// Exactness: every kernel returns dot_ref's bits. Integer block sums are computed with SIMD
// (exact in any order); the fp32 term of each block is dot_ref's expression, each operation
// rounded on its own, and each row folds y = ((t0 + t1) + t2) + ... in block order. Float
// weights follow dot_f32_ref's 16-lane fmaf rule (AVX-512: one zmm; AVX2: two ymm, lanes 0-7
// and 8-15), then the same pairwise fold.
//
// Activation precondition (act.h guarantees it): int8 activations lie in [-127, 127]. The
// kernels multiply |w| (<= 128, unsigned) by sign(w) * x with pmaddubsw; a pair sum is at most
// 2 * 128 * 127 = 32,512 < 32,767, so the int16 saturation of pmaddubsw never triggers.
//
// Formats without a SIMD version run dot_ref row by row: has_simd() says which ones do (so do
// windows whose act_stride is 2^27 bytes or more, far beyond any real row).
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::kernels {

enum class isa : uint8_t { scalar, avx2, avx512 };

// "scalar", "avx2", "avx512".
std::string_view name(isa i);
// True when this CPU can run kernels of ISA i (avx2: AVX2+FMA+F16C; avx512: F, BW, VL, VNNI).
bool cpu_supports(isa i);
// The fastest ISA this CPU supports.
isa best_isa();
// True when dot_rows(i, wt, ...) runs a SIMD kernel; false means dot_ref row by row (always the
// case for isa::scalar and for formats without a SIMD version at that ISA).
bool has_simd(isa i, dtype wt);

// One weight row against n_rows activation rows:
//   out[r] = dot_ref(wt, w_row, act_rows + r * act_stride, n) for r in [0, n_rows), bit for bit.
// w_row: n elements of format wt (any alignment). act_rows: row r starts act_stride bytes after
// row r-1, each laid out as quant::quantize_act_row(act_format_for(wt)) writes it (fp32 rows for
// F32/F16/BF16 weights, float-aligned). n_rows in [1, 16]; n a multiple of wt's block size.
// Each weight block is decoded once for all rows. Fails (sluice::fail) on n_rows out of range,
// a format dot_ref lacks, or an ISA this CPU cannot run: these are caller bugs, checked once.
void dot_rows(isa i, dtype wt, const std::byte* w_row, const std::byte* act_rows, size_t act_stride,
              int n_rows, int64_t n, float* out);

// The SIMD kernel dot_rows(i, wt, ...) would run, resolved once, for loops that make many calls
// with one (ISA, format) (matmul, the expert pool): no per-call checks or dispatch. nullptr when
// dot_rows would run dot_ref (isa::scalar, no SIMD version, or an ISA this CPU cannot run). The
// caller guarantees what dot_rows checks: n_rows in [1, 16] and act_stride < 2^27 bytes.
using dot_rows_fn = void (*)(const std::byte* w_row, const std::byte* act_rows, size_t act_stride,
                             int n_rows, int64_t n, float* out);
dot_rows_fn resolve_dot_rows(isa i, dtype wt);

// Column tiles: 8 weight rows (8 output columns of a matmul, k_tile_cols) against n_rows
// activation rows (1..k_tile_max_rows: each weight block is decoded once for all of them), one
// fp32 lane per column:
//   out[r * out_stride + c] = dot_ref(wt, w + c * w_stride, act_rows + r * act_stride, n)
// for c < 8 and r in [0, n_rows), bit for bit. dot_ref's per-block fold runs for 8 columns in
// one vector add, and the activation block's dx and sum are read once for the 8 columns
// (dot_tile_impl.h says why this is the fast form of a matmul). Arguments as dot_rows_fn, plus:
// w_stride: bytes from one weight row to the next; out_stride: floats from one output row to
// the next. Formats: the 32-wide ones (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) at both
// ISAs, and with AVX-512 VNNI the 256-wide ones (K-quants, IQ4_XS, the IQ2/IQ3 grids:
// dot_ktile_impl.h; windows of a few rows go column by column inside it); nullptr for the
// others, for isa::scalar and for an ISA this CPU cannot run.
inline constexpr int k_tile_cols = 8;
inline constexpr int k_tile_max_rows = 64;
using dot_tile_fn = void (*)(const std::byte* w, size_t w_stride, const std::byte* act_rows, size_t act_stride,
                             int n_rows, int64_t n, float* out, size_t out_stride);
dot_tile_fn resolve_dot_tile(isa i, dtype wt);

// The per-ISA kernel tables (dot_avx2.cpp, dot_avx512.cpp): nullptr for formats without a SIMD
// version. Arguments as dot_rows, already validated.
namespace detail {
dot_rows_fn avx2_kernel(dtype wt);
dot_rows_fn avx512_kernel(dtype wt);
dot_tile_fn avx2_tile(dtype wt);
dot_tile_fn avx512_tile(dtype wt);
}  // namespace detail

}  // namespace sluice::kernels
