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
// With several NUMA nodes a down job is one expert's columns (so that it reads one node's
// memory): 64 columns, 64 x 630 bytes of Q6_K = 40 KiB for Qwen3-30B-A3B (a 16-column job of
// one expert would be 10 KiB, one claim per ~1.5 us). A guess from the job sizes above, not
// measured: no machine here has two nodes.
constexpr int64_t k_numa_down_cols = 64;
constexpr int k_max_window = 16;   // rows one dot_rows call takes
// Rows one expert_columns call takes: a tile call's (each weight block decoded once for them).
// Measured 2026-12-02 on the 2-core AMD EPYC: a 16-row K-quant tile spent about a third of its
// time decoding and transposing blocks (perf, Q4_K).
constexpr int k_call_rows = kernels::k_tile_max_rows;

// dot_rows for one (ISA, format), its SIMD kernels resolved once per layer: the one-column
// kernel, and the 8-column tile where the format has one (the 32-wide formats: Q8_0, Q4_0,
// MXFP4, ...; with AVX-512 VNNI also the K-quants and I-quants: kernels/cpu/dot.h). Both give
// dot_ref's bits, so which one computes a column never changes it (E1, E2).
struct row_kernel {
    kernels::isa i;
    dtype t;
    size_t stride;   // activation row bytes
    kernels::dot_rows_fn f;
    kernels::dot_tile_fn tile;
    row_kernel(kernels::isa isa_, dtype t_, size_t stride_)
        : i(isa_), t(t_), stride(stride_), f(stride_ < (size_t{1} << 27) ? kernels::resolve_dot_rows(isa_, t_) : nullptr),
          tile(stride_ < (size_t{1} << 27) ? kernels::resolve_dot_tile(isa_, t_) : nullptr) {}
    void operator()(const std::byte* w, const std::byte* a, int nr, int64_t n, float* out) const {
        if (f) f(w, a, stride, nr, n, out);
        else kernels::dot_rows(i, t, w, a, stride, nr, n, out);
    }
};

// Expert e's rows of one of the bank's matrices: from the tensor (kernels::expert_slice's
// bytes), or from e's arena blob. Not a tensor_view: copying one copies its name, a std::string
// longer than the small-string buffer ("blk.0.ffn_gate_exps.weight"), a heap allocation per job.
struct expert_rows {
    const std::byte* data;
    uint64_t row_bytes;
    const std::byte* row(int64_t j) const { return data + static_cast<uint64_t>(j) * row_bytes; }
};

// Output columns [c0, c1) of w (n inputs) for the nr <= k_call_rows activation rows at act:
// out[r * os + (j - c0)] for row r and column j. Whole groups of 8 columns go through the tile
// kernel where the format has one, for all nr rows at once (one block of 8 weight rows decoded
// per activation block for every row instead of one row at a time; with the 32-wide formats
// that ran the expert pool's columns column by column at half the tile's speed), the rest
// column by column in windows of k_max_window rows.
void expert_columns(const row_kernel& k, const expert_rows& w, const std::byte* act, int nr, int64_t n, int64_t c0,
                    int64_t c1, float* out, size_t os) {
    int64_t j = c0;
    if (k.tile)
        for (; j + kernels::k_tile_cols <= c1; j += kernels::k_tile_cols)
            k.tile(w.row(j), w.row_bytes, act, k.stride, nr, n, out + (j - c0), os);
    float t[k_max_window];
    for (; j < c1; ++j)
        for (int r0 = 0; r0 < nr; r0 += k_max_window) {
            const int m = std::min(k_max_window, nr - r0);
            k(w.row(j), act + r0 * k.stride, m, n, t);
            for (int r = 0; r < m; ++r) out[static_cast<size_t>(r0 + r) * os + static_cast<size_t>(j - c0)] = t[r];
        }
}
expert_rows expert_matrix(const expert_bank& b, const tensor_view& w, uint64_t blob_offset, int64_t e) {
    const uint64_t rb = w.row_bytes();
    const uint64_t slice = rb * static_cast<uint64_t>(w.ne[1]);   // one expert's [n_in, n_out]
    return {b.blobs ? b.blobs + static_cast<uint64_t>(e) * b.blob_stride + blob_offset : w.data + static_cast<uint64_t>(e) * slice,
            rb};
}

