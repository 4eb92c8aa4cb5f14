#include "io/hf_names.h"

#include <array>
#include <charconv>

namespace sluice {
namespace {

struct name_row {
    std::string_view hf;    // suffix after "model.layers.N."
    std::string_view gguf;  // suffix after "blk.N."
    rope_permute permute;
};

// Per-block tensors with a one-to-one GGUF name (llama.cpp's gguf-py tensor_mapping.py).
constexpr std::array<name_row, 25> k_block_names{{
    {"input_layernorm.weight", "attn_norm.weight", rope_permute::none},
    {"post_attention_layernorm.weight", "ffn_norm.weight", rope_permute::none},
    {"self_attn.q_proj.weight", "attn_q.weight", rope_permute::q},
    {"self_attn.k_proj.weight", "attn_k.weight", rope_permute::k},
    {"self_attn.v_proj.weight", "attn_v.weight", rope_permute::none},
    {"self_attn.o_proj.weight", "attn_output.weight", rope_permute::none},
    {"self_attn.q_proj.bias", "attn_q.bias", rope_permute::q},
    {"self_attn.k_proj.bias", "attn_k.bias", rope_permute::k},
    {"self_attn.v_proj.bias", "attn_v.bias", rope_permute::none},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", rope_permute::none},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", rope_permute::none},
    {"mlp.gate_proj.weight", "ffn_gate.weight", rope_permute::none},
    {"mlp.up_proj.weight", "ffn_up.weight", rope_permute::none},
    {"mlp.down_proj.weight", "ffn_down.weight", rope_permute::none},
    {"mlp.gate.weight", "ffn_gate_inp.weight", rope_permute::none},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", rope_permute::none},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", rope_permute::none},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", rope_permute::none},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", rope_permute::none},
    // transformers 5 keeps experts as 3-D parameters [n_expert, out, in], already stacked as
    // llama.cpp stacks them; saved with or without a ".weight" suffix.
    {"mlp.experts.down_proj", "ffn_down_exps.weight", rope_permute::none},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight", rope_permute::none},
    {"mlp.experts.gate_proj", "ffn_gate_exps.weight", rope_permute::none},
    {"mlp.experts.up_proj", "ffn_up_exps.weight", rope_permute::none},
    {"mlp.experts.gate_proj.weight", "ffn_gate_exps.weight", rope_permute::none},
    {"mlp.experts.up_proj.weight", "ffn_up_exps.weight", rope_permute::none},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> k_expert_parts{{
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
}};

// Parses a decimal index at the front of s (no sign, no leading zeros but "0") and the dot
// after it; advances s past both.
std::optional<int64_t> take_index(std::string_view& s) {
    size_t n = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
    if (n == 0 || n > 9 || n >= s.size() || s[n] != '.' || (n > 1 && s[0] == '0')) return std::nullopt;
    int64_t v = 0;
    std::from_chars(s.data(), s.data() + n, v);
    s.remove_prefix(n + 1);
    return v;
}

bool take_prefix(std::string_view& s, std::string_view p) {
    if (!s.starts_with(p)) return false;
    s.remove_prefix(p.size());
    return true;
}

}  // namespace

std::optional<hf_target> map_hf_name(std::string_view name, bool permute_qk) {
    hf_target t;
    if (name.ends_with("rotary_emb.inv_freq")) {
        t.kind = hf_kind::skip;
        return t;
    }
    if (name == "model.embed_tokens.weight") t.gguf = "token_embd.weight";
    else if (name == "model.norm.weight") t.gguf = "output_norm.weight";
    else if (name == "lm_head.weight") t.gguf = "output.weight";
    if (!t.gguf.empty()) return t;

    std::string_view s = name;
    if (!take_prefix(s, "model.layers.")) return std::nullopt;
    auto layer = take_index(s);
    if (!layer) return std::nullopt;
    t.layer = *layer;
    const std::string blk = "blk." + std::to_string(*layer) + ".";

    for (const auto& row : k_block_names) {
        if (s != row.hf) continue;
        t.gguf = blk + std::string(row.gguf);
        if (permute_qk) t.permute = row.permute;
        return t;
    }
    if (s == "mlp.experts.gate_up_proj" || s == "mlp.experts.gate_up_proj.weight") {
        t.kind = hf_kind::fused_gate_up;
        t.gguf = blk + "ffn_gate_exps.weight";
        t.gguf_up = blk + "ffn_up_exps.weight";
        return t;
    }
    if (take_prefix(s, "mlp.experts.")) {
        auto e = take_index(s);
        if (!e) return std::nullopt;
        for (const auto& [hf, gguf] : k_expert_parts) {
            if (s != hf) continue;
            t.kind = hf_kind::expert;
            t.expert = *e;
            t.gguf = blk + std::string(gguf);
            return t;
        }
    }
    return std::nullopt;
}

}  // namespace sluice
