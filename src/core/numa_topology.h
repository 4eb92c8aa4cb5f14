// The machine's NUMA nodes, the CPUs of each that this process may run on, and how a thread
// pool of n threads spreads over them (issue 4 item 3: expert memory placed per node and
// computed by that node's threads).
//
// Read from sysfs (/sys/devices/system/node/nodeN/cpulist), intersected with the process's
// affinity mask (taskset, a cgroup cpuset): nodes left with no allowed CPU are dropped. No
// libnuma: the text files are all the topology there is, and the memory side (moe/
// numa_placement.h) uses the raw mbind/move_pages system calls, so the plain g++ build of the
// GPU machine (bench/gpu/build.sh) and CI link without the library.
//
// A *simulated* topology splits the allowed CPUs of a one-node machine into N nodes, so tests
// (and `--numa simulate:N`, or SLUICE_NUMA_SIMULATE=N with `--numa auto`) run the multi-node
// code paths -- threads claiming their node's experts first, then stealing -- on any machine.
// A simulated topology never places memory: its nodes do not exist (moe/numa_placement.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct numa_node {
    int id = 0;             // the kernel's node number (nodeN); the index when simulated
    std::vector<int> cpus;  // allowed CPUs of the node, ascending, non-empty
};

struct numa_topology {
    std::vector<numa_node> nodes;   // by id; empty: not known (one node of every allowed CPU)
    bool simulated = false;         // split for tests: no memory is placed on these nodes
    int n_cpus() const;
};

// Nodes a pool spreads over at most (the expert pool keeps a claim counter per node).
constexpr int k_max_numa_nodes = 64;

// "0-3,8,10-11\n" -> {0,1,2,3,8,10,11}: the kernel's cpulist format (ascending ranges, a
// trailing newline; an empty list is a node without CPUs). Throws sluice::error quoting the
// text on anything else: a bad number, a range that runs backwards, a CPU past 1 << 20, CPUs
// out of order or repeated.
std::vector<int> parse_cpulist(std::string_view text);

// The CPUs of the process's affinity mask, ascending.
std::vector<int> allowed_cpus();

// The nodes under `node_dir` (nodeN/cpulist for every directory nodeN, N a number), each's CPUs
// intersected with `allowed`; nodes left empty are dropped. A missing directory (a kernel
// without NUMA, some containers) gives one node 0 of every allowed CPU. A malformed cpulist
// throws, naming the file.
numa_topology read_numa_topology(const std::string& node_dir, const std::vector<int>& allowed);

// read_numa_topology("/sys/devices/system/node", allowed_cpus()).
numa_topology detect_numa_topology();

// `cpus` split into n_nodes contiguous nodes of as equal a size as can be (the first ones one
// larger), ids 0..n_nodes-1, simulated. Throws unless 1 <= n_nodes <= min(cpus, 64).
numa_topology simulate_numa_topology(int n_nodes, const std::vector<int>& cpus);

// The --numa option: "off" (one node: the pool and memory as without NUMA), "auto" (the
// detected topology; several nodes only where the machine has them), "simulate:N".
struct numa_choice {
    enum class mode { off, automatic, simulate } m = mode::automatic;
    int simulate_nodes = 0;   // N of simulate:N
};
numa_choice parse_numa_option(std::string_view text);   // throws on anything else, quoting it

// The topology a run uses. `simulate_env` is the value of SLUICE_NUMA_SIMULATE (null or empty:
// unset), read by the caller at start-up: with mode auto, N >= 2 there means simulate:N (a
// number is required; "1" or "0" mean no simulation). off gives an empty topology.
numa_topology resolve_numa(const numa_choice& c, const char* simulate_env);

// How a pool of n_threads threads spreads over a topology. Thread 0 is the caller of
// parallel_for (never pinned; counted on the first node); workers 1..n-1 are pinned to the
// CPUs listed. Threads go to the nodes in proportion to their allowed CPUs (largest remainder),
// node by node: the first node's threads are 0..t0-1, the next node's t0..t0+t1-1, ...; nodes
// that get no thread are left out. One node (n_nodes() == 1) when the topology has fewer than
// two nodes, n_threads < 2, or, for a real topology, more threads than its CPUs (the pool then
// pins as without NUMA). A simulated topology takes more threads than CPUs too (tests run 4
// threads on 2 CPUs): every cpu is then -1, nothing pinned, the nodes still assigned.
struct numa_thread_plan {
    std::vector<int> cpu;                // [n_threads] CPU of each thread; -1: not pinned (thread 0 always; empty on one node)
    std::vector<int> node;               // [n_threads] its node, an index into threads_per_node
    std::vector<int> threads_per_node;   // [n_nodes] >= 1 each
    std::vector<int> node_id;            // [n_nodes] the kernel's node numbers (simulated: indexes)
    bool simulated = false;
    int n_nodes() const { return static_cast<int>(threads_per_node.size()); }
};
numa_thread_plan plan_numa_threads(const numa_topology& t, int n_threads);

// "1 node", "2 nodes (8+8 threads)", "2 simulated nodes (1+1 threads)": for headers and logs.
std::string describe(const numa_thread_plan& p);

}  // namespace sluice
