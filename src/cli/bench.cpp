// `sluice bench`: being built (issue work in progress); registered so the CLI links.
#include "cli/commands.h"
#include "core/error.h"

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_bench_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("bench", "not built yet");
    cmd->callback([] { sluice::fail("sluice bench: not built yet"); });
}

}  // namespace sluice::cli
