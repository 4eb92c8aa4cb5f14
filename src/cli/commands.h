// Subcommand registration: each add_*_command adds its options and a callback to `app`.
// Callbacks throw sluice::error (printed by main) or return normally.
#pragma once

namespace CLI {
class App;
}

namespace sluice::cli {

void add_run_command(CLI::App& app);      // run.cpp
void add_inspect_command(CLI::App& app);  // inspect.cpp
void add_serve_command(CLI::App& app);    // serve.cpp
void add_bench_command(CLI::App& app);    // bench.cpp
void add_profile_command(CLI::App& app);  // profile.cpp

// --prefill-stream's help, the same for run, serve and bench.
inline constexpr const char* k_prefill_stream_help =
    "With --gpu and a budget: stream a split layer's experts to the GPU for prompt chunks of at least this many "
    "rows (-1: the cost model's cut-over; 0: never, and no VRAM for its two layer buffers)";

// --adaptive-cache's help, the same for run, serve and bench.
inline constexpr const char* k_adaptive_cache_help =
    "With --gpu and a budget: the VRAM cache follows the routing, swapping up to 8 experts a forward within their "
    "layers (on|off)";

}  // namespace sluice::cli
