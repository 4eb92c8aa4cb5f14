#include "io/hf_config.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace sluice {
namespace {

using json = nlohmann::json;

struct arch_row {
    std::string_view hf_class;  // config.json architectures[0]
    std::string_view gguf;      // general.architecture
    bool permute_qk;            // interleaved RoPE in llama.cpp: q/k rows permuted at load
};

// Bounds on the counts the reader allocates by: the models' own limits (blocks.cpp) are these
// or tighter (head_dim <= 512, layers <= 1,024), and are checked with the tensors.
constexpr int64_t k_max_hf_width = int64_t{1} << 16;     // hidden size, heads, head_dim
constexpr int64_t k_max_hf_layers = 1024;                // the models' own limit
constexpr int64_t k_max_hf_experts = int64_t{1} << 16;
// The reader keeps a slot per (layer, expert) for each expert tensor kind: 2^20 pairs is ~75 MB
// of slots at most; the largest MoEs have ~25,000 (48 layers x 512 experts).
constexpr int64_t k_max_hf_layer_experts = int64_t{1} << 20;

// One row per architecture: a new one adds a row here and its names in hf_names.cpp.
constexpr std::array<arch_row, 6> k_archs{{
    {"LlamaForCausalLM", "llama", true},
    {"Qwen3ForCausalLM", "qwen3", false},
    {"Qwen3MoeForCausalLM", "qwen3moe", false},
    {"Qwen2MoeForCausalLM", "qwen2moe", false},
    {"Qwen3NextForCausalLM", "qwen3next", false},
    {"Qwen3_5MoeForCausalLM", "qwen35moe", false},
}};

class reader {
public:
    reader(const json& j, std::string_view where) : j_(j), where_(where) {}

    const json* find(std::string_view key) const {
        auto it = j_.find(std::string(key));
        if (it == j_.end() || it->is_null()) return nullptr;
        return &*it;
    }

    // A positive integer that fits the u32 the converter writes.
    std::optional<int64_t> count(std::string_view key, int64_t min = 1,
                                 int64_t max = int64_t(std::numeric_limits<uint32_t>::max())) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_number_integer())
            fail("{}: '{}': expected an integer, got {}", where_, key, v->dump());
        int64_t x = v->get<int64_t>();
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) x = -1;
        if (x < min || x > max) fail("{}: '{}': expected an integer in [{}, {}], got {}", where_, key, min, max, v->dump());
        return x;
    }

    int64_t require_count(std::string_view key, int64_t max = int64_t(std::numeric_limits<uint32_t>::max())) const {
        auto v = count(key, 1, max);
        if (!v) fail("{}: missing '{}' (a positive integer)", where_, key);
        return *v;
    }

    std::optional<double> number(const json& obj, std::string_view key) const {
        auto it = obj.find(std::string(key));
        if (it == obj.end() || it->is_null()) return std::nullopt;
        if (!it->is_number()) fail("{}: '{}': expected a number, got {}", where_, key, it->dump());
        double x = it->get<double>();
        if (!std::isfinite(x) || !std::isfinite(static_cast<float>(x)))
            fail("{}: '{}': expected a finite f32 number, got {}", where_, key, it->dump());
        return x;
    }
    std::optional<double> number(std::string_view key) const { return number(j_, key); }

    std::optional<bool> flag(std::string_view key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) fail("{}: '{}': expected true or false, got {}", where_, key, v->dump());
        return v->get<bool>();
    }

private:
    const json& j_;
    std::string_view where_;
};

