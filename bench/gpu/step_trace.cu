// step_trace MODEL [N_PROMPT] [N_STEPS] [N_SHOWN] [N_ROWS]: how long each kernel of a decode step takes as
// it runs in the step's CUDA graph with programmatic dependent launch, where a profiler (ncu) would
// serialise the kernels and time each alone. Needs a build with STEP_TRACE=1
// (bench/gpu/build.sh): block (0, 0) of every kernel then records when it entered
// wait_prior_grids and when the wait returned (launch.cuh). A kernel's wait returns once the
// kernel before it has completed, so kernel k's time in the step is waited[k + 1] - waited[k],
// and waited[k] - entered[k] is how long its first block sat resident before it could start (0:
// it was not scheduled early). Prints, per position in the step, the launch shape and the mean of
// both over N_STEPS steps (the first layers' kernels and the last ones), then the totals by
// launch shape. Kernels that call trace_mark (launch.cuh) add, under their row, each mark's mean
// time after their wait's return: the phases of a kernel as it runs in the step. The step's
// tokens are greedy, as in decode_bench.
// N_ROWS > 1: each step is a verify window of that many rows instead (every row's logits wanted,
// rolled back after), launched as the engine launches windows (no graph: a kernel's time then
// includes any wait for the host's launch); the host's wall time a window, from the forward's
// call to its logits in host memory, is printed beside the GPU's span.
#include "models/cuda_model.h"

#include "decode_common.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kernels/cuda/step_trace.h"
#include "kv/kv_cache.h"
#include "models/model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <span>
#include <stdexcept>
#include <tuple>
#include <vector>

using namespace sluice;

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
#ifndef SLUICE_STEP_TRACE
    (void)argc;
    (void)argv;
    std::printf("step_trace: built without SLUICE_STEP_TRACE (bench/gpu/build.sh with STEP_TRACE=1)\n");
    return 2;
