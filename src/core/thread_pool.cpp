#include "core/thread_pool.h"

#include "core/cpu_count.h"
#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sluice {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

constexpr uint64_t job_word(uint32_t gen, uint32_t chunk) { return (static_cast<uint64_t>(gen) << 32) | chunk; }
constexpr uint32_t gen_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
constexpr uint32_t chunk_of(uint64_t w) { return static_cast<uint32_t>(w); }
// The chunk index of a closed generation: above every chunk count (run caps them at 0xFFFFFFF0).
constexpr uint32_t k_no_chunk = 0xFFFFFFFFu;

}  // namespace

thread_pool::thread_pool(int n_threads, thread_pool_options o) : n_threads_(n_threads), spin_us_(o.spin_us) {
    if (n_threads < 1 || n_threads > 1024) fail("thread_pool: n_threads: expected 1..1024, got {}", n_threads);
    if (o.spin_us < 0) fail("thread_pool: spin_us: expected >= 0, got {}", o.spin_us);
    // More threads than usable CPUs (an oversubscribed machine, a cgroup quota): a spinning
    // worker would take the CPU from the one holding the job's last chunk, so idle workers sleep.
    if (n_threads > usable_cpus()) spin_us_ = 0;
    // CPUs this process may run on, in order: worker i goes to the i-th (the caller keeps its own).
    // With several NUMA nodes the plan lists them node by node instead (numa_topology.h).
    const numa_thread_plan plan = plan_numa_threads(o.numa, n_threads);
    std::vector<int> cpus;
    if (plan.n_nodes() > 1) {
        if (o.pin && std::all_of(plan.cpu.begin() + 1, plan.cpu.end(), [](int c) { return c >= 0; })) cpus = plan.cpu;
    } else {
        cpu_set_t allowed;
        CPU_ZERO(&allowed);
        if (o.pin && sched_getaffinity(0, sizeof allowed, &allowed) == 0)
            for (int c = 0; c < CPU_SETSIZE; ++c)
                if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
    const bool pin = o.pin && static_cast<int>(cpus.size()) >= n_threads && n_threads > 1;
    bool all_pinned = pin;
    workers_.reserve(static_cast<size_t>(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) {
        workers_.emplace_back([this, i] { worker(i); });
        if (pin) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[static_cast<size_t>(i)], &one);
            // Best effort: a refused affinity (a container's cgroup) leaves the thread unpinned.
            const bool ok = pthread_setaffinity_np(workers_.back().native_handle(), sizeof one, &one) == 0;
            pinned_ = ok || pinned_;
            all_pinned = ok && all_pinned;
        }
    }
    // A worker not on its node's CPU would compute that node's experts from another node's
    // memory: then the pool is a one-node pool (the same bits, E2; only the speed differs). A
    // simulated topology keeps its nodes unpinned: it exists to run the multi-node claiming.
    if (plan.n_nodes() > 1 && (all_pinned || plan.simulated)) {
        node_of_ = plan.node;
        threads_per_node_ = plan.threads_per_node;
        numa_simulated_ = plan.simulated;
        for (int k = 0; k < plan.n_nodes(); ++k)
            for (const numa_node& nd : o.numa.nodes)
                if (nd.id == plan.node_id[static_cast<size_t>(k)])
                    for (int c : nd.cpus) {
                        if (c >= static_cast<int>(node_of_cpu_.size())) node_of_cpu_.resize(static_cast<size_t>(c) + 1, -1);
                        node_of_cpu_[static_cast<size_t>(c)] = k;
                    }
    } else {
        node_of_.assign(static_cast<size_t>(n_threads), 0);
        threads_per_node_ = {n_threads};
    }
}

int thread_pool::home_node(int tid) const {
    if (tid != 0 || node_of_cpu_.empty()) return node_of_[static_cast<size_t>(tid)];
    const int c = sched_getcpu();
    return c >= 0 && c < static_cast<int>(node_of_cpu_.size()) && node_of_cpu_[static_cast<size_t>(c)] >= 0
               ? node_of_cpu_[static_cast<size_t>(c)]
               : 0;
}