meta_value u32(int64_t v) { return {meta_type::u32, v}; }
// GGUF stores these as f32: keep the value a file would hold, not the JSON double.
meta_value f32(double v) { return {meta_type::f32, static_cast<double>(static_cast<float>(v))}; }
meta_value boolean(bool v) { return {meta_type::boolean, v}; }
meta_value str(std::string v) { return {meta_type::string, std::move(v)}; }

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds
// rope_theta). Only the types llama.cpp's converter writes keys for are mapped.
void add_rope_scaling(const reader& r, const json& rs, const std::string& a, std::string_view where,
                      hf_config& c) {
    if (!rs.is_object()) fail("{}: rope scaling: expected an object, got {}", where, rs.dump());
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
        auto it = rs.find(k);
        if (it == rs.end() || it->is_null()) continue;
        if (!it->is_string()) fail("{}: rope scaling '{}': expected a string, got {}", where, k, it->dump());
        type = it->get<std::string>();
        break;
    }
    if (type.empty() || type == "default") return;
    auto factor = r.number(rs, "factor");
    if (type == "yarn" || type == "linear") {
        if (!factor) fail("{}: rope scaling '{}' without 'factor'", where, type);
        c.meta.set(a + ".rope.scaling.type", str(type));
        c.meta.set(a + ".rope.scaling.factor", f32(*factor));
        if (auto orig = r.number(rs, "original_max_position_embeddings")) {
            if (!(*orig >= 1 && *orig <= 4294967295.0) || *orig != std::floor(*orig))
                fail("{}: rope scaling: original_max_position_embeddings {} is not a positive u32",
                     where, *orig);
            c.meta.set(a + ".rope.scaling.original_context_length", u32(static_cast<int64_t>(*orig)));
        }
        return;
    }
    if (type == "llama3") {
        hf_config::llama3_rope p;
        p.factor = factor.value_or(p.factor);
        p.low_freq_factor = r.number(rs, "low_freq_factor").value_or(p.low_freq_factor);
        p.high_freq_factor = r.number(rs, "high_freq_factor").value_or(p.high_freq_factor);
        p.original_context =
            r.number(rs, "original_max_position_embeddings").value_or(p.original_context);
        if (!(p.factor > 0 && p.low_freq_factor > 0 && p.high_freq_factor > 0 &&
              p.original_context > 0) || p.low_freq_factor == p.high_freq_factor)
            fail("{}: llama3 rope: factor {}, low_freq_factor {}, high_freq_factor {}, "
                 "original_max_position_embeddings {}: expected positive values, low != high",
                 where, p.factor, p.low_freq_factor, p.high_freq_factor, p.original_context);
        c.llama3 = p;
    }
    // Other types are noted with their parameters so model code can see them; llama3's
    // becomes rope_freqs.weight for llama (see llama3_rope_factors).
    c.meta.set("sluice.hf.rope_scaling.type", str(type));
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings"})
        if (auto v = r.number(rs, k)) c.meta.set(std::string("sluice.hf.rope_scaling.") + k, f32(*v));
}

