// `sluice run [MODEL] -p PROMPT`: streams the generated text to stdout as it is made, then
// prints prompt and decode speed to stderr. Flags follow llama.cpp's names.
#include "cli/commands.h"

#include "placement/vram_budget.h"
#include "sluice/engine.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <unistd.h>

namespace sluice::cli {
namespace {

struct run_args {
    std::string model;
    std::string prompt;
    std::string prompt_file;
    std::string system;
    int n_predict = 128;
    int ctx_size = 0;
    int threads = 0;
    std::string numa = "auto";
    float temp = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    uint64_t seed = 0;
    float repeat_penalty = 1.0f;
    float frequency_penalty = 0.0f;
    float presence_penalty = 0.0f;
    int repeat_last_n = 64;
    bool spec = false;
    std::string spec_kind;   // --spec's value: "" or "ngram" (prompt lookup), "mtp" (the model's MTP layers)
    std::string draft_model;
    std::string draft_vocab;   // --draft-vocab: the MTP head's trimmed vocabulary
    int draft_max = 15;
    std::string draft_depth = "adaptive";  // --draft-depth: adaptive (cost and acceptance) or fixed (--draft-max)
    bool chat = false;
    bool verbose = false;
    std::string stats_json;
    std::string vram_budget;
    int prefill_stream = -1;
    bool no_mmap = false;   // --no-mmap: the file read into memory (io/mmap.h)
    std::string adaptive_cache = "on";
    int gpu = -1;   // --gpu: CUDA device of the target model (-1: the CPU)
};

// The figures of one generation as a JSON object (benchmarks and tests read it).
void write_stats_json(const std::string& path, const generate_stats& st) {
    nlohmann::json j{{"n_prompt", st.n_prompt},           {"prompt_seconds", st.prompt_seconds},
                     {"n_decoded", st.n_decoded},         {"decode_seconds", st.decode_seconds},
                     {"prompt_tok_s", st.prompt_tok_s()}, {"decode_tok_s", st.decode_tok_s()},
                     {"stop_reason", st.stop_reason},     {"token_sha", st.token_sha},
                     {"tokens", st.tokens},               {"drafter", st.drafter},
                     {"verify_steps", st.verify_steps},   {"rows_min", st.rows_min},
                     {"rows_mean", st.rows_mean},         {"tokens_per_step", st.tokens_per_step},
                     {"acceptance", st.acceptance}};
    // Acceptance per draft depth (1 = a window's first draft), over the depths that saw drafts.
    nlohmann::json depths = nlohmann::json::array();
    for (size_t d = 0; d < st.proposed_at.size(); ++d)
        depths.push_back({{"depth", d + 1},
                          {"proposed", st.proposed_at[d]},
                          {"accepted", st.accepted_at[d]},
                          {"acceptance", double(st.accepted_at[d]) / double(std::max<int64_t>(st.proposed_at[d], 1))}});
    j["acceptance_by_depth"] = std::move(depths);
    std::ofstream out(path);
    if (!out) throw std::runtime_error(fmt::format("run: --stats-json {}: cannot write the file", path));
    out << j.dump(1) << "\n";
    out.close();   // a full disk (ENOSPC) or an I/O error shows here, not at the open
    if (out.fail()) throw std::runtime_error(fmt::format("run: --stats-json {}: writing the file failed", path));
}

void run(const run_args& a) {
    std::string prompt = a.prompt;
    if (!a.prompt_file.empty()) {
        // A directory opens as a stream that reads nothing: say so instead of "no prompt".
        if (std::filesystem::is_directory(a.prompt_file))
            throw std::runtime_error(fmt::format("run: -f {}: is a directory, not a file", a.prompt_file));
        std::ifstream in(a.prompt_file, std::ios::binary);
        if (!in) throw std::runtime_error(fmt::format("run: -f {}: cannot open the file", a.prompt_file));
        std::ostringstream ss;
        ss << in.rdbuf();
        if (in.bad()) throw std::runtime_error(fmt::format("run: -f {}: reading the file failed", a.prompt_file));
        prompt = ss.str();
    }
    // --stats-json: a path that cannot be written is found before the generation, not after it:
    // an existing one must be a writable regular file (a FIFO would block the write), a new one
    // needs a writable folder. Nothing is created or opened here.
    if (!a.stats_json.empty()) {
        const std::filesystem::path p(a.stats_json);
        std::error_code ec;
        const auto st = std::filesystem::status(p, ec);
        const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
        const bool ok = std::filesystem::exists(st) ? std::filesystem::is_regular_file(st) && ::access(p.c_str(), W_OK) == 0
                                                    : std::filesystem::is_directory(dir, ec) && ::access(dir.c_str(), W_OK) == 0;
        if (!ok) throw std::runtime_error(fmt::format("run: --stats-json {}: cannot write the file", a.stats_json));
    }
    if (prompt.empty()) throw std::runtime_error("run: no prompt: pass -p PROMPT or -f FILE");
    // --gpu N: the model on that CUDA device, its routed experts under --vram-budget (all in VRAM
    // without one). Without --gpu a budget is validated and every routed expert runs on the CPU.
    if (a.gpu < -1) throw std::runtime_error(fmt::format("run: --gpu {}: expected a device index >= 0 (-1: the CPU)", a.gpu));
    const uint64_t budget = a.vram_budget.empty() ? UINT64_MAX : placement::parse_size(a.vram_budget);
    if (!a.vram_budget.empty() && a.gpu < 0)
        if (const std::string note = placement::cpu_only_budget_note(budget); !note.empty()) fmt::print(stderr, "{}\n", note);

    engine_options eo;
    eo.model_path = a.model;
    eo.n_ctx = a.ctx_size;
    eo.n_threads = a.threads;
    eo.numa = a.numa;
    eo.draft_model_path = a.draft_model;
    eo.draft_vocab_path = a.draft_vocab;
    eo.gpu = a.gpu;
    eo.vram_budget = budget;
    eo.prefill_stream_rows = a.prefill_stream;
    eo.adaptive_cache = a.adaptive_cache == "on";
    eo.mmap = !a.no_mmap;
    eo.show_load_progress = true;
    auto eng = engine::open(eo);
    if (a.verbose) fmt::print(stderr, "model: {}\n{}\n", eng->model_path().string(), eng->describe());

    generate_params gp;
    gp.n_predict = a.n_predict;
    gp.temperature = a.temp;
    gp.top_k = a.top_k;
    gp.top_p = a.top_p;
    gp.min_p = a.min_p;
    gp.seed = a.seed;
    gp.repeat_penalty = a.repeat_penalty;
    gp.frequency_penalty = a.frequency_penalty;
    gp.presence_penalty = a.presence_penalty;
    gp.penalty_last_n = a.repeat_last_n;
    gp.drafter = !a.draft_model.empty() ? drafter_kind::draft_model : a.spec ? drafter_kind::ngram : drafter_kind::none;
    if (a.spec && a.draft_model.empty() && a.spec_kind == "mtp") gp.drafter = drafter_kind::mtp;
    if (a.draft_max < 0 || a.draft_max > 15)
        throw std::runtime_error(fmt::format("run: --draft-max {}: expected 0..15", a.draft_max));
    gp.max_window = a.draft_max + 1;
    gp.adaptive_depth = a.draft_depth == "adaptive";
    gp.chat = a.chat;
    gp.system = a.system;
    if (!a.chat) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
    }
    const generate_stats st = eng->generate(prompt, gp, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    fmt::print(stderr, "\nprompt: {} tokens, {:.1f} tok/s | decode: {} tokens, {:.1f} tok/s | stop: {}\n", st.n_prompt,
               st.prompt_tok_s(), st.n_decoded, st.decode_tok_s(), st.stop_reason);
    fmt::print(stderr, "token_sha: {}\n", st.token_sha);
    if (gp.drafter != drafter_kind::none) fmt::print(stderr, "{}\n", st.spec_summary);
    if (!a.stats_json.empty()) write_stats_json(a.stats_json, st);
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto args = std::make_shared<run_args>();
    auto* cmd = app.add_subcommand("run", "Generate text from a prompt (no MODEL: the default small model)");
    cmd->add_option("model", args->model, "GGUF file or Hugging Face directory");
    // Values outside an option's documented range are refused (a negative -c or -t was read as 0,
    // a negative -n as -1), and options that contradict each other too.
    CLI::Option* prompt_opt = cmd->add_option("-p,--prompt", args->prompt, "Prompt text");
    cmd->add_option("-f,--file", args->prompt_file, "Read the prompt from a file")->excludes(prompt_opt);
    cmd->add_option("-n,--n-predict", args->n_predict, "Tokens to generate (-1: until the context is full)")
        ->check(CLI::Range(-1, std::numeric_limits<int>::max()))
        ->capture_default_str();
    cmd->add_option("-c,--ctx-size", args->ctx_size, "Context size (0: the model's, at most 4096)")
        ->check(CLI::Range(0, std::numeric_limits<int>::max()))
        ->capture_default_str();
    cmd->add_option("-t,--threads", args->threads, "Threads (0: all)")->check(CLI::Range(0, std::numeric_limits<int>::max()))->capture_default_str();
    cmd->add_option("--numa", args->numa, "NUMA: auto (threads and routed experts per node where the machine has several nodes), off, or simulate:N (tests: N nodes from the allowed CPUs, no memory moved; SLUICE_NUMA_SIMULATE=N does this under auto)")->capture_default_str();
    cmd->add_option("--temp", args->temp, "Temperature (0: greedy)")->check(CLI::Range(0.0, 1e4))->capture_default_str();
    cmd->add_option("--top-k", args->top_k, "Top-k (0: off)")->check(CLI::Range(0, std::numeric_limits<int>::max()))->capture_default_str();
    cmd->add_option("--top-p", args->top_p, "Top-p (1: off)")->capture_default_str();
    cmd->add_option("--min-p", args->min_p, "Min-p (0: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
    cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
    cmd->add_option("--repeat-penalty", args->repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
    cmd->add_option("--frequency-penalty", args->frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
    cmd->add_option("--presence-penalty", args->presence_penalty, "Presence penalty (0: off)")->capture_default_str();
    cmd->add_option("--repeat-last-n", args->repeat_last_n, "Tokens the penalties look back over (-1: all)")
        ->capture_default_str();
    CLI::Option* spec = cmd->add_option("--spec", args->spec_kind,
                                        "Speculative decoding: same tokens as serial, faster. --spec or --spec ngram: "
                                        "prompt lookup (or the --draft-model); --spec mtp: the model's own MTP layers")
                            ->expected(0, 1);
    cmd->add_option("--draft-model", args->draft_model, "Draft model with the target's tokenizer (implies --spec)");
    cmd->add_option("--draft-vocab", args->draft_vocab, "With --spec mtp: the trimmed draft vocabulary "
                    "(tools/make_draft_vocab.py; default: MODEL.draft-vocab when it exists)");
    cmd->add_option("--draft-max", args->draft_max, "Most drafts per verify window (0..15)")->capture_default_str();
    cmd->add_option("--draft-depth", args->draft_depth, "adaptive: the measured window cost, the drafter's measured cost and the "
                    "acceptance pick the drafts per window (up to --draft-max); fixed: every window carries --draft-max drafts")
        ->check(CLI::IsMember({"adaptive", "fixed"}))
        ->capture_default_str();
    CLI::Option* chat_opt = cmd->add_flag("--chat", args->chat, "Wrap the prompt in the model's ChatML template");
    cmd->add_option("--system", args->system, "With --chat: the system message")->needs(chat_opt);
    cmd->add_flag("-v,--verbose", args->verbose, "Print the model's shape");
    cmd->add_option("--stats-json", args->stats_json, "Write the generation's figures (token_sha, tok/s, spec) as JSON");
    cmd->add_option("--vram-budget", args->vram_budget, "GPU memory for routed experts, e.g. 12G, 512M, 0");
    cmd->add_option("--prefill-stream", args->prefill_stream, k_prefill_stream_help)->capture_default_str();
    cmd->add_option("--adaptive-cache", args->adaptive_cache, k_adaptive_cache_help)
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    cmd->add_flag("--no-mmap", args->no_mmap, "Read the model into memory (transparent huge pages) instead of mapping it: slower start, faster CPU decode");
    cmd->add_option("--gpu", args->gpu, "CUDA device for the model (-1: the CPU); with --vram-budget, routed experts "
                    "beyond it run on the CPU")->capture_default_str();
    cmd->callback([args, spec] {
        args->spec = spec->count() > 0;
        // `--spec MODEL` (the flag before the model, as before --spec took a value): the model.
        if (args->spec && args->model.empty() && args->spec_kind != "ngram" && args->spec_kind != "mtp" &&
            !args->spec_kind.empty() && std::filesystem::exists(args->spec_kind))
            args->model = std::exchange(args->spec_kind, std::string());
        if (args->spec && !args->spec_kind.empty() && args->spec_kind != "ngram" && args->spec_kind != "mtp")
            throw std::runtime_error(fmt::format("run: --spec {}: expected ngram or mtp", args->spec_kind));
        if (args->spec_kind == "mtp" && !args->draft_model.empty())
            throw std::runtime_error("run: --spec mtp drafts with the model's own MTP layers: drop --draft-model, or use --spec ngram");
        if (args->prefill_stream < -1)
            throw std::runtime_error(fmt::format("run: --prefill-stream {}: expected -1 (the cost model's), 0 (never) or rows", args->prefill_stream));
        run(*args);
    });
}

}  // namespace sluice::cli
