// Speculative-decoding telemetry: what `sluice run --spec` prints and every reply carries.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace sluice {

// What one drafter did over a generation.
struct drafter_stats {
    int64_t calls = 0;         // propose() calls
    int64_t empty = 0;         // calls that proposed nothing (no match, drafting off)
    int64_t proposed = 0;      // draft tokens proposed (after the decoder's cap)
    int64_t accepted = 0;      // of those, kept by the verifier
    double acceptance() const { return proposed > 0 ? double(accepted) / double(proposed) : 0.0; }
};

struct spec_stats {
    int64_t steps = 0;             // verify windows forwarded (serial: one per token)
    int64_t rows_total = 0;        // rows over all windows
    int32_t rows_min = 0;          // smallest window (rows), 0 before the first step
    int32_t rows_max = 0;          // largest window (rows)
    int64_t tokens = 0;            // tokens emitted (committed to the output)
    int64_t drafts_proposed = 0;   // draft tokens put into windows
    int64_t drafts_accepted = 0;   // draft tokens kept
    int64_t prompt_rows = 0;       // prompt rows forwarded before the first window
    int64_t steps_drafting_off = 0;// windows the depth policy ran without drafts
    double forward_seconds = 0.0;  // wall time inside verify forwards
    double drafter_prompt_seconds = 0.0;  // the drafter's catch-up on the prompt (drafter::catch_up), prompt time
    drafter_stats drafter;
    std::string drafter_name;      // "none" for serial decoding
    // Acceptance per draft depth: [d] counts the windows whose draft d+1 was proposed, and of
    // those the ones that kept it (the drafts before it were all kept, by the verify rule).
    std::array<int64_t, 15> proposed_at{}, accepted_at{};
    // [r]: the windows of r rows (1..16; wider ones, which no verifier makes, counted at 16).
    std::array<int64_t, 17> windows_of_rows{};

    void add_window(int32_t rows, int32_t proposed, int32_t accepted, int32_t emitted) {
        rows_min = steps == 0 ? rows : std::min(rows_min, rows);
        rows_max = std::max(rows_max, rows);
        ++windows_of_rows[size_t(std::clamp<int32_t>(rows, 1, 16))];
        ++steps;
        rows_total += rows;
        drafts_proposed += proposed;
        drafts_accepted += accepted;
        tokens += emitted;
        for (int32_t d = 0; d < std::min<int32_t>(proposed, 15); ++d) ++proposed_at[size_t(d)];
        for (int32_t d = 0; d < std::min<int32_t>(accepted, 15); ++d) ++accepted_at[size_t(d)];
    }
    // Of the drafts proposed at depth d (1-based), the share kept; 0 when none was.
    double acceptance_at(int32_t d) const {
        if (d < 1 || d > 15 || proposed_at[size_t(d - 1)] == 0) return 0.0;
        return double(accepted_at[size_t(d - 1)]) / double(proposed_at[size_t(d - 1)]);
    }
    double rows_mean() const { return steps > 0 ? double(rows_total) / double(steps) : 0.0; }
    // Tokens committed per verify window: 1.0 is serial decoding.
    double accepted_per_step() const { return steps > 0 ? double(tokens) / double(steps) : 0.0; }
    double acceptance_rate() const {
        return drafts_proposed > 0 ? double(drafts_accepted) / double(drafts_proposed) : 0.0;
    }

    std::string summary() const {
        return fmt::format(
            "spec: drafter {}, {} tokens in {} verify windows, rows per verify min {} mean {:.2f} max {}, "
            "tokens per step {:.2f}, acceptance {:.3f} ({}/{} drafts), drafter calls {} (empty {}), "
            "windows without drafts {}",
            drafter_name.empty() ? "none" : drafter_name, tokens, steps, rows_min, rows_mean(), rows_max,
            accepted_per_step(), acceptance_rate(), drafts_accepted, drafts_proposed, drafter.calls,
            drafter.empty, steps_drafting_off) + depth_summary();
    }
    // ", acceptance by depth 1: 0.800 (8/10), 2: ..." over the depths that saw drafts.
    std::string depth_summary() const {
        std::string s;
        for (int32_t d = 1; d <= 15 && proposed_at[size_t(d - 1)] > 0; ++d)
            s += fmt::format("{}{}: {:.3f} ({}/{})", d == 1 ? ", acceptance by depth " : ", ", d, acceptance_at(d),
                             accepted_at[size_t(d - 1)], proposed_at[size_t(d - 1)]);
        return s;
    }
};

}  // namespace sluice
