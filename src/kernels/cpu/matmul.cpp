// Matrix products through the canonical dot products of dot_ref (E3), row-exact (E1) and split
// over output columns (E2).
#include "kernels/cpu/ops.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/quant.h"

namespace sluice::kernels {

size_t matmul_act_bytes(const tensor_view& w, int64_t n_rows) {
    return quant::act_row_bytes(quant::act_format_for(w.type), w.ne[0]) * static_cast<size_t>(n_rows);
}

void prepare_act(const tensor_view& w, const float* x, int64_t n_rows, std::byte* act) {
    const auto f = quant::act_format_for(w.type);
    const int64_t n_in = w.ne[0];
    const size_t row_bytes = quant::act_row_bytes(f, n_in);
    for (int64_t r = 0; r < n_rows; ++r) quant::quantize_act_row(f, x + r * n_in, n_in, act + r * row_bytes);
}

void matmul_prepared(thread_pool& pool, const tensor_view& w, const std::byte* act, int64_t n_rows,
                     float* y) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1];
    const size_t row_bytes = quant::act_row_bytes(quant::act_format_for(w.type), n_in);
    // dot_rows returns dot_ref's bits for up to 16 rows per weight row, decoding each weight
    // block once (SIMD where this CPU and format have a kernel, dot_ref otherwise).
    // The kernel is resolved once per call, not per row (the per-row checks cost ~3% of decode).
    static const isa best = best_isa();
    const dot_rows_fn simd = row_bytes < (size_t{1} << 27) ? resolve_dot_rows(best, w.type) : nullptr;
    pool.parallel_for(n_out, [&](int64_t b, int64_t e) {
        float tmp[16];
        for (int64_t j = b; j < e; ++j) {
            const std::byte* wr = w.row(j);
            for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
                const int nr = static_cast<int>(n_rows - r0 < 16 ? n_rows - r0 : 16);
                if (simd) simd(wr, act + r0 * row_bytes, row_bytes, nr, n_in, tmp);
                else dot_rows(best, w.type, wr, act + r0 * row_bytes, row_bytes, nr, n_in, tmp);
                for (int r = 0; r < nr; ++r) y[(r0 + r) * n_out + j] = tmp[r];
            }
        }
    });
}

void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n_rows, float* y,
            std::byte* act) {
    prepare_act(w, x, n_rows, act);
    matmul_prepared(pool, w, act, n_rows, y);
}

tensor_view expert_slice(const tensor_view& w, int64_t e) {
    tensor_view s = w;
    s.n_dims = 2;
    s.ne = {w.ne[0], w.ne[1], 1, 1};
    s.nbytes = w.row_bytes() * static_cast<uint64_t>(w.ne[1]);
    s.data = w.data + static_cast<uint64_t>(e) * s.nbytes;
    return s;
}

void get_row(const tensor_view& w, int64_t row, float* out) {
    quant::dequantize_row(w.type, w.row(row), out, w.ne[0]);
}

}  // namespace sluice::kernels
