// The interface every architecture implements, and the registry that picks one for a file.
// An architecture file reads top to bottom: hyperparameters (from llama.cpp's GGUF keys,
// validated), weights (bound by canonical name, dtype and shape checked), forward.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache.h"
#include "moe/expert_pool.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice {

class model_file;
using token_id = int32_t;

struct model_hparams {
    std::string arch;          // general.architecture
    int n_vocab = 0;
    int n_embd = 0;
    int n_layer = 0;
    int n_ctx_train = 0;
    int n_head = 0;
    int n_kv_head = 0;
    int head_dim = 0;          // <arch>.attention.key_length, else n_embd / n_head
    int n_ff = 0;              // dense FFN width (0 for all-MoE models)
    float rms_eps = 1e-6f;
    kernels::rope_params rope;
    // Mixture of experts (0 for dense models).
    int n_expert = 0;
    int n_expert_used = 0;
    int n_ff_exp = 0;          // width of one routed expert
    int n_ff_shexp = 0;        // width of the shared expert (qwen2moe)
    bool expert_weights_norm = false;  // renormalise the chosen experts' probabilities
    // Hybrid models (qwen3next, qwen35moe): Gated DeltaNet layers keep a recurrent state in the
    // sequence's kv_cache (kv/recurrent_state.h). 0 for every other architecture.
    int n_rec_layer = 0;            // recurrent layers
    int ssm_d_inner = 0;            // value width of a DeltaNet layer (n_v_heads * head_v_dim)
    int64_t rec_conv_floats = 0;    // conv state floats per recurrent layer
    int64_t rec_ssm_floats = 0;     // DeltaNet state floats per recurrent layer
    int64_t arch_floats_per_row = 0;  // forward_scratch::arch floats per row
};

struct load_options {
    int n_ctx = 0;   // 0: the model's training context, capped at 4096
};

// Sees each MoE layer's routed ids as the forward makes them (the routing profile's calibration
// pass counts them, placement/routing_profile.h). Called from the hot loop: it must neither
// throw nor allocate. ids: [n_rows * k_used] for layer `layer`.
struct routing_observer {
    void (*fn)(void* ctx, int layer, const int32_t* ids, int64_t n_ids) = nullptr;
    void* ctx = nullptr;
};

// Every buffer a forward needs, allocated once for a maximum window of max_rows rows, so the
// per-token loop allocates nothing. Built by model::make_scratch.
struct forward_scratch {
    thread_pool* pool = nullptr;   // owned by the context (session/engine)
    int max_rows = 0;
    // When set, forward writes only the last row's logits (to logits[0, n_vocab)): prefill
    // chunks whose other rows nobody samples skip most of the output projection.
    bool last_row_logits_only = false;

    std::vector<float> x;         // [max_rows, n_embd] residual stream
    std::vector<float> xn;        // [max_rows, n_embd] normalised input of a block
    std::vector<float> q;         // [max_rows, n_head * head_dim]
    std::vector<float> k, v;      // [max_rows, n_kv_head * head_dim]
    std::vector<float> attn;      // [max_rows, n_head * head_dim] attention output
    std::vector<float> attn_split;  // [kernels::attention_split_floats] chunk results when attention cuts the positions
    std::vector<float> out;       // [max_rows, n_embd] a block's output before the residual add
    std::vector<float> gate, up;  // [max_rows, max(n_ff, n_ff_exp, n_ff_shexp)]
    std::vector<float> expert;    // [n_embd] one expert's output for one row
    std::vector<float> shexp;     // [max_rows, n_embd] shared-expert output (qwen2moe)
    std::vector<float> router;    // [max_rows, max(n_expert, 1)] router logits -> probabilities
    std::vector<int32_t> expert_ids;   // [max_rows, n_expert_used]
    std::vector<float> expert_w;       // [max_rows, n_expert_used]
    std::vector<float> shexp_gate;     // [max_rows] shared-expert gate logits
    std::vector<std::byte> act;        // activation rows for matmul: max_rows * 4 * max(n_in) bytes
    moe::expert_scratch experts;       // the CPU expert pool's buffers (MoE models; empty otherwise)
    routing_observer on_route;         // optional: sees every MoE layer's routed ids
    std::vector<float> arch;           // [max_rows, hp.arch_floats_per_row] architecture-specific rows
};

// One sequence's rows in a batched forward: tokens[i] at position pos0 + i of its own cache.
struct batch_segment {
    std::span<const token_id> tokens;  // 1.. rows
    int32_t pos0 = 0;                  // <= kv->n_pos(); rows past pos0 are rolled back
    kv_cache* kv = nullptr;            // this sequence's cache; no two segments share one
    int32_t n_logits = 0;              // logits wanted for the last n_logits rows (0..rows)
};

class model {
public:
    virtual ~model();
    virtual const model_hparams& hparams() const = 0;

    // The rows of several sequences in one forward (continuous batching). Every op but
    // attention is row-wise, so the segments' rows are stacked [sum rows, n_embd] and only the
    // K/V writes and the attention run per segment, each against its own cache. Sets each
    // segment's kv->n_pos() to pos0 + rows. Writes logits [sum n_logits, n_vocab] row-major,
    // segment after segment. A row's bits depend on its token, position and cache only: never
    // on the other rows, the other segments, the batch size (E1) or the thread count (E2).
    // Throws (before any work) on a bad batch: the rows exceed scratch.max_rows, a pos0 past its
    // cache, positions past the context, a shared cache, an id outside the vocabulary.
    virtual void forward_batch(std::span<const batch_segment> batch, forward_scratch& scratch,
                               float* logits) = 0;

    // One sequence: tokens[i] at positions pos0 + i (a window of 1..max_rows rows: a prefill
    // chunk or a verify window), a one-segment batch. Writes logits [n_rows, n_vocab] (or the
    // last row only, see forward_scratch).
    void forward(std::span<const token_id> tokens, int32_t pos0, kv_cache& kv, forward_scratch& scratch,
                 float* logits);

    // A device model's forward runs on the device: its scratch holds the pool, the row limit and
    // the residual rows (x, the MTP drafter's input), none of the host forward's buffers (for a
    // 2,048-row prefill of the 35B shape those come to over 200 MB by their shapes, never touched).
    forward_scratch make_scratch(int max_rows, thread_pool& pool) const;
    virtual bool forward_on_host() const { return true; }
    kv_shape kv_shape_for(int n_ctx) const;

    // The host arrays of a cache (kv.k, kv.v, kv.recurrent()'s live state) are what a prefix-cache
    // checkpoint reads and restores (kv/prefix_cache.h). A model that keeps its own copy of a
    // cache (the CUDA model's, in VRAM) writes rows [0, kv.n_pos()) and the state there in
    // sync_kv_to_host (before a checkpoint is taken), and takes them from there in
    // load_kv_from_host (after a checkpoint was restored into kv). The CPU models work on the
    // host arrays themselves: nothing to do.
    virtual void sync_kv_to_host(kv_cache& kv);
    virtual void load_kv_from_host(kv_cache& kv);
};

// Rows of a verify window a hybrid model's recurrent state can roll back (DESIGN: windows of 1..16).
inline constexpr int k_recurrent_ckpt_rows = 16;

// The registry: llama, qwen3, qwen3moe, qwen2moe, qwen3next, qwen35moe. Throws naming the architecture otherwise.
std::unique_ptr<model> load_model(const model_file& f, const load_options& o);

}  // namespace sluice
