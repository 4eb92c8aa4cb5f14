// The byte-level BPE tokenizer behind every tokenizer::from_* factory. Loaders (GGUF metadata,
// tokenizer.json) fill a bpe_spec; make_bpe validates it and builds the lookup tables once.
#pragma once

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <string>
#include <utility>
#include <vector>

namespace sluice {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum token_type : int32_t {
    tt_undefined = 0, tt_normal = 1, tt_unknown = 2, tt_control = 3,
    tt_user_defined = 4, tt_unused = 5, tt_byte = 6,
};

struct bpe_spec {
    std::string source;        // "gguf" or the tokenizer.json path: for error messages
    std::string tokens_key;    // where tokens/merges came from, named in errors
    std::string merges_key;
    std::vector<std::string> tokens;  // [n_vocab] text as stored (GPT-2 byte-level chars for byte tokens)
    std::vector<int32_t> types;       // [n_vocab] token_type; empty = all normal
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order (rank = index)
    pre_kind pre = pre_kind::gpt2;
    bool ignore_merges = false;       // Llama 3: a piece that is a token is taken whole
    token_id bos = -1, eos = -1, eot = -1, eom = -1;
    // Fill-in-the-middle pad/repo/separator tokens: llama.cpp ends generation at them too.
    token_id fim_pad = -1, fim_rep = -1, fim_sep = -1;
    // GGUF: apply llama.cpp's load-time fixes (EOG- and FIM-looking tokens become control
    // tokens even when the converter marked them otherwise). tokenizer.json keeps its flags.
    bool llama_cpp_fixups = false;
    bool add_bos = false;
    std::string chat_template;
};

std::unique_ptr<tokenizer> make_bpe(bpe_spec spec);

// The end-of-generation texts llama.cpp recognises (llama-vocab.cpp, special_eog_ids).
bool is_eog_text(std::string_view text);
// The texts llama.cpp takes as EOT when tokenizer.ggml.eot_token_id is absent.
bool is_eot_text(std::string_view text);
// The texts llama.cpp takes as FIM pad / repo / separator tokens when their keys are absent.
bool is_fim_pad_text(std::string_view text);
bool is_fim_rep_text(std::string_view text);
bool is_fim_sep_text(std::string_view text);

}  // namespace sluice
