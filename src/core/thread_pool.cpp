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

// Job word: generation (16 bits) | the job's chunk count (24) | next unclaimed chunk (24). A
// thread claims a chunk with one fetch_add, and the word it gets back says which generation the
// chunk belongs to, how many chunks that generation has and which one is now its own: a claim
// never retries and never needs the job's other fields to tell whether it is valid. (A
// compare-and-swap claim retried under contention: 16 threads on one word; the chunk count had to
// live beside the word and a generation be closed before the next was opened.) A claim at or past
// the count is empty; such claims are at most two per thread and generation, so the next-chunk
// field stays below 2^24 for counts up to k_max_chunks and never carries into the count.
constexpr uint64_t k_field = (uint64_t{1} << 24) - 1;
constexpr uint32_t k_gen_mask = 0xFFFF;
constexpr int64_t k_max_chunks = (int64_t{1} << 24) - 4096;
constexpr uint64_t job_word(uint32_t gen, uint64_t count) {
    return (static_cast<uint64_t>(gen & k_gen_mask) << 48) | (count << 24);
}
constexpr uint32_t gen_of(uint64_t w) { return static_cast<uint32_t>(w >> 48); }
constexpr uint32_t count_of(uint64_t w) { return static_cast<uint32_t>((w >> 24) & k_field); }
constexpr uint32_t chunk_of(uint64_t w) { return static_cast<uint32_t>(w & k_field); }

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

int64_t thread_pool::work(int tid, uint32_t& gen) {
    int64_t ran = 0;
    for (;;) {
        // A read first: when every chunk is taken the claim would only move the line between
        // cores (each thread ended every call with such an empty claim: 16 more on the word).
        if (const uint64_t now = job_.load(std::memory_order_acquire); chunk_of(now) >= count_of(now)) {
            gen = gen_of(now);
            return ran;
        }
        // Every chunk this call runs is of one generation: a generation ends only when all its
        // chunks are counted in done_, and this thread counts its chunks after it returns.
        const uint64_t w = job_.fetch_add(1, std::memory_order_acq_rel);
        gen = gen_of(w);
        const uint32_t c = chunk_of(w);
        if (c >= count_of(w)) return ran;
        // Chunk c is ours: the job fields are this generation's until it is done.
        const int64_t b = static_cast<int64_t>(c) * grain_;
        const int64_t e = b + grain_ < n_ ? b + grain_ : n_;
        fn_(ctx_, tid, b, e);
        ++ran;
    }
}

void thread_pool::run(int64_t n, int64_t grain, trampoline t, void* ctx) {
    if (n <= 0) return;
    if (grain <= 0) {
        // Claims are serialised on the job word (a cache line moving between cores), so their
        // number, not only the balance, sets a short call's cost: 8 chunks a thread up to 4
        // threads, then 32 chunks in all (2 a thread from 16). bench_pool, 128 units of ~1 us,
        // one claim a unit against 2 claims a thread: 46 against 31 us at 2 threads (EPYC; ideal
        // 31), 9.7 against 7.1 us at 16 (the H200 machine's Xeon; ideal 3.2). A decode step's
        // matmuls are such calls: ~120 units of 0.1-0.5 us.
        const int64_t per_thread = n_threads_ <= 4 ? 8 : std::max<int64_t>(2, 32 / n_threads_);
        grain = (n + per_thread * n_threads_ - 1) / (per_thread * n_threads_);
    }
    if (grain < 1) grain = 1;
    // The job word counts chunks in 24 bits.
    if ((n + grain - 1) / grain > k_max_chunks) grain = (n + k_max_chunks - 1) / k_max_chunks;
    const int64_t n_chunks = (n + grain - 1) / grain;
    if (n_threads_ == 1 || n_chunks == 1) {
        for (int64_t b = 0; b < n; b += grain) t(ctx, 0, b, b + grain < n ? b + grain : n);
        return;
    }
    fn_ = t;
    ctx_ = ctx;
    n_ = n;
    grain_ = grain;
    done_.store(0, std::memory_order_relaxed);
    const uint32_t gen = gen_of(job_.load(std::memory_order_relaxed)) + 1;
    job_.store(job_word(gen, static_cast<uint64_t>(n_chunks)));   // seq_cst: publishes the fields above
    wake_.fetch_add(1);
    if (sleepers_.load() > 0) wake_.notify_all();
    uint32_t g = 0;
    const int64_t mine = work(0, g);
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
        // Checked first: an empty claim can land on the destructor's generation (the previous
        // job's count, all claimed), and then that generation is `seen` and nothing wakes us.
        if (stop_.load()) return;
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
                if (gen_of(job_.load()) == seen && !stop_.load()) wake_.wait(s);
                sleepers_.fetch_sub(1);
                continue;
            }
        }
        if (stop_.load()) return;
        // seen: the generation of this thread's last claim, the empty one that ended work().
        if (const int64_t ran = work(index, seen); ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
    }
}

}  // namespace sluice
