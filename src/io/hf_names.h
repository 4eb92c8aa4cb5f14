// Hugging Face tensor names -> llama.cpp GGUF names, as convert_hf_to_gguf.py maps them for
// llama, qwen3, qwen3moe, qwen2moe, qwen3next and qwen35moe. Some HF tensors are not one GGUF
// tensor: per-expert weights are stacked over the expert index, transformers 5's fused
// gate_up_proj is split in two, llama's q/k rows are permuted, and the hybrids' Gated DeltaNet
// tensors are reordered and transformed (conversion/qwen.py); the target says which, the reader
// does the bytes.
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
    qkvz_split,     // qwen3next's in_proj_qkvz: per key head [q, k, v, z] -> attn_qkv + attn_gate
    skip,           // not a weight llama.cpp keeps (rotary_emb.inv_freq)
};

// Element-wise steps the hybrids' converter applies, computed in f32 and rounded back to the
// tensor's type as torch does: A_log -> -exp(A_log); zero-centred RMSNorm weights -> w + 1.
enum class hf_float_op { none, neg_exp, plus_one };

// qwen35moe's V heads, stored grouped by key head [K0: v0..v(r-1), K1: ...], reordered to the
// tiled order [v0 of K0, v0 of K1, ..., v1 of K0, ...] (_LinearAttentionVReorderBase): rows from
// first_row on (in_proj_qkv and conv1d keep their q and k rows first), or the columns.
enum class hf_reorder { none, v_rows, v_cols };

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
    hf_float_op op = hf_float_op::none;
    hf_reorder reorder = hf_reorder::none;
    int64_t head_dim = 1;    // v_rows / v_cols: elements per V head along the reordered dimension
    bool qk_rows_first = false;   // v_rows: the first 2 x n_k_heads x k_head_dim rows stay
    bool squeeze = false;    // conv1d [channels, 1, kernel] -> GGUF ne {kernel, channels}
};

// What the name mapping needs to know of the model (from hf_config).
struct hf_name_rules {
    bool permute_qk = false;      // hf_config::permute_qk
    bool hybrid = false;          // qwen3next / qwen35moe
    bool v_heads_tiled = false;   // qwen35moe
    int64_t n_layer = 0;          // mtp.* blocks are numbered from here (blk.<n_layer + i>)
    int64_t v_head_dim = 0;       // linear_value_head_dim
};

// nullopt when the name is not one this reader knows (the caller reports it).
std::optional<hf_target> map_hf_name(std::string_view hf_name, const hf_name_rules& rules);
inline std::optional<hf_target> map_hf_name(std::string_view hf_name, bool permute_qk) {
    return map_hf_name(hf_name, hf_name_rules{.permute_qk = permute_qk});
}

}  // namespace sluice
