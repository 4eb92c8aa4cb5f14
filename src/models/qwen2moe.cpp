// qwen2moe: GQA attention with q/k/v biases and NeoX RoPE, then a mixture-of-experts FFN:
// softmax over all experts, top-k WITHOUT renormalisation (Qwen1.5/Qwen2-MoE's
// norm_topk_prob = false; <arch>.expert_weights_norm overrides), SwiGLU experts, plus a shared
// expert that every token uses, scaled by sigmoid(ffn_gate_inp_shexp . x).
// Weights per layer: attn_norm [n_embd]; q/k/v/o with biases bq [n_head*head_dim], bk/bv
// [n_kv*head_dim]; ffn_norm [n_embd]; router and experts as qwen3moe; shared expert gate/up
// [n_embd, n_ff_shexp], down [n_ff_shexp, n_embd], gate [n_embd]
// (<arch>.expert_shared_feed_forward_length = n_ff_shexp). The forward loop is transformer.cpp's.
#include "models/transformer.h"

namespace sluice {

std::unique_ptr<model> make_qwen2moe(const model_file& f, const load_options& o) {
    return make_transformer(f, o, {"qwen2moe", kernels::rope_mode::neox, /*qkv_bias=*/true, /*qk_norm=*/false, ffn_kind::moe_shared,
                                   /*default_expert_norm=*/false});
}

}  // namespace sluice
