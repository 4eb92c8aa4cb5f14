// The cost of one thread_pool::parallel_for, the hand-off a decode step pays a few hundred times
// per token: wall microseconds per call for chunk counts of a decode step's matmuls (16-256
// chunks) with no work and with ~1 us of work per chunk, at the given thread counts. A small
// dense model on 16 threads spends most of a token here. Asserts nothing.
// Usage: bench_pool [threads...]   (default: 2 and the machine's CPUs)
#include "core/cpu_count.h"
#include "core/thread_pool.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <vector>

using namespace sluice;

namespace {

// ~ns of dependent arithmetic the compiler cannot remove.
inline uint64_t busy(uint64_t x, int iters) {
    for (int i = 0; i < iters; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

double us_per_call(thread_pool& pool, int64_t chunks, int iters_per_chunk, int calls, int64_t grain = 1) {
    // One cache line per chunk: chunks run by different threads share no line.
    constexpr size_t k_line = 8;
    std::vector<uint64_t> sink(static_cast<size_t>(chunks) * k_line, 0);
    auto one = [&] {
        pool.parallel_for(chunks, grain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                uint64_t& v = sink[static_cast<size_t>(i) * k_line];
                v = busy(v, iters_per_chunk);
            }
        });
    };
    for (int i = 0; i < calls / 10; ++i) one();   // warm: workers spinning, pages touched
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) one();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t acc = 0;
    for (uint64_t v : sink) acc ^= v;
    if (acc == 42) fmt::print("");   // keeps sink alive
    return 1e6 * s / calls;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> threads;
    for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
    if (threads.empty()) threads = {2, usable_cpus()};
    // ~1 us of work a chunk: 300 dependent multiply-adds (~3-4 cycles each at ~3 GHz).
    constexpr int k_work = 300;
    // Columns: no work; ~1 us a unit, one unit a claim; the same in 2 claims per thread; the
    // ideal (one unit's time x units per thread).
    fmt::print("{:>8} {:>7} {:>10} {:>12} {:>14} {:>8}\n", "threads", "units", "empty us", "1us/claim us", "2 claims/thr", "ideal");
    for (int t : threads) {
        thread_pool pool(t);
        for (int64_t chunks : {16, 64, 128, 256}) {
            const double empty = us_per_call(pool, chunks, 0, 20000);
            const double work = us_per_call(pool, chunks, k_work, 5000);
            const double coarse = us_per_call(pool, chunks, k_work, 5000, (chunks + 2 * t - 1) / (2 * t));
            const double one_chunk = us_per_call(pool, 1, k_work, 20000);   // runs inline: the chunk's own cost
            fmt::print("{:>8} {:>7} {:>10.2f} {:>12.2f} {:>14.2f} {:>8.2f}\n", t, chunks, empty, work, coarse,
                       one_chunk * static_cast<double>((chunks + t - 1) / t));
        }
    }
    return 0;
}
