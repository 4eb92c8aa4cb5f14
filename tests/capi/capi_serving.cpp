// C ABI over the serving engine (include/sluice/serving.h) for the Python contract tests in
// tests/exact: batch = solo and resumed = fresh. Requests are submitted one by one (the
// scheduler starts them at once, so they share steps) and collected with
// sluice_serving_wait. Functions return >= 0 on success, -1 on error (sluice_serving_error).
#include "sluice/serving.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct served {
    sluice::completion_result result;
    std::vector<int32_t> streamed;       // ids delivered to on_token
    std::string text;                    // their text, then the tail
    std::vector<float> logprobs;         // of each streamed id (top_logprobs >= 0)
    std::vector<int32_t> top_ids;        // [n, k] best ids per token (top_logprobs > 0)
    bool done = false;
};

struct serving_handle {
    std::unique_ptr<sluice::serving_engine> eng;
    std::string error;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<served> requests;         // deque: stable addresses for the callbacks
};

std::string g_open_error;

served* get(void* hv, int idx) {
    auto* h = static_cast<serving_handle*>(hv);
    if (idx < 0 || size_t(idx) >= h->requests.size()) return nullptr;
    return &h->requests[size_t(idx)];
}

}  // namespace

extern "C" {

void* sluice_serving_open(const char* model, const char* draft_model, int n_threads, int n_ctx, int max_batch,
                          long long prefix_cache_bytes) {
    try {
        sluice::serving_options o;
        o.engine.model_path = model ? model : "";
        o.engine.draft_model_path = draft_model ? draft_model : "";
        o.engine.n_threads = n_threads;
        o.engine.n_ctx = n_ctx;
        o.max_batch = max_batch;
        o.prefix_cache_bytes = prefix_cache_bytes < 0 ? 0 : size_t(prefix_cache_bytes);
        auto h = std::make_unique<serving_handle>();
        h->eng = sluice::serving_engine::open(o);
        return h.release();
    } catch (const std::exception& e) {
        g_open_error = e.what();
        return nullptr;
    }
}

const char* sluice_serving_open_error() { return g_open_error.c_str(); }
const char* sluice_serving_error(void* h) { return static_cast<serving_handle*>(h)->error.c_str(); }
void sluice_serving_close(void* h) { delete static_cast<serving_handle*>(h); }
int sluice_serving_n_vocab(void* h) { return static_cast<serving_handle*>(h)->eng->n_vocab(); }

// The engine's tokenize (BOS as the model asks, never twice). Returns the count or -1.
int sluice_serving_tokenize(void* hv, const char* text, int parse_special, int32_t* out, int cap) {
    auto* h = static_cast<serving_handle*>(hv);
    try {
        auto ids = h->eng->tokenize(text, parse_special != 0);
        if (int(ids.size()) > cap) throw std::runtime_error("too many tokens for the buffer");
        std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
        return int(ids.size());
    } catch (const std::exception& e) {
        h->error = e.what();
        return -1;
    }
}

// Queues one request; returns its index, or -1 (the queue is full).
// drafter: 0 none, 1 ngram, 2 draft model, 3 MTP; plus 10: at a fixed depth (every window carries
// max_window - 1 drafts: the proposals then depend on the drafter's state alone). top_logprobs: -1 none, else 0..20.
int sluice_serving_submit(void* hv, const int32_t* prompt, int n_prompt, int n_predict, float temperature, int top_k,
                          float top_p, float min_p, unsigned long long seed, float repeat_penalty, int drafter,
                          int use_prefix_cache, int top_logprobs) {
    auto* h = static_cast<serving_handle*>(hv);
    try {
        sluice::completion_request r;
        r.prompt.assign(prompt, prompt + n_prompt);
        r.params.n_predict = n_predict;
        r.params.temperature = temperature;
        r.params.top_k = top_k;
        r.params.top_p = top_p;
        r.params.min_p = min_p;
        r.params.seed = seed;
        r.params.repeat_penalty = repeat_penalty;
        r.params.adaptive_depth = drafter < 10;
        drafter %= 10;
        r.params.drafter = drafter == 1   ? sluice::drafter_kind::ngram
                           : drafter == 2 ? sluice::drafter_kind::draft_model
                           : drafter == 3 ? sluice::drafter_kind::mtp
                                          : sluice::drafter_kind::none;
        r.use_prefix_cache = use_prefix_cache != 0;
        r.top_logprobs = top_logprobs;
        served* s;
        int idx;
        {
            std::lock_guard<std::mutex> lk(h->mu);
            h->requests.emplace_back();
            s = &h->requests.back();
            idx = int(h->requests.size()) - 1;
        }
        const int k = top_logprobs;
        const int64_t q = h->eng->submit(
            std::move(r),
            [s, k](const sluice::token_event& e) {
                s->streamed.push_back(e.id);
                s->text += e.text;
                if (k >= 0) s->logprobs.push_back(e.logprob);
                for (int j = 0; j < k; ++j) s->top_ids.push_back(j < int(e.top.size()) ? e.top[size_t(j)].id : -1);
                return true;
            },
            [h, s](const sluice::completion_result& res) {
                std::lock_guard<std::mutex> lk(h->mu);
                s->result = res;
                s->text += res.text_tail;
                s->done = true;
                h->cv.notify_all();
            });
        if (q != 0) {
            h->error = "the queue is full";
            std::lock_guard<std::mutex> lk(h->mu);
            s->done = true;
            return -1;
        }
        return idx;
    } catch (const std::exception& e) {
        h->error = e.what();
        return -1;
    }
}

// Waits until every submitted request has finished; returns how many there are.
int sluice_serving_wait(void* hv) {
    auto* h = static_cast<serving_handle*>(hv);
    std::unique_lock<std::mutex> lk(h->mu);
    h->cv.wait(lk, [&] {
        for (const served& s : h->requests)
            if (!s.done) return false;
        return true;
    });
    return int(h->requests.size());
}

// The result of request idx (after sluice_serving_wait). Tokens: returns the count.
int sluice_serving_result_tokens(void* h, int idx, int32_t* out, int cap) {
    served* s = get(h, idx);
    if (!s) return -1;
    const auto& t = s->result.stats.tokens;
    if (out && cap > 0) std::memcpy(out, t.data(), sizeof(int32_t) * std::min(t.size(), size_t(cap)));
    return int(t.size());
}
int sluice_serving_result_streamed(void* h, int idx, int32_t* out, int cap) {
    served* s = get(h, idx);
    if (!s) return -1;
    if (out && cap > 0) std::memcpy(out, s->streamed.data(), sizeof(int32_t) * std::min(s->streamed.size(), size_t(cap)));
    return int(s->streamed.size());
}
int sluice_serving_result_logprobs(void* h, int idx, float* out, int cap) {
    served* s = get(h, idx);
    if (!s) return -1;
    if (out && cap > 0) std::memcpy(out, s->logprobs.data(), sizeof(float) * std::min(s->logprobs.size(), size_t(cap)));
    return int(s->logprobs.size());
}
int sluice_serving_result_top_ids(void* h, int idx, int32_t* out, int cap) {
    served* s = get(h, idx);
    if (!s) return -1;
    if (out && cap > 0) std::memcpy(out, s->top_ids.data(), sizeof(int32_t) * std::min(s->top_ids.size(), size_t(cap)));
    return int(s->top_ids.size());
}
// Streamed text (bytes, not NUL-terminated); returns its length.
int sluice_serving_result_text(void* h, int idx, char* out, int cap) {
    served* s = get(h, idx);
    if (!s) return -1;
    if (out && cap > 0) std::memcpy(out, s->text.data(), std::min(s->text.size(), size_t(cap)));
    return int(s->text.size());
}
const char* sluice_serving_result_sha(void* h, int idx) {
    served* s = get(h, idx);
    return s ? s->result.stats.token_sha.c_str() : "";
}
const char* sluice_serving_result_finish(void* h, int idx) {
    served* s = get(h, idx);
    return s ? s->result.finish_reason.c_str() : "";
}
const char* sluice_serving_result_error(void* h, int idx) {
    served* s = get(h, idx);
    return s ? s->result.error.c_str() : "";
}
int sluice_serving_result_cached(void* h, int idx) {
    served* s = get(h, idx);
    return s ? s->result.cached_tokens : -1;
}
// Drafts the request proposed (which = 0) or had accepted (which = 1); -1 for a bad index.
long long sluice_serving_result_drafts(void* h, int idx, int which) {
    served* s = get(h, idx);
    if (!s) return -1;
    return which == 0 ? s->result.drafts_proposed : s->result.drafts_accepted;
}

// One figure of serving_metrics by name: steps, rows, max_segments, generated_tokens,
// prompt_tokens, cached_prompt_tokens, requests_done, prefix_cache_entries; -1 if unknown.
long long sluice_serving_metric(void* hv, const char* name) {
    const sluice::serving_metrics m = static_cast<serving_handle*>(hv)->eng->metrics();
    const std::string n = name ? name : "";
    if (n == "steps") return m.steps;
    if (n == "rows") return m.rows;
    if (n == "max_segments") return m.max_segments;
    if (n == "generated_tokens") return m.generated_tokens;
    if (n == "prompt_tokens") return m.prompt_tokens;
    if (n == "cached_prompt_tokens") return m.cached_prompt_tokens;
    if (n == "requests_done") return m.requests_done;
    if (n == "prefix_cache_entries") return m.prefix_cache_entries;
    return -1;
}

}  // extern "C"
