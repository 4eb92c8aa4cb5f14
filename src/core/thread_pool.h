// A persistent pool of worker threads for the per-token hot loop. parallel_for hands out an
// index range [0, n) in chunks claimed with one atomic compare-and-swap each (no lock), so a
// thread that the OS preempts delays only the chunk it holds, and the tail is one chunk long.
// Callers split OUTPUT rows/columns with it, never a reduction: every element is computed by the
// same code in the same order whatever the thread count or the chunking (E2).
//
// Waiting: between calls workers spin on the job word for `spin_us` microseconds, then sleep on
// a futex (std::atomic::wait). A decode step issues a few hundred parallel_for calls a few
// microseconds apart, so they hit spinning workers and pay no wake-up system call; a pool left
// idle (between requests) sleeps and costs nothing. Threads are created once (the context object
// owns the pool; there is no global pool); nothing is allocated per call.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace sluice {

struct thread_pool_options {
    // Pin worker i (1..n-1) to the i-th CPU of the process's allowed set (pthread_setaffinity_np)
    // when the set has at least n CPUs; the calling thread is left where it is.
    bool pin = true;
    // How long an idle worker spins before it sleeps. 0: sleep at once (also when the pool has
    // more threads than usable_cpus()).
    int spin_us = 1000;
};

class thread_pool {
public:
    // n_threads >= 1 (the calling thread counts as one: n_threads - 1 workers are started).
    explicit thread_pool(int n_threads, thread_pool_options o = {});
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int n_threads() const { return n_threads_; }
    // True when the workers were pinned (see thread_pool_options::pin).
    bool pinned() const { return pinned_; }

    // Calls fn(begin, end) on disjoint chunks covering [0, n), each at most `grain` long (grain
    // <= 0: about 8 chunks per thread), from any thread of the pool, the caller included;
    // returns when all are done. fn must not throw (it runs in the hot loop). Not reentrant:
    // one parallel_for at a time, from one thread.
    template <class F>
    void parallel_for(int64_t n, F&& fn) {
        parallel_for(n, 0, static_cast<F&&>(fn));
    }
    template <class F>
    void parallel_for(int64_t n, int64_t grain, F&& fn) {
        using fn_t = std::remove_reference_t<F>;
        run(n, grain, [](void* ctx, int, int64_t b, int64_t e) { (*static_cast<fn_t*>(ctx))(b, e); },
            const_cast<void*>(static_cast<const void*>(&fn)));
    }
    // Same, with the index of the running thread (0 = the caller, 1..n_threads-1 the workers)
    // as the first argument, for per-thread scratch: fn(tid, begin, end).
    template <class F>
    void parallel_for_tid(int64_t n, int64_t grain, F&& fn) {
        using fn_t = std::remove_reference_t<F>;
        run(n, grain, [](void* ctx, int tid, int64_t b, int64_t e) { (*static_cast<fn_t*>(ctx))(tid, b, e); },
            const_cast<void*>(static_cast<const void*>(&fn)));
    }

private:
    using trampoline = void (*)(void*, int, int64_t, int64_t);
    void run(int64_t n, int64_t grain, trampoline t, void* ctx);
    void worker(int index);
    // Claims and runs chunks of generation `gen` until none is left; returns how many it ran.
    int64_t work(uint32_t gen, int tid);

    int n_threads_;
    bool pinned_ = false;
    int spin_us_;
    std::vector<std::thread> workers_;

    // The current job, written by the caller before it publishes the job word; read by a worker
    // only after it has claimed a chunk of that job (so never while the caller rewrites it).
    trampoline fn_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_ = 0, grain_ = 1;

    // Job word: generation in the high 32 bits, next unclaimed chunk in the low 32. A worker
    // claims chunk c of generation g by CAS from (g, c) to (g, c + 1): a worker that wakes late
    // sees a newer generation and never runs a chunk of a job it did not load.
    alignas(64) std::atomic<uint64_t> job_{0};
    // Chunks of the current job: atomic because a worker whose job word is stale may read it
    // while the caller writes the next job's (its CAS then fails, so the value is never used).
    std::atomic<uint32_t> n_chunks_{0};
    alignas(64) std::atomic<int64_t> done_{0};      // chunks finished in the current generation
    alignas(64) std::atomic<uint32_t> wake_{0};     // futex word the sleeping workers wait on
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace sluice
