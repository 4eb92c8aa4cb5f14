#include "io/hf_convert.h"

#include "core/error.h"
#include "core/half.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace sluice {
namespace {

// _reorder_v_heads: index (k, j, d) of the grouped order [n_k, r, hd] goes to (j, k, d) of the
// tiled order [r, n_k, hd]; returns the source index of tiled index i.
int64_t grouped_of_tiled(int64_t i, int64_t n_k, int64_t r, int64_t hd) {
    const int64_t d = i % hd, jk = i / hd, k = jk % n_k, j = jk / n_k;
    return (k * r + j) * hd + d;
}

float apply(hf_float_op op, float x) {
    // torch: -torch.exp(x) and x + 1 on the tensor, each rounded to its dtype.
    return op == hf_float_op::neg_exp ? -std::exp(x) : x + 1.0f;
}

void float_op_in_place(hf_float_op op, dtype type, std::byte* p, uint64_t n, const safetensors_tensor& st,
                       std::string_view where) {
    switch (type) {
        case dtype::f32:
            for (uint64_t i = 0; i < n; ++i) {
                float x;
                std::memcpy(&x, p + 4 * i, 4);
                x = apply(op, x);
                std::memcpy(p + 4 * i, &x, 4);
            }
            return;
        case dtype::f16:
        case dtype::bf16:
            for (uint64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                const float x = apply(op, type == dtype::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h));
                h = type == dtype::f16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
                std::memcpy(p + 2 * i, &h, 2);
            }
            return;
        default:
            fail("safetensors: {}: tensor '{}': dtype {} cannot take the converter's float step (F32, F16 or BF16)",
                 where, st.name, st.dtype_name);
    }
}

}  // namespace

void convert_hybrid_tensor(const hf_target& t, const hf_config& c, const safetensors_tensor& st, const std::byte* src,
                           std::byte* dst, std::string_view where) {
    const int64_t rows = st.shape.empty() ? 1 : st.shape[0];
    const uint64_t eb = st.elem_bytes, n = eb ? st.nbytes / eb : 0;
    const uint64_t row_bytes = rows > 0 ? st.nbytes / static_cast<uint64_t>(rows) : 0;
    const int64_t n_k = c.linear_k_heads, r = n_k > 0 ? c.linear_v_heads / n_k : 0, hd = t.head_dim;
    if (t.reorder == hf_reorder::v_rows) {
        const int64_t first = t.qk_rows_first ? 2 * n_k * c.linear_k_dim : 0;
        if (rows - first != n_k * r * hd)
            fail("safetensors: {}: tensor '{}': {} rows, expected {} + {} value heads x {}", where, st.name, rows, first,
                 n_k * r, hd);
        std::memcpy(dst, src, static_cast<uint64_t>(first) * row_bytes);
        for (int64_t i = 0; i < n_k * r * hd; ++i)
            std::memcpy(dst + uint64_t(first + i) * row_bytes,
                        src + uint64_t(first + grouped_of_tiled(i, n_k, r, hd)) * row_bytes, row_bytes);
    } else if (t.reorder == hf_reorder::v_cols) {
        const int64_t cols = row_bytes / eb;
        if (cols != n_k * r * hd)
            fail("safetensors: {}: tensor '{}': {} columns, expected {} value heads x {}", where, st.name, cols, n_k * r,
                 hd);
        for (int64_t y = 0; y < rows; ++y)
            for (int64_t i = 0; i < cols; ++i)
                std::memcpy(dst + uint64_t(y) * row_bytes + uint64_t(i) * eb,
                            src + uint64_t(y) * row_bytes + uint64_t(grouped_of_tiled(i, n_k, r, hd)) * eb, eb);
    } else {
        std::memcpy(dst, src, st.nbytes);
    }
    if (t.op != hf_float_op::none) {
        if (!st.type) fail("safetensors: {}: tensor '{}': dtype {} has no GGML type", where, st.name, st.dtype_name);
        float_op_in_place(t.op, *st.type, dst, n, st, where);
    }
}

}  // namespace sluice
