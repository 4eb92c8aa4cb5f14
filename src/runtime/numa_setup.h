// A run's NUMA set-up, made once at load by the engines and `sluice bench`: the topology every
// thread pool of the run is given (--numa off|auto|simulate:N, core/numa_topology.h), the plan
// of the run's thread count over it, and the model's routed experts moved to their nodes
// (moe/numa_placement.h). On one node (or off) it is an empty topology and nothing is moved.
#pragma once

#include "core/numa_topology.h"
#include "moe/numa_placement.h"

#include <string>
#include <string_view>

namespace sluice {

class model_file;

struct numa_setup {
    numa_topology topology;               // for thread_pool_options::numa
    numa_thread_plan plan;                // n_threads over it (what the pools will do)
    moe::numa_placement_report placement;
    // "1 node" or "2 nodes (8+8 threads); experts: 16.20 GiB on 2 nodes, 99.7% of ... on their node".
    std::string describe() const;
};

// option: --numa's text. With "auto", SLUICE_NUMA_SIMULATE=N (N >= 2) simulates N nodes (tests,
// one-node machines); read here, once, at load. The experts are the file's 3-D *_exps.weight
// tensors; they are placed only when the plan has several real nodes.
numa_setup setup_numa(std::string_view option, int n_threads, const model_file& f);

}  // namespace sluice
