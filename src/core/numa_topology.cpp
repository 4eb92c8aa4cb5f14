// NUMA topology from sysfs, the simulated split, the --numa option and the thread plan
// (numa_topology.h).
#include "core/numa_topology.h"

#include "core/error.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sluice {

namespace {

constexpr int k_max_cpu = 1 << 20;

// A decimal number of the whole of `s`, below k_max_cpu; false otherwise.
bool parse_cpu(std::string_view s, int& v) {
    if (s.empty() || s.size() > 7) return false;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && p == s.data() + s.size() && v >= 0 && v < k_max_cpu;
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p);
    if (!f) fail("numa: cannot read {}", p.string());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

int numa_topology::n_cpus() const {
    int n = 0;
    for (const auto& nd : nodes) n += static_cast<int>(nd.cpus.size());
    return n;
}

std::vector<int> parse_cpulist(std::string_view text) {
    std::string_view s = text;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    std::vector<int> cpus;
    if (s.empty()) return cpus;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t comma = std::min(s.find(',', i), s.size());
        const std::string_view item = s.substr(i, comma - i);
        const size_t dash = item.find('-');
        int lo = 0, hi = 0;
        const bool ok = dash == std::string_view::npos
                            ? parse_cpu(item, lo) && (hi = lo, true)
                            : parse_cpu(item.substr(0, dash), lo) && parse_cpu(item.substr(dash + 1), hi) && lo <= hi;
        if (!ok) fail("numa: cpulist '{}': bad item '{}' (expected N or N-M with N <= M < {})", s, item, k_max_cpu);
        if (!cpus.empty() && lo <= cpus.back())
            fail("numa: cpulist '{}': CPU {} is out of order or repeated (expected ascending ranges)", s, lo);
        for (int c = lo; c <= hi; ++c) cpus.push_back(c);
        i = comma + 1;
    }
    return cpus;
}

std::vector<int> allowed_cpus() {
    std::vector<int> cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}

numa_topology read_numa_topology(const std::string& node_dir_text, const std::vector<int>& allowed) {
    const std::filesystem::path node_dir(node_dir_text);
    numa_topology t;
    std::error_code ec;
    if (std::filesystem::is_directory(node_dir, ec)) {
        for (const auto& e : std::filesystem::directory_iterator(node_dir, ec)) {
            const std::string name = e.path().filename().string();
            int id = 0;
            if (!name.starts_with("node") || !parse_cpu(std::string_view(name).substr(4), id) || !e.is_directory(ec)) continue;
            const std::filesystem::path list = e.path() / "cpulist";
            numa_node nd;
            nd.id = id;
            const std::string text = read_file(list);
            std::vector<int> cpus;
            try {
                cpus = parse_cpulist(text);
            } catch (const error& x) {
                fail("{}: {}", list.string(), x.what());
            }
            for (int c : cpus)
                if (std::binary_search(allowed.begin(), allowed.end(), c)) nd.cpus.push_back(c);
            if (!nd.cpus.empty()) t.nodes.push_back(std::move(nd));
        }
        std::sort(t.nodes.begin(), t.nodes.end(), [](const numa_node& a, const numa_node& b) { return a.id < b.id; });
    }
    if (t.nodes.empty() && !allowed.empty()) t.nodes.push_back({0, allowed});
    return t;
}

numa_topology detect_numa_topology() { return read_numa_topology("/sys/devices/system/node", allowed_cpus()); }

numa_topology simulate_numa_topology(int n_nodes, const std::vector<int>& cpus) {
    const int n = static_cast<int>(cpus.size());
    if (n_nodes < 1 || n_nodes > std::min(n, k_max_numa_nodes))
        fail("numa: simulate:{}: expected 1..{} nodes (one CPU each at least; {} CPUs allowed)", n_nodes,
             std::min(n, k_max_numa_nodes), n);
    numa_topology t;
    t.simulated = true;
    for (int k = 0, c = 0; k < n_nodes; ++k) {
        const int size = n / n_nodes + (k < n % n_nodes ? 1 : 0);
        t.nodes.push_back({k, std::vector<int>(cpus.begin() + c, cpus.begin() + c + size)});
        c += size;
    }
    return t;
}