thread_pool::~thread_pool() {
    stop_.store(true);
    job_.fetch_add(job_word(1, 0));   // a new generation with no chunks: spinners see it
    wake_.fetch_add(1);
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

int64_t thread_pool::work(uint32_t gen, int tid) {
    int64_t ran = 0;
    uint64_t w = job_.load(std::memory_order_acquire);
    for (;;) {
        if (gen_of(w) != gen) break;
        const uint32_t c = chunk_of(w);
        if (c >= n_chunks_.load(std::memory_order_acquire)) break;
        if (!job_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // Chunk c of generation gen is ours: the job fields are that generation's until it is done.
        const int64_t b = static_cast<int64_t>(c) * grain_;
        const int64_t e = b + grain_ < n_ ? b + grain_ : n_;
        fn_(ctx_, tid, b, e);
        ++ran;
        w = job_.load(std::memory_order_acquire);
    }
    return ran;
}

void thread_pool::run(int64_t n, int64_t grain, trampoline t, void* ctx) {
    if (n <= 0) return;
    if (grain <= 0) grain = (n + 8 * n_threads_ - 1) / (8 * n_threads_);
    if (grain < 1) grain = 1;
    // The job word counts chunks in 32 bits.
    if ((n + grain - 1) / grain > int64_t{0xFFFFFFF0}) grain = (n + 0xFFFFFFEF) / 0xFFFFFFF0;
    const int64_t n_chunks = (n + grain - 1) / grain;
    if (n_threads_ == 1 || n_chunks == 1) {
        for (int64_t b = 0; b < n; b += grain) t(ctx, 0, b, b + grain < n ? b + grain : n);
        return;
    }
    // Close the finished generation first, with a word no chunk count reaches. Without it, a
    // worker still holding the old word (every chunk claimed) could read the new n_chunks_
    // below, find its stale chunk index under it, and claim a phantom chunk of the old
    // generation by CAS before the new word is stored: it would run a chunk twice and count it
    // into the new job's done_, which then never equals n_chunks (seen as a hang on 2 cores
    // with 3 threads). n_chunks_ is stored with release and loaded with acquire, so a worker
    // that sees the new count also sees the closed word, and its CAS fails.
    const uint32_t closed = gen_of(job_.load(std::memory_order_relaxed)) + 1;
    job_.store(job_word(closed, k_no_chunk));
    fn_ = t;
    ctx_ = ctx;
    n_ = n;
    grain_ = grain;
    n_chunks_.store(static_cast<uint32_t>(n_chunks), std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t gen = closed + 1;
    job_.store(job_word(gen, 0));   // seq_cst: publishes the fields above; ordered before sleepers_
    wake_.fetch_add(1);
    if (sleepers_.load() > 0) wake_.notify_all();
    const int64_t mine = work(gen, 0);
    if (done_.fetch_add(mine, std::memory_order_acq_rel) + mine == n_chunks) return;
    // The rest is held by workers that are running it: spin (it is short), yielding now and then
    // so that a worker preempted on a busy machine gets its CPU back.
    for (unsigned i = 1; done_.load(std::memory_order_acquire) != n_chunks; ++i) {
        cpu_relax();
        if (i % 4096 == 0) sched_yield();
    }
}

void thread_pool::worker(int index) {
    uint32_t seen = 0;
    for (;;) {
        uint64_t w = job_.load(std::memory_order_acquire);
        if (gen_of(w) == seen) {
            // Spin for spin_us_, checking the clock every 64 pauses, then sleep.
            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
            for (unsigned i = 1; gen_of(w = job_.load(std::memory_order_acquire)) == seen; ++i) {
                cpu_relax();
                if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
            }
            if (gen_of(w) == seen) {
                // Lost-wake-up free: the caller stores job_, then bumps wake_, then reads sleepers_;
                // we read wake_, raise sleepers_, then re-read job_ (all seq_cst).
                const uint32_t s = wake_.load();
                sleepers_.fetch_add(1);
                if (gen_of(job_.load()) == seen) wake_.wait(s);
                sleepers_.fetch_sub(1);
                continue;
            }
        }
        if (stop_.load()) return;
        seen = gen_of(w);
        if (const int64_t ran = work(seen, index); ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
    }
}

}  // namespace sluice
