// qwen3moe: GQA attention with per-head q/k RMSNorm and NeoX RoPE (YaRN when the file asks),
// then a mixture-of-experts FFN: softmax over all experts, top-k, the chosen probabilities
// renormalised to sum to 1 (Qwen3's norm_topk_prob; <arch>.expert_weights_norm overrides),
// SwiGLU experts. Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder.
// Weights per layer: attn_norm [n_embd]; q/k/v/o; q_norm/k_norm [head_dim]; ffn_norm [n_embd];
// router [n_embd, n_expert]; gate/up [n_embd, n_ff_exp, n_expert]; down [n_ff_exp, n_embd,
// n_expert]. The forward loop is transformer.cpp's.
#include "models/transformer.h"

namespace sluice {

std::unique_ptr<model> make_qwen3moe(const model_file& f, const load_options& o) {
    return make_transformer(f, o, {"qwen3moe", kernels::rope_mode::neox, /*qkv_bias=*/false, /*qk_norm=*/true, ffn_kind::moe,
                                   /*default_expert_norm=*/true});
}

}  // namespace sluice
