// Hugging Face tensor names -> llama.cpp GGUF names, as convert_hf_to_gguf.py maps them for
// llama, qwen3, qwen3moe and qwen2moe. Some HF tensors are not one GGUF tensor: per-expert
// weights are stacked over the expert index, transformers 5's fused gate_up_proj is split in
// two, and llama's q/k rows are permuted; the target says which, the reader does the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

enum class hf_kind {
    plain,          // one HF tensor is one GGUF tensor (possibly row-permuted)
    expert,         // one expert's matrix: stacked with the others into `gguf`
    fused_gate_up,  // [n_expert, 2*n_ff, n_embd]: first n_ff rows of each expert are gate, rest up
    skip,           // not a weight llama.cpp keeps (rotary_emb.inv_freq)
};

// llama only: HF rotates halves of each head (NeoX), llama.cpp's `llama` interleaves pairs, so
// the converter reorders q/k rows per head (LlamaModel.permute); q uses n_head, k n_head_kv.
enum class rope_permute { none, q, k };

struct hf_target {
    hf_kind kind = hf_kind::plain;
    std::string gguf;        // GGUF name; for fused_gate_up the gate half's name
    std::string gguf_up;     // fused_gate_up only: the up half's name
    int64_t layer = -1;      // block index, -1 for tensors outside blocks
    int64_t expert = -1;     // expert only: its index
    rope_permute permute = rope_permute::none;
};

// nullopt when the name is not one this reader knows (the caller reports it). `permute_qk`
// is hf_config::permute_qk.
std::optional<hf_target> map_hf_name(std::string_view hf_name, bool permute_qk);

}  // namespace sluice
