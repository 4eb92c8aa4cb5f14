// `sluice serve`: being built (issue work in progress); registered so the CLI links.
#include "cli/commands.h"
#include "core/error.h"

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_serve_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("serve", "not built yet");
    cmd->callback([] { sluice::fail("sluice serve: not built yet"); });
}

}  // namespace sluice::cli
