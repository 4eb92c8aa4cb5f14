// TEMPORARY: replaced by the run implementation.
#include "cli/commands.h"
#include "core/error.h"
#include <CLI/CLI.hpp>
namespace sluice::cli {
void add_run_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("run", "run");
    cmd->callback([] { sluice::fail("run: not built yet"); });
}
}  // namespace sluice::cli
