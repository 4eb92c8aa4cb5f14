// The interface every architecture implements, and the registry that picks one for a file.
// An architecture file reads top to bottom: hyperparameters (from llama.cpp's GGUF keys,
// validated), weights (bound by canonical name, dtype and shape checked), forward.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache.h"

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
};

struct load_options {
    int n_ctx = 0;   // 0: the model's training context, capped at 4096
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
    std::vector<float> out;       // [max_rows, n_embd] a block's output before the residual add
    std::vector<float> gate, up;  // [max_rows, max(n_ff, n_ff_exp, n_ff_shexp)]
    std::vector<float> expert;    // [n_embd] one expert's output for one row
    std::vector<float> shexp;     // [max_rows, n_embd] shared-expert output (qwen2moe)
    std::vector<float> router;    // [max_rows, max(n_expert, 1)] router logits -> probabilities
    std::vector<int32_t> expert_ids;   // [max_rows, n_expert_used]
    std::vector<float> expert_w;       // [max_rows, n_expert_used]
    std::vector<float> shexp_gate;     // [max_rows] shared-expert gate logits
    std::vector<float> rope_cs;        // [n_rot] one position's cos/sin table
    std::vector<std::byte> act;        // activation rows for matmul: max_rows * 4 * max(n_in) bytes
};

class model {
public:
    virtual ~model();
    virtual const model_hparams& hparams() const = 0;

    // Runs tokens[i] at positions pos0 + i (a window of 1..max_rows rows: a prefill chunk or a
    // verify window) through the model, writing their K/V into `kv` at those positions and
    // setting kv.n_pos() to pos0 + n; requires pos0 <= kv.n_pos() (rows past pos0 are rolled
    // back). Writes logits [n_rows, n_vocab] row-major (or the last row only, see
    // forward_scratch). Row results are independent of the window size (E1) and of the thread
    // count (E2).
    virtual void forward(std::span<const token_id> tokens, int32_t pos0, kv_cache& kv,
                         forward_scratch& scratch, float* logits) = 0;

    forward_scratch make_scratch(int max_rows, thread_pool& pool) const;
    kv_shape kv_shape_for(int n_ctx) const;
};

// The registry: llama, qwen3, qwen3moe, qwen2moe. Throws naming the architecture otherwise.
std::unique_ptr<model> load_model(const model_file& f, const load_options& o);

}  // namespace sluice
