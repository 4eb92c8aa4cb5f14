// The `sluice` command. Each subcommand lives in its own file and registers itself here; the
// CLI uses the public API in include/sluice only.
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"sluice: Mixture-of-Experts inference that is exact, on the GPU and CPU you have"};
    app.require_subcommand(1);
    sluice::cli::add_run_command(app);
    sluice::cli::add_inspect_command(app);
    sluice::cli::add_serve_command(app);
    sluice::cli::add_bench_command(app);
    sluice::cli::add_profile_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        fmt::print(stderr, "sluice: {}\n", e.what());
        return 1;
    }
    return 0;
}
