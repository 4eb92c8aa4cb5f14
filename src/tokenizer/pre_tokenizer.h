// Pre-tokenizers: the regex lists llama.cpp applies for tokenizer.ggml.pre, compiled with PCRE2
// (UTF + Unicode properties, JIT). Regexes apply in sequence: each one splits every piece the
// previous left into its matches and the unmatched text between them (so SmolLM2's "\p{N}"
// first isolates every digit, as Hugging Face's Digits(individual_digits) does).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

enum class pre_kind {
    gpt2,    // 's|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
    llama3,  // Llama 3 ("llama-bpe"): digits in runs of at most 3, case-insensitive contractions
    qwen2,   // Qwen2/2.5/3: like llama3 but one digit per piece
    smollm,  // SmolLM/StarCoder: every digit alone, then the gpt2 regex
};
std::string_view name(pre_kind k);

class pre_tokenizer {
public:
    explicit pre_tokenizer(pre_kind kind);
    ~pre_tokenizer();
    pre_tokenizer(pre_tokenizer&&) noexcept;
    pre_tokenizer& operator=(pre_tokenizer&&) noexcept;

    pre_kind kind() const { return kind_; }
    // Splits valid UTF-8 `text` into pieces, appended to `out` as [begin, end) byte offsets
    // into text. The pieces cover text exactly, in order.
    void split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

private:
    struct compiled;
    pre_kind kind_;
    std::vector<std::unique_ptr<compiled>> regexes_;
};

}  // namespace sluice
