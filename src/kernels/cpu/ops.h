// Reference CPU ops for the forward pass: plainly correct, deterministic, row-exact.
//  - E1: every op computes a row of its output from that row's inputs alone, with the same code
//    whatever the number of rows in the window (no split-K that depends on the row count).
//  - E2: ops that take a thread_pool split OUTPUT elements (columns, heads) between threads,
//    never a reduction, so the thread count never changes a bit.
// Shapes are written [outer, inner] with the inner dimension contiguous. Families live in
// norm.cpp, rope.cpp, attention.cpp and matmul.cpp.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::quant {
enum class act_format : uint8_t;   // quant/act.h
}

namespace sluice::kernels {

// ---- reductions in one fixed order -------------------------------------------------------
// sum_i a[i]*b[i] in the canonical float order of dot_ref.h: 16 lanes, lane l accumulates
// fmaf(a[i], b[i], acc[l]) for i % 16 == l in index order, then pairwise folds (8, 4, 2, 1).
// SIMD where the CPU has AVX2 or AVX-512 (the F32 kernel of dot_rows), else the scalar
// definition dot_f32_lanes_ref; the same bits.
float dot_f32_lanes(const float* a, const float* b, int64_t n);
float dot_f32_lanes_ref(const float* a, const float* b, int64_t n);

// Row-wise work over n rows (norms, RoPE, activation quantisation, SwiGLU, residual adds):
// fn(r0, r1) on chunks of rows from the pool when there are at least k_rows_parallel_min rows,
// else fn(0, n) on the calling thread. Every row is computed by the same code whichever thread
// takes it, so the split never changes a bit (E2). An empty parallel_for took 1.0-1.3 us at 2
// threads and 3.1-4.4 us at 16 (bench_pool); one row of a norm took ~2.4 us there (SmolLM2's
// 576), when its sum of squares still called libm's fmaf per element (session 29: 1.65 ->
// 0.12 us on the 2-core EPYC with the SIMD dot; the 16-core figure and this threshold are not
// re-measured since). At 16 rows (the old threshold) a verify window of 8 rows ran its
// row-wise work on one thread while 15 waited: SmolLM2-135M at 16 threads, depth 256, the
// window's forward took 9.40 ms, its two norms, RoPE and SwiGLU ~80 us a layer; split from 2
// rows on, 6.56 ms and ~24 us (the H200 host, session 26, bench/RESULTS.md). A 2-row window
// gained nothing there (its rows' work is about one parallel_for's cost), so 2-3 rows stay on
// the calling thread.
inline constexpr int64_t k_rows_parallel_min = 4;
template <class F>
void for_rows(thread_pool& pool, int64_t n, F&& fn) {
    if (n < k_rows_parallel_min || pool.n_threads() == 1) {
        fn(int64_t{0}, n);
        return;
    }
    pool.parallel_for(n, fn);
}

// ---- norm.cpp ------------------------------------------------------------------------------
// out[i] = (x[i] * (1 / sqrt(mean(x^2) + eps))) * w[i]; the sum of squares is dot_f32_lanes(x, x).
// x, out: [n] (may alias); w: [n], or nullptr for no weight.
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);
// In place: x[i] = exp(x[i] - max) / sum, the sum taken in index order. x: [n], n >= 1.
void softmax(float* x, int64_t n);
// out[i] = silu(gate[i]) * up[i]. All [n]; out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// y[i] += b[i]. [n].
void add(float* y, const float* b, int64_t n);
// The index of the largest of x[0..n), NaN counting as -inf, ties (+0 and -0 are equal) going to
// the lowest index; 0 when every value is NaN or -inf. n >= 1. The greedy pick of the keyed
// sampler: on the GPU machine's host the scalar scan of a 151,936-entry row took 150-700 us a
// token, 3-14% of a GPU decode step (bench/gpu/step_overhead, decode_bench).
int64_t argmax_first(const float* x, int64_t n);
// argmax_first's definition: one strict '>' scan (the SIMD form must give its index).
int64_t argmax_first_ref(const float* x, int64_t n);

