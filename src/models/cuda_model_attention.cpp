// The CUDA model's attention block (the class is models/cuda_model_impl.h): the norm, q/k/v in as
// few launches as their formats allow, the head norms, RoPE and the cache store in one launch, the
// attention itself (the split pair for decode steps and verify windows, the rows kernel for prefill
// chunks), the hybrids' output gate, and wo with the residual add; with the buffers it needs (the
// RoPE table, the split attention's records).
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sluice::cuda_impl {

// Records for the split decode attention (cuda::attention_split) of every position of a cache
// of n_ctx: [rows, n_head, n_ctx / k_attn_chunk, attention_split_record_floats(head_dim)] floats
// (2.2 MB a row for 32 heads of 128 at 4,096 positions), grown when a longer cache comes. Rows:
// a verify window's 16 where they fit k_split_records_bytes, else as many as fit (at least one):
// a wider window runs in groups of that many rows (the same bits, more launches).
void cuda_model::ensure_attention_split(int n_ctx) {
    const int64_t chunks = (static_cast<int64_t>(n_ctx) + kernels::k_attn_chunk - 1) / kernels::k_attn_chunk;
    if (chunks <= attn_split_.max_chunks) return;
    ck(cudaStreamSynchronize(stream_), "sync");
    clear_graphs();
    free_attention_split();
    const size_t row = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(chunks) *
                       static_cast<size_t>(cuda::attention_split_record_floats(static_cast<int>(hp_.head_dim))) * 4;
    const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(k_split_records_bytes / row), 1, cuda::k_split_max_rows);
    ck(cudaMalloc(&attn_split_.records, row * static_cast<size_t>(rows)), "cudaMalloc (attention records)");
    attn_split_.max_chunks = chunks;
    attn_split_.max_rows = rows;
}

void cuda_model::free_attention_split() {
    if (attn_split_.records) cudaFree(attn_split_.records);
    attn_split_ = {};
}

void cuda_model::ensure_rope(int32_t n_pos) {
    if (n_pos <= rope_pos_) return;
    const int32_t want = std::max<int32_t>(((n_pos + 1023) / 1024) * 1024, rope_pos_ * 2);
    const int n_rot = hp_.rope.n_rot;
    std::vector<float> cs(static_cast<size_t>(want) * n_rot);
    for (int32_t p = 0; p < want; ++p) kernels::rope_table(hp_.rope, p, cs.data() + static_cast<size_t>(p) * n_rot);
    ck(cudaStreamSynchronize(stream_), "sync");
    clear_graphs();
    if (rope_) cudaFree(rope_);
    ck(cudaMalloc(&rope_, cs.size() * 4), "cudaMalloc (rope)");
    ck(cudaMemcpy(rope_, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice), "rope table");
    rope_pos_ = want;
}

