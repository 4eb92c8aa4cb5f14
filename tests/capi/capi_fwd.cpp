// C ABI over the forward pass (src/models, src/runtime) for the Python tests in tests/golden,
// which compare sluice's logits and tokens with transformers' fixtures and with llama.cpp.
// Every function returns >= 0 on success and -1 on any error; the last error's text is kept
// per handle (sluice_fwd_error) and for failed opens (sluice_fwd_open_error).
#include "io/model_file.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct handle {
    std::unique_ptr<sluice::model_file> file;
    std::unique_ptr<sluice::model> net;
    std::unique_ptr<sluice::tokenizer> tok;   // null when the model has none
    std::unique_ptr<sluice::session> sess;
    std::string error;
};

std::string g_open_error;

template <class F>
int guarded(handle* h, F&& f) {
    try {
        return f();
    } catch (const std::exception& e) {
        if (h) h->error = e.what();
        return -1;
    }
}

}  // namespace

extern "C" {

// max_rows: the largest window forward() will get.
void* sluice_fwd_open(const char* path, int n_ctx, int n_threads, int max_rows) {
    try {
        auto h = std::make_unique<handle>();
        h->file = sluice::model_file::open(path);
        h->net = sluice::load_model(*h->file, sluice::load_options{n_ctx});
        try {
            h->tok = sluice::tokenizer::for_model(*h->file, path);
        } catch (const std::exception&) {
            h->tok.reset();   // tiny fixtures may carry no tokenizer
        }
        sluice::session_options so;
        so.n_ctx = n_ctx;
        so.n_threads = n_threads;
        so.prefill_chunk = max_rows;
        h->sess = std::make_unique<sluice::session>(*h->net, so);
        return h.release();
    } catch (const std::exception& e) {
        g_open_error = e.what();
        return nullptr;
    }
}

const char* sluice_fwd_open_error() { return g_open_error.c_str(); }
const char* sluice_fwd_error(void* h) { return static_cast<handle*>(h)->error.c_str(); }
void sluice_fwd_close(void* h) { delete static_cast<handle*>(h); }
int sluice_fwd_n_vocab(void* h) { return static_cast<handle*>(h)->net->hparams().n_vocab; }

// Runs tokens[0..n) at positions pos0.. (the cache is first cut back to pos0) and writes the
// logits of every row, [n, n_vocab], to out.
int sluice_fwd_forward(void* hv, const int32_t* tokens, int n, int pos0, float* out) {
    auto* h = static_cast<handle*>(hv);
    return guarded(h, [&] {
        h->sess->truncate(pos0);
        const float* l = h->sess->forward_all(std::span<const int32_t>(tokens, static_cast<size_t>(n)));
        std::memcpy(out, l, sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(h->net->hparams().n_vocab));
        return 0;
    });
}

// Greedy generation: prefill prompt (from position 0), then n_gen argmax tokens into out.
// Stops early at an end-of-generation token when stop_at_eog and a tokenizer is present.
// Returns the number of tokens written.
int sluice_fwd_greedy(void* hv, const int32_t* prompt, int n_prompt, int n_gen, int stop_at_eog, int32_t* out) {
    auto* h = static_cast<handle*>(hv);
    return guarded(h, [&] {
        h->sess->truncate(0);
        const int n_vocab = h->net->hparams().n_vocab;
        const float* l = h->sess->prefill(std::span<const int32_t>(prompt, static_cast<size_t>(n_prompt)));
        int n = 0;
        while (n < n_gen) {
            int32_t best = 0;
            for (int32_t i = 1; i < n_vocab; ++i)
                if (l[i] > l[best]) best = i;
            if (stop_at_eog && h->tok && h->tok->is_end_of_generation(best)) break;
            out[n++] = best;
            if (n == n_gen) break;
            l = h->sess->decode(best);
        }
        return n;
    });
}

// Tokenizes text (BOS as the model's metadata asks); returns the count, or -1 (also when more
// than cap ids would be written).
int sluice_fwd_tokenize(void* hv, const char* text, int parse_special, int32_t* out, int cap) {
    auto* h = static_cast<handle*>(hv);
    return guarded(h, [&] {
        if (!h->tok) throw std::runtime_error("the model has no tokenizer");
        auto ids = h->tok->encode(text, parse_special != 0, true);
        if (static_cast<int>(ids.size()) > cap) throw std::runtime_error("too many tokens");
        std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
        return static_cast<int>(ids.size());
    });
}

// The text of ids (bytes, not NUL-terminated); returns its length, or -1 (also when it does not
// fit in cap bytes).
int sluice_fwd_detokenize(void* hv, const int32_t* ids, int n, char* out, int cap) {
    auto* h = static_cast<handle*>(hv);
    return guarded(h, [&] {
        if (!h->tok) throw std::runtime_error("the model has no tokenizer");
        const std::string text = h->tok->decode(std::vector<sluice::token_id>(ids, ids + n));
        if (static_cast<int>(text.size()) > cap) throw std::runtime_error("text longer than the buffer");
        std::memcpy(out, text.data(), text.size());
        return static_cast<int>(text.size());
    });
}

}  // extern "C"