// The hybrids' keys (conversion/qwen.py, Qwen3NextModel.set_gguf_parameters and the Qwen3.5
// MRoPE mixin), but those that depend on the MTP blocks (finish_hybrid_config).
void add_hybrid_keys(const reader& r, const json& j, std::string_view where, hf_config& c) {
    const std::string& a = c.arch;
    c.hybrid = true;
    c.linear_k_heads = r.require_count("linear_num_key_heads");
    c.linear_v_heads = r.require_count("linear_num_value_heads");
    c.v_heads_tiled = a == "qwen35moe" && c.linear_k_heads != c.linear_v_heads;   // the converter's condition
    c.linear_k_dim = r.require_count("linear_key_head_dim");
    c.linear_v_dim = r.require_count("linear_value_head_dim");
    if (c.linear_v_heads % c.linear_k_heads != 0)
        fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", where, c.linear_v_heads,
             c.linear_k_heads);
    c.meta.set(a + ".ssm.conv_kernel", u32(r.require_count("linear_conv_kernel_dim")));
    c.meta.set(a + ".ssm.state_size", u32(c.linear_k_dim));
    c.meta.set(a + ".ssm.group_count", u32(c.linear_k_heads));
    c.meta.set(a + ".ssm.time_step_rank", u32(c.linear_v_heads));
    c.meta.set(a + ".ssm.inner_size", u32(c.linear_v_dim * c.linear_v_heads));
    c.meta.set(a + ".full_attention_interval", u32(r.count("full_attention_interval").value_or(4)));
    c.n_mtp = r.count("mtp_num_hidden_layers", 0).value_or(0);
    auto lt = j.find("layer_types");
    if (lt != j.end() && !lt->is_null()) {
        if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layer)
            fail("{}: 'layer_types': expected a list of {} entries (num_hidden_layers)", where, c.n_layer);
        for (const json& t : *lt) {
            // Anything else (a sliding window, another mixer) would run as full attention.
            if (!t.is_string() || (t.get<std::string>() != "linear_attention" && t.get<std::string>() != "full_attention"))
                fail("{}: 'layer_types': expected 'linear_attention' or 'full_attention', got {}", where, t.dump());
            c.recurrent.push_back(t.get<std::string>() == "linear_attention");
        }
    }
    // The rotary width: head_dim x partial_rotary_factor (rope_parameters', 0.25 without one).
    double partial = 0.25;
    if (const json* rp = r.find("rope_parameters"); rp && rp->is_object())
        partial = r.number(*rp, "partial_rotary_factor").value_or(partial);
    c.meta.set(a + ".rope.dimension_count", u32(static_cast<int64_t>(static_cast<double>(c.head_dim) * partial)));
    if (a == "qwen35moe") {
        // Interleaved MRoPE sections, padded to 4 (gguf's add_rope_dimension_sections); the
        // converter's default when the checkpoint has none.
        auto sec = std::make_shared<meta_array>();
        sec->elem = meta_type::i32;
        const json* rp = r.find("rope_parameters");
        auto ms = rp && rp->is_object() ? rp->find("mrope_section") : json::const_iterator();
        if (rp && rp->is_object() && ms != rp->end() && ms->is_array()) {
            for (const json& v : *ms) {
                if (!v.is_number_integer()) fail("{}: 'mrope_section': expected integers, got {}", where, v.dump());
                sec->ints.push_back(v.get<int64_t>());
            }
        } else {
            sec->ints = {11, 11, 10};
        }
        if (sec->ints.size() > 4) fail("{}: 'mrope_section': expected at most 4 entries", where);
        sec->ints.resize(4, 0);
        c.meta.set(a + ".rope.dimension_sections", meta_value{meta_type::array, sec});
    }
}

}  // namespace

void finish_hybrid_config(hf_config& c, int64_t n_mtp) {
    const std::string& a = c.arch;
    // Released checkpoints have one MTP layer; a count past this is a broken or hostile file.
    constexpr int64_t k_max_mtp = 16;
    if (n_mtp < 0 || n_mtp > k_max_mtp)
        fail("config.json: {} MTP layers (mtp_num_hidden_layers or mtp.layers.*): expected 0..{}", n_mtp, k_max_mtp);
    c.n_mtp = n_mtp;
    c.meta.set(a + ".block_count", u32(c.n_layer + n_mtp));
    if (n_mtp > 0) c.meta.set(a + ".nextn_predict_layers", u32(n_mtp));
    if (!c.recurrent.empty()) {
        auto rl = std::make_shared<meta_array>();
        rl->elem = meta_type::boolean;
        for (bool b : c.recurrent) rl->ints.push_back(b ? 1 : 0);
        rl->ints.resize(static_cast<size_t>(c.n_layer + n_mtp), 0);
        c.meta.set(a + ".attention.recurrent_layers", meta_value{meta_type::array, rl});
    }
}

