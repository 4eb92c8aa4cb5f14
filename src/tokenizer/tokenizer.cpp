// tokenizer factories: GGUF metadata (tokenizer.ggml.*), decoding and the streaming decoder.
// from_hf_dir is in hf.cpp.
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "io/model_file.h"
#include "tokenizer/bpe.h"

namespace sluice {

namespace {

// tokenizer.ggml.pre -> regex set. llama.cpp's aliases for the same lists are accepted; an
// unknown name is an error rather than a silently different split.
pre_kind pre_from_name(const std::string& pre) {
    if (pre == "gpt2" || pre == "gpt-2") return pre_kind::gpt2;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return pre_kind::llama3;
    if (pre == "qwen2" || pre == "deepseek-r1-qwen") return pre_kind::qwen2;
    if (pre == "smollm" || pre == "starcoder" || pre == "refact") return pre_kind::smollm;
    fail("tokenizer: tokenizer.ggml.pre = '{}' is not supported (supported: gpt2, llama-bpe, qwen2, smollm)", pre);
}

std::vector<std::string> string_array(const metadata& meta, std::string_view key) {
    const meta_array* a = meta.get_array(key);
    if (!a) fail("tokenizer: missing key '{}' (an array of strings)", key);
    if (a->elem != meta_type::string || a->strings.size() != a->size())
        fail("tokenizer: key '{}': expected an array of strings, got an array of {}", key, name(a->elem));
    return a->strings;
}

token_id special_id(const metadata& meta, std::string_view key, size_t n_vocab) {
    auto v = meta.get_int(key);
    if (!v) return -1;
    if (*v < 0 || static_cast<uint64_t>(*v) >= n_vocab)
        fail("tokenizer: {} = {} is outside the vocabulary of {} tokens", key, *v, n_vocab);
    return static_cast<token_id>(*v);
}

}  // namespace

std::unique_ptr<tokenizer> tokenizer::from_metadata(const metadata& meta) {
    const std::string model = meta.get_string("tokenizer.ggml.model").value_or("");
    if (model.empty()) fail("tokenizer: missing key 'tokenizer.ggml.model' (expected 'gpt2')");
    if (model == "llama")
        fail("tokenizer: tokenizer.ggml.model = 'llama' (SentencePiece) is not supported; only 'gpt2' (byte-level BPE) is");
    if (model != "gpt2") fail("tokenizer: tokenizer.ggml.model = '{}' is not supported; only 'gpt2' (byte-level BPE) is", model);

    bpe_spec s;
    s.source = "gguf";
    s.tokens_key = "tokenizer.ggml.tokens";
    s.merges_key = "tokenizer.ggml.merges";
    s.tokens = string_array(meta, s.tokens_key);
    if (s.tokens.empty()) fail("tokenizer: key 'tokenizer.ggml.tokens' is empty: a vocabulary needs at least one token");
    const size_t n = s.tokens.size();
    if (const meta_array* tt = meta.get_array("tokenizer.ggml.token_type")) {
        if (tt->size() != n)
            fail("tokenizer: tokenizer.ggml.token_type has {} entries, expected {} (one per token in tokenizer.ggml.tokens)",
                 tt->size(), n);
        if (tt->ints.size() != n)
            fail("tokenizer: key 'tokenizer.ggml.token_type': expected an array of integers, got an array of {}", name(tt->elem));
        s.types.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            int64_t t = tt->ints[i];
            if (t < tt_undefined || t > tt_byte)
                fail("tokenizer: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", i, t);
            s.types.push_back(static_cast<int32_t>(t));
        }
    }
    const auto merges = string_array(meta, s.merges_key);
    s.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
        // "a b": split at the first space after the first character (a token may be a space
        // only in its GPT-2 form 'Ġ', but llama.cpp searches from 1 all the same).
        const std::string& m = merges[r];
        size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (sp == std::string::npos)
            fail("tokenizer: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", r, m);
        s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    const std::string pre = meta.get_string("tokenizer.ggml.pre").value_or("gpt2");
    s.pre = pre_from_name(pre);
    s.ignore_merges = s.pre == pre_kind::llama3;
    s.bos = special_id(meta, "tokenizer.ggml.bos_token_id", n);
    s.eos = special_id(meta, "tokenizer.ggml.eos_token_id", n);
    s.eot = special_id(meta, "tokenizer.ggml.eot_token_id", n);
    s.eom = special_id(meta, "tokenizer.ggml.eom_token_id", n);
    s.fim_pad = special_id(meta, "tokenizer.ggml.fim_pad_token_id", n);
    s.fim_rep = special_id(meta, "tokenizer.ggml.fim_rep_token_id", n);
    s.fim_sep = special_id(meta, "tokenizer.ggml.fim_sep_token_id", n);
    s.llama_cpp_fixups = true;
    special_id(meta, "tokenizer.ggml.unknown_token_id", n);
    special_id(meta, "tokenizer.ggml.padding_token_id", n);
    // llama.cpp's defaults: Llama 3 and SmolLM add BOS unless the file says otherwise.
    s.add_bos = meta.get_bool("tokenizer.ggml.add_bos_token")
                    .value_or(s.pre == pre_kind::llama3 || s.pre == pre_kind::smollm);
    if (s.add_bos && s.bos < 0)
        fail("tokenizer: tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is absent");
    s.chat_template = meta.get_string("tokenizer.chat_template").value_or("");
    return make_bpe(std::move(s));
}

std::unique_ptr<tokenizer> tokenizer::for_model(const model_file& f, const std::filesystem::path& model_path) {
    if (f.format() == "gguf") return from_metadata(f.meta());
    const auto dir = std::filesystem::is_directory(model_path) ? model_path : model_path.parent_path();
    return from_hf_dir(dir);
}

std::string tokenizer::decode(const std::vector<token_id>& ids) const {
    std::string out;
    for (token_id id : ids) out += text_of(id);
    return out;
}

namespace {

// How many bytes at the end of s form the start of a UTF-8 sequence that is still incomplete
// (0 when s ends on a boundary, or when its tail is invalid anyway and will never complete).
size_t incomplete_tail(const std::string& s) {
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        if (c >= 0xF5) need = 1;
        if (need <= back) return 0;  // complete (or a single byte)
        // The bytes after the lead must be valid so far, else nothing will complete it.
        std::string probe = s.substr(n - back);
        const unsigned b1 = back > 1 ? static_cast<unsigned char>(probe[1]) : 0;
        if (back > 1) {
            if (c == 0xE0 && b1 < 0xA0) return 0;
            if (c == 0xED && b1 > 0x9F) return 0;
            if (c == 0xF0 && b1 < 0x90) return 0;
            if (c == 0xF4 && b1 > 0x8F) return 0;
        }
        return back;
    }
    return 0;
}

}  // namespace

std::string stream_decoder::push(token_id id) {
    pending_ += tok_.text_of(id);
    const size_t hold = incomplete_tail(pending_);
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string stream_decoder::flush() {
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace sluice
