// The safetensors reader: every malformed file in tests/data/malformed_safetensors is rejected
// with the message its expect.txt names, the control directories load, and the header parser
// survives every truncation of every corpus file.
#include "core/error.h"
#include "io/hf_config.h"
#include "io/hf_names.h"
#include "io/safetensors.h"
#include "io/side_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace fs = std::filesystem;
using namespace sluice;

namespace {

const fs::path k_cases = fs::path(SLUICE_SOURCE_DIR) / "tests/data/malformed_safetensors";

std::string read_all(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> case_dirs(bool valid) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(k_cases))
        if (e.is_directory() && e.path().filename().string().starts_with("valid_") == valid)
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST(safetensors, malformed_safetensors_is_rejected) {
    auto dirs = case_dirs(false);
    ASSERT_GE(dirs.size(), 40u) << "corpus missing: run tools/make_malformed_safetensors.py";
    for (const auto& d : dirs) {
        const std::string expect = read_all(d / "expect.txt");
        ASSERT_FALSE(expect.empty()) << d;
        try {
            auto m = open_hf_directory(d);
            ADD_FAILURE() << d.filename() << ": loaded, expected an error containing '" << expect << "'";
        } catch (const sluice::error& e) {
            EXPECT_NE(std::string(e.what()).find(expect), std::string::npos)
                << d.filename() << ": got '" << e.what() << "', expected '" << expect << "'";
        }
    }
}

TEST(safetensors, valid_directories_load_with_gguf_names_and_bytes) {
    auto dirs = case_dirs(true);
    ASSERT_EQ(dirs.size(), 2u);
    for (const auto& d : dirs) {
        auto m = open_hf_directory(d);
        EXPECT_EQ(m->format(), "safetensors");
        EXPECT_EQ(m->architecture(), "llama");
        EXPECT_EQ(m->meta().require_string("general.name"), d.filename().string());
        EXPECT_EQ(m->meta().require_int("llama.embedding_length"), 8);
        auto ts = m->tensors();
        ASSERT_EQ(ts.size(), 2u) << d;
        EXPECT_EQ(ts[0].name, "token_embd.weight");
        EXPECT_EQ(ts[0].shape_string(), "[8, 16]");
        EXPECT_EQ(ts[0].type, dtype::f32);
        EXPECT_EQ(ts[1].name, "output_norm.weight");
        EXPECT_EQ(ts[1].shape_string(), "[8]");
        // The generator writes arange values: element i of each tensor is i.
        for (const auto& t : ts) {
            ASSERT_EQ(t.nbytes, uint64_t(t.n_elems()) * 4);
            for (int64_t i = 0; i < t.n_elems(); ++i) {
                float v;
                std::memcpy(&v, t.data + i * 4, 4);
                ASSERT_EQ(v, float(i)) << t.name << "[" << i << "]";
            }
        }
        // Tied embeddings and no lm_head: no output.weight is made up.
        EXPECT_EQ(m->find("output.weight"), nullptr);
    }
}

TEST(safetensors, header_parser_survives_every_truncation) {
    std::string file = read_all(k_cases / "valid_single/model.safetensors");
    ASSERT_GT(file.size(), 8u);
    auto whole = parse_safetensors({reinterpret_cast<const std::byte*>(file.data()), file.size()}, "x");
    EXPECT_EQ(whole.tensors.size(), 2u);
    int rejected = 0;
    for (size_t n = 0; n < file.size(); ++n) {
        // A fresh copy of exactly n bytes, so reading past it is caught by sanitizers.
        std::vector<std::byte> cut(n);
        if (n > 0) std::memcpy(cut.data(), file.data(), n);  // memcpy of a null vector is UB even for 0 bytes
        try {
            parse_safetensors(cut, "cut");
        } catch (const sluice::error&) {
            ++rejected;
        }
    }
    EXPECT_EQ(rejected, int(file.size()));  // every proper prefix loses the header or data
}

TEST(safetensors, hf_names_follow_llama_cpp_converter) {
    struct row { const char* hf; const char* gguf; hf_kind kind; };
    const row rows[] = {
        {"model.embed_tokens.weight", "token_embd.weight", hf_kind::plain},
        {"lm_head.weight", "output.weight", hf_kind::plain},
        {"model.norm.weight", "output_norm.weight", hf_kind::plain},
        {"model.layers.3.input_layernorm.weight", "blk.3.attn_norm.weight", hf_kind::plain},
        {"model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight", hf_kind::plain},
        {"model.layers.12.self_attn.o_proj.weight", "blk.12.attn_output.weight", hf_kind::plain},
        {"model.layers.0.self_attn.k_norm.weight", "blk.0.attn_k_norm.weight", hf_kind::plain},
        {"model.layers.0.self_attn.v_proj.bias", "blk.0.attn_v.bias", hf_kind::plain},
        {"model.layers.1.mlp.gate.weight", "blk.1.ffn_gate_inp.weight", hf_kind::plain},
        {"model.layers.1.mlp.shared_expert_gate.weight", "blk.1.ffn_gate_inp_shexp.weight", hf_kind::plain},
        {"model.layers.1.mlp.shared_expert.down_proj.weight", "blk.1.ffn_down_shexp.weight", hf_kind::plain},
        {"model.layers.1.mlp.experts.17.up_proj.weight", "blk.1.ffn_up_exps.weight", hf_kind::expert},
        {"model.layers.1.mlp.experts.down_proj", "blk.1.ffn_down_exps.weight", hf_kind::plain},
        {"model.layers.1.mlp.experts.gate_up_proj", "blk.1.ffn_gate_exps.weight", hf_kind::fused_gate_up},
        {"model.layers.1.self_attn.rotary_emb.inv_freq", "", hf_kind::skip},
    };
    for (const auto& r : rows) {
        auto t = map_hf_name(r.hf, false);
        ASSERT_TRUE(t) << r.hf;
        EXPECT_EQ(t->gguf, r.gguf) << r.hf;
        EXPECT_EQ(t->kind, r.kind) << r.hf;
    }
    EXPECT_EQ(map_hf_name("model.layers.1.mlp.experts.17.up_proj.weight", false)->expert, 17);
    EXPECT_EQ(map_hf_name("model.layers.2.self_attn.q_proj.weight", true)->permute, rope_permute::q);
    EXPECT_EQ(map_hf_name("model.layers.2.self_attn.k_proj.bias", true)->permute, rope_permute::k);
    EXPECT_EQ(map_hf_name("model.layers.2.self_attn.q_proj.weight", false)->permute, rope_permute::none);
    for (const char* bad : {"model.layers.x.input_layernorm.weight", "model.layers.01.mlp.up_proj.weight",
                            "model.layers.1.mlp.experts.-1.up_proj.weight", "model.layers.1", "weight"})
        EXPECT_FALSE(map_hf_name(bad, false)) << bad;
}

TEST(safetensors, hf_config_keys_follow_llama_cpp_converter) {
    const char* cfg = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
        "num_experts_per_tok": 8, "norm_topk_prob": true, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn", "factor": 4.0,
                            "original_max_position_embeddings": 32768},
        "max_position_embeddings": 40960, "vocab_size": 151936, "tie_word_embeddings": false})";
    hf_config c = parse_hf_config(cfg, "config.json", "Qwen3-30B-A3B");
    const auto& m = c.meta;
    EXPECT_EQ(m.require_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(m.require_string("general.name"), "Qwen3-30B-A3B");
    EXPECT_EQ(m.require_int("qwen3moe.block_count"), 48);
    EXPECT_EQ(m.require_int("qwen3moe.attention.head_count_kv"), 4);
    EXPECT_EQ(m.require_int("qwen3moe.attention.key_length"), 128);
    EXPECT_EQ(m.require_int("qwen3moe.expert_count"), 128);
    EXPECT_EQ(m.require_int("qwen3moe.expert_used_count"), 8);
    EXPECT_EQ(m.require_int("qwen3moe.expert_feed_forward_length"), 768);
    EXPECT_EQ(m.get_bool("qwen3moe.expert_weights_norm"), true);
    EXPECT_EQ(m.require_float("qwen3moe.rope.freq_base"), 1000000.0);
    EXPECT_EQ(m.require_float("qwen3moe.attention.layer_norm_rms_epsilon"), double(1e-06f));
    EXPECT_EQ(m.require_string("qwen3moe.rope.scaling.type"), "yarn");
    EXPECT_EQ(m.require_float("qwen3moe.rope.scaling.factor"), 4.0);
    EXPECT_EQ(m.require_int("qwen3moe.rope.scaling.original_context_length"), 32768);
    EXPECT_EQ(m.find("qwen3moe.attention.layer_norm_rms_epsilon")->type, meta_type::f32);
    EXPECT_EQ(m.find("qwen3moe.block_count")->type, meta_type::u32);
    EXPECT_FALSE(c.permute_qk);
    EXPECT_EQ(c.n_expert, 128);
}

