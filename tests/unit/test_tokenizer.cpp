// Byte-level BPE on a small vocabulary built in code: merge ranking, pre-tokenizer splits,
// special tokens, BOS/EOG rules, round trips, streaming, the HF path, and bad metadata.
#include "core/error.h"
#include "io/metadata.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

namespace sluice {
namespace {

meta_value str(std::string s) { return meta_value{meta_type::string, std::move(s)}; }
meta_value u32(int64_t v) { return meta_value{meta_type::u32, v}; }
meta_value boolean(bool b) { return meta_value{meta_type::boolean, b}; }
meta_value strings(std::vector<std::string> v) {
    auto a = std::make_shared<meta_array>();
    a->elem = meta_type::string;
    a->strings = std::move(v);
    return meta_value{meta_type::array, a};
}
meta_value ints(std::vector<int64_t> v) {
    auto a = std::make_shared<meta_array>();
    a->elem = meta_type::i32;
    a->ints = std::move(v);
    return meta_value{meta_type::array, a};
}

// A SmolLM2-shaped vocabulary: 4 control tokens, 1 user-defined, the 256 byte tokens, and the
// tokens the merges make.
struct small_vocab {
    std::vector<std::string> tokens{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<x>", "<tool>"};
    std::vector<int64_t> types{3, 3, 3, 3, 4};
    std::vector<std::string> merges{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d",
                                    "Ġwor ld", "1 2", "12 3", "b c", "a b"};
    small_vocab() {
        for (int b = 0; b < 256; ++b) {
            tokens.push_back(byte_level::encode(std::string(1, static_cast<char>(b))));
            types.push_back(1);
        }
        for (const auto& m : merges) {
            auto sp = m.find(' ');
            tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
            types.push_back(1);
        }
    }
    token_id id(const std::string& text) const {
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] == text) return static_cast<token_id>(i);
        return -1;
    }
    metadata meta(const std::string& pre = "smollm") const {
        metadata m;
        m.set("tokenizer.ggml.model", str("gpt2"));
        m.set("tokenizer.ggml.pre", str(pre));
        m.set("tokenizer.ggml.tokens", strings(tokens));
        m.set("tokenizer.ggml.token_type", ints(types));
        m.set("tokenizer.ggml.merges", strings(merges));
        m.set("tokenizer.ggml.bos_token_id", u32(1));
        m.set("tokenizer.ggml.eos_token_id", u32(2));
        m.set("tokenizer.ggml.add_bos_token", boolean(false));
        return m;
    }
};

std::string bytes_of(const tokenizer& t, const std::vector<token_id>& ids) { return t.decode(ids); }

TEST(tokenizer, merges_apply_lowest_rank_first) {
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    EXPECT_EQ(t->encode("hello", false, false), std::vector<token_id>{v.id("hello")});
    EXPECT_EQ(t->encode("hello world", false, false),
              (std::vector<token_id>{v.id("hello"), v.id("Ġworld")}));
    // "abc": "b c" ranks before "a b", so a + bc, not ab + c.
    EXPECT_EQ(t->encode("abc", false, false), (std::vector<token_id>{v.id("a"), v.id("bc")}));
    small_vocab w;
    std::swap(w.merges[11], w.merges[12]);
    auto t2 = tokenizer::from_metadata(w.meta());
    EXPECT_EQ(t2->encode("abc", false, false), (std::vector<token_id>{w.id("ab"), w.id("c")}));
}

TEST(tokenizer, smollm_isolates_digits_gpt2_does_not) {
    small_vocab v;
    auto smol = tokenizer::from_metadata(v.meta("smollm"));
    auto gpt2 = tokenizer::from_metadata(v.meta("gpt2"));
    EXPECT_EQ(smol->encode("123", false, false), (std::vector<token_id>{v.id("1"), v.id("2"), v.id("3")}));
    EXPECT_EQ(gpt2->encode("123", false, false), std::vector<token_id>{v.id("123")});
    // qwen2 splits digits one by one too; llama-bpe keeps runs of up to three.
    EXPECT_EQ(tokenizer::from_metadata(v.meta("qwen2"))->encode("123", false, false).size(), 3u);
    EXPECT_EQ(tokenizer::from_metadata(v.meta("llama-bpe"))->encode("123", false, false),
              std::vector<token_id>{v.id("123")});
    EXPECT_EQ(smol->pre_tokenizer_name(), "smollm");
}

TEST(tokenizer, special_text_becomes_its_id_only_when_parse_special) {
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    auto with = t->encode("<|im_start|>hello<|im_end|>", true, false);
    EXPECT_EQ(with, (std::vector<token_id>{1, v.id("hello"), 2}));
    auto without = t->encode("<|im_start|>hello<|im_end|>", false, false);
    EXPECT_GT(without.size(), 3u);
    EXPECT_EQ(bytes_of(*t, without), "<|im_start|>hello<|im_end|>");
    // User-defined tokens are split out either way (as llama.cpp and Hugging Face do).
    EXPECT_EQ(t->encode("<tool>", false, false), std::vector<token_id>{4});
    EXPECT_EQ(t->find_special("<|im_end|>"), 2);
    EXPECT_EQ(t->find_special("hello"), -1);
}

TEST(tokenizer, bos_and_end_of_generation_follow_metadata) {
    small_vocab v;
    auto m = v.meta();
    auto t = tokenizer::from_metadata(m);
    EXPECT_EQ(t->bos(), 1);
    EXPECT_EQ(t->eos(), 2);
    EXPECT_FALSE(t->adds_bos());
    EXPECT_EQ(t->encode("hello", true, true), std::vector<token_id>{v.id("hello")});
    m.set("tokenizer.ggml.add_bos_token", boolean(true));
    auto t2 = tokenizer::from_metadata(m);
    EXPECT_EQ(t2->encode("hello", true, true), (std::vector<token_id>{1, v.id("hello")}));
    EXPECT_EQ(t2->encode("hello", true, false), std::vector<token_id>{v.id("hello")});
    // EOS, and the texts llama.cpp treats as end of generation.
    EXPECT_TRUE(t->is_end_of_generation(2));
    EXPECT_TRUE(t->is_end_of_generation(0));   // <|endoftext|>
    EXPECT_FALSE(t->is_end_of_generation(1));  // <|im_start|>
    EXPECT_FALSE(t->is_end_of_generation(v.id("hello")));
    EXPECT_FALSE(t->is_end_of_generation(-1));
    // No eot_token_id: the first token by id whose text llama.cpp takes as EOT.
    EXPECT_EQ(t->eot(), 0);
}

std::string random_bytes(std::mt19937& rng, size_t n) {
    static const std::vector<std::string> atoms{"hello", " world", "123", "<|im_end|>", "<tool>", "é", "€",
                                                "😀", "  ", "\n", "\t", "'s", "ab", "c"};
    std::string s;
    while (s.size() < n) {
        if (rng() % 3 == 0) s += static_cast<char>(rng() % 256);
        else s += atoms[rng() % atoms.size()];
    }
    return s;
}

TEST(tokenizer, every_byte_string_round_trips) {
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    std::mt19937 rng(1234);
    for (int i = 0; i < 2000; ++i) {
        std::string s = random_bytes(rng, rng() % 64);
        ASSERT_EQ(t->decode(t->encode(s, false, false)), s) << "case " << i;
        ASSERT_EQ(t->decode(t->encode(s, true, false)), s) << "case " << i;
    }
}

bool is_valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        size_t n = byte_level::valid_utf8_len(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

TEST(tokenizer, stream_decoder_never_emits_half_a_code_point) {
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    const std::string text = "héllo € 😀 wörld 中文";
    // Byte tokens one at a time: the worst case for a streaming decoder.
    std::vector<token_id> ids;
    for (unsigned char c : text) ids.push_back(v.id(byte_level::encode(std::string(1, static_cast<char>(c)))));
    stream_decoder d(*t);
    std::string all;
    for (token_id id : ids) {
        std::string piece = d.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << "piece '" << piece << "'";
        all += piece;
    }
    all += d.flush();
    EXPECT_EQ(all, text);
    // Invalid bytes are not held back forever: they come out, and flush() returns the rest.
    stream_decoder d2(*t);
    std::string out = d2.push(v.id(byte_level::encode("\xff")));
    out += d2.push(v.id(byte_level::encode("\xe2")));
    EXPECT_EQ(out, "\xff");
    EXPECT_EQ(d2.flush(), "\xe2");
}

TEST(tokenizer, ids_past_the_tokens_decode_to_no_text) {
    // A Hugging Face model's output may have more rows than its tokenizer has tokens; a sampled
    // padding id has no text, and the text around it is unchanged.
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    const token_id padding = t->n_vocab() + 7;
    const token_id h = v.id(byte_level::encode("h")), i = v.id(byte_level::encode("i"));
    stream_decoder d(*t);
    std::string out = d.push(h);
    out += d.push(padding);
    out += d.push(i);
    EXPECT_EQ(out + d.flush(), "hi");
    EXPECT_EQ(t->decode({h, padding, i}), "hi");
    EXPECT_THROW(t->token_bytes(padding), error);
    EXPECT_THROW(t->text_of(-1), error);
}

std::vector<std::string> pieces(pre_kind k, std::string_view text) {
    std::vector<std::pair<size_t, size_t>> spans;
    pre_tokenizer(k).split(text, spans);
    std::vector<std::string> out;
    for (auto [b, e] : spans) out.emplace_back(text.substr(b, e - b));
    return out;
}

TEST(pre_tokenizer, regex_lists_split_like_llama_cpp) {
    using v = std::vector<std::string>;
    // \s+(?!\S) leaves the last space to the next word.
    EXPECT_EQ(pieces(pre_kind::gpt2, "Hello   world"), (v{"Hello", "  ", " world"}));
    EXPECT_EQ(pieces(pre_kind::gpt2, "it's 2024!"), (v{"it", "'s", " 2024", "!"}));
    // SmolLM: digits alone first, then the gpt2 regex inside each remaining piece.
    EXPECT_EQ(pieces(pre_kind::smollm, "ab 123"), (v{"ab", " ", "1", "2", "3"}));
    // Llama 3: runs of up to three digits, contractions in any case, newlines kept together.
    EXPECT_EQ(pieces(pre_kind::llama3, "1234567 IT'S\n\n x"), (v{"123", "456", "7", " IT", "'S", "\n\n", " x"}));
    EXPECT_EQ(pieces(pre_kind::qwen2, "x=12"), (v{"x", "=", "1", "2"}));
    EXPECT_EQ(pieces(pre_kind::qwen2, "中文 text"), (v{"中文", " text"}));
}

TEST(tokenizer, byte_missing_from_the_vocabulary_becomes_replacement_char) {
    // SmolLM2's vocabulary has no token for 0xFF (never valid UTF-8): it is encoded as U+FFFD,
    // as llama.cpp does, rather than dropped.
    small_vocab v;
    const std::string ff = byte_level::encode("\xff");
    v.tokens[static_cast<size_t>(v.id(ff))] = "<unused-ff>";
    auto t = tokenizer::from_metadata(v.meta());
    EXPECT_EQ(t->decode(t->encode("a\xff", false, false)), "a\xEF\xBF\xBD");
    EXPECT_EQ(t->decode(t->encode("a\xfe", false, false)), "a\xfe");
}

// Writes v as a Hugging Face tokenizer.json (+ tokenizer_config.json when config is not empty).
void write_hf_dir(const std::filesystem::path& dir, const small_vocab& v, const std::string& post_processor,
                  const std::string& config) {
    std::filesystem::create_directories(dir);
    std::ofstream f(dir / "tokenizer.json");
    std::string vocab, merges, added;
    auto q = [](const std::string& s) {
        std::string o = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') o += '\\';
            o += c;
        }
        return o + "\"";
    };
    for (size_t i = 0; i < v.tokens.size(); ++i) vocab += (i ? "," : "") + q(v.tokens[i]) + ":" + std::to_string(i);
    for (size_t i = 0; i < v.merges.size(); ++i) {
        auto sp = v.merges[i].find(' ');
        // Half as "a b" strings, half as [a, b] pairs: both spellings exist in the wild.
        merges += (i ? "," : "") + (i % 2 ? q(v.merges[i])
                                          : "[" + q(v.merges[i].substr(0, sp)) + "," + q(v.merges[i].substr(sp + 1)) + "]");
    }
    for (int i = 0; i < 5; ++i)
        added += std::string(i ? "," : "") + "{\"id\":" + std::to_string(i) + ",\"content\":" + q(v.tokens[i]) +
                 ",\"special\":" + (i < 4 ? "true" : "false") + "}";
    f << "{\"added_tokens\":[" << added << "],\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
      << "{\"type\":\"Digits\",\"individual_digits\":true},"
      << "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]},"
      << "\"post_processor\":" << (post_processor.empty() ? "null" : post_processor) << ","
      << "\"model\":{\"type\":\"BPE\",\"vocab\":{" << vocab << "},\"merges\":[" << merges << "]}}";
    if (!config.empty()) std::ofstream(dir / "tokenizer_config.json") << config;
}

std::filesystem::path temp_dir(const char* tag) {
    return std::filesystem::temp_directory_path() / (std::string("sluice_tok_") + tag + "_" + std::to_string(::getpid()));
}

TEST(tokenizer, hf_tokenizer_json_matches_gguf_metadata) {
    small_vocab v;
    const auto dir = temp_dir("hf");
    write_hf_dir(dir, v, "", R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                                 "add_bos_token": false, "chat_template": "{{ messages }}"})");
    auto hf = tokenizer::from_hf_dir(dir);
    auto gg = tokenizer::from_metadata(v.meta());
    std::filesystem::remove_all(dir);
    EXPECT_EQ(hf->n_vocab(), gg->n_vocab());
    EXPECT_EQ(hf->bos(), 1);
    EXPECT_EQ(hf->eos(), 2);
    EXPECT_FALSE(hf->adds_bos());
    EXPECT_EQ(hf->chat_template(), "{{ messages }}");
    std::mt19937 rng(99);
    for (int i = 0; i < 500; ++i) {
        std::string s = random_bytes(rng, rng() % 48);
        ASSERT_EQ(hf->encode(s, true, false), gg->encode(s, true, false)) << "case " << i;
    }
}

