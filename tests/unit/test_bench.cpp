// `sluice bench`: the roofline arithmetic (runtime/roofline.h), the oracle tape's control of
// acceptance, and the JSON shape bench/record.py reads.
#include "sluice/bench.h"

#include "core/thread_pool.h"
#include "runtime/bench_oracle.h"
#include "runtime/roofline.h"
#include "runtime/sampler.h"
#include "spec/depth_policy.h"
#include "spec/toy_target.h"
#include "spec/verifier.h"
#include "sluice/inspect.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>

namespace sluice {
namespace {

const std::filesystem::path k_moe = std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures/qwen3moe_e8_k2/model-Q8_0.gguf";

TEST(bench_roofline, one_row_reads_exactly_the_used_experts) {
    EXPECT_DOUBLE_EQ(expected_distinct_experts(128, 8, 1), 8.0);
    // Two rows: 128 * (1 - (120/128)^2) = 15.5 distinct experts on average.
    EXPECT_DOUBLE_EQ(expected_distinct_experts(128, 8, 2), 15.5);
    double last = 0.0;
    for (int rows = 1; rows <= 512; rows *= 2) {
        const double d = expected_distinct_experts(128, 8, rows);
        EXPECT_GT(d, last) << rows;
        EXPECT_LE(d, 128.0) << rows;
        last = d;
    }
    EXPECT_NEAR(expected_distinct_experts(128, 8, 4096), 128.0, 1e-9);
    EXPECT_DOUBLE_EQ(expected_distinct_experts(0, 0, 16), 0.0);
}

TEST(bench_roofline, forward_bytes_add_shared_once_and_rows_and_kv_per_position) {
    traffic_model m;
    m.shared_bytes = 1000;
    m.embd_row_bytes = 10;
    m.kv_bytes_per_position = 3;
    // Dense: shared once, embeddings per row, K/V of depth + rows positions.
    EXPECT_DOUBLE_EQ(forward_bytes(m, 1, 0), 1000 + 10 + 3);
    EXPECT_DOUBLE_EQ(forward_bytes(m, 4, 100), 1000 + 40 + 3 * 104);
    m.routed_bytes_total = 128 * 64;  // 64 bytes per expert
    m.n_expert = 128;
    m.n_expert_used = 8;
    EXPECT_DOUBLE_EQ(forward_bytes(m, 1, 0), 1000 + 10 + 8 * 64 + 3);
    EXPECT_DOUBLE_EQ(forward_bytes(m, 2, 0), 1000 + 20 + 15.5 * 64 + 6);
}

TEST(bench_roofline, prefill_and_decode_bytes_are_means_over_their_forwards) {
    traffic_model m{500, 7, 128 * 100, 128, 8, 11};
    // One chunk holding the whole prompt: one forward's bytes over its rows.
    EXPECT_DOUBLE_EQ(prefill_bytes_per_token(m, 32, 32), forward_bytes(m, 32, 0) / 32);
    // Three chunks: 32 + 32 + 8 rows at depths 0, 32, 64.
    EXPECT_DOUBLE_EQ(prefill_bytes_per_token(m, 72, 32),
                     (forward_bytes(m, 32, 0) + forward_bytes(m, 32, 32) + forward_bytes(m, 8, 64)) / 72);
    double sum = 0.0;
    for (int i = 0; i < 64; ++i) sum += forward_bytes(m, 1, 500 + i);
    EXPECT_NEAR(decode_bytes_per_token(m, 500, 64), sum / 64, 1e-9 * sum);
}

TEST(bench_roofline, ceiling_is_bandwidth_over_bytes_per_token) {
    EXPECT_DOUBLE_EQ(ceiling_tok_s(10.0, 1e9), 10.0);
    EXPECT_DOUBLE_EQ(ceiling_tok_s(84.7, 2e9), 42.35);
    EXPECT_DOUBLE_EQ(ceiling_tok_s(0.0, 1e9), 0.0);
    EXPECT_DOUBLE_EQ(ceiling_tok_s(10.0, 0.0), 0.0);
}

TEST(bench_roofline, expected_window_tokens_is_the_geometric_sum) {
    EXPECT_DOUBLE_EQ(expected_window_tokens(0.5, 3), 1.75);
    EXPECT_DOUBLE_EQ(expected_window_tokens(1.0, 16), 16.0);
    EXPECT_DOUBLE_EQ(expected_window_tokens(0.0, 8), 1.0);
    EXPECT_NEAR(expected_window_tokens(0.7, 16), (1 - std::pow(0.7, 16)) / 0.3, 1e-12);
}

TEST(bench_roofline, ram_probe_measures_a_positive_bandwidth) {
    thread_pool pool(2);
    const ram_probe p = measure_ram_read(pool, uint64_t(16) << 20, 2);
    EXPECT_GT(p.read_gb_s, 0.1);
    EXPECT_EQ(p.buffer_bytes, uint64_t(16) << 20);
    EXPECT_EQ(p.threads, 2);
    EXPECT_GE(default_ram_probe_bytes(), uint64_t(1) << 20);
}

TEST(bench_roofline, cpu_build_reports_no_gpu_in_words) {
    const gpu_probe g = measure_gpu();
#ifndef SLUICE_HAVE_CUDA
    EXPECT_FALSE(g.present);
    EXPECT_EQ(g.note, "no GPU (built without CUDA)");
#else
    EXPECT_FALSE(g.note.empty());
#endif
}

bench_options tiny_options() {
    bench_options o;
    o.model_path = k_moe;
    o.n_threads = 2;
    o.n_prompt = {40};
    o.n_gen = 6;
    o.depths = {0, 20};
    o.repetitions = 2;
    o.chunk = 16;
    o.windows = {1, 4};
    o.spec_windows = {1, 4};
    o.spec_n = 12;
    o.probe_bandwidth = false;
    o.bandwidth_gb_s = 10.0;
    return o;
}

TEST(bench_run, decode_ceiling_matches_inspect_bytes_per_token) {
    const bench_report r = run_bench(tiny_options());
    const inspect_report ir = inspect_model(k_moe);
    EXPECT_EQ(r.bytes_per_token, ir.bytes_per_token);
    EXPECT_DOUBLE_EQ(r.ceiling_tok_s, 10.0e9 / double(ir.bytes_per_token));
    // Tests in order: prefill, decode per depth, the cost curve, the oracle runs.
    std::vector<std::string> names;
    for (const auto& x : r.results) names.push_back(x.test);
    EXPECT_EQ(names, (std::vector<std::string>{"pp40", "tg6@d0", "tg6@d20", "win 1@d0", "win 4@d0", "spec 1@d0",
                                               "spec 4@d0"}));
    for (const auto& x : r.results) {
        EXPECT_EQ(int(x.seconds.size()), x.kind == "spec" ? 1 : 2) << x.test;
        EXPECT_GT(x.tok_s, 0.0) << x.test;
        EXPECT_GT(x.ceiling_tok_s, 0.0) << x.test;
        EXPECT_NEAR(x.ceiling_fraction, x.tok_s / x.ceiling_tok_s, 1e-12) << x.test;
    }
    // At depth 0 the decode traffic is inspect's figure plus the K/V the run reads.
    const bench_result& tg = r.results[1];
    EXPECT_GT(tg.bytes_per_token, double(ir.bytes_per_token));
    EXPECT_LT(tg.bytes_per_token, double(ir.bytes_per_token) + 8.0 * double(r.kv_bytes_per_position));
}

TEST(bench_run, oracle_tape_sets_the_acceptance_and_keeps_serial_tokens) {
    bench_options o = tiny_options();
    o.n_prompt.clear();
    o.n_gen = 0;
    o.depths = {8};
    o.windows.clear();
    o.spec_windows = {4};
    o.spec_n = 12;
    o.accept = 1.0;  // every draft is the model's own token: full windows of 4
    bench_report r = run_bench(o);
    ASSERT_EQ(r.results.size(), 1u);
    EXPECT_TRUE(r.results[0].same_tokens);
    EXPECT_DOUBLE_EQ(r.results[0].acceptance, 1.0);
    EXPECT_DOUBLE_EQ(r.results[0].tokens_per_step, 4.0);  // 12 tokens in 3 windows

    o.accept = 0.0;  // every draft wrong: one token per window, like serial decoding
    r = run_bench(o);
    ASSERT_EQ(r.results.size(), 1u);
    EXPECT_TRUE(r.results[0].same_tokens);
    EXPECT_DOUBLE_EQ(r.results[0].acceptance, 0.0);
    EXPECT_DOUBLE_EQ(r.results[0].tokens_per_step, 1.0);
    EXPECT_DOUBLE_EQ(r.results[0].expected_tokens_per_step, 1.0);
}

// Oracle runs only, after 8 positions, on a hybrid file with an MTP block.
bench_options mtp_oracle_options() {
    bench_options o = tiny_options();
    o.model_path = std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures/qwen35moe_e4_k2_mtp/converted-F32.gguf";
    o.n_prompt.clear();
    o.n_gen = 0;
    o.depths = {8};
    o.windows.clear();
    return o;
}

TEST(bench_run, mtp_paced_oracle_runs_keep_the_oracles_acceptance_and_serial_tokens) {
    // A hybrid file with an MTP block: each window size runs again with the head drafting (its
    // proposals paid for, then replaced by the oracle's).
    bench_options o = mtp_oracle_options();
    o.spec_windows = {1, 4};
    o.spec_n = 12;
    o.accept = 1.0;
    const bench_report r = run_bench(o);
    std::vector<std::string> names;
    for (const auto& x : r.results) names.push_back(x.test);
    EXPECT_EQ(names, (std::vector<std::string>{"spec 1@d8", "spec 4@d8", "spec+mtp 4@d8"}));
    ASSERT_EQ(r.results.size(), 3u);
    const bench_result& paced = r.results[2];
    EXPECT_EQ(paced.kind, "spec");
    EXPECT_TRUE(paced.same_tokens);
    EXPECT_DOUBLE_EQ(paced.acceptance, 1.0);
    EXPECT_DOUBLE_EQ(paced.tokens_per_step, 4.0);
    EXPECT_GT(paced.tok_s, 0.0);
}

TEST(bench_run, policy_sized_windows_keep_serial_tokens) {
    // --spec-policy: windows up to 6 rows sized by the depth policy, with the oracle's drafts and
    // again with the MTP head paying for them (capped at its 4 drafts). Which depths it picks
    // depends on the window costs it measures, so only what holds at any depth is checked.
    bench_options o = mtp_oracle_options();
    o.spec_windows = {1};
    o.spec_policy = 6;
    o.spec_n = 16;
    for (double accept : {1.0, 0.0}) {
        o.accept = accept;
        const bench_report r = run_bench(o);
        std::vector<std::string> names;
        for (const auto& x : r.results) names.push_back(x.test);
        EXPECT_EQ(names, (std::vector<std::string>{"spec 1@d8", "spec policy 6@d8", "spec+mtp policy 5@d8"}));
        for (const auto& x : r.results) {
            EXPECT_TRUE(x.same_tokens) << x.test;
            EXPECT_GE(x.rows_mean, 1.0) << x.test;
            EXPECT_LE(x.rows_mean, double(x.rows)) << x.test;
            EXPECT_GE(x.tokens_per_step, 1.0) << x.test;
            EXPECT_LE(x.tokens_per_step, x.rows_mean) << x.test;
            if (accept == 1.0) EXPECT_DOUBLE_EQ(x.tokens_per_step, x.rows_mean) << x.test;   // every draft kept
        }
    }
    o.spec_policy = 17;
    EXPECT_THROW(run_bench(o), std::exception);
    o.spec_policy = 1;
    EXPECT_THROW(run_bench(o), std::exception);
    o.spec_policy = 6;
    o.chunk = 4;   // a window of 6 rows cannot fit
    EXPECT_THROW(run_bench(o), std::exception);
    // Policy runs alone (no fixed windows): the tape is still made and the runs keep its tokens.
    o = mtp_oracle_options();
    o.spec_windows.clear();
    o.spec_policy = 4;
    o.spec_n = 8;
    const bench_report r = run_bench(o);
    ASSERT_EQ(r.results.size(), 2u);
    for (const auto& x : r.results) EXPECT_TRUE(x.same_tokens) << x.test;
}

TEST(bench_oracle, a_policy_with_flat_costs_drafts_the_oracles_tape_and_keeps_serial_tokens) {
    // What --spec-policy's runs do, on a toy target whose window costs are set rather than timed:
    // with flat costs and every draft right, the policy drafts deep windows; the tokens are serial's.
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
    decode_options opt;
    opt.max_tokens = 40;
    opt.max_window = 6;
    opt.calibrate_policy = false;
    toy_target serial_target(toy_params{});
    keyed_sampler greedy(toy_params{}.n_vocab, sampling_params::greedy());
    const decode_result serial = speculative_decoder(serial_target, greedy).generate(prompt, opt);
    for (double accept : {1.0, 0.5}) {
        depth_policy_params pp;
        pp.max_rows = 6;
        depth_policy flat(pp);
        for (int32_t r = 1; r <= 16; ++r) flat.set_cost(r, 1.0);
        bench_oracle::oracle_drafter od(serial.tokens, prompt.size(), accept, toy_params{}.n_vocab, 7);
        toy_target target(toy_params{});
        const decode_result res = speculative_decoder(target, greedy, &od, &flat).generate(prompt, opt);
        EXPECT_EQ(res.token_sha, serial.token_sha) << accept;
        EXPECT_EQ(res.stats.rows_max, 6) << accept;
        if (accept == 1.0) EXPECT_LE(res.stats.steps, 8);   // 40 tokens in windows of 6
    }
}

TEST(bench_run, bad_options_are_rejected_with_the_flag_name) {
    bench_options o = tiny_options();
    o.accept = 1.5;
    EXPECT_THROW(
        {
            try {
                run_bench(o);
            } catch (const std::exception& e) {
                EXPECT_NE(std::string(e.what()).find("--accept"), std::string::npos) << e.what();
                throw;
            }
        },
        std::exception);
    o = tiny_options();
    o.windows = {17};
    EXPECT_THROW(run_bench(o), std::exception);
    o = tiny_options();
    o.chunk = 2;  // a window of 4 rows cannot fit a chunk of 2
    EXPECT_THROW(run_bench(o), std::exception);
}

TEST(bench_json, shape_has_every_field_record_py_reads) {
    const bench_report r = run_bench(tiny_options());
    const auto j = nlohmann::json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("sluice_bench"), 1);
    EXPECT_EQ(j.at("model").at("path"), k_moe.string());
    EXPECT_EQ(j.at("threads"), 2);
    EXPECT_EQ(j.at("backend"), "cpu");
    EXPECT_TRUE(j.at("machine").is_string());
    EXPECT_DOUBLE_EQ(j.at("roofline").at("bandwidth_gb_s").get<double>(), 10.0);
    EXPECT_EQ(j.at("roofline").at("groups").size(), 5u);
    EXPECT_TRUE(j.at("bandwidth").at("ram_read_gb_s").is_null());  // not probed: null, not 0
    // Placement is not active: no hit rate, no zeros in its place.
    EXPECT_TRUE(j.at("placement").is_null());
    EXPECT_FALSE(j.at("placement_note").get<std::string>().empty());
    ASSERT_EQ(j.at("results").size(), r.results.size());
    for (const auto& x : j.at("results")) {
        for (const char* k : {"test", "kind", "n_prompt", "n_gen", "depth", "rows", "reps", "seconds", "mean_s",
                              "tok_s", "stddev_tok_s", "bytes_per_token", "ceiling_tok_s", "ceiling_fraction"})
            EXPECT_TRUE(x.contains(k)) << k;
        if (x.at("kind") == "spec") {
            for (const char* k : {"accept", "acceptance", "tokens_per_step", "expected_tokens_per_step", "rows_mean",
                                  "same_tokens"})
                EXPECT_TRUE(x.contains(k)) << k;
        }
    }
    // Without a bandwidth the ceilings are null, never 0.
    bench_options o = tiny_options();
    o.bandwidth_gb_s = 0.0;
    const auto k = nlohmann::json::parse(format_bench_json(run_bench(o)));
    EXPECT_TRUE(k.at("roofline").at("ceiling_tok_s").is_null());
    for (const auto& x : k.at("results")) EXPECT_TRUE(x.at("ceiling_fraction").is_null());
}

}  // namespace
}  // namespace sluice
