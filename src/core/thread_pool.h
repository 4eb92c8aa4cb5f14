// A persistent pool of worker threads. parallel_for splits an index range [0, n) into one
// contiguous slice per thread; callers split OUTPUT rows/columns with it, never a reduction, so
// every element is computed by the same code in the same order whatever the thread count (E2).
// Threads are created once (the context object owns the pool; there is no global pool) and
// wait on a condition variable between calls: no per-call thread creation, no allocation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice {

class thread_pool {
public:
    // n_threads >= 1 (the calling thread counts as one: n_threads - 1 workers are started).
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int n_threads() const { return n_threads_; }

    // Calls fn(begin, end) on disjoint slices covering [0, n); returns when all are done.
    // fn must not throw (it runs in the hot loop). Not reentrant: one parallel_for at a time.
    template <class F>
    void parallel_for(int64_t n, F&& fn) {
        using fn_t = std::remove_reference_t<F>;
        run(n, [](void* ctx, int64_t b, int64_t e) { (*static_cast<fn_t*>(ctx))(b, e); },
            const_cast<void*>(static_cast<const void*>(&fn)));
    }

private:
    using trampoline = void (*)(void*, int64_t, int64_t);
    void run(int64_t n, trampoline t, void* ctx);
    void worker(int index);
    void slice(int index, int64_t& b, int64_t& e) const;

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    uint64_t generation_ = 0;  // bumped for each parallel_for; workers run once per value
    int pending_ = 0;          // workers still running the current generation
    bool stop_ = false;
    trampoline fn_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_ = 0;
};

}  // namespace sluice