std::vector<float> llama3_rope_factors(const hf_config::llama3_rope& p, int64_t head_dim) {
    // convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors, step by step in torch's float32:
    // a python number meeting a float32 tensor is rounded to float32 first, and `x / t` for a
    // tensor t is t.reciprocal() * x (torch's __rtruediv__).
    const float dim = static_cast<float>(head_dim);
    const float factor = static_cast<float>(p.factor);
    const float low = static_cast<float>(p.low_freq_factor);
    const float high_minus_low = static_cast<float>(p.high_freq_factor - p.low_freq_factor);
    const float old_ctx = static_cast<float>(p.original_context);
    const float low_wavelen = static_cast<float>(p.original_context / p.low_freq_factor);
    const float high_wavelen = static_cast<float>(p.original_context / p.high_freq_factor);
    const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
    std::vector<float> out;
    for (int64_t i = 0; i < head_dim; i += 2) {
        const float x = static_cast<float>(i) / dim;
        const float freq = 1.0f / std::pow(static_cast<float>(p.theta), x);
        const float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < high_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > low_wavelen) {
            out.push_back(factor);
        } else {
            const float smooth = ((1.0f / wavelen) * old_ctx - low) / high_minus_low;
            out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
        }
    }
    return out;
}

std::string supported_hf_architectures() {
    std::string s;
    for (const auto& row : k_archs)
        s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", row.hf_class, row.gguf);
    return s;
}

