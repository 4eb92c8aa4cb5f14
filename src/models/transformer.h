// The transformer architectures whose layer is x += attention(norm(x)); x += ffn(norm(x)), built
// from the blocks of blocks.h: llama, qwen3, qwen3moe and qwen2moe differ only in what they bind
// (q/k/v biases, per-head q/k norms, the RoPE ordering, a dense FFN or routed experts with or
// without a shared expert) and in one default (whether top-k router weights are renormalised).
// Each architecture keeps its own file (llama.cpp, qwen3.cpp, ...) with its description and
// factory; the forward loop is this one.
#pragma once

#include "kernels/cpu/ops.h"
#include "models/model.h"

#include <memory>

namespace sluice {

enum class ffn_kind : uint8_t {
    dense,            // gate/up [n_embd, n_ff], down [n_ff, n_embd]
    moe,              // routed SwiGLU experts
    moe_shared,       // routed experts plus a shared expert scaled by sigmoid(gate . x)
};

struct transformer_arch {
    const char* name = "";                       // general.architecture, the metadata key prefix
    kernels::rope_mode rope = kernels::rope_mode::normal;
    bool qkv_bias = false;                       // bq [n_head*head_dim], bk/bv [n_kv*head_dim]
    bool qk_norm = false;                        // q_norm/k_norm [head_dim] before RoPE
    ffn_kind ffn = ffn_kind::dense;
    // MoE: renormalise the chosen top-k probabilities to sum to 1 unless the file's
    // <arch>.expert_weights_norm says otherwise (Qwen3: yes; Qwen1.5/Qwen2-MoE: no).
    bool default_expert_norm = false;
};

std::unique_ptr<model> make_transformer(const model_file& f, const load_options& o, const transformer_arch& a);

}  // namespace sluice
