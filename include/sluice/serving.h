// The serving API the HTTP server (src/server) uses: requests submitted from any thread, decoded
// together by one scheduler thread (continuous batching: the rows of every active request go
// through one forward), with a prefix cache of KV checkpoints. Because every kernel is row-exact
// (E1) a request's tokens are the ones its solo run gives; a request resumed from the prefix
// cache gives what the same prompt served fresh gives (E5).
#pragma once

#include "sluice/engine.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

struct token_logprob {
    int32_t id = 0;
    std::string text;       // the token's bytes (may be part of a UTF-8 code point)
    float logprob = 0.0f;   // log softmax of the model's logits at this position (after logit_bias)
};

// One generated token, delivered in order.
struct token_event {
    int32_t id = 0;
    std::string text;                 // newly completed text (whole UTF-8 code points; may be empty)
    float logprob = 0.0f;             // of `id`, when the request asked for logprobs
    std::vector<token_logprob> top;   // the top_logprobs best ids, when asked (best first, ties by id)
};

struct completion_request {
    std::vector<int32_t> prompt;      // token ids (the server renders the chat template and tokenises)
    generate_params params;           // n_predict, sampling, penalties, drafter, seed
    std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias), ids validated by the server
    int top_logprobs = -1;            // -1: no logprobs; 0..20: the chosen token's and this many best
    bool use_prefix_cache = true;
    // Optional: set it to true from any thread to end the request within one step, prefill
    // included, with finish_reason "cancelled" (a client that went away while nothing streams).
    std::shared_ptr<std::atomic<bool>> cancel;
};

struct completion_result {
    generate_stats stats;             // tokens, token_sha, spec telemetry, timings
    std::string finish_reason;        // "stop" (EOG or cancelled by a stop string), "length", "cancelled", "error"
    int cached_tokens = 0;            // prompt tokens restored from the prefix cache
    // Drafting of this request beyond stats' summary (rows per verify min/mean, tokens per step,
    // acceptance are in stats): how the depth policy spent its windows.
    int64_t drafts_proposed = 0;      // draft rows put into verify windows
    int64_t drafts_accepted = 0;      // of those, kept
    int64_t windows_drafting_off = 0; // windows the depth policy ran without drafts (it did not pay)
    int32_t rows_max = 0;             // the widest verify window
    std::string error;                // set when finish_reason == "error"
    // Text the stream decoder still held at the end (an incomplete UTF-8 sequence, or bytes
    // after the last whole code point): append it after the last token_event's text.
    std::string text_tail;
};

// Called on the scheduler thread for each token; return false to end the request within this
// step (a stop string was found, the client went away). Must not block.
using token_callback = std::function<bool(const token_event&)>;
using done_callback = std::function<void(const completion_result&)>;

struct serving_options {
    engine_options engine;
    int max_batch = 8;                 // requests decoding together
    int max_queue = 64;                // waiting requests; submit() refuses beyond it
    size_t prefix_cache_bytes = size_t(1) << 30;  // KV checkpoints kept (LRU)
    // Prompt rows one step carries, over all new requests (1..4096); 0: the model's prefill
    // forward (runtime/loaded_model.h: default_prefill_rows, 512, or 2048 for a split GPU model
    // that streams its experts), as llama.cpp's server fills its batch. Fewer keep the token
    // latency of decoding requests lower while a long prompt arrives, at the prompt's expense
    // (a split model copies each layer's missing experts once per forward, whatever its rows).
    int prefill_rows_per_step = 0;
    // Draft depth (requests with a drafter and generate_params::adaptive_depth): the cost of
    // windows of 1..16 rows is measured once per engine, on the scheduler thread before the
    // first such request's first window (not counted as its time), and each request keeps its
    // own acceptance, as `sluice run --spec` does; a request whose drafts do not pay runs
    // without them until they do. false: every window carries max_window - 1 drafts.
    bool calibrate_depth_policy = true;
};

struct serving_metrics {
    int64_t queue_depth = 0, active = 0;
    int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
    int64_t drafted = 0, accepted = 0;
    // Per draft depth (1..k_depths): drafts proposed at that depth and, of those, kept.
    static constexpr int k_depths = 15;
    std::array<int64_t, k_depths> drafted_at{}, accepted_at{};
    int64_t windows_drafting_off = 0;  // windows of drafting requests the depth policy left without drafts
    double depth_calibration_seconds = 0.0;  // the one-off window cost measurement (0: not run yet)
    double decode_seconds = 0.0;       // summed over steps
    int64_t steps = 0;                 // batched forwards run
    int64_t rows = 0;                  // rows over all steps (prefill and decode)
    int64_t max_segments = 0;          // the most requests one step has carried
    int64_t requests_done = 0;         // on_done calls so far
    int64_t prefix_cache_entries = 0, prefix_cache_bytes = 0;
    bool ready = false;                // the model is loaded and the scheduler is running
    std::string phase;                 // "loading", "ready", "stopping"
};

class serving_engine {
public:
    static std::unique_ptr<serving_engine> open(const serving_options& o);
    ~serving_engine();

    // Thread-safe. Returns 0 when the request was queued, else the number of requests queued
    // (the queue is full: the server answers 429). on_done is called exactly once, last (on the
    // scheduler thread; on the caller's thread, at once, with "error" after shutdown()). A bad
    // request (empty or too long prompt, ids out of range, bad sampling values) ends with
    // finish_reason "error" and the reason in `error`; on_token returning false ends it with "stop".
    int64_t submit(completion_request r, token_callback on_token, done_callback on_done);

    // Tokeniser access for the server (thread-safe, read-only).
    std::vector<int32_t> tokenize(std::string_view text, bool parse_special) const;
    std::string token_text(int32_t id) const;
    int32_t n_vocab() const;
    int32_t n_ctx() const;
    int prefill_rows_per_step() const;   // serving_options' value, 0 resolved for the model
    bool is_eog(int32_t id) const;
    std::string chat_template() const;   // the model's tokenizer.chat_template ("" if none)
    std::string bos_text() const, eos_text() const;
    std::string model_name() const;
    // "" when requests cannot draft with an MTP head (the model has none, or runs on the GPU);
    // else what the head drafts over ("MTP head, whole vocabulary (N ids)", or the trimmed one's file).
    std::string mtp_summary() const;

    serving_metrics metrics() const;
    // Prometheus lines of the routed experts' placement (hit rate, PCIe share and bytes, each
    // lane's time: placement/metrics.h) as of the last step; empty unless the model runs on a
    // GPU with its experts split under a VRAM budget.
    std::string placement_metrics_text() const;
    // Stops taking requests; cancel_in_flight ends active ones with "cancelled", else they finish.
    void shutdown(bool cancel_in_flight);

private:
    struct impl;
    explicit serving_engine(std::unique_ptr<impl> p);
    std::unique_ptr<impl> p_;
};

}  // namespace sluice
