// `sluice serve [MODEL]`: the OpenAI-compatible server (src/server/http_server.h) over the
// continuous-batching engine (include/sluice/serving.h). It listens first, loads the model
// (/ready answers 503 "loading" meanwhile), then serves until SIGTERM or SIGINT: it stops taking
// requests (503), lets the ones in flight finish for a grace period, cancels the rest, and exits 0.
#include "cli/commands.h"

#include <algorithm>

#include "core/error.h"
#include "io/side_file.h"
#include "placement/vram_budget.h"
#include "server/backend.h"
#include "server/chat_template.h"
#include "server/http_server.h"
#include "sluice/serving.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <pthread.h>
#include <thread>
#include <utility>

namespace sluice::cli {
namespace {

struct serve_args {
    std::string model;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    int ctx_size = 0;
    int threads = 0;
    std::string numa = "auto";
    int parallel = 8;
    int queue = 64;
    bool spec = false;
    std::string spec_kind;   // --spec's value: "" or "ngram" (prompt lookup), "mtp" (the model's MTP layers)
    std::string draft_model;
    std::string draft_vocab; // --draft-vocab: the MTP head's trimmed vocabulary (default: <model>.draft-vocab if present)
    int draft_max = 15;
    std::string draft_depth = "adaptive";  // --draft-depth: adaptive (cost and acceptance) or fixed (--draft-max)
    int prefix_cache_mb = 1024;
    std::string web_root;
    int max_body_mb = 4;
    int grace_s = 20;
    std::string vram_budget;
    int prefill_stream = -1;
    int prefill_rows = 0;   // --prefill-rows: prompt rows per step (0: the model's prefill forward)
    bool no_mmap = false;   // --no-mmap: the file read into memory (io/mmap.h)
    std::string adaptive_cache = "on";
    int gpu = -1;   // --gpu: CUDA device of the target model (-1: the CPU)
    std::string chat_template;   // --chat-template: a Jinja file used instead of the model's
};

// Waits until `done` or the deadline; true when `done` held.
template <class F>
bool wait_until(F done, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

void serve(const serve_args& a) {
    if (a.port < 0 || a.port > 65535) fail("serve: --port {}: expected 0..65535", a.port);
    if (a.parallel < 1 || a.parallel > 256) fail("serve: --parallel {}: expected 1..256", a.parallel);
    if (a.queue < 0 || a.queue > 100000) fail("serve: --queue {}: expected 0..100000", a.queue);
    if (a.draft_max < 0 || a.draft_max > 15) fail("serve: --draft-max {}: expected 0..15", a.draft_max);
    if (a.prefix_cache_mb < 0) fail("serve: --prefix-cache-mb {}: expected >= 0", a.prefix_cache_mb);
    if (a.max_body_mb < 1 || a.max_body_mb > 1024) fail("serve: --max-body-mb {}: expected 1..1024", a.max_body_mb);
    // --gpu N: the model on that CUDA device, its routed experts under --vram-budget (all in VRAM
    // without one). Without --gpu a budget is validated and every routed expert runs on the CPU.
    if (a.gpu < -1) fail("serve: --gpu {}: expected a device index >= 0 (-1: the CPU)", a.gpu);
    const uint64_t budget = a.vram_budget.empty() ? UINT64_MAX : placement::parse_size(a.vram_budget);
    if (!a.vram_budget.empty() && a.gpu < 0)
        if (const std::string note = placement::cpu_only_budget_note(budget); !note.empty()) fmt::print(stderr, "{}\n", note);

    // SIGTERM and SIGINT are taken by sigwait below, never by a handler: blocked here, before any
    // thread starts, so every thread inherits the mask. A vanished client must not kill the
    // process through SIGPIPE either (its write fails instead, which cancels its request).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    server_options so;
    so.host = a.host;
    so.port = a.port;
    so.api_key = a.api_key;
    so.web_root = a.web_root.empty() ? find_web_root() : std::filesystem::path(a.web_root);
    if (!a.web_root.empty() && !std::filesystem::is_directory(so.web_root))
        fail("serve: --web-root {}: not a directory", a.web_root);
    so.max_body_bytes = static_cast<size_t>(a.max_body_mb) << 20;
    if (!a.chat_template.empty()) {
        so.chat_template = read_side_file(a.chat_template, "serve: --chat-template");
        try {
            chat_template check(so.chat_template);   // a template that cannot parse fails here, not per request
        } catch (const std::exception& e) {
            fail("serve: --chat-template {}: {}", a.chat_template, e.what());
        }
    }
    // A request's n choices are submitted together: more than the batch and the queue hold at
    // once could never be taken, so the parser refuses them (400) rather than a 429 forever.
    so.max_n = std::max(1, std::min(so.max_n, a.parallel + a.queue));
    so.drafter = !a.draft_model.empty() ? drafter_kind::draft_model : a.spec ? drafter_kind::ngram : drafter_kind::none;
    if (a.spec && a.draft_model.empty() && a.spec_kind == "mtp") so.drafter = drafter_kind::mtp;
    if (a.spec_kind == "mtp" && !a.draft_model.empty()) fail("serve: --spec mtp and --draft-model: choose one drafter");
    so.max_window = a.draft_max + 1;
    so.adaptive_depth = a.draft_depth == "adaptive";
    so.http_threads = std::max(64, 2 * (a.parallel + a.queue) + 8);

    http_server server(so);
    const int port = server.bind();
    fmt::print(stderr, "sluice serve: listening on http://{}:{}/ (loading the model)\n", a.host, port);
    std::thread http([&server] { server.run(); });

    serving_options opt;
    opt.engine.model_path = a.model;
    opt.engine.n_ctx = a.ctx_size;
    opt.engine.n_threads = a.threads;
    opt.engine.numa = a.numa;
    opt.engine.draft_model_path = a.draft_model;
    opt.engine.draft_vocab_path = a.draft_vocab;
    opt.engine.gpu = a.gpu;
    opt.engine.vram_budget = budget;
    opt.engine.prefill_stream_rows = a.prefill_stream;
    opt.engine.adaptive_cache = a.adaptive_cache == "on";
    opt.prefill_rows_per_step = a.prefill_rows;
    opt.engine.mmap = !a.no_mmap;
    // The load's steps on stderr and on /ready ("loading: pinning expert pages 41%").
    opt.engine.show_load_progress = true;
    opt.engine.on_load_phase = [&server](const std::string& phase) {
        server.set_phase(phase.empty() ? "loading" : "loading: " + phase);
    };
    opt.max_batch = a.parallel;
    opt.max_queue = a.queue;
    opt.prefix_cache_bytes = static_cast<size_t>(a.prefix_cache_mb) << 20;
    std::shared_ptr<serving_backend> backend;
    std::string mtp;
    int prefill_rows = 0;
    try {
        std::unique_ptr<serving_engine> eng = serving_engine::open(opt);
        mtp = eng->mtp_summary();
        prefill_rows = eng->prefill_rows_per_step();
        if (so.drafter == drafter_kind::mtp && mtp.empty())
            fail("serve: --spec mtp: the model ({}) has no MTP (nextn) layers (use --spec for prompt lookup, or "
                 "--draft-model)",
                 eng->model_name());
        backend = std::make_shared<engine_backend>(std::move(eng));
        server.set_backend(backend);
    } catch (...) {
        server.stop();
        http.join();
        throw;
    }
    fmt::print(stderr, "sluice serve: ready: {} (context {}, batch {}, queue {}, {} prompt rows a step){}{}\n",
               backend->model_name(), backend->n_ctx(), a.parallel, a.queue, prefill_rows,
               so.web_root.empty() ? "" : ", page from ",
               so.web_root.string());
    if (so.drafter == drafter_kind::mtp) fmt::print(stderr, "sluice serve: drafting with the {}\n", mtp);

    int sig = 0;
    sigwait(&sigs, &sig);
    fmt::print(stderr, "sluice serve: {}: finishing {} request(s) in flight, taking no new ones\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", server.in_flight());
    server.begin_drain();
    // An engine that cannot stop (a step that never returns) must not keep the process alive
    // forever: past the grace period and the cancellation, exit with an error.
    // (The HTTP side's stop waits up to k_read_timeout_s for a client stalled mid-request.)
    const int limit_s = a.grace_s + 5 + k_read_timeout_s + 5;
    std::thread([limit_s] {
        std::this_thread::sleep_for(std::chrono::seconds(limit_s));
        fmt::print(stderr, "sluice serve: the engine did not stop within {} s of the signal; exiting\n", limit_s);
        std::_Exit(1);
    }).detach();
    if (!wait_until([&] { return server.in_flight() == 0; }, std::chrono::seconds(a.grace_s))) {
        fmt::print(stderr, "sluice serve: cancelling {} request(s) after {} s\n", server.in_flight(), a.grace_s);
        backend->shutdown(/*cancel_in_flight=*/true);
        wait_until([&] { return server.in_flight() == 0; }, std::chrono::seconds(5));
    }
    server.stop();
    http.join();
    backend->shutdown(/*cancel_in_flight=*/true);
    fmt::print(stderr, "sluice serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto a = std::make_shared<serve_args>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (no MODEL: the default small model)");
    cmd->add_option("model", a->model, "GGUF file or Hugging Face directory");
    cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", a->port, "Port (0: any free one)")->capture_default_str();
    cmd->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
    cmd->add_option("--chat-template", a->chat_template,
                    "Jinja chat template file used instead of the model's (e.g. one that renders tools)");
    cmd->add_option("-c,--ctx-size", a->ctx_size, "Context size per request (0: the model's, at most 4096)")
        ->capture_default_str();
    cmd->add_option("-t,--threads", a->threads, "Threads (0: all)")->capture_default_str();
    cmd->add_option("--numa", a->numa, "NUMA: auto (threads and routed experts per node where the machine has several nodes), off, or simulate:N (tests: N nodes from the allowed CPUs, no memory moved; SLUICE_NUMA_SIMULATE=N does this under auto)")->capture_default_str();
    cmd->add_option("--parallel", a->parallel, "Requests decoding together (max batch)")->capture_default_str();
    cmd->add_option("--queue", a->queue, "Requests waiting beyond the batch; more get 429")->capture_default_str();
    CLI::Option* spec = cmd->add_option("--spec", a->spec_kind,
                                        "Speculative decoding: same tokens as serial, faster. --spec or --spec ngram: "
                                        "prompt lookup (or the --draft-model); --spec mtp: the model's own MTP layers")
                            ->expected(0, 1);
    cmd->add_option("--draft-vocab", a->draft_vocab, "With --spec mtp: the trimmed draft vocabulary "
                    "(tools/make_draft_vocab.py; default: MODEL.draft-vocab when it exists)");
    cmd->add_option("--draft-model", a->draft_model, "Draft model with the target's tokenizer (implies --spec)");
    cmd->add_option("--draft-max", a->draft_max, "Most drafts per verify window (0..15)")->capture_default_str();
    cmd->add_option("--draft-depth", a->draft_depth, "adaptive: the measured window cost, the drafter's measured cost "
                    "and each request's acceptance pick the drafts per window (up to --draft-max); fixed: every window carries --draft-max drafts")
        ->check(CLI::IsMember({"adaptive", "fixed"}))
        ->capture_default_str();
    cmd->add_option("--prefix-cache-mb", a->prefix_cache_mb, "Memory for KV checkpoints of past prompts (MiB)")
        ->capture_default_str();
    cmd->add_option("--web-root", a->web_root, "Folder of the chat page (default: web/ next to the binary)");
    cmd->add_option("--max-body-mb", a->max_body_mb, "Largest request body (MiB); larger get 413")->capture_default_str();
    cmd->add_option("--shutdown-grace", a->grace_s, "Seconds in-flight requests get to finish after SIGTERM")
        ->capture_default_str();
    cmd->add_option("--vram-budget", a->vram_budget, "GPU memory for routed experts, e.g. 12G, 512M, 0");
    cmd->add_option("--prefill-stream", a->prefill_stream, k_prefill_stream_help)->capture_default_str();
    cmd->add_option("--prefill-rows", a->prefill_rows, "Prompt rows one step carries over all new requests (1..4096; "
                    "0: the model's prefill forward, 512, or 2048 for a split GPU model that streams its experts); "
                    "fewer keep decoding requests' token latency lower while long prompts arrive")
        ->capture_default_str();
    cmd->add_option("--adaptive-cache", a->adaptive_cache, k_adaptive_cache_help)
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    cmd->add_flag("--no-mmap", a->no_mmap, "Read the model into memory (transparent huge pages) instead of mapping it: slower start, faster CPU decode");
    cmd->add_option("--gpu", a->gpu, "CUDA device for the model (-1: the CPU); with --vram-budget, routed experts "
                    "beyond it run on the CPU")->capture_default_str();
    cmd->callback([a, spec] {
        a->spec = spec->count() > 0;
        // `--spec MODEL` (the flag before the model, as before --spec took a value): the model.
        if (a->spec && a->model.empty() && a->spec_kind != "ngram" && a->spec_kind != "mtp" && !a->spec_kind.empty() &&
            std::filesystem::exists(a->spec_kind))
            a->model = std::exchange(a->spec_kind, std::string());
        if (a->spec && !a->spec_kind.empty() && a->spec_kind != "ngram" && a->spec_kind != "mtp")
            fail("serve: --spec {}: expected ngram or mtp", a->spec_kind);
        serve(*a);
    });
}

}  // namespace sluice::cli
