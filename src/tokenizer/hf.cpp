// tokenizer::from_hf_dir: a Hugging Face tokenizer.json (BPE model, byte-level pre-tokenizer and
// decoder) plus tokenizer_config.json for BOS/EOS, add_bos_token and the chat template.
#include "core/error.h"
#include "io/hf_config.h"
#include "io/side_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace sluice {

namespace {

using json = nlohmann::json;

json read_json(const std::filesystem::path& p) {
    const std::string text = read_side_file(p, "tokenizer");
    // nlohmann::json recurses once per level: a file of a million '[' would overflow the stack.
    if (json_nesting_depth(text) > k_max_json_depth)
        fail("tokenizer: '{}': JSON nested deeper than {} levels", p.string(), k_max_json_depth);
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        fail("tokenizer: '{}' is not valid JSON: {}", p.string(), e.what());
    }
}

// The original (Hugging Face) spellings of the split regexes llama.cpp's lists stand for.
const char* const hf_llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const hf_qwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct pre_check {
    const std::string& file;
    void byte_level(const json& p, bool want_regex) const {
        if (p.value("add_prefix_space", false))
            fail("tokenizer: {}: pre_tokenizer ByteLevel.add_prefix_space = true is not supported", file);
        if (p.value("use_regex", true) != want_regex)
            fail("tokenizer: {}: pre_tokenizer ByteLevel.use_regex = {} here is not a supported combination",
                 file, p.value("use_regex", true));
    }
};

// Recognises the pre-tokenizer configurations of the supported families.
pre_kind pre_from_json(const json& p, const std::string& file) {
    pre_check chk{file};
    if (!p.is_object()) fail("tokenizer: {}: pre_tokenizer is missing (expected ByteLevel or a Sequence)", file);
    const std::string type = p.value("type", "");
    if (type == "ByteLevel") {
        chk.byte_level(p, true);
        return pre_kind::gpt2;
    }
    if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
        p["pretokenizers"].size() == 2) {
        const json& a = p["pretokenizers"][0];
        const json& b = p["pretokenizers"][1];
        const std::string ta = a.value("type", ""), tb = b.value("type", "");
        if (ta == "Digits" && tb == "ByteLevel") {
            if (!a.value("individual_digits", false))
                fail("tokenizer: {}: pre_tokenizer Digits.individual_digits = false is not supported", file);
            chk.byte_level(b, true);
            return pre_kind::smollm;
        }
        if (ta == "Split" && tb == "ByteLevel") {
            chk.byte_level(b, false);
            if (a.value("behavior", "") != "Isolated" || a.value("invert", false))
                fail("tokenizer: {}: pre_tokenizer Split must be behavior Isolated, invert false; got {}", file, a.dump());
            std::string pattern;
            if (a.contains("pattern") && a["pattern"].is_object() && a["pattern"].contains("Regex"))
                pattern = a["pattern"]["Regex"].get<std::string>();
            if (pattern == hf_llama3) return pre_kind::llama3;
            if (pattern == hf_qwen2) return pre_kind::qwen2;
            fail("tokenizer: {}: pre_tokenizer Split regex '{}' is not one of the supported (llama3, qwen2)", file, pattern);
        }
    }
    fail("tokenizer: {}: pre_tokenizer {} is not supported (ByteLevel; Digits+ByteLevel; Split(llama3|qwen2)+ByteLevel)",
         file, p.dump());
}

// "bos_token": "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_text(const json& cfg, const char* key) {
    if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
    const json& v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
}

// The token a TemplateProcessing post-processor puts before a single sequence (Llama 3 adds
// BOS this way rather than with add_bos_token), searched through Sequence post-processors.
std::optional<std::string> template_prefix_token(const json& p) {
    if (!p.is_object()) return std::nullopt;
    const std::string type = p.value("type", "");
    if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
        for (const json& q : p["processors"])
            if (auto t = template_prefix_token(q)) return t;
        return std::nullopt;
    }
    if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array() || p["single"].empty())
        return std::nullopt;
    const json& first = p["single"][0];
    if (first.contains("SpecialToken") && first["SpecialToken"].contains("id") && first["SpecialToken"]["id"].is_string())
        return first["SpecialToken"]["id"].get<std::string>();
    return std::nullopt;
}

}  // namespace

