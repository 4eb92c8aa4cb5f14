// `sluice inspect MODEL [--json] [--full]`: metadata, every tensor, bytes by group and the
// bytes one decoded token reads (include/sluice/inspect.h builds the report).
#include "cli/commands.h"

#include "sluice/inspect.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>
#include <string>

namespace sluice::cli {

void add_inspect_command(CLI::App& app) {
    struct options {
        std::string model;
        bool json = false;
        bool full = false;
    };
    auto opt = std::make_shared<options>();
    auto* cmd = app.add_subcommand("inspect", "Show a model's metadata, tensors and bytes read per token");
    cmd->add_option("MODEL", opt->model, "GGUF file (any part of a split set) or Hugging Face directory")
        ->required();
    cmd->add_flag("--json", opt->json, "Print the report as JSON");
    cmd->add_flag("--full", opt->full, "JSON: include every element of long arrays (vocabularies, merges)");
    cmd->callback([opt] {
        const inspect_report r = inspect_model(opt->model, inspect_options{.full_arrays = opt->full});
        const std::string out = opt->json ? format_json(r) : format_text(r);
        fmt::print("{}", out);
    });
}

}  // namespace sluice::cli