// One run_experts call's jobs: what every job reads, resolved once per call. Both pool paths
// (one node, several) run these same three functions, so a column's bits do not depend on the
// path, the thread or the chunking (E2).
struct layer_jobs {
    const expert_bank& bank;
    expert_scratch& s;
    row_kernel kg, ku, kd;
    const std::byte* act_gate;   // [slots, rbg] sorted slots' activations for gate
    const std::byte* act_up;     // [slots, rbu] same for up (== act_gate when the formats agree)
    size_t rbg, rbu, rbd;        // activation row bytes: gate, up (n_embd), down (n_ff)
    quant::act_format fd;        // down's activation format
    int64_t E, F, K, n_rows, gate_chunks;
    const float* w;              // [n_rows, K] router weights (run_experts)
    float* out;                  // [n_rows, E] the combined rows (run_experts); null: no combine
    // run_expert_pairs: each slot's y goes to the row of its (row, rank) pair,
    // [n_rows * K, pair_stride]; null: to s.y by slot (run_experts, which combines from there).
    float* pair_y;
    int64_t pair_stride;

    // Gate/up job `job` = (active expert job / gate_chunks, chunk job % gate_chunks): the chunk's
    // gate and up columns for every row routed to the expert; the job that finishes the
    // expert's last chunk applies SwiGLU to its rows and requantises them for down.
    void gate_up(int64_t job) const {
        const int32_t u = static_cast<int32_t>(job / gate_chunks);
        const int64_t c0 = (job % gate_chunks) * k_gate_cols, c1 = std::min(F, c0 + k_gate_cols);
        const int64_t e = s.active[static_cast<size_t>(u)];
        const int32_t p0 = s.start[static_cast<size_t>(u)], p1 = s.start[static_cast<size_t>(u) + 1];
        const expert_rows wg = expert_matrix(bank, *bank.gate, bank.gate_offset, e),
                          wu = expert_matrix(bank, *bank.up, bank.up_offset, e);
        for (int32_t g = p0; g < p1; g += k_call_rows) {
            const int nr = std::min(k_call_rows, p1 - g);
            const size_t at = static_cast<size_t>(g) * static_cast<size_t>(F) + static_cast<size_t>(c0);
            expert_columns(kg, wg, act_gate + g * rbg, nr, E, c0, c1, s.gate.data() + at, static_cast<size_t>(F));
            expert_columns(ku, wu, act_up + g * rbu, nr, E, c0, c1, s.up.data() + at, static_cast<size_t>(F));
        }
        // acq_rel: the finisher sees every other chunk's columns of this expert.
        if (s.left[u].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        for (int32_t p = p0; p < p1; ++p) {
            float* h = s.gate.data() + static_cast<size_t>(p) * F;
            kernels::swiglu(h, s.up.data() + static_cast<size_t>(p) * F, h, F);
            quant::quantize_act_row(fd, h, F, s.act_down.data() + p * rbd);
        }
    }

    // Down columns [c0, c1) of active expert u for every row routed to it, into y.
    void down(int32_t u, int64_t c0, int64_t c1) const {
        const expert_rows wd = expert_matrix(bank, *bank.down, bank.down_offset, s.active[static_cast<size_t>(u)]);
        const int32_t p0 = s.start[static_cast<size_t>(u)], p1 = s.start[static_cast<size_t>(u) + 1];
        // The pair path's buffer holds k_max_window rows of a column chunk.
        const int window = pair_y ? k_max_window : k_call_rows;
        for (int32_t g = p0; g < p1; g += window) {
            const int nr = std::min(window, p1 - g);
            const std::byte* act = s.act_down.data() + g * rbd;
            if (!pair_y) {
                expert_columns(kd, wd, act, nr, F, c0, c1, s.y.data() + static_cast<size_t>(g) * static_cast<size_t>(E) + c0,
                               static_cast<size_t>(E));
                continue;
            }
            // Each slot's row goes to its (row, rank) pair's row: computed here, then scattered.
            float t[k_max_window * k_numa_down_cols];
            for (int64_t b = c0; b < c1; b += k_numa_down_cols) {
                const int64_t e = std::min(c1, b + k_numa_down_cols);
                expert_columns(kd, wd, act, nr, F, b, e, t, static_cast<size_t>(e - b));
                for (int r = 0; r < nr; ++r) {
                    float* y = pair_y + static_cast<int64_t>(s.sorted_row[static_cast<size_t>(g + r)]) * pair_stride;
                    for (int64_t j = b; j < e; ++j) y[j] = t[static_cast<size_t>(r) * static_cast<size_t>(e - b) + static_cast<size_t>(j - b)];
                }
            }
        }
    }

    // Output columns [c0, c1) of every row, in the router's rank order:
    // out = ((0 + w_0 * y_0) + w_1 * y_1) + ...
    void combine(int64_t c0, int64_t c1) const {
        if (!out) return;
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
};

// Runs job(j) once for every j in [0, begin[m]), m = pool.n_nodes(): node k's jobs are
// [begin[k], begin[k + 1]). A thread claims its home node's jobs first (thread_pool::home_node),
// one at a time from that
// node's counter (no lock), then the other nodes' in turn (k + 1, k + 2, ...), so it reads
// another node's memory only once its own node's work is all claimed, and the tail is one job.
// parallel_for_tid hands out one slot per thread; a thread that takes two, or none, changes
// only who runs a job, never what it computes.
template <class F>
void claim_by_node(thread_pool& pool, expert_scratch& s, const int64_t* begin, F&& job) {
    const int m = pool.n_nodes();
    // Relaxed: parallel_for publishes them (its job word is stored after, seq_cst).
    for (int k = 0; k < m; ++k) s.node_next[k].next.store(begin[k], std::memory_order_relaxed);
    pool.parallel_for_tid(pool.n_threads(), 1, [&](int tid, int64_t, int64_t) {
        const int home = pool.home_node(tid);
        for (int i = 0; i < m; ++i) {
            const int k = home + i < m ? home + i : home + i - m;
            const int64_t end = begin[k + 1];
            // Relaxed: the claim only has to be unique; results are published by the left /
            // down_left counters (acq_rel) and by parallel_for's completion count.
            for (int64_t j; (j = s.node_next[k].next.fetch_add(1, std::memory_order_relaxed)) < end;) job(j);
        }
    });
}

// The two phases with several nodes: every job touches one expert, and node k's threads take
// the jobs of node k's experts first (first_expert_of_node). Down is cut per (expert, columns),
// so the combine of a column chunk is done by the job that finishes its last expert.
void run_numa(thread_pool& pool, const layer_jobs& L, int32_t n_active) {
    expert_scratch& s = L.s;
    const int m = pool.n_nodes();
    int64_t* const begin = s.node_begin.data();
    // Node k's active experts are active[ua_k, ua_k+1): ids ascend, nodes own contiguous ranges.
    int32_t ua[k_max_numa_nodes + 1];
    for (int k = 0; k <= m; ++k) {
        const int32_t first = first_expert_of_node(s.n_expert, pool.threads_per_node(), k);
        ua[k] = static_cast<int32_t>(std::lower_bound(s.active.data(), s.active.data() + n_active, first) - s.active.data());
    }
    for (int k = 0; k <= m; ++k) begin[k] = ua[k] * L.gate_chunks;
    claim_by_node(pool, s, begin, [&](int64_t job) { L.gate_up(job); });

    const int64_t down_chunks = (L.E + k_numa_down_cols - 1) / k_numa_down_cols;
    for (int64_t c = 0; c < down_chunks; ++c) s.down_left[c].store(n_active, std::memory_order_relaxed);
    for (int k = 0; k <= m; ++k) begin[k] = ua[k] * down_chunks;
    claim_by_node(pool, s, begin, [&](int64_t job) {
        const int64_t c = job % down_chunks, c0 = c * k_numa_down_cols, c1 = std::min(L.E, c0 + k_numa_down_cols);
        L.down(static_cast<int32_t>(job / down_chunks), c0, c1);
        // acq_rel: the finisher of column chunk c sees every expert's y columns of it.
        if (s.down_left[c].fetch_sub(1, std::memory_order_acq_rel) == 1) L.combine(c0, c1);
    });
}

}  // namespace

int32_t first_expert_of_node(int32_t n_expert, std::span<const int> threads_per_node, int node) {
    int64_t before = 0, total = 0;
    for (size_t k = 0; k < threads_per_node.size(); ++k) {
        if (static_cast<int>(k) < node) before += threads_per_node[k];
        total += threads_per_node[k];
    }
    if (total <= 0) return node <= 0 ? 0 : n_expert;
    return static_cast<int32_t>(static_cast<int64_t>(n_expert) * before / total);
}

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
    s.node_next = std::make_unique<expert_scratch::node_counter[]>(k_max_numa_nodes);
    s.node_begin.resize(k_max_numa_nodes + 1);
    s.down_left = std::make_unique<std::atomic<int32_t>[]>((E + k_numa_down_cols - 1) / k_numa_down_cols);
    return s;
}

