// qwen3: dense GQA transformer with per-head RMSNorm on q and k before RoPE (Qwen3-0.6B..32B).
// RoPE in the NeoX ordering (halves rotated together); head_dim from attention.key_length.
// Weights per layer: attn_norm [n_embd]; q/k/v/o; q_norm/k_norm [head_dim], no biases;
// ffn_norm [n_embd]; gate/up [n_embd, n_ff], down [n_ff, n_embd]. The forward loop is
// transformer.cpp's.
#include "models/transformer.h"

namespace sluice {

std::unique_ptr<model> make_qwen3(const model_file& f, const load_options& o) {
    return make_transformer(f, o, {"qwen3", kernels::rope_mode::neox, /*qkv_bias=*/false, /*qk_norm=*/true, ffn_kind::dense});
}

}  // namespace sluice
