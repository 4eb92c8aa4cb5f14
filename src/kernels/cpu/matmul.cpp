// Matrix products through the canonical dot products of dot_ref (E3), row-exact (E1) and split
// over output columns (E2).
#include "kernels/cpu/ops.h"
#include "core/error.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/quant.h"

namespace sluice::kernels {

size_t matmul_act_bytes(const tensor_view& w, int64_t n_rows) {
    return quant::act_row_bytes(quant::act_format_for(w.type), w.ne[0]) * static_cast<size_t>(n_rows);
}

void quantize_act_rows(thread_pool& pool, quant::act_format f, const float* x, int64_t n_in, int64_t n_rows,
                       std::byte* act) {
    const size_t row_bytes = quant::act_row_bytes(f, n_in);
    for_rows(pool, n_rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) quant::quantize_act_row(f, x + r * n_in, n_in, act + r * row_bytes);
    });
}

void prepare_act(const tensor_view& w, const float* x, int64_t n_rows, std::byte* act) {
    const auto f = quant::act_format_for(w.type);
    const size_t row_bytes = quant::act_row_bytes(f, w.ne[0]);
    for (int64_t r = 0; r < n_rows; ++r) quant::quantize_act_row(f, x + r * w.ne[0], w.ne[0], act + r * row_bytes);
}

void prepare_act(thread_pool& pool, const tensor_view& w, const float* x, int64_t n_rows, std::byte* act) {
    quantize_act_rows(pool, quant::act_format_for(w.type), x, w.ne[0], n_rows, act);
}

namespace {

// One matrix of a matmul, its kernels resolved once per call: the work is cut into units of
// k_tile_cols output columns (one column-tile call each where the format has a tile kernel; a
// last partial unit, and formats without one, go column by column through dot_rows). Every
// output is dot_ref's bits whichever path computes it, so the cut never changes a bit.
struct matmul_plan {
    const tensor_view* w = nullptr;
    float* y = nullptr;              // [n_rows, n_out]
    int64_t n_in = 0, n_out = 0;
    size_t row_bytes = 0;            // one prepared activation row
    size_t w_stride = 0;             // one weight row
    dot_rows_fn rows = nullptr;      // nullptr: dot_rows (dot_ref row by row)
    dot_tile_fn tile = nullptr;      // nullptr: column by column
    isa best = isa::scalar;

    matmul_plan(const tensor_view& w_, float* y_) : w(&w_), y(y_), n_in(w_.ne[0]), n_out(w_.ne[1]) {
        static const isa best_of_cpu = best_isa();
        best = best_of_cpu;
        row_bytes = quant::act_row_bytes(quant::act_format_for(w_.type), n_in);
        w_stride = w_.row_bytes();
        // The kernels gather with int32 offsets: rows 2^27 bytes apart are far beyond any model.
        const bool stride_ok = row_bytes < (size_t{1} << 27);
        rows = stride_ok ? resolve_dot_rows(best, w_.type) : nullptr;
        tile = stride_ok ? resolve_dot_tile(best, w_.type) : nullptr;
    }
    int64_t units() const { return (n_out + k_tile_cols - 1) / k_tile_cols; }

    // Output columns [jb, je) for every activation row, 16 rows per kernel call.
    void columns(const std::byte* act, int64_t n_rows, int64_t jb, int64_t je) const {
        float tmp[16];
        for (int64_t j = jb; j < je; ++j) {
            const std::byte* wr = w->data + static_cast<uint64_t>(j) * w_stride;
            for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
                const int nr = static_cast<int>(n_rows - r0 < 16 ? n_rows - r0 : 16);
                if (rows) rows(wr, act + r0 * row_bytes, row_bytes, nr, n_in, tmp);
                else dot_rows(best, w->type, wr, act + r0 * row_bytes, row_bytes, nr, n_in, tmp);
                for (int r = 0; r < nr; ++r) y[(r0 + r) * n_out + j] = tmp[r];
            }
        }
    }
    // Units [ub, ue).
    void run(const std::byte* act, int64_t n_rows, int64_t ub, int64_t ue) const {
        const int64_t jb = ub * k_tile_cols, je = ue * k_tile_cols < n_out ? ue * k_tile_cols : n_out;
        if (!tile) {
            columns(act, n_rows, jb, je);
            return;
        }
        int64_t j = jb;
        for (; j + k_tile_cols <= je; j += k_tile_cols)
            for (int64_t r0 = 0; r0 < n_rows; r0 += k_tile_max_rows) {
                const int nr = static_cast<int>(n_rows - r0 < k_tile_max_rows ? n_rows - r0 : k_tile_max_rows);
                tile(w->data + static_cast<uint64_t>(j) * w_stride, w_stride, act + r0 * row_bytes, row_bytes, nr, n_in,
                     y + r0 * n_out + j, static_cast<size_t>(n_out));
            }
        columns(act, n_rows, j, je);
    }
};

}  // namespace

void matmul_prepared(thread_pool& pool, const tensor_view& w, const std::byte* act, int64_t n_rows,
                     float* y) {
    const matmul_plan p(w, y);
    pool.parallel_for(p.units(), [&](int64_t b, int64_t e) { p.run(act, n_rows, b, e); });
}

void matmul_prepared_many(thread_pool& pool, std::span<const matmul_out> outs, const std::byte* act,
                          int64_t n_rows) {
    constexpr size_t k_max = 4;
    if (outs.empty()) return;
    if (outs.size() > k_max) fail("matmul_prepared_many: {} matrices: expected at most {}", outs.size(), k_max);
    const auto f = quant::act_format_for(outs[0].w->type);
    for (const matmul_out& o : outs)
        if (quant::act_format_for(o.w->type) != f || o.w->ne[0] != outs[0].w->ne[0])
            fail("matmul_prepared_many: tensor '{}' does not take the activation rows of '{}'", o.w->name,
                 outs[0].w->name);
    // The matrices' units end to end: one parallel_for, one barrier for all of them.
    const matmul_plan p[k_max] = {matmul_plan(*outs[0].w, outs[0].y),
                                  outs.size() > 1 ? matmul_plan(*outs[1].w, outs[1].y) : matmul_plan(*outs[0].w, nullptr),
                                  outs.size() > 2 ? matmul_plan(*outs[2].w, outs[2].y) : matmul_plan(*outs[0].w, nullptr),
                                  outs.size() > 3 ? matmul_plan(*outs[3].w, outs[3].y) : matmul_plan(*outs[0].w, nullptr)};
    int64_t end[k_max] = {};
    int64_t total = 0;
    for (size_t i = 0; i < outs.size(); ++i) end[i] = total += p[i].units();
    const size_t n = outs.size();
    pool.parallel_for(total, [&](int64_t b, int64_t e) {
        int64_t base = 0;
        for (size_t i = 0; i < n && b < e; base = end[i], ++i) {
            if (b >= end[i]) continue;
            const int64_t ue = e < end[i] ? e : end[i];
            p[i].run(act, n_rows, b - base, ue - base);
            b = ue;
        }
    });
}

void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n_rows, float* y,
            std::byte* act) {
    prepare_act(pool, w, x, n_rows, act);
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
