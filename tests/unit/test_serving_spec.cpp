// The serving engine's draft depth (issue 5, serving part): a request served with a drafter,
// whose windows the depth policy sizes (window costs measured once per engine, acceptance per
// request), gives the tokens and token_sha of the same request served without one, greedy and
// sampled; the per-request drafting figures in completion_result add up; the costs are measured
// once per engine and only when a request drafts. On golden fixtures (tests/golden/fixtures).
#include "sluice/serving.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

std::filesystem::path fixture(const std::string& name, const char* file = "model-Q8_0.gguf") {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "golden" / "fixtures" / name / file;
}

serving_options options(const std::string& name, bool policy) {
    serving_options o;
    o.engine.model_path = fixture(name);
    o.engine.n_ctx = 256;
    o.engine.n_threads = 2;
    o.max_batch = 4;
    o.prefill_rows_per_step = 32;
    o.calibrate_depth_policy = policy;
    return o;
}

// Submits every request at once and waits for all of them.
std::vector<completion_result> serve(serving_engine& eng, const std::vector<completion_request>& reqs) {
    std::vector<completion_result> out(reqs.size());
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        completion_result* r = &out[i];
        const int64_t q = eng.submit(reqs[i], nullptr, [&, r](const completion_result& res) {
            std::lock_guard<std::mutex> lk(mu);
            *r = res;
            ++done;
            cv.notify_all();
        });
        EXPECT_EQ(q, 0);
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == reqs.size(); });
    return out;
}

// One request as these tests send it: a seed for the sampled ones, no prefix cache.
completion_request make_request(std::vector<int32_t> prompt, float temperature, drafter_kind d, int n_predict,
                                int max_window) {
    completion_request r;
    r.prompt = std::move(prompt);
    r.params.n_predict = n_predict;
    r.params.temperature = temperature;
    r.params.seed = 4242;
    r.params.drafter = d;
    r.params.max_window = max_window;
    r.use_prefix_cache = false;
    return r;
}

// Prompts the n-gram drafter finds matches in (a phrase repeated) and one it mostly does not
// (random ids); each greedy and sampled with a seed.
std::vector<completion_request> requests(int n_vocab, drafter_kind d) {
    std::mt19937 g(2024);
    std::uniform_int_distribution<int32_t> id(0, n_vocab - 4);   // no special ids
    std::vector<int32_t> phrase(9);
    for (auto& t : phrase) t = id(g);
    std::vector<int32_t> repeated;
    for (int i = 0; i < 5; ++i) repeated.insert(repeated.end(), phrase.begin(), phrase.end());
    std::vector<int32_t> random(40);
    for (auto& t : random) t = id(g);
    std::vector<completion_request> out;
    for (const auto* prompt : {&repeated, &random})
        for (float temp : {0.0f, 0.8f}) out.push_back(make_request(*prompt, temp, d, 40, 8));
    return out;
}

TEST(serving_spec, drafted_request_equals_serial_request_greedy_and_sampled) {
    for (const char* name : {"qwen3moe_e8_k2", "llama_gqa2_tied"}) {
        SCOPED_TRACE(name);
        auto serial_eng = serving_engine::open(options(name, true));
        const int n_vocab = serial_eng->n_vocab();
        const auto serial = serve(*serial_eng, requests(n_vocab, drafter_kind::none));
        EXPECT_EQ(serial_eng->metrics().depth_calibration_seconds, 0.0);   // nobody drafted: nothing measured
        // Drafted with the depth policy, and drafted at a fixed depth (every window full).
        auto policy_eng = serving_engine::open(options(name, true));
        const auto policy = serve(*policy_eng, requests(n_vocab, drafter_kind::ngram));
        auto fixed_eng = serving_engine::open(options(name, false));
        const auto fixed = serve(*fixed_eng, requests(n_vocab, drafter_kind::ngram));
        int64_t proposed = 0;
        for (size_t i = 0; i < serial.size(); ++i) {
            SCOPED_TRACE(i);
            ASSERT_NE(serial[i].finish_reason, "error") << serial[i].error;
            EXPECT_GT(serial[i].stats.n_decoded, 0);
            EXPECT_EQ(policy[i].stats.tokens, serial[i].stats.tokens);
            EXPECT_EQ(policy[i].stats.token_sha, serial[i].stats.token_sha);
            EXPECT_EQ(fixed[i].stats.token_sha, serial[i].stats.token_sha);
            EXPECT_EQ(policy[i].finish_reason, serial[i].finish_reason);
            EXPECT_EQ(serial[i].drafts_proposed, 0);
            EXPECT_EQ(serial[i].rows_max, 1);
            EXPECT_EQ(policy[i].stats.drafter, "ngram");
            proposed += fixed[i].drafts_proposed;
        }
        EXPECT_GT(proposed, 0);   // the drafted runs did draft
        EXPECT_GT(policy_eng->metrics().depth_calibration_seconds, 0.0);
        EXPECT_EQ(fixed_eng->metrics().depth_calibration_seconds, 0.0);
    }
}

