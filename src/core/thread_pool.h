// A persistent pool of worker threads for the per-token hot loop. parallel_for hands out an
// index range [0, n) in chunks claimed with one atomic fetch_add each (no lock), so a
// thread that the OS preempts delays only the chunk it holds, and the tail is one chunk long.
// Callers split OUTPUT rows/columns with it, never a reduction: every element is computed by the
// same code in the same order whatever the thread count or the chunking (E2).
//
// Waiting: between calls workers spin on the job word for `spin_us` microseconds, then sleep on
// a futex (std::atomic::wait). A decode step issues a few hundred parallel_for calls a few
// microseconds apart, so they hit spinning workers and pay no wake-up system call; a pool left
// idle (between requests) sleeps and costs nothing. Threads are created once (the context object
// owns the pool; there is no global pool); nothing is allocated per call.
//
// NUMA: given a topology of several nodes (thread_pool_options::numa), the workers are pinned
// node by node and each knows its node (node_of, home_node); parallel_for itself is unchanged.
// The expert pool (moe/expert_pool.h) builds its per-node claiming on top of parallel_for_tid.
#pragma once

#include "core/numa_topology.h"

#include <atomic>
#include <cstdint>
#include <span>
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
    // NUMA (core/numa_topology.h): with several nodes, pin on, and no more threads than the
    // topology's CPUs, the threads are spread over the nodes by plan_numa_threads, each worker
    // pinned to a CPU of its node, and node_of(tid) names its node (the expert pool claims that
    // node's jobs first). Otherwise (empty, one node, pin off or refused) the pool is the
    // one-node pool: pinned as above, node_of() 0 for every thread. A simulated topology keeps
    // its nodes even unpinned (tests: the multi-node claiming on any machine). The initializer
    // keeps designated initializers ({.pin = false}) free of -Wmissing-field-initializers.
    numa_topology numa = {};
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
    // Nodes the threads are spread over (1 without NUMA), the node of thread tid (0 = the
    // caller, counted on node 0), and how many threads each node has.
    int n_nodes() const { return static_cast<int>(threads_per_node_.size()); }
    int node_of(int tid) const { return node_of_[static_cast<size_t>(tid)]; }
    // The node whose work thread tid should take first: a worker's node_of(tid); for the caller
    // (never pinned) the node of the CPU it is running on now (sched_getcpu, a vDSO read), node
    // 0 when that CPU is none of the nodes'. Called once per parallel_for on the NUMA path only.
    int home_node(int tid) const;
#if __cplusplus >= 202002L   // CUDA kernel files include this header as C++17 (kernels/cuda/ops.cuh)
    std::span<const int> threads_per_node() const { return threads_per_node_; }
#endif
    bool numa_simulated() const { return numa_simulated_; }

    // Calls fn(begin, end) on disjoint chunks covering [0, n), each at most `grain` long (grain
    // <= 0: 8 chunks a thread up to 4 threads, 32 in all beyond), from any thread of the pool,
    // the caller included; returns when all are done. fn must not throw (it runs in the hot
    // loop). Not reentrant: one parallel_for at a time, from one thread.
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
    // Claims and runs chunks until a claim comes back empty; returns how many it ran, and in
    // `gen` the generation of that last claim.
    int64_t work(int tid, uint32_t& gen);

    int n_threads_;
    bool pinned_ = false;
    int spin_us_;
    std::vector<int> node_of_;            // [n_threads] node of each thread
    std::vector<int> threads_per_node_;   // [n_nodes]
    std::vector<int> node_of_cpu_;        // [max CPU + 1] node of each CPU, -1: none (empty on one node)
    bool numa_simulated_ = false;
    std::vector<std::thread> workers_;

    // The current job, written by the caller before it publishes the job word; read by a worker
    // only after it has claimed a chunk of that job (so never while the caller rewrites it).
    trampoline fn_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_ = 0, grain_ = 1;

    // Job word: generation, chunk count and next unclaimed chunk (thread_pool.cpp's job_word);
    // one fetch_add claims a chunk.
    alignas(64) std::atomic<uint64_t> job_{0};
    alignas(64) std::atomic<int64_t> done_{0};      // chunks finished in the current generation
    alignas(64) std::atomic<uint32_t> wake_{0};     // futex word the sleeping workers wait on
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace sluice
