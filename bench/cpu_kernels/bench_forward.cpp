// Prefill and decode speed of one model file through session (the engine's forward loop), with
// the prefill chunk as a parameter: the engine fixes it (32 rows), and a MoE model's prefill
// reads every routed expert once per chunk, so the chunk sets how often the experts are read.
// Prints wall-clock tok/s and the process CPU seconds of each phase (CLOCK_PROCESS_CPUTIME_ID:
// on a loaded machine the CPU figure is the steadier one). Asserts nothing.
// Usage: bench_forward MODEL [threads=2] [chunk=32] [n_prompt=512] [n_decode=32]
#include "io/model_file.h"
#include "models/model.h"
#include "runtime/generate.h"

#include "bench_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <vector>

using namespace sluice;

int main(int argc, char** argv) {
    if (argc < 2) {
        fmt::print(stderr, "usage: bench_forward MODEL [threads=2] [chunk=32] [n_prompt=512] [n_decode=32]\n");
        return 2;
    }
    const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    const int chunk = argc > 3 ? std::atoi(argv[3]) : 32;
    const int n_prompt = argc > 4 ? std::atoi(argv[4]) : 512;
    const int n_decode = argc > 5 ? std::atoi(argv[5]) : 32;
    const auto file = model_file::open(argv[1]);
    auto m = load_model(*file, {});
    session_options o;
    o.n_ctx = n_prompt + n_decode + 1;
    o.n_threads = threads;
    o.prefill_chunk = chunk;
    session s(*m, o);
    const int V = m->hparams().n_vocab;
    // A fixed pseudo-random prompt (ids below 1000: ordinary tokens in every vocabulary here).
    std::vector<token_id> prompt(static_cast<size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i) prompt[static_cast<size_t>(i)] = static_cast<token_id>((i * 7919 + 13) % std::min(V, 1000));
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    double c0 = process_seconds();
    const float* l = s.prefill(prompt);
    const double pw = std::chrono::duration<double>(clk::now() - t0).count(), pc = process_seconds() - c0;
    t0 = clk::now();
    c0 = process_seconds();
    for (int i = 0; i < n_decode; ++i) {
        const token_id t = static_cast<token_id>(std::max_element(l, l + V) - l);
        l = s.decode(t);
    }
    const double dw = std::chrono::duration<double>(clk::now() - t0).count(), dc = process_seconds() - c0;
    fmt::print("threads {} chunk {}: prefill {} tok: {:.1f} tok/s ({:.2f} cpu-s) | decode {} tok: {:.1f} tok/s ({:.2f} cpu-s)\n",
               threads, chunk, n_prompt, n_prompt / pw, pc, n_decode, n_decode / dw, dc);
    return 0;
}
