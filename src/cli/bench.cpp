// `sluice bench [MODEL]`: prefill and decode speed, the verify-window cost curve and oracle-tape
// speculative decoding, each against its roofline ceiling (include/sluice/bench.h). Flags follow
// llama-bench's where they exist (-t, -p, -n, -r); lists are comma-separated.
#include "cli/commands.h"

#include "core/error.h"
#include "placement/vram_budget.h"
#include "sluice/bench.h"
#include "sluice/engine.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace sluice::cli {
namespace {

struct bench_args {
    std::string model;
    bench_options o;
    bool json = false;
    bool no_probe = false;
    bool no_warmup = false;
    bool quiet = false;
    uint64_t probe_mb = 0;
    std::string vram_budget;
    bool no_mmap = false;   // --no-mmap: the file read into memory (io/mmap.h)
    std::string adaptive_cache = "on";
    bool chunk_given = false;   // --chunk on the command line (else the backend's default)
};

// "0" alone means an empty list (llama-bench's -p 0: no prefill test).
std::vector<int> zero_is_none(std::vector<int> v) {
    v.erase(std::remove(v.begin(), v.end(), 0), v.end());
    return v;
}

void run(bench_args a) {
    // With --gpu, a budget splits the routed experts between VRAM and the CPU lane (the report's
    // placement); without it, a budget is validated and every routed expert runs on the CPU.
    if (!a.vram_budget.empty()) {
        const uint64_t budget = placement::parse_size(a.vram_budget);
        a.o.vram_budget = budget;
        if (const std::string note = placement::cpu_only_budget_note(budget); !note.empty() && a.o.gpu < 0 && !a.quiet)
            fmt::print(stderr, "{}\n", note);
    }
    a.o.mmap = !a.no_mmap;
    a.o.adaptive_cache = a.adaptive_cache == "on";
    // Without --chunk: what `sluice run` uses for the model on its backend (runtime/loaded_model.h:
    // default_prefill_rows), resolved once the model is loaded.
    if (!a.chunk_given) a.o.chunk = 0;
    a.o.model_path = a.model.empty() ? engine::default_model_path() : std::filesystem::path(a.model);
    a.o.n_prompt = zero_is_none(a.o.n_prompt);
    a.o.windows = zero_is_none(a.o.windows);
    a.o.spec_windows = zero_is_none(a.o.spec_windows);
    a.o.probe_bandwidth = !a.no_probe;
    a.o.warmup = !a.no_warmup;
    a.o.probe_bytes = a.probe_mb << 20;
    const bench_report r = run_bench(a.o, [&](std::string_view line) {
        if (!a.quiet) fmt::print(stderr, "bench: {}\n", line);
    });
    fmt::print("{}", a.json ? format_bench_json(r) : format_bench_text(r));
    std::fflush(stdout);
    // Drafted output that differs from serial decoding is an exactness bug (E2), not a slow run:
    // the report is printed, then the command fails, so scripts that only read exit codes see it
    // (session 46 found a GPU one in a report's text).
    for (const bench_result& x : r.results)
        if (x.kind == "spec" && !x.same_tokens)
            fail("bench: {}: the drafted tokens differ from serial decoding", x.test);
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto a = std::make_shared<bench_args>();
    auto* cmd = app.add_subcommand(
        "bench", "Measure prefill and decode speed, the verify-window cost curve and oracle-tape speculative "
                 "decoding, each against the memory-bandwidth ceiling");
    cmd->add_option("MODEL", a->model, "GGUF file or Hugging Face directory (default: the default model)");
    cmd->add_option("-t,--threads", a->o.n_threads, "CPU threads (default: every hardware thread)");
    cmd->add_option("--numa", a->o.numa, "NUMA: auto (threads and routed experts per node where the machine has several nodes), off, or simulate:N (tests: N nodes from the allowed CPUs, no memory moved; SLUICE_NUMA_SIMULATE=N does this under auto)")->capture_default_str();
    cmd->add_option("-p,--n-prompt", a->o.n_prompt, "Prefill tests: prompt lengths (comma-separated; 0: none)")
        ->delimiter(',')
        ->default_str("512");
    cmd->add_option("-n,--n-gen", a->o.n_gen, "Tokens per decode test (0: none)")->default_str("64");
    cmd->add_option("--ctx,-d,--n-depth", a->o.depths,
                    "Decode after prompts of these lengths (comma-separated; 32768 is allowed, but its prefill is "
                    "slow on a CPU)")
        ->delimiter(',')
        ->default_str("512,4096");
    cmd->add_option("-r,--repetitions", a->o.repetitions, "Repetitions of each test")->default_str("3");
    cmd->add_option("--chunk,--ubatch-size", a->o.chunk,
                    "Rows per prefill forward (default: as `sluice run`: 512, or 2048 with --gpu and a "
                    "--vram-budget whose split experts stream for prefill)")
        ->each([a](const std::string&) { a->chunk_given = true; });
    cmd->add_option("--windows", a->o.windows, "Cost curve: window sizes 1..16 (comma-separated; 0: none)")
        ->delimiter(',')
        ->default_str("1..16");
    cmd->add_option("--window-depth", a->o.window_depth,
                    "Cached positions before the cost curve and the oracle runs (default: the first --ctx depth)");
    cmd->add_option("--accept", a->o.accept, "Oracle tape: probability that a draft is the model's own token")
        ->default_str("0.7");
    cmd->add_option("--spec-windows", a->o.spec_windows, "Oracle runs: window sizes (comma-separated; 0: none)")
        ->delimiter(',')
        ->default_str("1,2,4,8,16");
    cmd->add_option("--spec-n", a->o.spec_n, "Tokens per oracle run (default: -n)");
    cmd->add_option("--spec-reps", a->o.spec_reps, "Repetitions of each oracle run")->default_str("1");
    cmd->add_option("--spec-policy", a->o.spec_policy,
                    "Oracle runs: one more whose windows (up to this many rows, 2..16) the depth policy sizes, "
                    "as `sluice run --spec` does (0: none)")
        ->default_str("0");
    cmd->add_option("--seed", a->o.seed, "Seed of the prompt tokens and the oracle's coin")->default_str("1");
    cmd->add_option("--bandwidth", a->o.bandwidth_gb_s, "Ceilings from this GB/s instead of the measured RAM read");
    cmd->add_option("--probe-mb", a->probe_mb, "RAM probe buffer in MiB (default: 4x the last-level cache, >= 512)");
    cmd->add_flag("--no-probe", a->no_probe, "Measure no bandwidth (no ceilings unless --bandwidth)");
    cmd->add_flag("--no-warmup", a->no_warmup,
                  "No untimed decode token before each depth's timed decode runs (llama-bench's --no-warmup)");
    // Always parsed, so that a build without CUDA says so instead of "unexpected argument"; listed
    // in --help only where it works (bench/run_gpu.sh detects a CUDA build by it).
    auto* gpu = cmd->add_option("--gpu", a->o.gpu,
                                "Run the model on this CUDA device (ceilings from its HBM bandwidth); with "
                                "--vram-budget, routed experts beyond it run on the CPU");
    if (!bench_gpu_built()) gpu->group("");
    cmd->add_flag("--json", a->json, "Print the report as JSON (progress still goes to stderr)");
    cmd->add_flag("-q,--quiet", a->quiet, "No progress lines on stderr");
    cmd->add_option("--vram-budget", a->vram_budget, "GPU memory for routed experts, e.g. 12G, 512M, 0");
    cmd->add_option("--prefill-stream", a->o.prefill_stream_rows, k_prefill_stream_help)->default_str("-1");
    cmd->add_option("--adaptive-cache", a->adaptive_cache, k_adaptive_cache_help)
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    cmd->add_flag("--no-mmap", a->no_mmap, "Read the model into memory (transparent huge pages) instead of mapping it: slower start, faster CPU decode");
    cmd->callback([a] { run(*a); });
}

}  // namespace sluice::cli
