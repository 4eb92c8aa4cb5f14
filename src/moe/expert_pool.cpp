// The CPU expert pool (expert_pool.h): dedup of the window's routed ids, then the gate/up phase
// (with SwiGLU and requantisation done by the job that finishes each expert) and the down phase
// (with the rank-order combine of its columns), each one parallel_for of lock-free chunks.
#include "moe/expert_pool.h"

#include "core/error.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/ops.h"
#include "quant/act.h"

#include <algorithm>
#include <cstring>

namespace sluice::moe {

namespace {

// Columns per job. Gate/up: 32 rows of gate and 32 of up per job, for every row routed to the
// expert (Qwen3-30B-A3B: 2 x 32 x 1,152 bytes of Q4_K = 72 KiB, ~10 us at 7 GB/s; 24 jobs per
// expert). Down: 16 output columns of every active expert per job (2,048 / 16 = 128 jobs).
constexpr int64_t k_gate_cols = 32;
constexpr int64_t k_down_cols = 16;
constexpr int k_max_window = 16;   // rows one dot_rows call takes

// dot_rows for one (ISA, format), its SIMD kernel resolved once per layer.
struct row_kernel {
    kernels::isa i;
    dtype t;
    size_t stride;
    kernels::dot_rows_fn f;
    row_kernel(kernels::isa isa_, dtype t_, size_t stride_)
        : i(isa_), t(t_), stride(stride_), f(stride_ < (size_t{1} << 27) ? kernels::resolve_dot_rows(isa_, t_) : nullptr) {}
    void operator()(const std::byte* w, const std::byte* a, int nr, int64_t n, float* out) const {
        if (f) f(w, a, stride, nr, n, out);
        else kernels::dot_rows(i, t, w, a, stride, nr, n, out);
    }
};

// Expert e's slice of one of the bank's matrices: from the tensor, or from e's arena blob.
tensor_view expert_matrix(const expert_bank& b, const tensor_view& w, uint64_t blob_offset, int64_t e) {
    tensor_view s = kernels::expert_slice(w, e);
    if (b.blobs) s.data = b.blobs + static_cast<uint64_t>(e) * b.blob_stride + blob_offset;
    return s;
}

}  // namespace

expert_scratch make_expert_scratch(int max_rows, int k_used, int n_expert, int64_t n_embd, int64_t n_ff) {
    if (max_rows < 1 || k_used < 1 || n_expert < k_used || n_embd < 1 || n_ff < 1)
        fail("expert_scratch: expected max_rows >= 1, 1 <= k_used <= n_expert, n_embd, n_ff >= 1; got {}, {}, {}, {}, {}",
             max_rows, k_used, n_expert, n_embd, n_ff);
    expert_scratch s;
    s.max_rows = max_rows;
    s.k_used = k_used;
    s.n_expert = n_expert;
    s.n_embd = n_embd;
    s.n_ff = n_ff;
    const size_t S = static_cast<size_t>(max_rows) * static_cast<size_t>(k_used);
    const size_t U = std::min(S, static_cast<size_t>(n_expert));
    const size_t E = static_cast<size_t>(n_embd), F = static_cast<size_t>(n_ff);
    s.count.resize(static_cast<size_t>(n_expert));
    s.active.resize(U);
    s.start.resize(U + 1);
    s.sorted_row.resize(S);
    s.pos.resize(S);
    s.act_x.resize(static_cast<size_t>(max_rows) * 4 * E);
    s.act_gate.resize(S * 4 * E);
    s.act_up.resize(S * 4 * E);
    s.act_down.resize(S * 4 * F);
    s.gate.resize(S * F);
    s.up.resize(S * F);
    s.y.resize(S * E);
    s.left = std::make_unique<std::atomic<int32_t>[]>(U);
    return s;
}

void run_experts(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids,
                 const float* w, int64_t n_rows, expert_scratch& s, float* out) {
    static const kernels::isa best = kernels::best_isa();
    const int64_t E = s.n_embd, F = s.n_ff, K = s.k_used, S = n_rows * K;

    // ---- plan: slots sorted by expert (counting sort, stable: rows ascending per expert) ----
    std::fill(s.count.begin(), s.count.end(), 0);
    for (int64_t i = 0; i < S; ++i) ++s.count[static_cast<size_t>(ids[i])];
    int32_t n_active = 0, acc = 0;
    for (int32_t e = 0; e < s.n_expert; ++e) {
        const int32_t c = s.count[static_cast<size_t>(e)];
        if (c == 0) continue;
        s.active[static_cast<size_t>(n_active)] = e;
        s.start[static_cast<size_t>(n_active)] = acc;
        s.count[static_cast<size_t>(e)] = acc;   // from here on: the expert's next free slot
        acc += c;
        ++n_active;
    }
    s.start[static_cast<size_t>(n_active)] = acc;
    for (int64_t i = 0; i < S; ++i) {
        const int32_t p = s.count[static_cast<size_t>(ids[i])]++;
        s.sorted_row[static_cast<size_t>(p)] = static_cast<int32_t>(i / K);
        s.pos[static_cast<size_t>(i)] = p;
    }

    // ---- activations: each row quantised once, copied to its slots (gate's and up's formats) ----
    const auto fg = quant::act_format_for(bank.gate->type), fu = quant::act_format_for(bank.up->type);
    const auto fd = quant::act_format_for(bank.down->type);
    const size_t rbg = quant::act_row_bytes(fg, E), rbu = quant::act_row_bytes(fu, E), rbd = quant::act_row_bytes(fd, F);
    const bool same_gu = fg == fu;
    std::byte* const act_gate = s.act_gate.data();
    std::byte* const act_up = same_gu ? act_gate : s.act_up.data();
    for (int pass = 0; pass < (same_gu ? 1 : 2); ++pass) {
        const auto f = pass == 0 ? fg : fu;
        const size_t rb = pass == 0 ? rbg : rbu;
        std::byte* dst = pass == 0 ? act_gate : act_up;
        for (int64_t r = 0; r < n_rows; ++r) quant::quantize_act_row(f, x + r * E, E, s.act_x.data() + r * rb);
        for (int64_t p = 0; p < S; ++p)
            std::memcpy(dst + p * rb, s.act_x.data() + static_cast<size_t>(s.sorted_row[static_cast<size_t>(p)]) * rb, rb);
    }

    const row_kernel kg(best, bank.gate->type, rbg), ku(best, bank.up->type, rbu), kd(best, bank.down->type, rbd);

    // ---- phase 1: gate and up rows; the expert's last job applies SwiGLU and requantises ----
    const int64_t gate_chunks = (F + k_gate_cols - 1) / k_gate_cols;
    for (int32_t u = 0; u < n_active; ++u) s.left[u].store(static_cast<int32_t>(gate_chunks), std::memory_order_relaxed);
    pool.parallel_for(n_active * gate_chunks, 1, [&](int64_t jb, int64_t je) {
        float tg[k_max_window], tu[k_max_window];
        for (int64_t job = jb; job < je; ++job) {
            const int32_t u = static_cast<int32_t>(job / gate_chunks);
            const int64_t c0 = (job % gate_chunks) * k_gate_cols, c1 = std::min(F, c0 + k_gate_cols);
            const int64_t e = s.active[static_cast<size_t>(u)];
            const int32_t p0 = s.start[static_cast<size_t>(u)], p1 = s.start[static_cast<size_t>(u) + 1];
            const tensor_view wg = expert_matrix(bank, *bank.gate, bank.gate_offset, e),
                              wu = expert_matrix(bank, *bank.up, bank.up_offset, e);
            for (int64_t j = c0; j < c1; ++j) {
                const std::byte* rg = wg.row(j);
                const std::byte* ru = wu.row(j);
                for (int32_t g = p0; g < p1; g += k_max_window) {
                    const int nr = std::min(k_max_window, p1 - g);
                    kg(rg, act_gate + g * rbg, nr, E, tg);
                    ku(ru, act_up + g * rbu, nr, E, tu);
                    for (int r = 0; r < nr; ++r) {
                        s.gate[static_cast<size_t>((g + r) * F + j)] = tg[r];
                        s.up[static_cast<size_t>((g + r) * F + j)] = tu[r];
                    }
                }
            }
            // acq_rel: the finisher sees every other chunk's columns of this expert.
            if (s.left[u].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
            for (int32_t p = p0; p < p1; ++p) {
                float* h = s.gate.data() + static_cast<size_t>(p) * F;
                kernels::swiglu(h, s.up.data() + static_cast<size_t>(p) * F, h, F);
                quant::quantize_act_row(fd, h, F, s.act_down.data() + p * rbd);
            }
        }
    });

    // ---- phase 2: down rows of every active expert for a chunk of columns, then the combine ----
    const int64_t down_chunks = (E + k_down_cols - 1) / k_down_cols;
    pool.parallel_for(down_chunks, 1, [&](int64_t jb, int64_t je) {
        float t[k_max_window];
        for (int64_t job = jb; job < je; ++job) {
            const int64_t c0 = job * k_down_cols, c1 = std::min(E, c0 + k_down_cols);
            for (int32_t u = 0; u < n_active; ++u) {
                const tensor_view wd = expert_matrix(bank, *bank.down, bank.down_offset, s.active[static_cast<size_t>(u)]);
                const int32_t p0 = s.start[static_cast<size_t>(u)], p1 = s.start[static_cast<size_t>(u) + 1];
                for (int64_t j = c0; j < c1; ++j) {
                    const std::byte* rd = wd.row(j);
                    for (int32_t g = p0; g < p1; g += k_max_window) {
                        const int nr = std::min(k_max_window, p1 - g);
                        kd(rd, s.act_down.data() + g * rbd, nr, F, t);
                        for (int r = 0; r < nr; ++r) s.y[static_cast<size_t>((g + r) * E + j)] = t[r];
                    }
                }
            }
            // Combine in the router's rank order: out = ((0 + w_0 * y_0) + w_1 * y_1) + ...
            for (int64_t r = 0; r < n_rows; ++r) {
                float* o = out + r * E;
                for (int64_t j = c0; j < c1; ++j) o[j] = 0.0f;
                for (int64_t k = 0; k < K; ++k) {
                    const float we = w[r * K + k];
                    const float* y = s.y.data() + static_cast<size_t>(s.pos[static_cast<size_t>(r * K + k)]) * E;
                    for (int64_t j = c0; j < c1; ++j) o[j] = o[j] + we * y[j];
                }
            }
        }
    });
}

}  // namespace sluice::moe