TEST(safetensors, many_tensors_parse_and_a_late_duplicate_is_caught) {
    // 30,000 one-byte tensors (a 128-expert model in one file has ~18,000): the header parse is
    // linear in them (json::parse with a callback rescanned the object at every entry's end:
    // 24,597 tensors took 7.7 s). The last entry repeats the first name.
    auto header_of = [](int n, bool duplicate) {
        std::string h = "{";
        for (int i = 0; i < n; ++i)
            h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
                 std::to_string(i + 1) + "]},";
        h += duplicate ? "\"t0\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}" : "\"__metadata__\":{}}";
        std::string file(8, '\0');
        const uint64_t len = h.size();
        std::memcpy(file.data(), &len, 8);
        return file + h + std::string(size_t(n), 'x');
    };
    const std::string ok = header_of(30000, false);
    const auto h = parse_safetensors({reinterpret_cast<const std::byte*>(ok.data()), ok.size()}, "many");
    EXPECT_EQ(h.tensors.size(), 30000u);
    const std::string dup = header_of(30000, true);
    try {
        parse_safetensors({reinterpret_cast<const std::byte*>(dup.data()), dup.size()}, "dup");
        ADD_FAILURE() << "a header naming t0 twice was accepted";
    } catch (const sluice::error& e) {
        EXPECT_NE(std::string(e.what()).find("names 't0' twice"), std::string::npos) << e.what();
    }
}