void cuda_model::attention_block(const dlayer& l, int il, std::span<const attn_rows> segs, int64_t n,
                                 const int32_t* pos_dev) {
    const int64_t hd = hp_.head_dim;
    const int64_t nq = hp_.n_head * hd, nkv = hp_.n_kv_head * hd;
    // The norm quantises for wq; k and v reuse those rows when their format takes the same.
    // Hybrid models' gated attention: wq gives the query and the output gate per head (qg_).
    const bool q_act = norm(x_, l.attn_norm, xn_, n, fmt(l.wq), act_);
    float* const q_out = spec_.hybrid ? qg_ : q_;
    const bool k_reuse = q_act && fmt(l.wk) == fmt(l.wq);
    // One launch for all three where matmul_mixed takes them (a decode step's row of a Q4_K_M
    // file: q and k Q4_K paired, v Q4_K or Q6_K), the activation row already in act_ (q_act, so
    // building the arguments launches nothing). Else two launches where two of the three share a
    // format (k with v, else q with k), or three.
    const bool qkv_one = q_act && pairable_plain(l.wq, l.wk) && fmt(l.wv) == fmt(l.wq) &&
                         cuda::matmul_mixed(mm_args_for(l.wq, xn_, n, q_out, true, nullptr, 1, false, &l.wk, k_),
                                            mm_args_for(l.wv, xn_, n, v_, true), stream_);
    if (!qkv_one && !pairable(l.wk, l.wv) && pairable_plain(l.wq, l.wk)) {
        mm(l.wq, xn_, n, q_out, q_act, nullptr, 1, false, &l.wk, k_);
        mm(l.wv, xn_, n, v_, q_act && fmt(l.wv) == fmt(l.wq));
    } else if (!qkv_one) {
        mm(l.wq, xn_, n, q_out, q_act);
        if (pairable(l.wk, l.wv)) {
            mm(l.wk, xn_, n, k_, k_reuse, nullptr, 1, false, &l.wv, v_);
        } else {
            mm(l.wk, xn_, n, k_, k_reuse);
            // An int8 wk leaves xn_'s rows for its format in act_ (a float wk leaves act_ alone, and
            // then v quantises again: a rare mix not worth tracking).
            const bool k_act = fmt(l.wk) != quant::act_format::f32;
            mm(l.wv, xn_, n, v_, k_act && fmt(l.wv) == fmt(l.wk));
        }
    }
    // gated_query reads only q's launch's output: after k and v, the same bits.
    if (spec_.hybrid) cuda::gated_query(qg_, q_, n, hp_.n_head, static_cast<int>(hd), stream_);
    if (l.bq) {
        cuda::add_rows(q_, l.bq, n, nq, stream_);
        cuda::add_rows(k_, l.bk, n, nkv, stream_);
        cuda::add_rows(v_, l.bv, n, nkv, stream_);
    }
    kernels::attention_params ap;
    ap.n_head = hp_.n_head;
    ap.n_kv_head = hp_.n_kv_head;
    ap.head_dim = hp_.head_dim;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp_.head_dim)));
    // The attention's output rows quantised for wo in the split pair's merge launch where it runs
    // (a decode step's row or a verify window's rows), after the hybrids' output gate in the same
    // launch.
    const quant::act_format o_fmt = fmt(l.wo);
    const bool o_fold = o_fmt != quant::act_format::f32;
    const size_t o_act_bytes = o_fold ? quant::act_row_bytes(o_fmt, nq) : 0;
    bool o_act = o_fold;
    int64_t row0 = 0;
    for (const attn_rows& g : segs) {
        const int64_t rows = g.rows;
        const size_t layer_floats = static_cast<size_t>(g.n_ctx) * static_cast<size_t>(nkv);
        float* kc = g.kv + (2 * static_cast<size_t>(il)) * layer_floats;
        float* vc = kc + layer_floats;
        // q/k head norms (qwen3*), RoPE, and k, v into the cache: one launch.
        cuda::qk_norm_rope_store(hp_.rope, rope_, g.pos0, q_ + row0 * nq, k_ + row0 * nkv, v_ + row0 * nkv, l.q_norm,
                                 l.k_norm, hp_.rms_eps, rows, hp_.n_head, hp_.n_kv_head, static_cast<int>(hd), kc, vc,
                                 stream_, pos_dev);
        cuda::attention_act aq;
        aq.act = o_fold ? act_ + static_cast<size_t>(row0) * o_act_bytes : nullptr;
        aq.width = o_fmt == quant::act_format::q8_32 ? 32 : 256;
        aq.gate = spec_.hybrid ? qg_ + row0 * 2 * nq : nullptr;
        const bool made = cuda::attention(ap, q_ + row0 * nq, kc, vc, g.pos0, rows, attn_ + row0 * nq, stream_, pos_dev,
                                          &attn_split_, &aq);
        if (spec_.hybrid && !made)
            cuda::output_gate(attn_ + row0 * nq, qg_ + row0 * 2 * nq, rows, hp_.n_head, static_cast<int>(hd), stream_);
        o_act = o_act && made;   // every segment launched; one that made none: wo quantises all
        row0 += rows;
    }
    // x += wo . attn in the matmul's launch (its activation rows made by attention where o_act).
    mm(l.wo, attn_, n, x_, o_act, nullptr, 1, true);
}

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