#else
    if (argc < 2) {
        std::fprintf(stderr, "usage: step_trace MODEL [N_PROMPT] [N_STEPS] [N_SHOWN] [N_ROWS]\n");
        return 2;
    }
    const int n_prompt = argc > 2 ? std::atoi(argv[2]) : 512;
    const int n_steps = argc > 3 ? std::atoi(argv[3]) : 32;
    const int n_rows = argc > 5 ? std::max(1, std::min(16, std::atoi(argv[5]))) : 1;
    try {
        if (!cuda_available()) {
            std::printf("SKIP: no CUDA device\n");
            return 77;
        }
        auto mf = model_file::open(argv[1]);
        load_options o;
        o.n_ctx = n_prompt + n_steps + 64 + n_rows;
        auto m = load_model_cuda(*mf, o, 0);
        const model_hparams& hp = m->hparams();
        thread_pool pool(1);
        forward_scratch s = m->make_scratch(n_prompt > 16 ? n_prompt : 16, pool);
        // logits: [16, n_vocab], a window's rows; the prompt's forward writes its last row only.
        std::vector<float> logits(static_cast<size_t>(hp.n_vocab) * 16);
        const std::vector<token_id> prompt = gpu_bench::synthetic_prompt(n_prompt, hp.n_vocab);
        kv_cache kv(m->kv_shape_for(o.n_ctx));
        s.last_row_logits_only = true;
        m->forward(prompt, 0, kv, s, logits.data());
        s.last_row_logits_only = n_rows == 1;   // a window wants every row's logits
        set_cuda_graphs(*m, true);
        set_cuda_programmatic_launch(*m, true);
        token_id next = gpu_bench::argmax(logits.data(), hp.n_vocab);
        const token_id first = next;
        // Two untimed steps (the graph's capture, then one replay), rolled back.
        for (int i = 0; i < 2; ++i) m->forward(std::span<const token_id>(&next, 1), n_prompt, kv, s, logits.data());
        kv.truncate(n_prompt);

        const unsigned cap = 8192u * static_cast<unsigned>(n_steps);
        cuda::step_trace host;
        host.cap = cap;
        cuda::step_trace* dev = nullptr;
        if (cudaMalloc(&dev, sizeof(cuda::step_trace)) != cudaSuccess ||
            cudaMalloc(&host.rec, sizeof(cuda::step_trace_record) * cap) != cudaSuccess ||
            cudaMemcpy(dev, &host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess)
            throw std::runtime_error("step_trace: device allocation failed");
        std::vector<unsigned> per_step;   // records after each step
        std::vector<token_id> window(static_cast<size_t>(n_rows));
        double wall_s = 0.0;               // host time of the forwards, logits included
        if (n_rows > 1) {                  // one untimed window first (its buffers' first use)
            std::fill(window.begin(), window.end(), first);
            m->forward(window, n_prompt, kv, s, logits.data());
            kv.truncate(n_prompt);
            for (int r = 1; r < n_rows; ++r)
                window[static_cast<size_t>(r)] = gpu_bench::argmax(logits.data() + static_cast<size_t>(r - 1) * hp.n_vocab, hp.n_vocab);
        }
        cuda::set_step_trace(dev);
        for (int i = 0; i < n_steps; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            if (n_rows == 1) {
                m->forward(std::span<const token_id>(&next, 1), n_prompt + i, kv, s, logits.data());
            } else {
                // The window right after the prompt, rolled back each step: the same rows every
                // step (tokens after the first are the argmax of the row before, as drafts the
                // target accepts would be).
                window[0] = first;
                m->forward(window, n_prompt, kv, s, logits.data());
                kv.truncate(n_prompt);
                for (int r = 1; r < n_rows; ++r)
                    window[static_cast<size_t>(r)] = gpu_bench::argmax(logits.data() + static_cast<size_t>(r - 1) * hp.n_vocab, hp.n_vocab);
            }
            wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            next = gpu_bench::argmax(logits.data(), hp.n_vocab);
            cuda::step_trace now;
            cudaMemcpy(&now, dev, sizeof now, cudaMemcpyDeviceToHost);
            per_step.push_back(now.n);
        }
        cuda::set_step_trace(nullptr);
        const unsigned n = std::min(per_step.back(), cap);
        std::vector<cuda::step_trace_record> rec(n);
        cudaMemcpy(rec.data(), host.rec, sizeof(cuda::step_trace_record) * n, cudaMemcpyDeviceToHost);
        const unsigned per = per_step[0];   // records a step: the kernels' waits and the marks
        for (int i = 0; i < n_steps; ++i)
            if (per_step[static_cast<size_t>(i)] != per * static_cast<unsigned>(i + 1) || per_step.back() > cap)
                throw std::runtime_error("step_trace: steps recorded different counts (or the buffer overflowed)");
        // Each step's kernel records (mark 0) in order, and its marks (trace_mark in launch.cuh).
        std::vector<std::vector<cuda::step_trace_record>> waits(n_steps), marks(n_steps);
        for (int st = 0; st < n_steps; ++st)
            for (unsigned i = 0; i < per; ++i) {
                const cuda::step_trace_record& r = rec[static_cast<size_t>(st) * per + i];
                (r.mark ? marks : waits)[static_cast<size_t>(st)].push_back(r);
            }
        const unsigned K = static_cast<unsigned>(waits[0].size());
        for (const auto& w : waits)
            if (w.size() != K) throw std::runtime_error("step_trace: steps recorded different kernel counts");
        // Per position k in the step: mean time to the next kernel's wait, mean early residency;
        // each mark's mean time after the wait of the kernel it fell in (the last wait before it).
        std::vector<double> dur(K, 0.0), early(K, 0.0);
        std::map<std::pair<unsigned, unsigned>, std::pair<double, int>> mark_at;   // (kernel, id) -> (sum ns, count)
        double span = 0.0;
        for (int st = 0; st < n_steps; ++st) {
            const cuda::step_trace_record* r = waits[static_cast<size_t>(st)].data();
            for (unsigned k = 0; k < K; ++k) {
                early[k] += static_cast<double>(r[k].waited - r[k].entered);
                if (k + 1 < K) dur[k] += static_cast<double>(r[k + 1].waited - r[k].waited);
            }
            span += static_cast<double>(r[K - 1].waited - r[0].waited);
            for (const cuda::step_trace_record& m : marks[static_cast<size_t>(st)]) {
                const auto after = std::upper_bound(r, r + K, m.waited, [](unsigned long long t, const cuda::step_trace_record& w) {
                    return t < w.waited;
                });
                if (after == r) continue;   // before the step's first wait: none here
                const unsigned k = static_cast<unsigned>(after - r - 1);
                auto& e = mark_at[{k, m.mark}];
                e.first += static_cast<double>(m.waited - r[k].waited);
                e.second += 1;
            }
        }
        const double ns = 1e-3 / n_steps;   // ns summed over steps -> mean us
        std::printf("model: %s, %d layers; %u kernels a step; %d steps after a %d-token prompt\n", hp.arch.c_str(),
                    hp.n_layer, K, n_steps, n_prompt);
        std::printf("first kernel's wait to last kernel's wait: %.1f us a step (the last kernel's own time not included)\n",
                    span * ns);
        std::printf("rows a step %d; the host's wall time a step (forward called to logits in host memory): %.1f us\n",
                    n_rows, 1e6 * wall_s / n_steps);
        const cuda::step_trace_record* r0 = waits[0].data();
        auto row = [&](unsigned k) {
            std::printf("%5u  grid %6u x %3u  block %4u   %8.2f us   waited early %7.2f us\n", k, r0[k].grid_x, r0[k].grid_y,
                        r0[k].block, k + 1 < K ? dur[k] * ns : 0.0, early[k] * ns);
            for (auto it = mark_at.lower_bound({k, 0u}); it != mark_at.end() && it->first.first == k; ++it)
                std::printf("         mark %u at %6.2f us after the wait (%.1f a step)\n", it->first.second,
                            it->second.first / it->second.second * 1e-3, static_cast<double>(it->second.second) / n_steps);
        };
        // N_SHOWN (argument 4, default 40): the kernels listed one by one from the step's first.
        const unsigned shown = argc > 4 ? static_cast<unsigned>(std::max(1, std::atoi(argv[4]))) : 40u;
        const unsigned head = std::min(K, shown);
        std::printf("-- the first %u kernels\n", head);
        for (unsigned k = 0; k < head; ++k) row(k);
        std::printf("-- the last 8\n");
        for (unsigned k = K > 8 ? std::max(head, K - 8) : head; k < K; ++k) row(k);
        // Totals by launch shape (kernels of one shape may be different kernels).
        std::map<std::tuple<unsigned, unsigned, unsigned>, std::tuple<int, double, double>> by_shape;
        for (unsigned k = 0; k + 1 < K; ++k) {
            auto& e = by_shape[{r0[k].grid_x, r0[k].grid_y, r0[k].block}];
            std::get<0>(e) += 1;
            std::get<1>(e) += dur[k] * ns;
            std::get<2>(e) += early[k] * ns;
        }
        std::printf("-- by launch shape: kernels a step, us a step, share; mean early residency\n");
        std::vector<std::pair<double, std::tuple<unsigned, unsigned, unsigned>>> order;
        for (const auto& [key, v] : by_shape) order.push_back({std::get<1>(v), key});
        std::sort(order.rbegin(), order.rend());
        for (const auto& [t, key] : order) {
            const auto& v = by_shape[key];
            std::printf("grid %6u x %3u  block %4u   %4d   %9.1f us  %5.1f%%   early %6.2f us\n", std::get<0>(key),
                        std::get<1>(key), std::get<2>(key), std::get<0>(v), t, 100.0 * t / (span * ns),
                        std::get<2>(v) / std::get<0>(v));
        }
        cudaFree(host.rec);
        cudaFree(dev);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return 0;
#endif
}
