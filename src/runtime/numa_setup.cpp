// A run's NUMA set-up (numa_setup.h).
#include "runtime/numa_setup.h"

#include "io/model_file.h"

#include <cstdlib>
#include <vector>

namespace sluice {

std::string numa_setup::describe() const {
    if (plan.n_nodes() <= 1) return sluice::describe(plan);
    return sluice::describe(plan) + "; " + placement.describe();
}

numa_setup setup_numa(std::string_view option, int n_threads, const model_file& f) {
    numa_setup s;
    s.topology = resolve_numa(parse_numa_option(option), std::getenv("SLUICE_NUMA_SIMULATE"));
    s.plan = plan_numa_threads(s.topology, n_threads);
    std::vector<const tensor_view*> experts;
    for (const tensor_view& t : f.tensors())
        if (t.n_dims == 3 && t.name.ends_with("_exps.weight")) experts.push_back(&t);
    if (!experts.empty()) s.placement = moe::place_experts(experts, s.plan);
    else s.placement.note = "no routed experts";
    return s;
}

}  // namespace sluice
