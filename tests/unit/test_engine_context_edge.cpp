// Drafting near the end of the context (E5): a prompt that leaves fewer positions than a full
// verify window still decodes, drafted, exactly what serial decoding gives. The adaptive depth
// policy's start-up calibration timed windows of 16 rows at the prompt's end whatever room the
// context had left, and the run ended with "positions ... do not fit the context" (found by a
// black-box review: a 2,040-token prompt at the default 2,048-position context).
#include "sluice/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace sluice {
namespace {

std::filesystem::path shipped_moe() {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "models" / "sluice-moe-25m-Q8_0.gguf";
}

TEST(engine_context_edge, drafted_equals_serial_when_less_than_a_window_of_context_is_left) {
    engine_options o;
    o.model_path = shipped_moe();
    o.n_threads = 2;
    o.n_ctx = 64;
    // Repeated text, so that prompt lookup has drafts to propose right to the end; longer than
    // the context at first.
    std::string prompt;
    for (int i = 0; i < 40; ++i) prompt += "one two three ";
    for (int room_wanted : {1, 5, 15}) {
        SCOPED_TRACE(room_wanted);
        auto eng = engine::open(o);   // a fresh engine: the policy calibrates on its first drafted run
        // Trim the prompt until it leaves at least `room_wanted` positions (a few more at most).
        std::string p = prompt;
        generate_params probe;
        probe.n_predict = 0;
        int room = 0;
        while (p.size() > 8) {
            try {
                room = o.n_ctx - eng->generate(p, probe, nullptr).n_prompt;
            } catch (const std::exception&) {
                room = 0;   // longer than the context
            }
            if (room >= room_wanted) break;
            p.resize(p.size() - 4);
        }
        ASSERT_GE(room, room_wanted);
        ASSERT_LT(room, 16);
        for (float temp : {0.0f, 0.8f}) {
            generate_params serial;
            serial.n_predict = -1;   // to the end of the context
            serial.temperature = temp;
            serial.seed = 7;
            generate_params drafted = serial;
            drafted.drafter = drafter_kind::ngram;
            drafted.adaptive_depth = true;
            const generate_stats a = eng->generate(p, serial, nullptr);
            const generate_stats b = eng->generate(p, drafted, nullptr);
            EXPECT_EQ(a.tokens, b.tokens) << "temperature " << temp;
            EXPECT_EQ(a.token_sha, b.token_sha);
            EXPECT_EQ(a.stop_reason, b.stop_reason);
        }
    }
}

}  // namespace
}  // namespace sluice
