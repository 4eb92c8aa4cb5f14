// libFuzzer target for the byte-level BPE tokenizer: a SmolLM2-shaped vocabulary (control and
// user-defined tokens, all 256 byte tokens, a few hundred merges) built once in code under each
// supported pre-tokenizer. For every byte string: encoding never fails, every id is in range,
// decode(encode(s)) == s with and without parse_special, and the streaming decoder's pieces
// concatenate to the same bytes. Anything else (a crash, a sanitizer report) is a bug.
#include "core/error.h"
#include "io/metadata.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace sluice;

meta_value str(std::string s) { return meta_value{meta_type::string, std::move(s)}; }

meta_value array_of(std::vector<std::string> v) {
    auto a = std::make_shared<meta_array>();
    a->elem = meta_type::string;
    a->strings = std::move(v);
    return meta_value{meta_type::array, a};
}

meta_value array_of(std::vector<int64_t> v) {
    auto a = std::make_shared<meta_array>();
    a->elem = meta_type::i32;
    a->ints = std::move(v);
    return meta_value{meta_type::array, a};
}

std::unique_ptr<tokenizer> build(const char* pre) {
    std::vector<std::string> tokens{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
    std::vector<int64_t> types{3, 3, 3, 4};
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(byte_level::encode(std::string(1, static_cast<char>(b))));
        types.push_back(1);
    }
    // Merges: letter pairs, space + letter, digit pairs, then longer words built on them.
    std::vector<std::string> merges;
    auto add = [&](const std::string& a, const std::string& b) {
        merges.push_back(a + " " + b);
        tokens.push_back(a + b);
        types.push_back(1);
    };
    const std::string common = "etaoinshrdlu";
    for (char a : common)
        for (char b : common) add(std::string(1, a), std::string(1, b));
    for (char a : common) add("Ġ", std::string(1, a));
    for (char a = '0'; a <= '9'; ++a) add(std::string(1, a), "0");
    add("Ġt", "he");
    add("Ġthe", "re");
    add("Ġ", "Ġ");
    add("ĠĠ", "ĠĠ");
    add("Ċ", "Ċ");
    add("Ã", "©");  // é
    metadata m;
    m.set("tokenizer.ggml.model", str("gpt2"));
    m.set("tokenizer.ggml.pre", str(pre));
    m.set("tokenizer.ggml.tokens", array_of(tokens));
    m.set("tokenizer.ggml.token_type", array_of(types));
    m.set("tokenizer.ggml.merges", array_of(merges));
    m.set("tokenizer.ggml.bos_token_id", meta_value{meta_type::u32, int64_t{1}});
    m.set("tokenizer.ggml.eos_token_id", meta_value{meta_type::u32, int64_t{2}});
    return tokenizer::from_metadata(m);
}

const std::vector<std::unique_ptr<tokenizer>>& tokenizers() {
    static const auto all = [] {
        std::vector<std::unique_ptr<tokenizer>> v;
        for (const char* pre : {"smollm", "gpt2", "llama-bpe", "qwen2"}) v.push_back(build(pre));
        return v;
    }();
    return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const tokenizer& t = *tokenizers()[data[0] % 4];
    const std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
    for (bool parse_special : {false, true}) {
        const std::vector<token_id> ids = t.encode(s, parse_special, false);
        for (token_id id : ids)
            if (id < 0 || id >= t.n_vocab()) std::abort();
        if (t.decode(ids) != s) std::abort();
        stream_decoder d(t);
        std::string streamed;
        for (token_id id : ids) streamed += d.push(id);
        streamed += d.flush();
        if (streamed != s) std::abort();
    }
    return 0;
}
