// config.json -> GGUF metadata. A Hugging Face directory's config is translated into the keys
// llama.cpp's converter (convert_hf_to_gguf.py) writes, so model code reads one vocabulary of
// keys whatever the file format. Values keep the GGUF types the converter uses: counts u32,
// floats f32 (rounded as a GGUF file would store them), flags bool.
#pragma once

#include "core/json_depth.h"
#include "io/metadata.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <optional>
#include <string_view>
#include <vector>

namespace sluice {

struct hf_config {
    std::string arch;               // "llama", "qwen3", "qwen3moe", "qwen2moe", "qwen3next", "qwen35moe"
    metadata meta;                  // GGUF keys, general.* included
    int64_t n_embd = 0;             // hidden_size
    int64_t n_layer = 0;            // num_hidden_layers
    int64_t n_head = 0;             // num_attention_heads
    int64_t n_head_kv = 0;          // num_key_value_heads (n_head when absent)
    int64_t head_dim = 0;           // head_dim (n_embd / n_head when absent)
    int64_t n_expert = 0;           // num_experts (0 for dense models)
    bool tie_word_embeddings = false;
    // llama.cpp's `llama` uses interleaved RoPE while HF rotates halves: q/k rows are permuted
    // at load, exactly as the converter does. NeoX-rope architectures (qwen*) are not.
    bool permute_qk = false;
    // rope_type "llama3" (Llama 3.1+): llama.cpp's converter turns these into a rope_freqs
    // tensor (LlamaModel.generate_extra_tensors); values as config.json gives them, with the
    // converter's defaults where it gives none.
    struct llama3_rope {
        double theta = 10000.0, factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
        double original_context = 8192.0;
    };
    std::optional<llama3_rope> llama3;
    // The hybrid Qwen MoEs (qwen3next, qwen35moe): Gated DeltaNet layers, whose tensors the
    // converter reshapes (hf_names.h: hf_transform), and MTP blocks stored as mtp.*.
    bool hybrid = false;
    bool v_heads_tiled = false;     // qwen35moe with fewer key than value heads: V heads reordered
                                    // from grouped to tiled order
    int64_t n_mtp = 0;              // mtp_num_hidden_layers (0 when config.json has none)
    int64_t linear_k_heads = 0, linear_v_heads = 0, linear_k_dim = 0, linear_v_dim = 0;
    std::vector<bool> recurrent;    // [n_layer] from layer_types: linear_attention layers
};

// Writes the keys that depend on the MTP blocks (block_count = n_layer + n_mtp,
// nextn_predict_layers, attention.recurrent_layers with the MTP blocks false), as the converter
// does once it has counted them: n_mtp from config.json, or from the mtp.layers.* tensors.
void finish_hybrid_config(hf_config& c, int64_t n_mtp);

// rope_freqs.weight for llama3 rope scaling, [head_dim / 2] f32, computed in float32 the way
// the converter's torch code computes it.
std::vector<float> llama3_rope_factors(const hf_config::llama3_rope& p, int64_t head_dim);

// The deepest JSON nesting the model readers accept (json_nesting_depth is checked before a
// parse: a hostile header of a million '[' overflowed the stack).
inline constexpr size_t k_max_json_depth = 64;

// The architectures this reader maps, as "HF class -> GGUF arch" for error messages.
std::string supported_hf_architectures();

// Parses config.json text. `where` names the file in errors; `model_name` becomes general.name
// (the directory's name). Throws sluice::error naming the field and the value.
hf_config parse_hf_config(std::string_view json_text, std::string_view where,
                          std::string_view model_name);

}  // namespace sluice
