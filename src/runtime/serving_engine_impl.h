// Private to the serving engine (serving_engine.cpp, serving_windows.cpp): a request's state
// and the engine's, shared by the scheduler's step and the walk of its windows.
#pragma once

#include "sluice/serving.h"

#include "core/cpu_count.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "models/cuda_model.h"
#include "models/hybrid_mtp.h"
#include "placement/metrics.h"
#include "runtime/generate.h"
#include "runtime/loaded_model.h"
#include "runtime/numa_setup.h"
#include "runtime/sampler.h"
#include "runtime/token_sha.h"
#include "spec/depth_policy.h"
#include "spec/draft_model_drafter.h"
#include "spec/draft_vocab.h"
#include "spec/mtp_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/session_target.h"
#include "spec/spec_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

namespace sluice {

namespace serving_detail {

using steady = std::chrono::steady_clock;
constexpr int k_max_window = 16;       // rows of one verify window (the decoder's limit)
constexpr int k_max_prefill_rows_per_step = 4096;   // twice the largest default (a streaming split model's)
constexpr int k_max_top_logprobs = 20; // OpenAI's limit
constexpr int k_draft_rows = 32;       // rows per forward of a request's draft model

inline double seconds(steady::time_point a, steady::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One request from admission to on_done. Everything its steps touch is allocated at admission.
struct request_state {
    completion_request req;
    token_callback on_token;
    done_callback on_done;

    int32_t n_prompt = 0;
    int32_t max_tokens = 0;       // tokens to generate at most (n_predict capped by the context)
    bool ctx_capped = false;      // max_tokens is the context's room, not n_predict
    std::unique_ptr<kv_cache> kv; // [n_layer][n_prompt + max_tokens, n_kv_head, head_dim]
    std::unique_ptr<keyed_sampler> sampler;
    std::unique_ptr<stream_decoder> text;
    std::unique_ptr<session> draft_session;         // the draft model's state (draft_model only)
    std::unique_ptr<session_target> draft_target;
    std::unique_ptr<mtp_head> head;                 // the request's MTP head (mtp only)
    std::unique_ptr<drafter> drafts;                // null: serial decoding
    mtp_drafter* mtp = nullptr;                     // drafts.get() when it is the MTP drafter
    depth_policy policy;            // this request's acceptance; the engine's window costs
    bool use_policy = false;        // drafts and adaptive_depth: the policy picks each window's depth
    bool drafted_last = false;      // the drafter proposed for the last window (its time is then a draft's cost)
    std::vector<double> confidence; // [k_max_window] the drafter's chance of each draft being kept
    std::vector<int32_t> context;   // [n_prompt + max_tokens] prompt, then the generated ids
    std::vector<int32_t> rows;      // this step's rows: prompt rows, then the window
    std::vector<int32_t> proposal;  // [k_max_window] the drafter's proposal
    std::vector<float> biased;      // [n_vocab] logits + logit_bias (logprobs only)
    token_event event;              // reused for every token

    // This step.
    int32_t pos0 = 0, n_prefill = 0, n_drafts = 0;
    int64_t row0 = 0;             // the segment's first row among the step's stacked rows
    bool has_window = false;
    // A hybrid model's prompt is checkpointed once its rows are prefilled, before the first
    // window (serving_engine.cpp: the state exists only at the lengths the sequence passes).
    bool checkpoint_prompt = false;

    int32_t generated = 0;
    token_sha sha;
    spec_stats spec;
    completion_result result;
    steady::time_point t_admit, t_first;
    bool first_done = false;
    bool finished = false;   // on_done was called: the scheduler drops the request
};

}  // namespace serving_detail

using serving_detail::request_state;

struct serving_engine::impl {
    serving_options opt;
    loaded_model target;
    std::unique_ptr<loaded_model> draft;
    int n_ctx = 0;
    int32_t n_vocab = 0;
    bool has_mtp = false;                                 // the target has an MTP head (CPU or CUDA model)
    std::shared_ptr<const mtp_draft_rows> draft_rows;    // the trimmed draft vocabulary's rows, or null
    std::string mtp_summary;                             // "" without an MTP head
    std::vector<int32_t> eog;   // ids that end a generation

    numa_setup numa;   // the pool's topology; the target's experts placed per node at open

    // Scheduler-thread state.
    std::unique_ptr<thread_pool> pool;
    forward_scratch scratch;                   // [prefill_rows_per_step + max_batch * 16] rows
    std::vector<float> logits;                 // [max_batch * 16, n_vocab]
    std::vector<batch_segment> batch;          // [<= max_batch]
    std::vector<request_state*> in_batch;      // the request of each segment
    std::vector<std::unique_ptr<request_state>> active;
    std::vector<std::unique_ptr<request_state>> admitted;
    std::unique_ptr<prefix_cache> cache;
    // Window costs of 1..16 rows, measured once (calibrate_costs) and then followed by the steps
    // that carry one request's window alone (a shared step's time says nothing of one window).
    depth_policy costs;
    bool costs_measured = false;

    // Shared with the submitting threads, under mu.
    mutable std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<request_state>> queue;
    // Requests taken from the queue and not yet finished: the batch's slots in use, exact at every
    // moment (m.active lags behind admissions and finishes), for submit()'s admission bound.
    int64_t slots_taken = 0;
    bool stopping = false, cancel_all = false;
    serving_metrics m;
    // The split model's placement counters after the last step (a struct copy under mu: no
    // allocation in the step); nullopt unless the experts are split under a VRAM budget.
    std::optional<placement::placement_metrics> placement;
    bool experts_split = false;   // the target's routed experts are split under a VRAM budget
    std::thread worker;

    void run();
    void step();
    bool admit(request_state& r);
    void finish(request_state& r, const char* finish_reason, const char* stop_reason, std::string error = {});
    void walk_window(request_state& r, const float* logits);
    void absorb_mtp(request_state& r, int32_t kept);
    // Keeps r's first n committed rows (and a hybrid's state, which must be at n) in the prefix
    // cache; a failure (the GPU model's copy back) is reported and keeps nothing.
    void store_checkpoint(request_state& r, size_t n);
    void calibrate_costs(int32_t token);
    int32_t choose_drafts(request_state& r, int32_t cap);
};

}  // namespace sluice