TEST(tokenizer, hf_post_processor_template_adds_bos) {
    // Llama 3's tokenizer.json adds BOS with a TemplateProcessing post-processor, not add_bos_token.
    small_vocab v;
    const auto dir = temp_dir("hf_bos");
    write_hf_dir(dir, v,
                 R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}]})",
                 "");
    auto t = tokenizer::from_hf_dir(dir);
    EXPECT_TRUE(t->adds_bos());
    EXPECT_EQ(t->bos(), 1);
    EXPECT_EQ(t->encode("hello", true, true), (std::vector<token_id>{1, v.id("hello")}));
    write_hf_dir(dir, v, "", R"({"bos_token": "<nope>"})");
    EXPECT_THROW(tokenizer::from_hf_dir(dir), error);
    std::filesystem::remove_all(dir);
}

// A hostile tokenizer.json: nested deep enough to overflow a recursive parser's stack (a
// 400 KB file crashed the loader), or a token id that would size the tables at 2^31 entries.
// Each is a clear error before the parse or the allocation.
TEST(tokenizer_bad_input, hf_deep_nesting_and_huge_ids_are_rejected_before_use) {
    small_vocab v;
    const auto dir = temp_dir("hf_hostile");
    write_hf_dir(dir, v, "[" + std::string(200000, '[') + std::string(200000, ']') + "]", "");
    try {
        tokenizer::from_hf_dir(dir);
        ADD_FAILURE() << "a tokenizer.json nested 200,001 levels deep loaded";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
    }
    // The vocabulary with one more token whose id is 2^31 - 2, or 2^64 - 1 (once read as -1).
    const std::pair<const char*, const char*> cases[] = {{"2147483646", "but there are only"},
                                                         {"18446744073709551615", "outside 0..2^31-2"}};
    for (const auto& [id, want] : cases) {
        write_hf_dir(dir, v, "", "");
        std::string text;
        {
            std::ifstream f(dir / "tokenizer.json");
            text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        }
        const size_t at = text.find("\"vocab\":{") + 9;
        text.insert(at, std::string("\"zz_big\":") + id + ",");
        std::ofstream(dir / "tokenizer.json") << text;
        try {
            tokenizer::from_hf_dir(dir);
            ADD_FAILURE() << "a token id of " << id << " loaded";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << id << ": " << e.what();
        }
    }
    // A tokenizer_config.json that is not an object, or whose keys have the wrong type, was
    // ignored (the defaults silently taken): each is an error naming the file and key.
    const std::pair<const char*, const char*> configs[] = {{"[1, 2]", "expected a JSON object"},
                                                           {R"({"add_bos_token": "true"})", "'add_bos_token' has the wrong type"},
                                                           {R"({"chat_template": 5})", "'chat_template' has the wrong type"}};
    for (const auto& [config, want] : configs) {
        write_hf_dir(dir, v, "", config);
        try {
            tokenizer::from_hf_dir(dir);
            ADD_FAILURE() << config << " loaded";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << config << ": " << e.what();
        }
    }
    std::filesystem::remove_all(dir);
}

