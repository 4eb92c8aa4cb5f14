// Progress of the long steps of a start (repacking the experts, calibration, later pinning): on a
// terminal a bar redrawn in place with bytes done, rate and time left; otherwise (a log, a pipe)
// one line per phase when it ends. The current phase is also readable from another thread, so the
// server's /ready can report it ("repacking experts 41%") until the model is ready.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::placement {

// One bar line for `phase` with done of total bytes after `seconds`:
// "repacking experts [#########.........]  41%  1.2 GiB / 2.9 GiB  310.4 MiB/s  6 s left".
// total 0 means unknown (no bar, no percentage, no time left). unit: empty for bytes (KiB, MiB, ...),
// else a plain count followed by the unit ("1200 / 5000 tokens  300 tokens/s").
std::string render_progress_line(std::string_view phase, uint64_t done, uint64_t total, double seconds, int bar_width,
                                 std::string_view unit = {});

enum class progress_style {
    automatic,   // a bar when `out` is a terminal, else lines
    bar,         // always the bar (tests)
    lines,       // one line per finished phase
    silent,      // nothing printed (the phase is still reported)
};

class progress {
public:
    explicit progress(std::FILE* out = stderr, progress_style style = progress_style::automatic);
    // Ends a phase still open (a load that threw part way): the bar gets its newline and the
    // phase reads "" again.
    ~progress();
    progress(const progress&) = delete;
    progress& operator=(const progress&) = delete;

    // Starts a phase of `total` bytes (or of `unit`s when given; 0: unknown). Ends the previous
    // one if still open.
    void begin(std::string phase, uint64_t total, std::string unit = {});
    // Adds `bytes` to the current phase; redraws the bar at most every 100 ms.
    void advance(uint64_t bytes);
    // Ends the current phase: the bar's final state and a newline, or its one summary line.
    void finish();

    // "repacking experts 41%" while a phase runs, "" between phases. Safe from any thread.
    std::string phase() const;
    // Called with phase() whenever it changes (begin, a new whole percent, finish): the server
    // passes http_server::set_phase here.
    void on_phase(std::function<void(const std::string&)> f) { on_phase_ = std::move(f); }

    uint64_t done() const;
    bool is_bar() const { return bar_; }

private:
    void draw(bool final_);
    void publish();

    std::FILE* out_;
    bool bar_ = false, silent_ = false;
    mutable std::mutex m_;
    std::string phase_, shown_, unit_;
    uint64_t total_ = 0, done_ = 0;
    int last_percent_ = -1;
    bool open_ = false;
    std::chrono::steady_clock::time_point t0_, last_draw_;
    std::function<void(const std::string&)> on_phase_;
};

}  // namespace sluice::placement
