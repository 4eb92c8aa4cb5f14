// AVX-512 (F, BW, VL, VNNI) kernels of dot.h: dot_simd_impl.h with VNNI on 256-bit vectors for
// 256-wide blocks (vpmaddubsw + vpdpwssd; see kblock_sumi for why not 512-bit), vpdpbusd for
// 32-wide blocks and one zmm of 16 fp32 lanes for float rows; the column tiles of
// dot_tile_impl.h (with its vpdpbusd form for windows), and of dot_ktile_impl.h for 256-wide
// blocks (vpdpbusd, this ISA only). Called only when the CPU reports all four extensions
// (dot_dispatch.cpp).
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
// GCC 12 warns about the deliberately undefined vectors inside its own AVX-512 intrinsic headers
// (_mm512_undefined_*): a known false positive, silenced for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define SLUICE_DOT_WIDE 1
// clang ignores GCC's target pragma: give every function in the kernels the target attribute.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#endif
#include "kernels/cpu/dot_simd_impl.h"
#include "kernels/cpu/dot_tile_impl.h"
#include "kernels/cpu/dot_ktile_impl.h"
#undef SLUICE_DOT_WIDE

namespace sluice::kernels::detail {
dot_rows_fn avx512_kernel(dtype wt) { return kernel_for(wt); }
dot_tile_fn avx512_tile(dtype wt) {
    const dot_tile_fn f = tile_for(wt);
    return f ? f : ktile_for(wt);
}
}  // namespace sluice::kernels::detail
#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
