// C ABI over the public engine (include/sluice/engine.h) for the Python contract tests in
// tests/exact: one engine opened once, many generations, each returning its token ids,
// token_sha and speculative telemetry. Functions return >= 0 on success, -1 on error
// (sluice_engine_error gives the text).
#include "sluice/engine.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>

namespace {

struct engine_handle {
    std::unique_ptr<sluice::engine> eng;
    std::string error;
    sluice::generate_stats last;
    // generate_params::adaptive_depth for every generation (sluice_engine_set_adaptive_depth).
    bool adaptive_depth = true;
};

std::string g_open_error;

}  // namespace

extern "C" {

void* sluice_engine_open(const char* model, const char* draft_model, int n_threads, int n_ctx) {
    try {
        sluice::engine_options o;
        o.model_path = model ? model : "";
        o.draft_model_path = draft_model ? draft_model : "";
        o.n_threads = n_threads;
        o.n_ctx = n_ctx;
        auto h = std::make_unique<engine_handle>();
        h->eng = sluice::engine::open(o);
        return h.release();
    } catch (const std::exception& e) {
        g_open_error = e.what();
        return nullptr;
    }
}

const char* sluice_engine_open_error() { return g_open_error.c_str(); }
const char* sluice_engine_error(void* h) { return static_cast<engine_handle*>(h)->error.c_str(); }
void sluice_engine_close(void* h) { delete static_cast<engine_handle*>(h); }
// 0: every window drafts up to max_window rows whatever the measured costs (the exactness tests
// must verify drafts on any machine, also one where the depth policy would stop drafting).
void sluice_engine_set_adaptive_depth(void* h, int on) { static_cast<engine_handle*>(h)->adaptive_depth = on != 0; }

// drafter: 0 none, 1 ngram, 2 draft model, 3 the model's MTP layers. Returns the number of generated tokens.
int sluice_engine_generate(void* hv, const char* prompt, int chat, int n_predict, float temperature, int top_k,
                           float top_p, float min_p, unsigned long long seed, float repeat_penalty, int drafter,
                           int max_window) {
    auto* h = static_cast<engine_handle*>(hv);
    try {
        sluice::generate_params p;
        p.n_predict = n_predict;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.seed = seed;
        p.repeat_penalty = repeat_penalty;
        p.chat = chat != 0;
        p.drafter = drafter == 1   ? sluice::drafter_kind::ngram
                    : drafter == 2 ? sluice::drafter_kind::draft_model
                    : drafter == 3 ? sluice::drafter_kind::mtp
                                   : sluice::drafter_kind::none;
        p.max_window = max_window;
        p.adaptive_depth = h->adaptive_depth;
        h->last = h->eng->generate(prompt, p, nullptr);
        return static_cast<int>(h->last.tokens.size());
    } catch (const std::exception& e) {
        h->error = e.what();
        return -1;
    }
}

// The last generation's figures.
int sluice_engine_last_tokens(void* hv, int* out, int cap) {
    auto* h = static_cast<engine_handle*>(hv);
    const int n = static_cast<int>(h->last.tokens.size());
    std::memcpy(out, h->last.tokens.data(), sizeof(int) * static_cast<size_t>(n < cap ? n : cap));
    return n;
}
const char* sluice_engine_last_sha(void* h) { return static_cast<engine_handle*>(h)->last.token_sha.c_str(); }
const char* sluice_engine_last_stop(void* h) { return static_cast<engine_handle*>(h)->last.stop_reason.c_str(); }
const char* sluice_engine_last_spec(void* h) { return static_cast<engine_handle*>(h)->last.spec_summary.c_str(); }
double sluice_engine_last_tokens_per_step(void* h) { return static_cast<engine_handle*>(h)->last.tokens_per_step; }
double sluice_engine_last_acceptance(void* h) { return static_cast<engine_handle*>(h)->last.acceptance; }
long long sluice_engine_last_steps(void* h) { return static_cast<engine_handle*>(h)->last.verify_steps; }

}  // extern "C"