hf_config parse_hf_config(std::string_view json_text, std::string_view where,
                          std::string_view model_name) {
    if (json_nesting_depth(json_text) > k_max_json_depth)
        fail("{}: JSON nested deeper than {} levels", where, k_max_json_depth);
    json j;
    try {
        j = json::parse(json_text.begin(), json_text.end());
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", where, e.what());
    }
    if (!j.is_object()) fail("{}: expected a JSON object at the top level", where);
    reader r(j, where);

    auto archs = j.find("architectures");
    if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
        fail("{}: 'architectures' must be a non-empty list of class names; supported: {}", where,
             supported_hf_architectures());
    std::string hf_class = (*archs)[0].get<std::string>();
    const arch_row* row = nullptr;
    for (const auto& x : k_archs)
        if (x.hf_class == hf_class) row = &x;
    if (!row)
        fail("{}: architecture '{}' is not supported; supported: {}", where, hf_class,
             supported_hf_architectures());

    hf_config c;
    c.arch = std::string(row->gguf);
    c.permute_qk = row->permute_qk;
    const std::string& a = c.arch;
    c.meta.set("general.architecture", str(a));
    c.meta.set("general.type", str("model"));
    c.meta.set("general.name", str(std::string(model_name)));
    c.meta.set("sluice.hf.architecture", str(hf_class));

    // Counts that size what the reader allocates (per layer, per expert, per head dimension) are
    // bounded here, before any allocation; the model checks its own, tighter limits later.
    c.n_embd = r.require_count("hidden_size", k_max_hf_width);
    c.n_layer = r.require_count("num_hidden_layers", k_max_hf_layers);
    c.n_head = r.require_count("num_attention_heads", k_max_hf_width);
    c.n_head_kv = r.count("num_key_value_heads", 1, k_max_hf_width).value_or(c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where,
             c.n_head, c.n_head_kv);
    if (auto hd = r.count("head_dim", 1, k_max_hf_width)) {
        c.head_dim = *hd;
    } else {
        if (c.n_embd % c.n_head != 0)
            fail("{}: no 'head_dim' and hidden_size {} is not a multiple of num_attention_heads {}",
                 where, c.n_embd, c.n_head);
        c.head_dim = c.n_embd / c.n_head;
    }
    c.meta.set(a + ".embedding_length", u32(c.n_embd));
    c.meta.set(a + ".block_count", u32(c.n_layer));
    c.meta.set(a + ".attention.head_count", u32(c.n_head));
    c.meta.set(a + ".attention.head_count_kv", u32(c.n_head_kv));
    c.meta.set(a + ".attention.key_length", u32(c.head_dim));
    c.meta.set(a + ".attention.value_length", u32(c.head_dim));
    // The converter writes the rotary width for llama; every architecture here rotates the whole head.
    c.meta.set(a + ".rope.dimension_count", u32(c.head_dim));

    // Every architecture here gates its FFN with SiLU; a config naming another activation would
    // be computed with SiLU anyway (transformers would follow the config), so it is refused.
    if (const json* act = r.find("hidden_act"); act && !act->is_null()) {
        if (!act->is_string() || (act->get<std::string>() != "silu" && act->get<std::string>() != "swish"))
            fail("{}: hidden_act {}: {} uses SiLU ('silu')", where, act->dump(), hf_class);
    }
    if (auto v = r.count("intermediate_size")) c.meta.set(a + ".feed_forward_length", u32(*v));
    if (auto v = r.count("max_position_embeddings")) c.meta.set(a + ".context_length", u32(*v));
    if (auto v = r.count("vocab_size")) c.meta.set(a + ".vocab_size", u32(*v));
    if (auto v = r.number("rms_norm_eps"))
        c.meta.set(a + ".attention.layer_norm_rms_epsilon", f32(*v));

    std::optional<double> theta = r.number("rope_theta");
    if (const json* rp = r.find("rope_parameters")) {
        if (!rp->is_object()) fail("{}: 'rope_parameters': expected an object", where);
        if (!theta) theta = r.number(*rp, "rope_theta");
        add_rope_scaling(r, *rp, a, where, c);
    }
    if (const json* rs = r.find("rope_scaling")) add_rope_scaling(r, *rs, a, where, c);
    if (theta) c.meta.set(a + ".rope.freq_base", f32(*theta));
    if (c.llama3 && theta) c.llama3->theta = *theta;
    if (c.llama3 && !row->permute_qk) c.llama3.reset();  // the converter does this for llama only

    // transformers 5 writes num_local_experts where 4.x wrote num_experts.
    auto n_exp = r.count("num_experts", 1, k_max_hf_experts);
    if (!n_exp) n_exp = r.count("num_local_experts", 1, k_max_hf_experts);
    if (auto v = n_exp) {
        if (*v * c.n_layer > k_max_hf_layer_experts)
            fail("{}: {} layers x {} experts: more than {} (layer, expert) pairs", where, c.n_layer, *v, k_max_hf_layer_experts);
        c.n_expert = *v;
        c.meta.set(a + ".expert_count", u32(*v));
        auto used = r.count("num_experts_per_tok");
        if (!used) fail("{}: experts given without 'num_experts_per_tok'", where);
        if (*used > *v)
            fail("{}: num_experts_per_tok {} exceeds num_experts {}", where, *used, *v);
        c.meta.set(a + ".expert_used_count", u32(*used));
    } else if (a == "qwen3moe" || a == "qwen2moe") {
        fail("{}: '{}' needs 'num_experts' (or 'num_local_experts')", where, hf_class);
    }
    if (auto v = r.count("moe_intermediate_size"))
        c.meta.set(a + ".expert_feed_forward_length", u32(*v));
    if (auto v = r.count("shared_expert_intermediate_size"))
        c.meta.set(a + ".expert_shared_feed_forward_length", u32(*v));
    // The hybrids' converter (Qwen2MoeModel's parameters) writes no expert_weights_norm.
    const bool hybrid = a == "qwen3next" || a == "qwen35moe";
    if (auto v = r.flag("norm_topk_prob"); v && !hybrid) c.meta.set(a + ".expert_weights_norm", boolean(*v));
    if (hybrid) {
        add_hybrid_keys(r, j, where, c);
    } else {
        // Sliding-window attention is not built: such layers would attend to the whole context.
        bool sliding = r.flag("use_sliding_window").value_or(false);
        if (const json* lt = r.find("layer_types"); lt && lt->is_array())
            for (const json& t : *lt) sliding = sliding || t != "full_attention";
        if (sliding)
            fail("{}: sliding-window attention (use_sliding_window, or layer_types other than 'full_attention') is "
                 "not supported",
                 where);
    }

    c.tie_word_embeddings = r.flag("tie_word_embeddings").value_or(false);
    c.meta.set("sluice.hf.tie_word_embeddings", boolean(c.tie_word_embeddings));
    if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string())
        c.meta.set("sluice.hf.torch_dtype", str(it->get<std::string>()));
    else if (auto it2 = j.find("dtype"); it2 != j.end() && it2->is_string())
        c.meta.set("sluice.hf.torch_dtype", str(it2->get<std::string>()));
    return c;
}

}  // namespace sluice