// ---- rope.cpp ------------------------------------------------------------------------------
enum class rope_mode : uint8_t {
    normal,  // rotates adjacent pairs (x[2i], x[2i+1]): llama (its converter permutes q/k for it)
    neox,    // rotates (x[i], x[i + n_rot/2]): qwen2, qwen3, qwen3moe
};

// RoPE with llama.cpp's YaRN. theta_i = pos * freq_base^(-2i/n_rot), interpolated by
// freq_scale (= 1/factor) on the dimensions below the YaRN correction range and extrapolated
// above it, with a linear ramp between; when ext_factor != 0 the sin/cos are scaled by
// attn_factor * (1 + 0.1 ln(1/freq_scale)).
struct rope_params {
    rope_mode mode = rope_mode::normal;
    int n_rot = 0;              // rotated dimensions per head (even, <= head_dim)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;    // 1 / scaling factor (linear and YaRN scaling)
    float ext_factor = 0.0f;    // YaRN extrapolation mix: 1 for YaRN, 0 otherwise
    float attn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    int n_ctx_orig = 0;         // the training context the scaling extends (YaRN only)
};

// Per-position table: cs[2i] = cos(theta_i) * mscale, cs[2i+1] = sin(theta_i) * mscale for
// i < n_rot/2. Computed in double and rounded once, by the same code for every row.
void rope_table(const rope_params& p, int32_t pos, float* cs /* [n_rot] */);
// Rotates the first n_rot dimensions of each of n_head heads in place. x: [n_head, head_dim].
void rope_apply(const rope_params& p, const float* cs /* [n_rot] */, float* x, int n_head, int head_dim);

// ---- attention.cpp -------------------------------------------------------------------------
inline constexpr int k_attn_chunk = 32;     // KV positions reduced per chunk (E1: fixed)
inline constexpr int k_max_head_dim = 512;

struct attention_params {
    int n_head = 0;       // query heads
    int n_kv_head = 0;    // key/value heads (GQA: n_head % n_kv_head == 0)
    int head_dim = 0;     // <= k_max_head_dim
    float scale = 1.0f;   // usually 1/sqrt(head_dim)
};

// Causal attention for a window of rows. Row r (at position pos0 + r) attends to KV positions
// 0..pos0+r. For each (row, head): scores over chunks of k_attn_chunk positions in order, each
// chunk softmaxed against its own max and merged into a running (max, sum, output) in chunk
// order (the same online form a GPU kernel uses), so a row's result never depends on the rows
// around it. Threads split (row, head) pairs.
//   q:   [n_rows, n_head, head_dim]
//   k,v: [n_ctx, n_kv_head, head_dim], positions 0..pos0+n_rows-1 filled
//   out: [n_rows, n_head, head_dim]
// attention() runs SIMD code (AVX2+FMA where the CPU has it, head_dim % 16 == 0) that gives
// attention_ref's bits; attention_ref is the scalar definition, kept for the parity tests.
//
// With a split scratch, a call of at most k_attn_split_rows rows whose (row, head) tasks would
// leave threads idle or unevenly loaded (a decode row: SmolLM2's 9 heads on 16 threads, or its 3
// KV heads' tasks on 2) also cuts the KV positions over the threads: each chunk's (max, sum,
// output) goes to the scratch, and the chunks are then merged in order per (row, head) with the
// merge the unsplit loop does: the same operations on the same operands, so the same bits. The
// positions go in rounds of k_attn_split_chunks chunks, which bounds the scratch.
inline constexpr int k_attn_split_rows = 4;
inline constexpr int k_attn_split_chunks = 64;   // 2,048 positions a round
struct attention_scratch {
    float* parts = nullptr;   // attention_split_floats(p) floats, or null: no split
    size_t floats = 0;
    bool always = false;      // split whenever the rows allow, paying or not (the parity tests)
};
// [k_attn_split_rows, n_head] running (max, sum), then [k_attn_split_rows, n_head,
// k_attn_split_chunks] chunk results of head_dim + 2 floats.
size_t attention_split_floats(const attention_params& p);
void attention(thread_pool& pool, const attention_params& p, const float* q, const float* k,
               const float* v, int32_t pos0, int64_t n_rows, float* out, attention_scratch split = {});
