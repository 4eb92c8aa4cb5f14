// Single-thread throughput of dot.h kernels: GB/s of weight bytes read, per format, window rows
// (1, 2, 4, 8, 12, 16, and 32, 64 for the column tiles; $BENCH_DOT_ROWS=R: only R) and ISA, for
// dot_rows and the column tiles.
// A matrix of 16 MiB of weights (larger than L2, like a real layer's) is multiplied against one
// window; the best of `reps` passes is reported. No assertion: numbers
// only. Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a loaded machine that
// preempts the thread does not count against the kernel (it still shares caches and memory).
// Usage: bench_dot [reps=5] [format-name ...]
#include "kernels/cpu/dot.h"
#include "quant/act.h"
#include "quant/quant.h"

#include "bench_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::kernels;

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    std::vector<std::string> only(argv + std::min(argc, 2), argv + argc);
    const dtype formats[] = {dtype::q8_0, dtype::q4_0, dtype::q4_1, dtype::q4_k, dtype::q6_k, dtype::q5_k,
                             dtype::q5_0, dtype::q5_1, dtype::iq4_xs, dtype::iq4_nl, dtype::mxfp4, dtype::q2_k,
                             dtype::q3_k, dtype::f16, dtype::bf16, dtype::f32, dtype::iq3_s, dtype::iq3_xxs,
                             dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s};
    // Columns: a typical hidden size; $BENCH_DOT_N sets another (768: Qwen3-30B-A3B's expert down rows).
    const int64_t n = std::getenv("BENCH_DOT_N") ? std::max<int64_t>(256, std::atoll(std::getenv("BENCH_DOT_N")) / 256 * 256) : 4096;
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n) * k_tile_max_rows);
    for (auto& v : x) v = dist(rng);

    fmt::print("{:<8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}   (GB/s of weights, 1 thread, n={})\n", "format",
               "rows", "scalar", "avx2", "avx512", "avx2 tile", "512 tile", n);
    for (dtype t : formats) {
        if (!only.empty() && std::find(only.begin(), only.end(), std::string(name(t))) == only.end()) continue;
        const uint64_t row_bytes = *bytes_for(t, n);
        // 16 MiB of weights (beyond L2, like a real layer's); $BENCH_DOT_KIB sets another size (e.g. 512: in L2).
        const char* kib = std::getenv("BENCH_DOT_KIB");
        const uint64_t matrix_bytes = kib ? std::strtoull(kib, nullptr, 10) << 10 : uint64_t{16} << 20;
        const int64_t n_out = std::max<int64_t>(1, static_cast<int64_t>(matrix_bytes / row_bytes));
        std::vector<float> wf(static_cast<size_t>(n));
        std::vector<std::byte> w(row_bytes * n_out);
        for (int64_t j = 0; j < n_out; ++j) {
            for (auto& v : wf) v = dist(rng);
            quant::quantize_row(t, wf.data(), w.data() + j * row_bytes, n);
        }
        const auto af = quant::act_format_for(t);
        const size_t act_bytes = quant::act_row_bytes(af, n);
        std::vector<std::byte> act(act_bytes * k_tile_max_rows + 64);
        for (int r = 0; r < k_tile_max_rows; ++r)
            quant::quantize_act_row(af, x.data() + r * n, n, act.data() + r * act_bytes);
        std::vector<float> out(k_tile_max_rows * static_cast<size_t>(n_out));
        for (int rows : {1, 2, 4, 8, 12, 16, 32, 64}) {
            if (std::getenv("BENCH_DOT_ROWS") && rows != std::atoi(std::getenv("BENCH_DOT_ROWS"))) continue;
            std::string line = fmt::format("{:<8} {:>5}", name(t), rows);
            for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
                if (!cpu_supports(i) || rows > 16) { line += fmt::format(" {:>10}", "n/a"); continue; }
                // The scalar path at 16 rows is slow: fewer output rows keep the run short.
                const int64_t cols = i == isa::scalar ? std::max<int64_t>(1, n_out / 8) : n_out;
                double best = 1e30;
                for (int rep = 0; rep < reps; ++rep) {
                    const double t0 = thread_seconds();
                    for (int64_t j = 0; j < cols; ++j)
                        dot_rows(i, t, w.data() + j * row_bytes, act.data(), act_bytes, rows, n, out.data() + j * 16);
                    const double t1 = thread_seconds();
                    best = std::min(best, t1 - t0);
                }
                const double gbs = static_cast<double>(row_bytes) * cols / best / 1e9;
                line += fmt::format(" {:>10.2f}{}", gbs, has_simd(i, t) ? "" : "*");
            }
            // The column tile (8 weight rows a call) where this ISA has one: matmul's and the
            // expert pool's kernel for whole groups of 8 columns.
            for (isa i : {isa::avx2, isa::avx512}) {
                const dot_tile_fn tile = resolve_dot_tile(i, t);
                if (!tile) { line += fmt::format(" {:>10}", "-"); continue; }
                double best = 1e30;
                for (int rep = 0; rep < reps; ++rep) {
                    const double t0 = thread_seconds();
                    for (int64_t j = 0; j + 8 <= n_out; j += 8)
                        tile(w.data() + j * row_bytes, row_bytes, act.data(), act_bytes, rows, n, out.data() + j, static_cast<size_t>(n_out));
                    const double t1 = thread_seconds();
                    best = std::min(best, t1 - t0);
                }
                line += fmt::format(" {:>10.2f}", static_cast<double>(row_bytes) * (n_out / 8 * 8) / best / 1e9);
            }
            fmt::print("{}\n", line);
        }
    }
    fmt::print("* = no SIMD version at that ISA: dot_ref row by row\n");
    return 0;
}