numa_choice parse_numa_option(std::string_view text) {
    numa_choice c;
    if (text == "off") c.m = numa_choice::mode::off;
    else if (text == "auto") c.m = numa_choice::mode::automatic;
    else if (text.starts_with("simulate:") && parse_cpu(text.substr(9), c.simulate_nodes) && c.simulate_nodes >= 1 &&
             c.simulate_nodes <= k_max_numa_nodes)
        c.m = numa_choice::mode::simulate;
    else
        fail("--numa '{}': expected off, auto or simulate:N with N in 1..{}", text, k_max_numa_nodes);
    return c;
}

numa_topology resolve_numa(const numa_choice& c, const char* simulate_env) {
    switch (c.m) {
    case numa_choice::mode::off: return {};
    case numa_choice::mode::simulate: return simulate_numa_topology(c.simulate_nodes, allowed_cpus());
    case numa_choice::mode::automatic: break;
    }
    if (simulate_env && *simulate_env) {
        int n = 0;
        if (!parse_cpu(simulate_env, n))
            fail("SLUICE_NUMA_SIMULATE '{}': expected a number of nodes (unset, 0 or 1: none)", simulate_env);
        if (n >= 2) return simulate_numa_topology(n, allowed_cpus());
    }
    return detect_numa_topology();
}

numa_thread_plan plan_numa_threads(const numa_topology& t, int n_threads) {
    numa_thread_plan p;
    p.simulated = t.simulated;
    const int C = t.n_cpus();
    // A real topology needs a CPU of its node for every worker; a simulated one (tests) spreads
    // any number of threads over its nodes, unpinned when there are more threads than CPUs.
    const bool unpinned = n_threads > C;
    if (t.nodes.size() < 2 || n_threads < 2 || (unpinned && !t.simulated)) {
        p.node.assign(static_cast<size_t>(std::max(n_threads, 0)), 0);
        p.threads_per_node = {n_threads};
        p.node_id = {t.nodes.empty() ? 0 : t.nodes.front().id};
        return p;
    }
    // Largest remainder: node k gets floor(n * c_k / C), the leftover threads go to the largest
    // remainders (ties: the lower node). Never more than c_k when n <= C.
    const size_t N = t.nodes.size();
    std::vector<int> share(N);
    std::vector<std::pair<long long, size_t>> rem(N);
    int given = 0;
    for (size_t k = 0; k < N; ++k) {
        const long long num = static_cast<long long>(n_threads) * static_cast<long long>(t.nodes[k].cpus.size());
        share[k] = static_cast<int>(num / C);
        rem[k] = {-(num % C), k};
        given += share[k];
    }
    std::sort(rem.begin(), rem.end());
    for (int i = 0; given < n_threads; ++i, ++given) ++share[rem[static_cast<size_t>(i)].second];
    for (size_t k = 0; k < N; ++k) {
        if (share[k] == 0) continue;
        if (p.n_nodes() == k_max_numa_nodes) return plan_numa_threads({}, n_threads);
        const int node = p.n_nodes();   // the index among the nodes that get threads
        p.threads_per_node.push_back(share[k]);
        p.node_id.push_back(t.nodes[k].id);
        for (int i = 0; i < share[k]; ++i) {
            // The caller is thread 0, on the first node; it keeps its CPU, so the first node's
            // workers take that node's CPUs from the second on (as the pool does on one node).
            const bool caller = p.cpu.empty();
            p.cpu.push_back(caller || unpinned ? -1 : t.nodes[k].cpus[static_cast<size_t>(i)]);
            p.node.push_back(node);
        }
    }
    if (p.n_nodes() < 2) return plan_numa_threads({}, n_threads);
    return p;
}

std::string describe(const numa_thread_plan& p) {
    if (p.n_nodes() <= 1) return "1 node";
    std::string s = fmt::format("{} {}nodes (", p.n_nodes(), p.simulated ? "simulated " : "");
    for (int k = 0; k < p.n_nodes(); ++k) s += fmt::format("{}{}", k ? "+" : "", p.threads_per_node[static_cast<size_t>(k)]);
    return s + " threads)";
}

}  // namespace sluice