TEST(side_file, only_regular_files_within_the_bound_are_read) {
    // A tokenizer.json linked to /dev/zero was read until memory ran out; a 1 GiB config.json
    // took 2 GB to read.
    const fs::path dir = fs::temp_directory_path() / "sluice_side_file_test";
    fs::remove_all(dir);
    fs::create_directories(dir / "a_directory");
    { std::ofstream(dir / "config.json") << "{\"a\": 1}"; }
    fs::create_symlink("/dev/zero", dir / "zero.json");
    EXPECT_EQ(read_side_file(dir / "config.json", "test"), "{\"a\": 1}");
    auto error_of = [&](const fs::path& p, size_t max_bytes) -> std::string {
        try {
            read_side_file(p, "test", max_bytes);
        } catch (const sluice::error& e) {
            return e.what();
        }
        return "(read)";
    };
    EXPECT_NE(error_of(dir / "config.json", 7).find("is 8 bytes, more than the 7"), std::string::npos);
    EXPECT_NE(error_of(dir / "zero.json", 1 << 20).find("not a regular file"), std::string::npos);
    EXPECT_NE(error_of(dir / "a_directory", 1 << 20).find("not a regular file"), std::string::npos);
    EXPECT_NE(error_of(dir / "missing.json", 1 << 20).find("does not exist"), std::string::npos);
    fs::remove_all(dir);
}
