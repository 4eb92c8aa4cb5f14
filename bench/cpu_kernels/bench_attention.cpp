// Single-thread time of kernels::attention (the AVX2 path where the CPU has it) and of
// attention_ref, the scalar definition: Qwen3-30B-A3B's shape (32 query heads, 4 KV heads, 128
// wide), one row at depths 512 / 2048 / 8192 (a decode step) and 64 rows ending at 512 / 2048 (a
// prefill chunk). Best of `reps` runs, thread CPU time; no assertion, numbers only.
// Usage: bench_attention [reps=5]
#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"

#include "bench_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

using namespace sluice;

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
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
