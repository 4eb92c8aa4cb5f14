#include "core/thread_pool.h"

#include "core/error.h"

namespace sluice {

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
    if (n_threads < 1 || n_threads > 1024) fail("thread_pool: n_threads: expected 1..1024, got {}", n_threads);
    workers_.reserve(static_cast<size_t>(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

// Thread `index` gets the index-th of n_threads near-equal contiguous slices.
void thread_pool::slice(int index, int64_t& b, int64_t& e) const {
    const int64_t per = n_ / n_threads_, extra = n_ % n_threads_;
    b = index * per + (index < extra ? index : extra);
    e = b + per + (index < extra ? 1 : 0);
}

void thread_pool::run(int64_t n, trampoline t, void* ctx) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        t(ctx, 0, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = t;
        ctx_ = ctx;
        n_ = n;
        pending_ = n_threads_ - 1;
        ++generation_;
    }
    start_cv_.notify_all();
    int64_t b, e;
    slice(0, b, e);
    if (b < e) t(ctx, b, e);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void thread_pool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        trampoline t;
        void* ctx;
        {
            std::unique_lock<std::mutex> lock(mu_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            t = fn_;
            ctx = ctx_;
        }
        int64_t b, e;
        slice(index, b, e);
        if (b < e) t(ctx, b, e);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--pending_ == 0) done_cv_.notify_one();
        }
    }
}

}  // namespace sluice
