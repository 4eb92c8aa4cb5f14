// Pieces every architecture here shares: reading the common hyperparameters, binding weights
// by name with dtype and shape checks, and the attention / dense FFN / MoE FFN / output blocks
// written with the ops of src/kernels. Architecture files compose them.
#pragma once

#include "models/model.h"

#include <optional>
#include <string_view>

namespace sluice {

class metadata;

// Reads <arch>.* keys common to GQA transformers and validates them (n_vocab from
// <arch>.vocab_size or token_embd's rows).
model_hparams read_transformer_hparams(const model_file& f, std::string_view arch, kernels::rope_mode mode);
// <arch>.expert_count, expert_used_count, expert_feed_forward_length (validated);
// <arch>.expert_weights_norm overrides `default_norm` when present.
void read_moe_hparams(const model_file& f, model_hparams& hp, bool default_norm);

// Binds tensors by canonical name; every mismatch names the tensor, the expected and the
// actual dtype or shape.
class weight_binder {
public:
    explicit weight_binder(const model_file& f) : f_(f) {}
    // A matrix ne = {n_in, n_out} (a 1-D [n_in] when n_out == 1) in a format with a dot product.
    const tensor_view& matrix(const std::string& name, int64_t n_in, int64_t n_out) const;
    // Same, or nullptr when absent.
    const tensor_view* optional_matrix(const std::string& name, int64_t n_in, int64_t n_out) const;
    // Experts ne = {n_in, n_out, n_expert}.
    const tensor_view& experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const;
    // A vector [n] (norm weights, biases) converted to f32 once at load.
    std::vector<float> vec(const std::string& name, int64_t n) const;
    std::vector<float> optional_vec(const std::string& name, int64_t n) const;  // empty when absent

private:
    void check_shape(const tensor_view& t, std::initializer_list<int64_t> ne) const;
    const model_file& f_;
};

std::string blk(int il, std::string_view what);   // "blk.<il>.<what>"

// Row-wise ops over n rows of `width` floats, split over the pool when n is large enough
// (kernels::for_rows): out[r] = rmsnorm(x[r]) * w; y[r] += b[r]. The same bits either way.
void rmsnorm_rows(thread_pool& pool, const float* x, const float* w, float* out, int64_t n, int64_t width, float eps);
void add_rows(thread_pool& pool, float* y, const float* b, int64_t n, int64_t width);
// y_i = w_i x for up to 4 matrices that read the same input x [n, n_in] (q/k/v, gate/up, a
// DeltaNet layer's input projections): x prepared once into act and one parallel_for where the
// matrices take the same activation rows, else one matmul each; the same bits either way.
void matmul_shared_input(thread_pool& pool, std::span<const kernels::matmul_out> outs, const float* x, int64_t n,
                         std::byte* act);
// One row at position pos: RoPE of q [n_head, head_dim] and k [n_kv_head, head_dim] in place,
// then k and v [n_kv_head * head_dim] copied into that position's cache rows.
void rope_and_cache_row(const model_hparams& hp, int32_t pos, float* q, float* k, const float* v, float* k_cache_row,
                        float* v_cache_row);

struct attn_weights {
    std::vector<float> norm;                  // attn_norm [n_embd]
    const tensor_view* wq = nullptr;          // [n_embd, n_head*head_dim]
    const tensor_view* wk = nullptr;          // [n_embd, n_kv_head*head_dim]
    const tensor_view* wv = nullptr;          // [n_embd, n_kv_head*head_dim]
    const tensor_view* wo = nullptr;          // [n_head*head_dim, n_embd]
    std::vector<float> bq, bk, bv;            // biases (qwen2moe) or empty
    std::vector<float> q_norm, k_norm;        // per-head RMSNorm [head_dim] (qwen3*) or empty
};
// bias / qk_norm: which optional parts the architecture has.
attn_weights bind_attention(const weight_binder& b, const model_hparams& hp, int il, bool bias, bool qk_norm);

struct ffn_weights {
    const tensor_view* gate = nullptr;   // [n_embd, n_ff]
    const tensor_view* up = nullptr;     // [n_embd, n_ff]
    const tensor_view* down = nullptr;   // [n_ff, n_embd]
};
ffn_weights bind_ffn(const weight_binder& b, int il, std::string_view suffix, int64_t n_embd, int64_t n_ff);

struct moe_weights {
    const tensor_view* router = nullptr;      // ffn_gate_inp [n_embd, n_expert]
    const tensor_view* gate_exps = nullptr;   // [n_embd, n_ff_exp, n_expert]
    const tensor_view* up_exps = nullptr;     // [n_embd, n_ff_exp, n_expert]
    const tensor_view* down_exps = nullptr;   // [n_ff_exp, n_embd, n_expert]
    // Shared expert (qwen2moe): always-on FFN scaled by sigmoid(shexp_gate . x).
    ffn_weights shexp;
    const tensor_view* shexp_gate = nullptr;  // ffn_gate_inp_shexp [n_embd]
    int layer = -1;                           // the block's index (for forward_scratch::on_route)
};
moe_weights bind_moe(const weight_binder& b, const model_hparams& hp, int il, bool shared_expert);

struct output_weights {
    const tensor_view* tok_embd = nullptr;  // [n_embd, n_vocab]
    std::vector<float> norm;                // output_norm [n_embd]
    const tensor_view* output = nullptr;    // [n_embd, n_vocab]; token_embd when tied
};
output_weights bind_output(const weight_binder& b, const model_hparams& hp);

// Checks the batch against its caches and the scratch; throws on a bad request (before any
// work, so the hot loop below never throws). Returns the total number of rows.
int64_t check_batch(const model_hparams& hp, std::span<const batch_segment> batch, const forward_scratch& s);
// s.x[r] = token_embd row of the r-th row of the batch (segments stacked in order).
void embed_batch(const output_weights& w, const model_hparams& hp, std::span<const batch_segment> batch,
                 forward_scratch& s);
// s.x += attention(rmsnorm(s.x)) for the n stacked rows of the batch: q/k/v for every row at
// once, then per segment the K/V writes of layer il into its cache and the causal attention.
void attention_block(const attn_weights& w, const model_hparams& hp, int il, std::span<const batch_segment> batch,
                     int64_t n, forward_scratch& s);
// After the last layer: every segment's cache now holds pos0 + rows positions.
void commit_batch(std::span<const batch_segment> batch);
// s.out = swiglu FFN of s.xn (n rows).
void ffn_rows(const ffn_weights& w, int64_t n_ff, int64_t n_embd, int64_t n, forward_scratch& s, float* out);
// s.x += dense FFN(rmsnorm(s.x)).
void dense_ffn_block(const std::vector<float>& norm, const ffn_weights& w, const model_hparams& hp,
                     int64_t n, forward_scratch& s);
// s.x += MoE FFN(rmsnorm(s.x)) (+ the gated shared expert when bound).
void moe_ffn_block(const std::vector<float>& norm, const moe_weights& w, const model_hparams& hp,
                   int64_t n, forward_scratch& s);
// logits = output(rmsnorm(s.x)) for the last n_logits rows of each segment, packed.
void output_block(const output_weights& w, const model_hparams& hp, std::span<const batch_segment> batch,
                  forward_scratch& s, float* logits);

}  // namespace sluice
