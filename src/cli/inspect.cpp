// TEMPORARY: replaced by the inspect implementation.
#include "cli/commands.h"
#include "core/error.h"
#include <CLI/CLI.hpp>
namespace sluice::cli {
void add_inspect_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("inspect", "inspect");
    cmd->callback([] { sluice::fail("inspect: not built yet"); });
}
}  // namespace sluice::cli
