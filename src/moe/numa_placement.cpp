// Expert pages moved to their node (numa_placement.h): first touch under a node-preferring
// policy, mbind with MPOL_MF_MOVE, a move_pages query of a sample.
#include "moe/numa_placement.h"

#include "core/error.h"
#include "moe/expert_pool.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace sluice::moe {

namespace {

// The kernel ABI's values (<linux/mempolicy.h>), spelled here so that neither that header nor
// libnuma is needed.
constexpr int k_mpol_default = 0;
constexpr int k_mpol_preferred = 1;
constexpr unsigned k_mpol_mf_move = 1u << 1;

// Node masks of 1,024 bits (the kernel's usual MAX_NUMNODES); maxnode is the bit count + 1, as
// libnuma passes it (the kernel reads maxnode - 1 bits).
constexpr int k_mask_words = 16;
constexpr int k_mask_bits = k_mask_words * 64;
constexpr uint64_t k_sample_pages = 65536;   // pages queried per node after the move

struct node_mask {
    unsigned long w[k_mask_words] = {};
    explicit node_mask(int node) { w[node / 64] = 1ul << (node % 64); }
};

// syscall() is variadic: every argument is passed as a full long (an int's upper half would be
// undefined where the kernel reads an unsigned long, e.g. maxnode).
constexpr unsigned long k_maxnode = k_mask_bits + 1;
long sys_set_mempolicy(int mode, const unsigned long* mask) {
    return syscall(SYS_set_mempolicy, long{mode}, mask, mask ? k_maxnode : 0ul);
}
long sys_mbind(void* addr, unsigned long len, int mode, const unsigned long* mask, unsigned flags) {
    return syscall(SYS_mbind, addr, len, long{mode}, mask, k_maxnode, static_cast<unsigned long>(flags));
}
// Query mode (nodes null): status[i] = the node of pages[i], or -errno (-ENOENT: not present).
long sys_move_pages(unsigned long count, void** pages, int* status) {
    return syscall(SYS_move_pages, 0l, count, pages, static_cast<const int*>(nullptr), status, 0l);
}

// A page-aligned byte range of the mapping, bound to one node.
struct page_range {
    uintptr_t begin = 0, end = 0;
};

// What one node's thread does and finds.
struct node_work {
    int node_id = 0;
    std::vector<page_range> ranges;
    uint64_t bytes = 0, checked = 0, on_node = 0;
    std::string error;   // the first failed call, "" when none
};

void place_on_node(node_work& nw, uintptr_t page) {
    const node_mask mask(nw.node_id);
    // 1. First touch under a policy preferring the node: page cache misses land there.
    if (sys_set_mempolicy(k_mpol_preferred, mask.w) != 0) nw.error = fmt::format("set_mempolicy: {}", std::strerror(errno));
    unsigned sink = 0;
    for (const page_range& r : nw.ranges)
        for (uintptr_t a = r.begin; a < r.end; a += page) sink += *reinterpret_cast<const volatile unsigned char*>(a);
    (void)sink;
    sys_set_mempolicy(k_mpol_default, nullptr);
    // 2. Bind and move what was already resident elsewhere.
    for (const page_range& r : nw.ranges)
        if (sys_mbind(reinterpret_cast<void*>(r.begin), r.end - r.begin, k_mpol_preferred, mask.w, k_mpol_mf_move) != 0 &&
            nw.error.empty())
            nw.error = fmt::format("mbind: {}", std::strerror(errno));
    // 3. Where a sample of the pages are now.
    uint64_t total = 0;
    for (const page_range& r : nw.ranges) total += (r.end - r.begin) / page;
    const uint64_t stride = std::max<uint64_t>(1, (total + k_sample_pages - 1) / k_sample_pages);
    std::vector<void*> pages;
    pages.reserve(static_cast<size_t>(std::min(total, k_sample_pages)));
    uint64_t i = 0;
    for (const page_range& r : nw.ranges)
        for (uintptr_t a = r.begin; a < r.end; a += page, ++i)
            if (i % stride == 0) pages.push_back(reinterpret_cast<void*>(a));
    std::vector<int> status(pages.size(), -1);
    if (!pages.empty() && sys_move_pages(pages.size(), pages.data(), status.data()) != 0) {
        if (nw.error.empty()) nw.error = fmt::format("move_pages: {}", std::strerror(errno));
        return;
    }
    nw.checked = pages.size();
    nw.on_node = static_cast<uint64_t>(std::count(status.begin(), status.end(), nw.node_id));
}

}  // namespace

std::string numa_placement_report::describe() const {
    if (nodes <= 1) return fmt::format("experts not placed ({})", note.empty() ? "1 node" : note);
    std::string s = fmt::format("experts: {:.2f} GiB on {} nodes, {:.1f}% of {} sampled pages on their node",
                                double(bytes) / double(1ull << 30), nodes,
                                checked_pages ? 100.0 * double(pages_on_node) / double(checked_pages) : 0.0,
                                checked_pages);
    return note.empty() ? s : s + " (" + note + ")";
}

numa_placement_report place_experts(std::span<const tensor_view* const> experts, const numa_thread_plan& plan) {
    numa_placement_report rep;
    const int m = plan.n_nodes();
    if (m <= 1) {
        rep.note = "1 node";
        return rep;
    }
    if (plan.simulated) {
        rep.note = "simulated nodes";
        return rep;
    }
    for (int id : plan.node_id)
        if (id < 0 || id >= k_mask_bits) {
            rep.note = fmt::format("node {} is past the {}-node mask: memory not placed", id, k_mask_bits);
            return rep;
        }
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    std::vector<node_work> work(static_cast<size_t>(m));
    for (int k = 0; k < m; ++k) work[static_cast<size_t>(k)].node_id = plan.node_id[static_cast<size_t>(k)];
    for (const tensor_view* t : experts) {
        if (!t || t->n_dims != 3 || t->ne[2] < 1)
            fail("numa placement: tensor '{}': expected a 3-D expert tensor [n_in, n_out, n_expert]", t ? t->name : "null");
        const int32_t n_expert = static_cast<int32_t>(t->ne[2]);
        const uint64_t slice = t->nbytes / static_cast<uint64_t>(n_expert);   // one expert's bytes
        const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
        for (int k = 0; k < m; ++k) {
            const uintptr_t b = base + slice * static_cast<uint64_t>(first_expert_of_node(n_expert, plan.threads_per_node, k));
            const uintptr_t e = base + slice * static_cast<uint64_t>(first_expert_of_node(n_expert, plan.threads_per_node, k + 1));
            // Whole pages: a boundary page goes to the later node; the last range ends on the
            // tensor's last page (its tail may share a page with the next tensor: harmless).
            page_range r{b / page * page, k + 1 == m ? (e + page - 1) / page * page : e / page * page};
            if (r.begin >= r.end) continue;
            work[static_cast<size_t>(k)].ranges.push_back(r);
            work[static_cast<size_t>(k)].bytes += e - b;
        }
    }
    // One thread a node, in parallel: each reads (first touch) and moves its own node's pages.
    {
        std::vector<std::thread> threads;
        threads.reserve(work.size());
        for (node_work& nw : work) threads.emplace_back([&nw, page] { place_on_node(nw, page); });
        for (auto& t : threads) t.join();
    }
    rep.nodes = m;
    for (const node_work& nw : work) {
        rep.bytes += nw.bytes;
        rep.checked_pages += nw.checked;
        rep.pages_on_node += nw.on_node;
        if (!nw.error.empty() && rep.note.empty()) rep.note = fmt::format("node {}: {}", nw.node_id, nw.error);
    }
    return rep;
}

}  // namespace sluice::moe
