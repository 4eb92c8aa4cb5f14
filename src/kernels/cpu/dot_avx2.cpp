// AVX2 (+FMA, F16C) kernels of dot.h: the shared code of dot_simd_impl.h compiled for this
// target only, so the rest of libsluice stays baseline x86-64; dot_dispatch.cpp calls them only
// when the CPU reports AVX2, FMA and F16C.
#include "kernels/cpu/dot.h"

#include "quant/act.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define SLUICE_DOT_WIDE 0
// clang ignores GCC's target pragma: give every function in the kernels the target attribute.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif
#include "kernels/cpu/dot_simd_impl.h"
#include "kernels/cpu/dot_tile_impl.h"
#undef SLUICE_DOT_WIDE

namespace sluice::kernels::detail {
dot_rows_fn avx2_kernel(dtype wt) { return kernel_for(wt); }
dot_tile_fn avx2_tile(dtype wt) { return tile_for(wt); }
}  // namespace sluice::kernels::detail
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
