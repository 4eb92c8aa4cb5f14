// llama: dense GQA transformer (Llama 2/3, SmolLM2, Mistral-shaped dense models).
// RoPE in the normal (adjacent-pair) ordering: llama.cpp's converter permutes q/k so that it
// applies (the hf reader does the same for safetensors directories).
// Weights per layer: attn_norm [n_embd]; q/k/v/o, no biases, no q/k norm; ffn_norm [n_embd];
// gate/up [n_embd, n_ff], down [n_ff, n_embd]. The forward loop is transformer.cpp's.
#include "models/transformer.h"

namespace sluice {

std::unique_ptr<model> make_llama(const model_file& f, const load_options& o) {
    return make_transformer(f, o, {"llama", kernels::rope_mode::normal, /*qkv_bias=*/false, /*qk_norm=*/false, ffn_kind::dense});
}

}  // namespace sluice