// Bad input: each error names the key and the value at fault.
void expect_error(const metadata& m, const std::vector<std::string>& parts) {
    try {
        tokenizer::from_metadata(m);
        ADD_FAILURE() << "no error; expected one naming " << parts[0];
    } catch (const error& e) {
        for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}

TEST(tokenizer_bad_input, special_id_past_the_vocabulary_is_rejected) {
    small_vocab v;
    auto m = v.meta();
    m.set("tokenizer.ggml.bos_token_id", u32(static_cast<int64_t>(v.tokens.size())));
    expect_error(m, {"tokenizer.ggml.bos_token_id", std::to_string(v.tokens.size())});
    m = v.meta();
    m.set("tokenizer.ggml.eos_token_id", u32(1000000));
    expect_error(m, {"tokenizer.ggml.eos_token_id", "1000000"});
}

TEST(tokenizer_bad_input, sentencepiece_model_is_rejected_clearly) {
    small_vocab v;
    auto m = v.meta();
    m.set("tokenizer.ggml.model", str("llama"));
    expect_error(m, {"tokenizer.ggml.model", "llama", "not supported"});
    m.set("tokenizer.ggml.model", str("t5"));
    expect_error(m, {"tokenizer.ggml.model", "t5"});
}

TEST(tokenizer_bad_input, merge_naming_an_unknown_token_is_rejected) {
    small_vocab v;
    v.merges.push_back("q zz");
    expect_error(v.meta(), {"tokenizer.ggml.merges", "q zz", "zz"});
    small_vocab w;
    w.merges.push_back("nospace");
    expect_error(w.meta(), {"tokenizer.ggml.merges", "nospace"});
}

TEST(tokenizer_bad_input, token_type_length_mismatch_is_rejected) {
    small_vocab v;
    v.types.pop_back();
    expect_error(v.meta(), {"tokenizer.ggml.token_type", std::to_string(v.types.size()),
                            std::to_string(v.tokens.size())});
    small_vocab w;
    w.types[7] = 9;
    expect_error(w.meta(), {"tokenizer.ggml.token_type[7]", "9"});
}

TEST(tokenizer_bad_input, missing_or_empty_vocabulary_is_rejected) {
    small_vocab v;
    metadata m;
    const metadata full = v.meta();
    for (const auto& [k, val] : full.all())
        if (k != "tokenizer.ggml.tokens") m.set(k, val);
    expect_error(m, {"tokenizer.ggml.tokens"});
    metadata e = v.meta();
    e.set("tokenizer.ggml.tokens", strings({}));
    e.set("tokenizer.ggml.token_type", ints({}));
    e.set("tokenizer.ggml.merges", strings({}));
    e.set("tokenizer.ggml.bos_token_id", u32(0));
    expect_error(e, {"tokenizer.ggml.tokens", "empty"});
    metadata w = v.meta();
    w.set("tokenizer.ggml.tokens", ints({1, 2}));
    expect_error(w, {"tokenizer.ggml.tokens", "strings"});
}

TEST(tokenizer_bad_input, unknown_pre_tokenizer_is_rejected) {
    small_vocab v;
    expect_error(v.meta("mystery-bpe"), {"tokenizer.ggml.pre", "mystery-bpe"});
}

TEST(tokenizer_bad_input, negative_id_is_rejected_by_decode) {
    small_vocab v;
    auto t = tokenizer::from_metadata(v.meta());
    EXPECT_THROW(t->decode({-1}), error);
    EXPECT_THROW(t->token_bytes(-1), error);
}

}  // namespace
}  // namespace sluice
