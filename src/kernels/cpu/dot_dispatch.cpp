// Run-time choice of dot.h kernels: the ISA tables of dot_avx2.cpp / dot_avx512.cpp, and the
// explicit scalar fallback (dot_ref row by row) for isa::scalar and formats without SIMD code.
#include "kernels/cpu/dot.h"

#include <cpuid.h>

#include "core/error.h"
#include "kernels/cpu/dot_ref.h"

namespace sluice::kernels {

std::string_view name(isa i) {
    switch (i) {
    case isa::scalar: return "scalar";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    }
    return "?";
}

bool cpu_supports(isa i) {
    // Computed once: __builtin_cpu_supports reads cpuid data that cannot change.
    // F16C from cpuid leaf 1 (ecx bit 29): clang 14's __builtin_cpu_supports has no "f16c".
    static const bool f16c = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
    }();
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    switch (i) {
    case isa::scalar: return true;
    case isa::avx2: return avx2;
    case isa::avx512: return avx512;
    }
    return false;
}

isa best_isa() {
    if (cpu_supports(isa::avx512)) return isa::avx512;
    if (cpu_supports(isa::avx2)) return isa::avx2;
    return isa::scalar;
}

namespace {

dot_rows_fn table_for(isa i, dtype wt) {
    switch (i) {
    case isa::avx2: return detail::avx2_kernel(wt);
    case isa::avx512: return detail::avx512_kernel(wt);
    case isa::scalar: return nullptr;
    }
    return nullptr;
}

}  // namespace

bool has_simd(isa i, dtype wt) { return table_for(i, wt) != nullptr; }

dot_rows_fn resolve_dot_rows(isa i, dtype wt) { return cpu_supports(i) ? table_for(i, wt) : nullptr; }

dot_tile_fn resolve_dot_tile(isa i, dtype wt) {
    if (!cpu_supports(i)) return nullptr;
    switch (i) {
    case isa::avx2: return detail::avx2_tile(wt);
    case isa::avx512: return detail::avx512_tile(wt);
    case isa::scalar: return nullptr;
    }
    return nullptr;
}

void dot_rows(isa i, dtype wt, const std::byte* w_row, const std::byte* act_rows, size_t act_stride,
              int n_rows, int64_t n, float* out) {
    if (n_rows < 1 || n_rows > 16) fail("dot_rows: n_rows: expected 1..16, got {}", n_rows);
    if (!has_dot(wt)) fail("dot_rows: weight format {} has no dot product", name(wt));
    if (!cpu_supports(i)) fail("dot_rows: this CPU cannot run {} kernels", name(i));
    // The window kernels gather each row's dx with int32 offsets (r * act_stride, r < 16).
    const bool stride_ok = act_stride < (size_t{1} << 27);
    if (const dot_rows_fn f = stride_ok ? table_for(i, wt) : nullptr) {
        f(w_row, act_rows, act_stride, n_rows, n, out);
        return;
    }
    // No SIMD version (has_simd says so; or rows 128 MiB apart): the definition, row by row.
    for (int r = 0; r < n_rows; ++r) out[r] = dot_ref(wt, w_row, act_rows + r * act_stride, n);
}

}  // namespace sluice::kernels