TEST(serving_spec, drafting_figures_add_up_and_costs_are_measured_once) {
    auto eng = serving_engine::open(options("qwen3moe_e8_k2", true));
    const auto reqs = requests(eng->n_vocab(), drafter_kind::ngram);
    const auto first = serve(*eng, reqs);
    const double calib = eng->metrics().depth_calibration_seconds;
    ASSERT_GT(calib, 0.0);
    const auto second = serve(*eng, reqs);
    EXPECT_EQ(eng->metrics().depth_calibration_seconds, calib);   // once per engine, not per request
    int64_t proposed = 0, accepted = 0, off = 0;
    for (const auto* run : {&first, &second})
        for (const completion_result& r : *run) {
            const generate_stats& st = r.stats;
            ASSERT_GT(st.verify_steps, 0);
            // Every window is the pending row plus its drafts.
            EXPECT_NEAR(st.rows_mean * double(st.verify_steps), double(st.verify_steps + r.drafts_proposed), 1e-6);
            EXPECT_LE(r.drafts_accepted, r.drafts_proposed);
            EXPECT_LE(r.windows_drafting_off, st.verify_steps);
            EXPECT_GE(st.rows_min, 1);
            EXPECT_LE(r.rows_max, 8);   // max_window
            EXPECT_NEAR(st.tokens_per_step, double(st.n_decoded) / double(st.verify_steps), 1e-9);
            if (r.drafts_proposed > 0) {
                EXPECT_NEAR(st.acceptance, double(r.drafts_accepted) / double(r.drafts_proposed), 1e-9);
            }
            proposed += r.drafts_proposed;
            accepted += r.drafts_accepted;
            off += r.windows_drafting_off;
        }
    // The engine's counters are the sums over its requests.
    const serving_metrics m = eng->metrics();
    EXPECT_EQ(m.drafted, proposed);
    EXPECT_EQ(m.accepted, accepted);
    EXPECT_EQ(m.windows_drafting_off, off);
    // The same request twice: the same tokens (the depth may differ with the timings).
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].stats.token_sha, second[i].stats.token_sha);
}

// The MTP drafter (issue 11) with a prefill budget of 3 rows a step: every prompt is prefilled
// by pieces over several steps, and its last piece shares a step with the first window. The
// head has no committed hidden state to draft from in that step; it drafts from the next one on,
// and every request gives the tokens it gives without drafts. (Session 10's CI caught a server
// test where concurrent requests split their prompts like this and the MTP drafter threw.)
TEST(serving_spec, mtp_drafts_after_a_prompt_prefilled_in_pieces) {
    auto mtp_options = [] {
        serving_options o = options("qwen3next_e4_k2_mtp", false);
        o.engine.model_path = fixture("qwen3next_e4_k2_mtp", "converted-F32.gguf");
        o.prefill_rows_per_step = 3;
        return o;
    };
    auto build = [](int n_vocab, drafter_kind d) {
        std::mt19937 g(77);
        std::uniform_int_distribution<int32_t> id(0, n_vocab - 4);
        std::vector<completion_request> out;
        for (int len : {10, 7, 4, 2})
            for (float temp : {0.0f, 0.9f}) {
                std::vector<int32_t> prompt(static_cast<size_t>(len));
                for (auto& t : prompt) t = id(g);
                out.push_back(make_request(std::move(prompt), temp, d, 14, 5));
            }
        return out;
    };
    auto serial_eng = serving_engine::open(mtp_options());
    const int n_vocab = serial_eng->n_vocab();
    const auto serial = serve(*serial_eng, build(n_vocab, drafter_kind::none));
    auto mtp_eng = serving_engine::open(mtp_options());
    const auto drafted = serve(*mtp_eng, build(n_vocab, drafter_kind::mtp));
    int64_t proposed = 0;
    for (size_t i = 0; i < serial.size(); ++i) {
        SCOPED_TRACE(i);
        ASSERT_NE(serial[i].finish_reason, "error") << serial[i].error;
        ASSERT_NE(drafted[i].finish_reason, "error") << drafted[i].error;
        EXPECT_EQ(drafted[i].stats.tokens, serial[i].stats.tokens);
        EXPECT_EQ(drafted[i].stats.token_sha, serial[i].stats.token_sha);
        EXPECT_EQ(drafted[i].stats.drafter, "mtp");
        proposed += drafted[i].drafts_proposed;
    }
    EXPECT_GT(proposed, 0);
}

}  // namespace
}  // namespace sluice
