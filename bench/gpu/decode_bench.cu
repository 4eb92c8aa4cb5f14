// decode_bench MODEL [N_PROMPT] [N_GEN]: the whole model on the GPU through load_model_cuda:
// load time, prefill tok/s (the prompt as one window), decode tok/s (batch 1, greedy, no
// drafting) with the decode step as a CUDA graph, without, and as a graph with programmatic
// dependent launch (PDL: the library's default on sm_90; the first three figures are taken with
// it off), whether the decodes gave the same tokens (exit 1 when not), the time of a verify
// window of 8 rows, and (E1 at depth) whether a 16-row window that reaches a new attention chunk
// equals its 16 serial steps bit for bit (exit 1 when not, or when that check fails to run). Prints one line per figure and a
// JSON line at the end (for bench/RESULTS.md).
// DECODE_BENCH_PROFILE=prefill|decode|window brackets that phase (the timed prefill, the first
// step decoded without graphs, the first window) with cudaProfilerStart/Stop, for
// `ncu --profile-from-start off` (bench/gpu/profile.sh).
#include "models/cuda_model.h"

#include "decode_common.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kernels/cpu/ops.h"
#include "kv/kv_cache.h"
#include "models/model.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

using namespace sluice;
using gpu_bench::argmax;
using gpu_bench::now_s;

