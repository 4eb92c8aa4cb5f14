// src/placement/vram_budget.h and progress.h: --vram-budget sizes parse (units, fractions, 0) and
// everything else is rejected naming the flag; the progress line shows bytes, rate and time
// left; a phase is reported while it runs and cleared after; a non-terminal gets one line a phase.
#include "placement/progress.h"
#include "placement/vram_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace sluice::placement {
namespace {

TEST(placement_budget, vram_budget_sizes_parse) {
    EXPECT_EQ(parse_size("0"), 0u);
    EXPECT_EQ(parse_size("4096"), 4096u);
    EXPECT_EQ(parse_size("512M"), 512ull << 20);
    EXPECT_EQ(parse_size("12G"), 12ull << 30);
    EXPECT_EQ(parse_size("12g"), 12ull << 30);
    EXPECT_EQ(parse_size("12GiB"), 12ull << 30);
    EXPECT_EQ(parse_size("12GB"), 12ull << 30);
    EXPECT_EQ(parse_size("1.5G"), 3ull << 29);
    EXPECT_EQ(parse_size("1.5K"), 1536u);
    EXPECT_EQ(parse_size("2T"), 2ull << 40);
    EXPECT_EQ(parse_size("64k"), 65536u);
    EXPECT_EQ(parse_size(" 8G "), 8ull << 30);
    EXPECT_EQ(parse_size("100B"), 100u);
}

TEST(placement_budget, malformed_vram_budget_is_rejected) {
    for (const char* bad : {"", "G", "-1G", "12X", "12GG", "1.5", "12 G x", "99999999999T", "1e9", "0x10", ".G"}) {
        try {
            parse_size(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find("--vram-budget"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("12G"), std::string::npos) << e.what();
        }
    }
}

TEST(placement_budget, cpu_only_note_names_the_budget) {
    EXPECT_EQ(cpu_only_budget_note(0), "");
    const std::string n = cpu_only_budget_note(12ull << 30);
    EXPECT_NE(n.find("12.0 GiB"), std::string::npos) << n;
    EXPECT_NE(n.find("every routed expert runs on the CPU"), std::string::npos) << n;
}

TEST(placement_progress, progress_line_shows_bytes_rate_and_time_left) {
    const std::string s = render_progress_line("repacking experts", 1ull << 30, 4ull << 30, 2.0, 20);
    EXPECT_NE(s.find("repacking experts ["), std::string::npos) << s;
    EXPECT_NE(s.find("#####..............."), std::string::npos) << s;
    EXPECT_NE(s.find(" 25%"), std::string::npos) << s;
    EXPECT_NE(s.find("1.0 GiB / 4.0 GiB"), std::string::npos) << s;
    EXPECT_NE(s.find("512.0 MiB/s"), std::string::npos) << s;
    EXPECT_NE(s.find("6 s left"), std::string::npos) << s;
    const std::string tokens = render_progress_line("calibrating", 1000, 4000, 2.0, 0, "tokens");
    EXPECT_EQ(tokens, "calibrating  25%  1000 tokens / 4000 tokens  500 tokens/s  6 s left");
    const std::string done = render_progress_line("x", 10, 10, 1.0, 4);
    EXPECT_NE(done.find("100%"), std::string::npos) << done;
    EXPECT_EQ(done.find("left"), std::string::npos) << done;
}

TEST(placement_progress, phase_is_reported_while_it_runs) {
    progress p(nullptr, progress_style::silent);
    std::vector<std::string> seen;
    p.on_phase([&](const std::string& s) { seen.push_back(s); });
    EXPECT_EQ(p.phase(), "");
    p.begin("repacking experts", 200);
    EXPECT_EQ(p.phase(), "repacking experts 0%");
    p.advance(100);
    EXPECT_EQ(p.phase(), "repacking experts 50%");
    p.advance(100);
    p.finish();
    EXPECT_EQ(p.phase(), "");
    ASSERT_GE(seen.size(), 4u);
    EXPECT_EQ(seen.front(), "repacking experts 0%");
    EXPECT_EQ(seen[1], "repacking experts 50%");
    EXPECT_EQ(seen.back(), "");
}

// A load that throws part way leaves its phase open: the destructor ends it, so /ready does not
// keep a stale percentage and the bar gets its newline.
TEST(placement_progress, an_open_phase_ends_with_the_progress) {
    std::vector<std::string> seen;
    {
        progress p(nullptr, progress_style::silent);
        p.on_phase([&](const std::string& s) { seen.push_back(s); });
        p.begin("experts to the GPU", 300);
        p.advance(100);
        EXPECT_EQ(p.done(), 100u);
    }
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[1], "experts to the GPU 33%");
    EXPECT_EQ(seen.back(), "");
}

TEST(placement_progress, a_non_terminal_gets_one_line_per_phase) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    {
        progress p(f, progress_style::automatic);   // a file is not a terminal
        EXPECT_FALSE(p.is_bar());
        p.begin("repacking experts", 1000);
        for (int i = 0; i < 10; ++i) p.advance(100);
        p.begin("calibrating", 0);   // ends the first phase
        p.advance(5);
        p.finish();
    }
    std::rewind(f);
    std::string out;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    std::fclose(f);
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
    EXPECT_EQ(out.find('\r'), std::string::npos) << out;
    EXPECT_NE(out.find("repacking experts"), std::string::npos) << out;
    EXPECT_NE(out.find("calibrating"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::placement
