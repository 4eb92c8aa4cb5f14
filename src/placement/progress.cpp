#include "placement/progress.h"

#include "placement/vram_budget.h"

#include <fmt/core.h>

#include <algorithm>
#include <unistd.h>

namespace sluice::placement {

std::string render_progress_line(std::string_view phase, uint64_t done, uint64_t total, double seconds, int bar_width,
                                 std::string_view unit) {
    const auto amount = [&](uint64_t v) { return unit.empty() ? format_bytes(v) : fmt::format("{} {}", v, unit); };
    std::string s(phase);
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    if (total > 0) {
        const uint64_t d = std::min(done, total);
        const double f = static_cast<double>(d) / static_cast<double>(total);
        const int filled = static_cast<int>(f * bar_width);
        if (bar_width > 0)
            s += " [" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(bar_width - filled), '.') + "]";
        s += fmt::format(" {:3d}%  {} / {}", static_cast<int>(f * 100.0), amount(d), amount(total));
    } else {
        s += fmt::format("  {}", amount(done));
    }
    if (rate > 0) s += fmt::format("  {}/s", amount(static_cast<uint64_t>(rate)));
    if (total > 0 && rate > 0 && done < total)
        s += fmt::format("  {:.0f} s left", static_cast<double>(total - done) / rate);
    else if (total > 0 && done >= total)
        s += fmt::format("  {:.1f} s", seconds);
    return s;
}

progress::progress(std::FILE* out, progress_style style) : out_(out) {
    silent_ = style == progress_style::silent || out == nullptr;
    bar_ = !silent_ && (style == progress_style::bar || (style == progress_style::automatic && ::isatty(::fileno(out))));
}

void progress::begin(std::string phase, uint64_t total, std::string unit) {
    if (open_) finish();
    {
        std::lock_guard lk(m_);
        phase_ = std::move(phase);
        total_ = total;
        unit_ = std::move(unit);
        done_ = 0;
        last_percent_ = -1;
        open_ = true;
        t0_ = last_draw_ = std::chrono::steady_clock::now();
    }
    publish();
    if (bar_) draw(false);
}

void progress::advance(uint64_t bytes) {
    if (!open_) return;
    bool changed = false;
    {
        std::lock_guard lk(m_);
        done_ += bytes;
        const int pct = total_ > 0 ? static_cast<int>(std::min(done_, total_) * 100 / total_) : -1;
        changed = pct != last_percent_;
        last_percent_ = pct;
    }
    if (changed) publish();
    if (!bar_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(false);
}

void progress::finish() {
    if (!open_) return;
    if (!silent_) {
        if (bar_) {
            draw(true);
        } else {
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
            fmt::print(out_, "{}\n", render_progress_line(phase_, done_, total_, secs, 0, unit_));
            std::fflush(out_);
        }
    }
    {
        std::lock_guard lk(m_);
        open_ = false;
        phase_.clear();
    }
    publish();
}

progress::~progress() {
    try {
        finish();
    } catch (...) {   // a failed write to the terminal or the phase callback: nothing to report to
    }
}

uint64_t progress::done() const {
    std::lock_guard lk(m_);
    return done_;
}

std::string progress::phase() const {
    std::lock_guard lk(m_);
    return shown_;
}

void progress::publish() {
    std::string now;
    {
        std::lock_guard lk(m_);
        if (open_) now = total_ > 0 ? fmt::format("{} {}%", phase_, std::max(last_percent_, 0)) : phase_;
        shown_ = now;
    }
    if (on_phase_) on_phase_(now);
}

void progress::draw(bool final_) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    // \r and erase-to-end: the bar is redrawn in place; the final draw ends the line.
    fmt::print(out_, "\r{}\x1b[K{}", render_progress_line(phase_, done_, total_, secs, 30, unit_), final_ ? "\n" : "");
    std::fflush(out_);
}

}  // namespace sluice::placement