std::unique_ptr<tokenizer> tokenizer::from_hf_dir(const std::filesystem::path& dir) {
    const auto tok_path = dir / "tokenizer.json";
    const std::string file = tok_path.string();
    const json j = read_json(tok_path);
    try {
        if (!j.contains("model") || !j["model"].is_object()) fail("tokenizer: {}: missing 'model'", file);
        const json& m = j["model"];
        if (m.value("type", "BPE") != "BPE")
            fail("tokenizer: {}: model.type = '{}' is not supported; only 'BPE' (byte-level) is", file, m.value("type", ""));
        if (m.value("byte_fallback", false))
            fail("tokenizer: {}: model.byte_fallback = true (SentencePiece-style BPE) is not supported", file);
        if (!m.contains("vocab") || !m["vocab"].is_object() || m["vocab"].empty())
            fail("tokenizer: {}: model.vocab is missing or empty", file);

        bpe_spec s;
        s.source = file;
        s.tokens_key = "model.vocab";
        s.merges_key = "model.merges";
        // Ids may come from model.vocab and added_tokens; together they must cover 0..n-1.
        std::vector<std::pair<int64_t, std::string>> entries;
        std::vector<std::pair<int64_t, bool>> added;  // id, special
        // An id as written: unsigned values beyond int64 stay out of range instead of wrapping to -1.
        auto id_value = [](const json& v) -> int64_t {
            return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
        };
        for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
            if (!it.value().is_number_integer()) fail("tokenizer: {}: model.vocab['{}'] is not an integer id", file, it.key());
            entries.emplace_back(id_value(it.value()), it.key());
        }
        if (j.contains("added_tokens") && !j["added_tokens"].is_null() && !j["added_tokens"].is_array())
            fail("tokenizer: {}: added_tokens: expected an array, got {}", file, j["added_tokens"].type_name());
        if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
            for (const json& a : j["added_tokens"]) {
                if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
                    fail("tokenizer: {}: added_tokens entry {} lacks an integer 'id' or a string 'content'", file, a.dump());
                entries.emplace_back(id_value(a["id"]), a["content"].get<std::string>());
                added.emplace_back(id_value(a["id"]), a.value("special", false));
            }
        }
        int64_t max_id = -1;
        for (auto& [id, text] : entries) {
            if (id < 0 || id >= INT32_MAX) fail("tokenizer: {}: token '{}' has id {}, outside 0..2^31-2", file, text, id);
            max_id = std::max(max_id, id);
        }
        // Ids run 0..n-1 without gaps, so n is at most the number of entries: checked before the
        // tables of n entries are allocated (an id of 2^31-2 would ask for 64 GB).
        if (max_id >= static_cast<int64_t>(entries.size()))
            fail("tokenizer: {}: a token has id {} but there are only {} tokens (ids must run 0..n-1 without gaps)", file,
                 max_id, entries.size());
        const size_t n = static_cast<size_t>(max_id + 1);
        s.tokens.assign(n, std::string());
        std::vector<uint8_t> seen(n, 0);
        for (auto& [id, text] : entries) {
            if (seen[id] && s.tokens[id] != text)
                fail("tokenizer: {}: id {} is given to both '{}' and '{}'", file, id, s.tokens[id], text);
            s.tokens[id] = text;
            seen[id] = 1;
        }
        for (size_t i = 0; i < n; ++i)
            if (!seen[i]) fail("tokenizer: {}: no token has id {} (ids must run 0..{} without gaps)", file, i, n - 1);
        s.types.assign(n, tt_normal);
        for (auto [id, special] : added) s.types[id] = special ? tt_control : tt_user_defined;

        if (m.contains("merges") && m["merges"].is_array()) {
            const json& ms = m["merges"];
            s.merges.reserve(ms.size());
            for (size_t r = 0; r < ms.size(); ++r) {
                const json& e = ms[r];
                if (e.is_string()) {  // "a b"
                    const std::string t = e.get<std::string>();
                    size_t sp = t.size() > 1 ? t.find(' ', 1) : std::string::npos;
                    if (sp == std::string::npos)
                        fail("tokenizer: {}: model.merges[{}] = '{}' is not two tokens separated by a space", file, r, t);
                    s.merges.emplace_back(t.substr(0, sp), t.substr(sp + 1));
                } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
                    s.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
                } else {
                    fail("tokenizer: {}: model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", file, r, e.dump());
                }
            }
        } else {
            fail("tokenizer: {}: model.merges is missing", file);
        }
        s.ignore_merges = m.value("ignore_merges", false);
        s.pre = pre_from_json(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), file);

        auto id_of = [&](const std::string& text) -> token_id {
            for (size_t i = 0; i < n; ++i)
                if (s.tokens[i] == text) return static_cast<token_id>(i);
            return -1;
        };
        // A post-processor template that starts with a special token adds it as BOS.
        if (auto prefix = template_prefix_token(j.contains("post_processor") ? j["post_processor"] : json())) {
            s.bos = id_of(*prefix);
            if (s.bos < 0) fail("tokenizer: {}: post_processor adds '{}', which is not a token", file, *prefix);
            s.add_bos = true;
        }
        // tokenizer_config.json: BOS/EOS by text, add_bos_token (when present it decides).
        const auto cfg_path = dir / "tokenizer_config.json";
        if (std::filesystem::exists(cfg_path)) {
            const json cfg = read_json(cfg_path);
            // A malformed config is an error, not a silent fall back to defaults: its keys decide
            // BOS, EOS and the chat template.
            if (!cfg.is_object()) fail("tokenizer: {}: expected a JSON object, got {}", cfg_path.string(), cfg.type_name());
            for (const char* key : {"add_bos_token", "chat_template"}) {
                auto it = cfg.find(key);
                if (it == cfg.end() || it->is_null()) continue;
                const bool ok = std::string_view(key) == "add_bos_token" ? it->is_boolean() : it->is_string() || it->is_array();
                if (!ok) fail("tokenizer: {}: '{}' has the wrong type ({})", cfg_path.string(), key, it->type_name());
            }
            auto find_id = [&](const char* key) -> token_id {
                auto t = token_text(cfg, key);
                if (!t) return -1;
                if (token_id id = id_of(*t); id >= 0) return id;
                fail("tokenizer: {}: {} = '{}' is not a token of {}", cfg_path.string(), key, *t, file);
            };
            if (token_id b = find_id("bos_token"); b >= 0) s.bos = b;
            s.eos = find_id("eos_token");
            if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
                s.add_bos = cfg["add_bos_token"].get<bool>();
            if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
                s.chat_template = cfg["chat_template"].get<std::string>();
            if (s.add_bos && s.bos < 0)
                fail("tokenizer: {}: add_bos_token is true but bos_token is absent", cfg_path.string());
        }
        if (s.add_bos && s.bos < 0) fail("tokenizer: {}: BOS is to be added but no bos_token is named", file);
        return make_bpe(std::move(s));
    } catch (const json::exception& e) {
        fail("tokenizer: {}: unexpected JSON shape: {}", file, e.what());
    }
}

}  // namespace sluice
