// Byte-level BPE tokenizers (gpt2, llama-bpe, qwen2, smollm pre-tokenizers) built from GGUF
// metadata (tokenizer.ggml.*) or from a Hugging Face tokenizer.json. SentencePiece ("llama")
// vocabularies are not supported and are rejected at load with that reason.
// Invalid UTF-8 in the input is kept: each such byte becomes its byte token, so
// decode(encode(s)) == s for every byte string s.
#pragma once

#include "io/metadata.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class model_file;

using token_id = int32_t;

class tokenizer {
public:
    virtual ~tokenizer() = default;

    // From tokenizer.ggml.* keys. Throws sluice::error naming the key on bad metadata.
    static std::unique_ptr<tokenizer> from_metadata(const metadata& meta);
    // From a Hugging Face directory's tokenizer.json (+ tokenizer_config.json when present).
    static std::unique_ptr<tokenizer> from_hf_dir(const std::filesystem::path& dir);
    // Whichever applies to an opened model.
    static std::unique_ptr<tokenizer> for_model(const model_file& f,
                                                const std::filesystem::path& model_path);

    // Text to ids. parse_special: special/added-token text in `text` becomes those ids.
    // add_bos: prepend BOS when the model's metadata asks for it.
    virtual std::vector<token_id> encode(std::string_view text, bool parse_special = true,
                                         bool add_bos = true) const = 0;
    // The bytes a token stands for (may be part of a UTF-8 code point).
    virtual std::string token_bytes(token_id id) const = 0;
    // token_bytes for generated ids: ids past the tokenizer's tokens have no text. They are the
    // rows a Hugging Face model pads its output to (Qwen3's configs have 151,936 for 151,669
    // tokens), which sampling can pick; transformers' and vLLM's decoders skip them too.
    std::string text_of(token_id id) const { return id >= n_vocab() ? std::string{} : token_bytes(id); }
    // Ids to text (complete; invalid UTF-8 bytes are kept as they are).
    std::string decode(const std::vector<token_id>& ids) const;

    virtual int32_t n_vocab() const = 0;
    virtual token_id bos() const = 0;   // -1 when none
    virtual token_id eos() const = 0;   // -1 when none
    // End of generation: EOS, EOT (<|im_end|>, <|endoftext|>, ...) as the metadata marks them.
    virtual bool is_end_of_generation(token_id id) const = 0;
    // The token id of a special token's text, or -1.
    virtual token_id find_special(std::string_view text) const = 0;
    // Whether encode(..., add_bos=true) prepends BOS (tokenizer.ggml.add_bos_token /
    // tokenizer_config.json add_bos_token, else llama.cpp's default for the pre-tokenizer).
    virtual bool adds_bos() const = 0;
    virtual token_id eot() const = 0;  // -1 when none
    // tokenizer.chat_template / tokenizer_config.json chat_template; empty when absent.
    virtual std::string_view chat_template() const = 0;
    // The pre-tokenizer in use, by its tokenizer.ggml.pre name ("gpt2", "llama-bpe", ...).
    virtual std::string_view pre_tokenizer_name() const = 0;
};

// Streams text while tokens arrive: never emits half a UTF-8 code point; holds back a partial
// sequence until it completes, and flushes what is left at the end.
class stream_decoder {
public:
    explicit stream_decoder(const tokenizer& tok) : tok_(tok) {}
    std::string push(token_id id);
    std::string flush();

private:
    const tokenizer& tok_;
    std::string pending_;
};

}  // namespace sluice