namespace {

// Brackets one phase for the profiler when DECODE_BENCH_PROFILE names it (nothing otherwise).
struct profile_scope {
    bool on;
    explicit profile_scope(const char* phase) {
        const char* want = std::getenv("DECODE_BENCH_PROFILE");
        on = want && std::string(want) == phase;
        if (on) cudaProfilerStart();
    }
    ~profile_scope() {
        if (on) cudaProfilerStop();
    }
};

// E1 at depth, as the engine runs windows (graphs + PDL): wide_lead serial steps after the
// prompt, then k_wide_rows more whose logits are kept; back to the prompt + wide_lead, the same
// tokens as one window. The lead puts the window's first position 20 positions into a chunk of the
// split attention (k_attn_chunk), so its rows from the 13th on reach a chunk that begins after
// that position (the lane whose rows-to-stage count went negative before session 46), whatever the
// prompt's length. Returns the rows whose logits equal their serial step's, bit for bit.
constexpr int k_wide_rows = 16, k_wide_offset = 20;
static_assert(k_wide_offset + k_wide_rows > kernels::k_attn_chunk, "the window crosses into the next chunk");
int wide_lead(int n_prompt) {
    return k_wide_offset + (kernels::k_attn_chunk - n_prompt % kernels::k_attn_chunk) % kernels::k_attn_chunk;
}
int wide_chunk(int n_prompt) {   // the chunk start inside the window
    return (n_prompt + wide_lead(n_prompt)) / kernels::k_attn_chunk * kernels::k_attn_chunk + kernels::k_attn_chunk;
}

template <class BackToPrompt>
int wide_window_rows_equal(model& m, kv_cache& kv, forward_scratch& s, std::vector<float>& logits, token_id first,
                           int n_prompt, BackToPrompt back_to_prompt) {
    const int V = m.hparams().n_vocab;
    const size_t row = static_cast<size_t>(V);
    const int lead = wide_lead(n_prompt);
    std::vector<token_id> inputs;   // every step's input token: the lead's, then the window's
    std::vector<float> serial(static_cast<size_t>(k_wide_rows) * row);
    // The prompt again (a recurrent cache) must leave its last row's logits only: logits holds
    // 16 rows.
    s.last_row_logits_only = true;
    back_to_prompt();
    token_id next = first;
    for (int i = 0; i < lead + k_wide_rows; ++i) {
        inputs.push_back(next);
        m.forward(std::span<const token_id>(&next, 1), n_prompt + i, kv, s, logits.data());
        if (i >= lead) std::copy_n(logits.data(), row, serial.begin() + static_cast<size_t>(i - lead) * row);
        next = argmax(logits.data(), V);
    }
    // Back to the window's first position: a truncation, or for a recurrent cache (its state
    // rolls back over one window only) the prompt again and the lead's steps.
    if (kv.shape().rec.n_layer == 0) {
        kv.truncate(n_prompt + lead);
    } else {
        back_to_prompt();
        for (int i = 0; i < lead; ++i)
            m.forward(std::span<const token_id>(&inputs[static_cast<size_t>(i)], 1), n_prompt + i, kv, s, logits.data());
    }
    s.last_row_logits_only = false;   // the window: every row's logits
    m.forward(std::span<const token_id>(inputs.data() + lead, k_wide_rows), n_prompt + lead, kv, s,
              logits.data());
    int equal = 0;
    for (int r = 0; r < k_wide_rows; ++r)
        equal += std::memcmp(logits.data() + static_cast<size_t>(r) * row, serial.data() + static_cast<size_t>(r) * row,
                             row * sizeof(float)) == 0;
    kv.truncate(n_prompt + lead);
    return equal;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    if (argc < 2) {
        std::fprintf(stderr, "usage: decode_bench MODEL [N_PROMPT] [N_GEN]\n");
        return 2;
    }
    const int n_prompt = argc > 2 ? std::atoi(argv[2]) : 128;
    const int n_gen = argc > 3 ? std::atoi(argv[3]) : 64;
    try {
        if (!cuda_available()) {
            std::printf("SKIP: no CUDA device\n");
            return 77;
        }
        double t0 = now_s();
        auto mf = model_file::open(argv[1]);
        load_options o;
        o.n_ctx = n_prompt + n_gen + 64 + kernels::k_attn_chunk;   // + the wide window's lead (wide_lead)
        auto m = load_model_cuda(*mf, o, 0);
        const double t_load = now_s() - t0;
        set_cuda_programmatic_launch(*m, false);   // the baseline figures; PDL is timed at the end
        const model_hparams& hp = m->hparams();
        std::printf("model: %s, %d layers, n_embd %d, experts %d (top %d), vocab %d; loaded in %.2f s\n", hp.arch.c_str(),
                    hp.n_layer, hp.n_embd, hp.n_expert, hp.n_expert_used, hp.n_vocab, t_load);
        thread_pool pool(1);
        forward_scratch s = m->make_scratch(n_prompt > 16 ? n_prompt : 16, pool);
        s.last_row_logits_only = true;
        std::vector<float> logits(static_cast<size_t>(hp.n_vocab) * 16);
        const std::vector<token_id> prompt = gpu_bench::synthetic_prompt(n_prompt, hp.n_vocab);

        // Warm-up (allocations, first launches) on its own cache.
        {
            kv_cache kw(m->kv_shape_for(o.n_ctx));
            m->forward(prompt, 0, kw, s, logits.data());
        }
        kv_cache kv(m->kv_shape_for(o.n_ctx));
        t0 = now_s();
        {
            profile_scope ps("prefill");
            m->forward(prompt, 0, kv, s, logits.data());
        }
        const double t_prefill = now_s() - t0;
        const token_id first = argmax(logits.data(), hp.n_vocab);
        // Back to the prefilled prompt: a truncation, or for a hybrid model (whose recurrent
        // state rolls back only over the last window's rows) the prompt prefilled again, untimed.
        const bool recurrent = kv.shape().rec.n_layer > 0;
        const auto back_to_prompt = [&] {
            if (!recurrent) return kv.truncate(n_prompt);
            kv.truncate(0);
            m->forward(prompt, 0, kv, s, logits.data());
        };
        // Decode with and without graphs from the same prefilled cache (rolled back to the
        // prompt): the tokens must agree; the times differ by the launch overhead.
        double t_decode[2] = {0.0, 0.0}, t_argmax[2] = {0.0, 0.0};
        std::vector<token_id> out[2];
        for (int mode = 0; mode < 2; ++mode) {
            set_cuda_graphs(*m, mode == 0);
            back_to_prompt();
            token_id next = first;
            // One untimed step per mode: the graph's capture happens here.
            m->forward(std::span<const token_id>(&next, 1), n_prompt, kv, s, logits.data());
            kv.truncate(n_prompt);
            t0 = now_s();
            for (int i = 0; i < n_gen; ++i) {
                {
                    profile_scope ps(mode == 1 && i == 0 ? "decode" : "");
                    m->forward(std::span<const token_id>(&next, 1), n_prompt + i, kv, s, logits.data());
                }
                const double ta = now_s();
                next = argmax(logits.data(), hp.n_vocab);
                t_argmax[mode] += now_s() - ta;
                out[mode].push_back(next);
            }
            t_decode[mode] = now_s() - t0;
        }
        // A verify window of 8 rows after the decoded tokens (rolled back each time).
        std::vector<token_id> win(8, first);
        const int32_t pos = kv.n_pos();
        const int reps = 10;
        s.last_row_logits_only = false;
        t0 = now_s();
        for (int i = 0; i < reps; ++i) {
            profile_scope ps(i == 0 ? "window" : "");
            m->forward(win, pos, kv, s, logits.data());
            kv.truncate(pos);
        }
        const double t_win = (now_s() - t0) / reps;
        const double step = t_decode[0] / n_gen;
        std::printf("prefill: %d tokens in %.3f s = %.1f tok/s\n", n_prompt, t_prefill, n_prompt / t_prefill);
        std::printf("decode (graphs): %d tokens in %.3f s = %.1f tok/s (%.3f ms/token)\n", n_gen, t_decode[0],
                    n_gen / t_decode[0], 1e3 * step);
        std::printf("  of which the host's argmax over the logits: %.1f us/token\n", 1e6 * t_argmax[0] / n_gen);
        std::printf("decode (no graphs): %d tokens in %.3f s = %.1f tok/s (%.3f ms/token)\n", n_gen, t_decode[1],
                    n_gen / t_decode[1], 1e3 * t_decode[1] / n_gen);
        std::printf("greedy tokens with and without graphs: %s\n", out[0] == out[1] ? "identical" : "DIFFER");
        std::printf("verify window of 8 rows: %.2f ms (%.2fx one decode step)\n", 1e3 * t_win, t_win / step);
        // The graphs again with programmatic dependent launch (sm_90: each kernel scheduled while
        // the one before it ends, waiting for it at its first instruction): the tokens must agree.
        // Off again afterwards; a failure to launch is reported, different tokens fail the run
        // (PDL is the default on sm_90).
        double t_pdl = -1.0, t_win_graph = -1.0;
        bool pdl_equal = false, win_graph_equal = false;
        int wide_rows_equal = -1;   // rows of the 16-row window equal to their serial steps (-1: not run)
        std::string pdl_error;
        s.last_row_logits_only = true;
        try {
            set_cuda_graphs(*m, true);
            set_cuda_programmatic_launch(*m, true);
            back_to_prompt();
            token_id next = first;
            m->forward(std::span<const token_id>(&next, 1), n_prompt, kv, s, logits.data());
            kv.truncate(n_prompt);
            std::vector<token_id> out_pdl;
            t0 = now_s();
            for (int i = 0; i < n_gen; ++i) {
                m->forward(std::span<const token_id>(&next, 1), n_prompt + i, kv, s, logits.data());
                next = argmax(logits.data(), hp.n_vocab);
                out_pdl.push_back(next);
            }
            t_pdl = now_s() - t0;
            pdl_equal = out_pdl == out[0];
            // The verify window as the engine runs it (graphs + programmatic launch): captured at
            // its first position and (a plain cache) replayed one position later, each mode from
            // the same cache contents; every logit's bits against the same windows launched
            // without graphs. A hybrid's recurrent state rolls back over one window only: one
            // position there.
            s.last_row_logits_only = false;
            const int positions = recurrent ? 1 : 2;
            const int32_t wq = kv.n_pos() - (recurrent ? 0 : 2);
            const size_t wfloats = win.size() * static_cast<size_t>(hp.n_vocab);
            std::vector<float> graphed(2 * wfloats, 0.0f), eager(2 * wfloats, 0.0f);
            for (int mode = 0; mode < 2; ++mode) {
                set_cuda_graphs(*m, mode == 0);
                kv.truncate(wq);
                for (int k = 0; k < positions; ++k) {
                    m->forward(win, wq + k, kv, s, logits.data());   // the window at wq + 1 keeps row wq of the one before
                    kv.truncate(wq + (k == 0 && positions == 2 ? 1 : 0));
                    std::copy_n(logits.data(), wfloats, (mode == 0 ? graphed : eager).begin() + k * wfloats);
                }
                kv.truncate(wq);
                if (mode == 0) {   // timed: replays at wq
                    t0 = now_s();
                    for (int i = 0; i < reps; ++i) {
                        m->forward(win, wq, kv, s, logits.data());
                        kv.truncate(wq);
                    }
                    t_win_graph = (now_s() - t0) / reps;
                }
            }
            win_graph_equal = std::memcmp(graphed.data(), eager.data(), graphed.size() * sizeof(float)) == 0;
            wide_rows_equal = wide_window_rows_equal(*m, kv, s, logits, first, n_prompt, back_to_prompt);
            s.last_row_logits_only = true;
            set_cuda_programmatic_launch(*m, false);
        } catch (const std::exception& e) {
            pdl_error = e.what();
            try {
                set_cuda_programmatic_launch(*m, false);
            } catch (...) {
            }
        }
        // A failure after the PDL decode (the window checks) is reported too, and fails the run.
        if (t_pdl > 0.0 && !pdl_error.empty())
            std::printf("verify windows (graphs + programmatic launch): FAILED: %s\n", pdl_error.c_str());
        if (t_pdl > 0.0)
            std::printf("decode (graphs + programmatic launch): %d tokens in %.3f s = %.1f tok/s (%.3f ms/token); tokens %s\n",
                        n_gen, t_pdl, n_gen / t_pdl, 1e3 * t_pdl / n_gen, pdl_equal ? "identical" : "DIFFER");
        else
            std::printf("decode (graphs + programmatic launch): FAILED: %s\n", pdl_error.c_str());
        if (t_win_graph > 0.0)
            std::printf("verify window of 8 rows (graphs + programmatic launch): %.2f ms; logits at two positions %s\n",
                        1e3 * t_win_graph, win_graph_equal ? "identical to the windows without graphs" : "DIFFER");
        if (wide_rows_equal >= 0)
            std::printf("verify window of %d rows at position %d (graphs + programmatic launch, reaching the chunk at %d): "
                        "%d of %d rows bit-identical to serial steps\n",
                        k_wide_rows, n_prompt + wide_lead(n_prompt), wide_chunk(n_prompt), wide_rows_equal, k_wide_rows);
        std::printf("{\"arch\": \"%s\", \"layers\": %d, \"n_prompt\": %d, \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.1f, "
                    "\"decode_tok_s_no_graphs\": %.1f, \"decode_tok_s_pdl\": %.1f, \"pdl_tokens_equal\": %s, "
                    "\"window8_ms\": %.3f, \"window8_graph_ms\": %.3f, \"window_graph_logits_equal\": %s, "
                    "\"load_s\": %.2f, \"graph_tokens_equal\": %s, \"wide_window_rows_equal\": %d}\n",
                    hp.arch.c_str(), hp.n_layer, n_prompt, n_prompt / t_prefill, n_gen / t_decode[0], n_gen / t_decode[1],
                    t_pdl > 0.0 ? n_gen / t_pdl : 0.0, pdl_equal ? "true" : "false", 1e3 * t_win, 1e3 * t_win_graph,
                    win_graph_equal ? "true" : "false", t_load,
                    out[0] == out[1] ? "true" : "false", wide_rows_equal);
        if (out[0] != out[1]) return 1;
        if (t_pdl > 0.0 && !pdl_error.empty()) return 1;
        if (t_pdl > 0.0 && !pdl_equal) return 1;
        if (t_win_graph > 0.0 && !win_graph_equal) return 1;
        if (wide_rows_equal >= 0 && wide_rows_equal != k_wide_rows) return 1;
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return 0;
}
