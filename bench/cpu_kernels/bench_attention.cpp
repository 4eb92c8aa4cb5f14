// Single-thread time of kernels::attention (the AVX2 path where the CPU has it) and of
// attention_ref, the scalar definition: Qwen3-30B-A3B's shape (32 query heads, 4 KV heads, 128
// wide), one row at depths 512 / 2048 / 8192 (a decode step) and 64 rows ending at 512 / 2048 (a
// prefill chunk). Best of `reps` runs, thread CPU time; no assertion, numbers only.
// With threads > 1: one decode row's wall time on a pool of that many threads, the positions
// split over them (attention_scratch) against the unsplit (row, head) tasks, for the head layouts
// of SmolLM2 (9/3 of 64), the shipped MoE (6/2 of 64), Qwen3-30B-A3B (32/4 of 128) and the hybrids'
// attention (16/2 of 256), at 512 / 2,048 / 8,192 positions. Median of `reps` runs.
// Usage: bench_attention [reps=5] [threads=1]
#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"

#include "bench_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

using namespace sluice;

namespace {

int split_against_unsplit(int reps, int threads) {
    struct layout {
        const char* name;
        int n_head, n_kv, hd;
    };
    thread_pool pool(threads);
    fmt::print("{:<34} {:>10} {:>10} {:>7}   (us a decode row, {} threads, median of {})\n", "case", "unsplit", "split",
               "ratio", threads, reps);
    std::mt19937 g(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (const layout l : {layout{"SmolLM2 9/3 x 64", 9, 3, 64}, layout{"shipped MoE 6/2 x 64", 6, 2, 64},
                           layout{"Qwen3-30B-A3B 32/4 x 128", 32, 4, 128}, layout{"hybrid attention 16/2 x 256", 16, 2, 256}}) {
        kernels::attention_params p;
        p.n_head = l.n_head;
        p.n_kv_head = l.n_kv;
        p.head_dim = l.hd;
        p.scale = 1.0f / std::sqrt(static_cast<float>(l.hd));
        for (int end : {512, 2048, 8192}) {
            std::vector<float> q(static_cast<size_t>(l.n_head * l.hd));
            std::vector<float> k(static_cast<size_t>(end) * static_cast<size_t>(l.n_kv * l.hd)), v(k.size());
            for (auto* b : {&q, &k, &v})
                for (auto& x : *b) x = d(g);
            std::vector<float> out(q.size()), parts(kernels::attention_split_floats(p));
            double med[2];
            for (int which = 0; which < 2; ++which) {
                const kernels::attention_scratch sc{which ? parts.data() : nullptr, which ? parts.size() : 0, true};
                std::vector<double> t;
                for (int r = 0; r <= reps; ++r) {   // the first run warms the caches: not counted
                    const auto t0 = std::chrono::steady_clock::now();
                    kernels::attention(pool, p, q.data(), k.data(), v.data(), end - 1, 1, out.data(), sc);
                    if (r > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                }
                std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
                med[which] = t[t.size() / 2];
            }
            fmt::print("{:<34} {:>10.1f} {:>10.1f} {:>6.2f}x\n", fmt::format("{} at {}", l.name, end), 1e6 * med[0],
                       1e6 * med[1], med[0] / med[1]);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
    if (threads > 1) return split_against_unsplit(reps, threads);
    kernels::attention_params p;
    p.n_head = 32;
    p.n_kv_head = 4;
    p.head_dim = 128;
    p.scale = 1.0f / std::sqrt(128.0f);
    const int64_t max_pos = 8192;
    std::mt19937 g(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(64 * p.n_head * p.head_dim));
    std::vector<float> k(static_cast<size_t>(max_pos * p.n_kv_head * p.head_dim)), v(k.size());
    for (auto* b : {&q, &k, &v})
        for (auto& x : *b) x = d(g);
    std::vector<float> out(q.size());
    thread_pool pool(1);
    fmt::print("{:<22} {:>12} {:>12}   (us a row, 1 thread; 32/4 heads of 128)\n", "case", "attention", "ref");
    struct test {
        int rows;
        int end;   // positions seen by the last row
    };
    for (const test t : {test{1, 512}, test{1, 2048}, test{1, 8192}, test{64, 512}, test{64, 2048}}) {
        const int32_t pos0 = t.end - t.rows;
        double best[2] = {1e30, 1e30};
        for (int which = 0; which < 2; ++which)
            for (int r = 0; r < (which ? std::max(1, reps / 2) : reps); ++r) {
                const double t0 = thread_seconds();
                if (which == 0) kernels::attention(pool, p, q.data(), k.data(), v.data(), pos0, t.rows, out.data());
                else kernels::attention_ref(pool, p, q.data(), k.data(), v.data(), pos0, t.rows, out.data());
                best[which] = std::min(best[which], thread_seconds() - t0);
            }
        fmt::print("{:<22} {:>12.1f} {:>12.1f}\n", fmt::format("{} rows to {}", t.rows, t.end), 1e6 * best[0] / t.rows,
                   1e6 * best[1] / t.rows);
    }
    return 0;
}
