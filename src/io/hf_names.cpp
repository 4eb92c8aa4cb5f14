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

// The hybrids' per-block tensors that differ from the table above (conversion/qwen.py:
// Qwen3NextModel, _LinearAttentionVReorderBase; gguf-py's tensor map for QWEN3NEXT / QWEN35MOE).
// Their zero-centred norms get +1 in map_hf_name.
std::optional<hf_target> map_hybrid_block(std::string_view s, const std::string& blk, const hf_name_rules& r) {
    hf_target t;
    const bool v = r.v_heads_tiled;
    auto v_rows = [&](int64_t hd, bool qk_first) {
        if (!v) return;
        t.reorder = hf_reorder::v_rows;
        t.head_dim = hd;
        t.qk_rows_first = qk_first;
    };
    if (s == "post_attention_layernorm.weight") t.gguf = blk + "post_attention_norm.weight";
    else if (s == "linear_attn.A_log") {
        t.gguf = blk + "ssm_a";
        t.op = hf_float_op::neg_exp;
        v_rows(1, false);
    } else if (s == "linear_attn.dt_bias" || s == "linear_attn.dt_proj.bias") {
        t.gguf = blk + "ssm_dt.bias";
        v_rows(1, false);
    } else if (s == "linear_attn.conv1d.weight") {
        t.gguf = blk + "ssm_conv1d.weight";
        t.squeeze = true;
        v_rows(r.v_head_dim, true);
    } else if (s == "linear_attn.in_proj_ba.weight") t.gguf = blk + "ssm_ba.weight";
    else if (s == "linear_attn.in_proj_qkvz.weight") {
        t.kind = hf_kind::qkvz_split;
        t.gguf = blk + "attn_qkv.weight";
        t.gguf_up = blk + "attn_gate.weight";
    } else if (s == "linear_attn.in_proj_qkv.weight") {
        t.gguf = blk + "attn_qkv.weight";
        v_rows(r.v_head_dim, true);
    } else if (s == "linear_attn.in_proj_z.weight") {
        t.gguf = blk + "attn_gate.weight";
        v_rows(r.v_head_dim, false);
    } else if (s == "linear_attn.in_proj_a.weight") {
        t.gguf = blk + "ssm_alpha.weight";
        v_rows(1, false);
    } else if (s == "linear_attn.in_proj_b.weight") {
        t.gguf = blk + "ssm_beta.weight";
        v_rows(1, false);
    } else if (s == "linear_attn.norm.weight") t.gguf = blk + "ssm_norm.weight";
    else if (s == "linear_attn.out_proj.weight") {
        t.gguf = blk + "ssm_out.weight";
        if (v) {
            t.reorder = hf_reorder::v_cols;
            t.head_dim = r.v_head_dim;
        }
    } else return std::nullopt;
    return t;
}

std::optional<hf_target> map_block(std::string_view s, int64_t layer, const hf_name_rules& r) {
    hf_target t;
    t.layer = layer;
    const std::string blk = "blk." + std::to_string(layer) + ".";
    if (r.hybrid)
        if (auto h = map_hybrid_block(s, blk, r)) {
            h->layer = layer;
            return h;
        }
    for (const auto& row : k_block_names) {
        if (s != row.hf) continue;
        t.gguf = blk + std::string(row.gguf);
        if (r.permute_qk) t.permute = row.permute;
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

// The hybrids' MTP block, stored as mtp.* (or model.mtp.*): its decoder layers become blocks
// n_layer + i, its own tensors blk.<n_layer>.nextn.* (_QwenMtpMixin.filter_tensors).
std::optional<hf_target> map_mtp(std::string_view s, const hf_name_rules& r) {
    if (take_prefix(s, "layers.")) {
        auto i = take_index(s);
        if (!i) return std::nullopt;
        return map_block(s, r.n_layer + *i, r);
    }
    constexpr std::array<std::pair<std::string_view, std::string_view>, 4> k_nextn{{
        {"fc.weight", "nextn.eh_proj.weight"},
        {"pre_fc_norm_embedding.weight", "nextn.enorm.weight"},
        {"pre_fc_norm_hidden.weight", "nextn.hnorm.weight"},
        {"norm.weight", "nextn.shared_head_norm.weight"},
    }};
    for (const auto& [hf, gguf] : k_nextn) {
        if (s != hf) continue;
        hf_target t;
        t.layer = r.n_layer;
        t.gguf = "blk." + std::to_string(r.n_layer) + "." + std::string(gguf);
        if (gguf.ends_with("norm.weight")) t.op = hf_float_op::plus_one;   // renamed *norm.weight: +1
        return t;
    }
    return std::nullopt;
}

}  // namespace

std::optional<hf_target> map_hf_name(std::string_view name, const hf_name_rules& r) {
    hf_target t;
    if (name.ends_with("rotary_emb.inv_freq")) {
        t.kind = hf_kind::skip;
        return t;
    }
    if (name == "model.embed_tokens.weight") t.gguf = "token_embd.weight";
    else if (name == "model.norm.weight") t.gguf = "output_norm.weight";
    else if (name == "lm_head.weight") t.gguf = "output.weight";
    std::optional<hf_target> out;
    std::string_view s = name;
    if (!t.gguf.empty()) {
        out = t;
    } else if (r.hybrid && (take_prefix(s, "mtp.") || take_prefix(s, "model.mtp."))) {
        out = map_mtp(s, r);
    } else if (take_prefix(s, "model.layers.")) {
        if (auto layer = take_index(s)) out = map_block(s, *layer, r);
    }
    // The hybrids' RMSNorms are zero-centred: the converter adds 1 to every *norm.weight but
    // the gated one inside the DeltaNet (linear_attn.norm), which is a plain RMSNorm.
    if (out && r.hybrid && name.ends_with("norm.weight") && !name.ends_with("linear_attn.norm.weight"))
        out->op = hf_float_op::plus_one;
    return out;
}

}  // namespace sluice