namespace {

// The work of one call, for run_experts (every pair, combined into out) and run_expert_pairs (the
// pairs with an id >= 0, each y to its own row of pair_y): the pairs sorted by expert, each row
// quantised once and copied to its pairs' slots, then the two phases. Returns the active experts.
int32_t run_pairs(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids, const float* w,
                  int64_t n_rows, expert_scratch& s, float* out, float* pair_y, int64_t pair_stride) {
    static const kernels::isa best = kernels::best_isa();
    const int64_t E = s.n_embd, F = s.n_ff, K = s.k_used, S = n_rows * K;

    // ---- plan: selected pairs sorted by expert (counting sort, stable: pairs ascending per
    // expert); sorted_row[slot] is the slot's pair index r * K + k, pos[pair] its slot ----
    std::fill(s.count.begin(), s.count.end(), 0);
    for (int64_t i = 0; i < S; ++i)
        if (ids[i] >= 0) ++s.count[static_cast<size_t>(ids[i])];
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
    if (n_active == 0) return 0;
    for (int64_t i = 0; i < S; ++i) {
        if (ids[i] < 0) continue;
        const int32_t p = s.count[static_cast<size_t>(ids[i])]++;
        s.sorted_row[static_cast<size_t>(p)] = static_cast<int32_t>(i);
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
        kernels::quantize_act_rows(pool, f, x, E, n_rows, s.act_x.data());
        kernels::for_rows(pool, acc, [&](int64_t p0, int64_t p1) {
            for (int64_t p = p0; p < p1; ++p)
                std::memcpy(dst + p * rb, s.act_x.data() + static_cast<size_t>(s.sorted_row[static_cast<size_t>(p)] / K) * rb,
                            rb);
        });
    }

    const int64_t gate_chunks = (F + k_gate_cols - 1) / k_gate_cols;
    const layer_jobs L{bank, s, row_kernel(best, bank.gate->type, rbg), row_kernel(best, bank.up->type, rbu),
                       row_kernel(best, bank.down->type, rbd), act_gate, act_up, rbg, rbu, rbd, fd, E, F, K, n_rows,
                       gate_chunks, w, out, pair_y, pair_stride};
    for (int32_t u = 0; u < n_active; ++u) s.left[u].store(static_cast<int32_t>(gate_chunks), std::memory_order_relaxed);

    // Several NUMA nodes: jobs per expert, claimed node by node (run_numa). One node, every
    // machine measured so far: the flat batches below, with nothing added for NUMA but this test.
    if (pool.n_nodes() > 1) {
        run_numa(pool, L, n_active);
        return n_active;
    }

    // ---- phase 1: gate and up rows; the expert's last job applies SwiGLU and requantises ----
    pool.parallel_for(n_active * gate_chunks, 1, [&](int64_t jb, int64_t je) {
        for (int64_t job = jb; job < je; ++job) L.gate_up(job);
    });

    // ---- phase 2: down rows of every active expert for a chunk of columns, then the combine ----
    const int64_t down_chunks = (E + k_down_cols - 1) / k_down_cols;
    pool.parallel_for(down_chunks, 1, [&](int64_t jb, int64_t je) {
        for (int64_t job = jb; job < je; ++job) {
            const int64_t c0 = job * k_down_cols, c1 = std::min(E, c0 + k_down_cols);
            for (int32_t u = 0; u < n_active; ++u) L.down(u, c0, c1);
            L.combine(c0, c1);
        }
    });
    return n_active;
}

}  // namespace

void run_experts(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids,
                 const float* w, int64_t n_rows, expert_scratch& s, float* out) {
    run_pairs(pool, bank, x, ids, w, n_rows, s, out, nullptr, 0);
}

int run_expert_pairs(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids, int64_t n_rows,
                     expert_scratch& s, float* y, int64_t y_stride) {
    if (n_rows > s.max_rows || y_stride < s.n_embd)
        fail("run_expert_pairs: {} rows (scratch for {}), y stride {} (expected >= {})", n_rows, s.max_rows, y_stride,
             s.n_embd);
    return run_pairs(pool, bank, x, ids, nullptr, n_rows, s, nullptr, y, y_stride);
}

}  // namespace sluice::moe
