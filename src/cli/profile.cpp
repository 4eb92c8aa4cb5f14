// `sluice profile MODEL --text FILE [-o OUT]`: the routing profile of a MoE model (issue 10) -
// how often the router picks each (layer, expert) over a calibration text, run through the
// normal CPU forward - saved beside the model ("<model>.profile.bin"), where --vram-budget's
// expert cache finds it and reuses it while the model is unchanged.
#include "cli/commands.h"

#include "core/error.h"
#include "placement/progress.h"
#include "placement/routing_profile.h"
#include "runtime/loaded_model.h"
#include "sluice/engine.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>

namespace sluice::cli {
namespace {

struct profile_args {
    std::string model;
    std::string text;
    std::string out;
    int threads = 0;
    int ctx = 512;
    int max_tokens = 0;
};

void run(const profile_args& a) {
    std::ifstream in(a.text, std::ios::binary);
    if (!in) fail("profile: --text {}: cannot open the file", a.text);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::filesystem::path model_path = a.model.empty() ? engine::default_model_path() : std::filesystem::path(a.model);
    loaded_model m = loaded_model::open(model_path, 0);
    const placement::model_identity id = placement::identify_model(model_path, *m.file);
    placement::calibration_options o;
    o.n_threads = a.threads;
    o.n_ctx = a.ctx;
    o.max_tokens = a.max_tokens;
    placement::progress prog(stderr);
    const placement::routing_profile p = placement::calibrate_profile(*m.net, id, *m.tok, ss.str(), o, &prog);
    const std::filesystem::path out = a.out.empty() ? placement::default_profile_path(model_path) : std::filesystem::path(a.out);
    placement::write_profile(out, p);
    // How skewed the routing is: the share of lookups the top quarter of (layer, expert) pairs serve.
    std::vector<uint64_t> c = p.counts;
    std::sort(c.begin(), c.end(), std::greater<>());
    const uint64_t total = std::accumulate(c.begin(), c.end(), uint64_t{0});
    const uint64_t top = std::accumulate(c.begin(), c.begin() + static_cast<std::ptrdiff_t>((c.size() + 3) / 4), uint64_t{0});
    fmt::print("profile: {} tokens over {} layers x {} experts ({} used): the top quarter of pairs serve {:.1f}% of "
               "lookups\nprofile: written to {}\n",
               p.n_tokens, p.n_layer, p.n_expert, p.k_used, total ? 100.0 * static_cast<double>(top) / static_cast<double>(total) : 0.0,
               out.string());
}

}  // namespace

void add_profile_command(CLI::App& app) {
    auto a = std::make_shared<profile_args>();
    auto* cmd = app.add_subcommand("profile", "Count each expert's routing over a calibration text (for --vram-budget)");
    cmd->add_option("model", a->model, "GGUF file or Hugging Face directory (a MoE model)");
    cmd->add_option("--text", a->text, "Calibration text file")->required();
    cmd->add_option("-o,--output", a->out, "Profile file (default: <model>.profile.bin beside the model)");
    cmd->add_option("-t,--threads", a->threads, "Threads (0: all)")->capture_default_str();
    cmd->add_option("-c,--ctx-size", a->ctx, "Positions per pass (a longer text runs in several passes)")->capture_default_str();
    cmd->add_option("--max-tokens", a->max_tokens, "Use at most this many tokens of the text (0: all)")->capture_default_str();
    cmd->callback([a] { run(*a); });
}

}  // namespace sluice::cli
