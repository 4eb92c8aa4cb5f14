// C ABI over src/quant and src/kernels/cpu/dot_ref for the Python tests in tests/quant, which
// compare it with the gguf package's numpy (de)quantisation. Every function returns 0 on
// success and -1 on any error (an exception never crosses the C boundary).
#include "core/dtype.h"
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <cstddef>
#include <cstdint>
#include <exception>

namespace {

// Runs f, mapping any exception to -1. The type id must be a known dtype.
template <class F>
int guarded(uint32_t type, F&& f) {
    try {
        if (!sluice::find_dtype(type)) return -1;
        f(static_cast<sluice::dtype>(type));
        return 0;
    } catch (const std::exception&) {
        return -1;
    }
}

}  // namespace

extern "C" {

int sluice_dequantize(uint32_t type, const void* src, float* dst, int64_t n) {
    return guarded(type, [&](sluice::dtype t) {
        if (!sluice::quant::can_dequantize(t)) throw std::exception();
        sluice::quant::dequantize_row(t, static_cast<const std::byte*>(src), dst, n);
    });
}

int sluice_quantize(uint32_t type, const float* src, void* dst, int64_t n) {
    return guarded(type, [&](sluice::dtype t) {
        if (!sluice::quant::can_quantize(t)) throw std::exception();
        sluice::quant::quantize_row(t, src, static_cast<std::byte*>(dst), n);
    });
}

// Bytes of the activation row that a weight of `type` consumes, or -1.
int64_t sluice_act_row_bytes(uint32_t type, int64_t n) {
    int64_t r = -1;
    guarded(type, [&](sluice::dtype t) {
        r = static_cast<int64_t>(sluice::quant::act_row_bytes(sluice::quant::act_format_for(t), n));
    });
    return r;
}

int sluice_quantize_act(uint32_t type, const float* x, int64_t n, void* dst) {
    return guarded(type, [&](sluice::dtype t) {
        sluice::quant::quantize_act_row(sluice::quant::act_format_for(t), x, n, static_cast<std::byte*>(dst));
    });
}

int sluice_dot_ref(uint32_t type, const void* w_row, const void* act_row, int64_t n, float* out) {
    return guarded(type, [&](sluice::dtype t) {
        if (!sluice::kernels::has_dot(t) || n % sluice::info(t).block_elems != 0) throw std::exception();
        *out = sluice::kernels::dot_ref(t, static_cast<const std::byte*>(w_row),
                                        static_cast<const std::byte*>(act_row), n);
    });
}

}  // extern "C"
