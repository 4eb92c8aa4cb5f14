// Expert memory per NUMA node (issue 4 item 3): node k's routed experts of every layer
// (moe::first_expert_of_node, the rule the expert pool claims by) are moved to node k's memory,
// where node k's threads read them.
//
// How: the experts stay where the model file's read-only mapping has them (tensor views keep
// their addresses, so nothing else changes and the bits cannot: same bytes, same kernels). For
// each node, one thread at load
//   1. sets its own memory policy to prefer node k (set_mempolicy(MPOL_PREFERRED)) and reads one
//      byte of every page of node k's expert ranges: pages not yet in the page cache are read
//      from disk into node k's memory (page cache pages are allocated by the faulting thread's
//      policy, not the mapping's);
//   2. binds the ranges with mbind(MPOL_PREFERRED, MPOL_MF_MOVE): pages already cached on
//      another node (an earlier run, another process's read) migrate to node k. Pages mapped by
//      another process too are not moved (that needs MPOL_MF_MOVE_ALL and CAP_SYS_NICE);
//   3. asks move_pages (query mode) where a sample of the pages now are, for the report.
// PREFERRED, not BIND: a full node keeps the page where it was instead of failing the load; the
// report says how much landed. Pages at a boundary between two nodes' ranges go to the later one.
// Why not a node-local copy (an anonymous mapping bound to node k, the experts copied into it,
// as placement/expert_arena.h repacks them): it doubles the load-time traffic, and the bank would
// have to point at the copy; with the mapping moved in place nothing but page locations changes.
// Its weakness: the kernel may reclaim clean file pages under memory pressure and read them back
// wherever the faulting thread runs (then usually a thread of the right node, which claims its
// node's experts first).
//
// Raw system calls (syscall(SYS_mbind, ...)), not libnuma: three calls with fixed kernel ABI
// values are all that is needed, and the GPU machine's plain g++ build and CI must link without
// the library. A kernel or container that refuses them (seccomp: docker's default profile allows
// them only with CAP_SYS_NICE) leaves the pages where they are, with the error in the report.
//
// Nothing is done for one node or a simulated topology (its nodes do not exist): the report says
// so, and no page is touched.
#pragma once

#include "core/numa_topology.h"
#include "core/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace sluice::moe {

struct numa_placement_report {
    int nodes = 1;                 // nodes the experts were spread over (1: nothing placed)
    uint64_t bytes = 0;            // expert bytes bound to a node
    uint64_t checked_pages = 0;    // pages sampled after the move (at most 65,536 a node)
    uint64_t pages_on_node = 0;    // of those, the ones on their node
    std::string note;              // why nothing (or not all) was placed; empty when all went well
    // "not placed (1 node)", "16.2 GiB on 2 nodes, 99.7% of sampled pages on their node".
    std::string describe() const;
};

// experts: every layer's routed-expert tensors, 3-D [n_in, n_out, n_expert] (expert outermost),
// their data in a mapping of this process (the model file's); only page locations change. plan: the thread plan of the
// pool that will compute them (plan_numa_threads with the same topology and thread count).
numa_placement_report place_experts(std::span<const tensor_view* const> experts, const numa_thread_plan& plan);

}  // namespace sluice::moe