void attention_ref(thread_pool& pool, const attention_params& p, const float* q, const float* k,
                   const float* v, int32_t pos0, int64_t n_rows, float* out);

// ---- matmul.cpp ----------------------------------------------------------------------------
// y[r, j] = dot(w row j, x row r). w: GGML matrix ne = {n_in, n_out} (a 2-D tensor or one
// expert's slice of a 3-D one) in any format dot_ref supports; x: [n_rows, n_in] f32;
// y: [n_rows, n_out]. Each activation row is prepared once with quant::quantize_act_row (int8
// blocks for quantised weights, a copy for float weights) into `act`, then every (row, column)
// is one kernels::dot_ref call: the bits of row r never depend on n_rows (E1); threads split
// the columns (E2).
// act: matmul_act_bytes(w, n_rows) bytes of scratch.
size_t matmul_act_bytes(const tensor_view& w, int64_t n_rows);
void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n_rows, float* y,
            std::byte* act);
// Same, with the activation rows already prepared in `act` for w's format (one preparation
// shared by several matrices of one format: an expert's gate and up, q/k/v).
void matmul_prepared(thread_pool& pool, const tensor_view& w, const std::byte* act, int64_t n_rows,
                     float* y);
void prepare_act(const tensor_view& w, const float* x, int64_t n_rows, std::byte* act);
// Same, rows split over the pool (for_rows).
void prepare_act(thread_pool& pool, const tensor_view& w, const float* x, int64_t n_rows, std::byte* act);
// x [n_rows, n_in] quantised row by row into format f (act: n_rows * act_row_bytes(f, n_in)
// bytes), rows split over the pool (for_rows): what prepare_act does for a matrix's format.
void quantize_act_rows(thread_pool& pool, quant::act_format f, const float* x, int64_t n_in, int64_t n_rows,
                       std::byte* act);
// Several matrices that take the same prepared rows (same activation format and n_in: q/k/v, an
// FFN's gate and up), y_i = w_i x, in one parallel_for: one barrier instead of one per matrix,
// the same bits as matmul_prepared on each. At most 4 matrices.
struct matmul_out {
    const tensor_view* w = nullptr;
    float* y = nullptr;   // [n_rows, w->ne[1]]
};
#if __cplusplus >= 202002L   // CUDA kernel files include this header as C++17 (kernels/cuda/ops.cuh)
void matmul_prepared_many(thread_pool& pool, std::span<const matmul_out> outs, const std::byte* act,
                          int64_t n_rows);
#endif

// Expert e of a 3-D expert tensor ne = {n_in, n_out, n_expert}, as a 2-D view.
tensor_view expert_slice(const tensor_view& w, int64_t e);
// Row `row` of a matrix (e.g. token_embd [n_embd, n_vocab]) as f32. out: [ne[0]].
void get_row(const tensor_view& w, int64_t row, float* out);

// ---- router (norm.cpp) ---------------------------------------------------------------------
struct router_params {
    int n_expert = 0;
    int n_used = 0;        // experts per token (1..n_expert)
    bool renormalize = false;  // divide the chosen probabilities by their sum
};
// probs = softmax(logits); ids = the n_used largest probabilities in descending order (ties:
// lower id first); weights = their probabilities (renormalised when asked).
//   logits: [n_expert] (overwritten with the probabilities); ids, weights: [n_used]
void route_topk(const router_params& p, float* logits, int32_t* ids, float* weights);

}  // namespace sluice::kernels
