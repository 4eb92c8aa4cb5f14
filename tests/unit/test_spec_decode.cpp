// Speculative decoding reproduces serial decoding exactly (E4): for greedy and sampled decoding
// with several seeds, over 24 prompts, with every drafter -- prompt lookup, a garbage drafter, an
// oracle and a draft model -- and when EOS, a stop callback or max_tokens cuts a window short.
// The toy target's logits depend on its whole committed state, so a rollback bug shows as a
// different token; the tests also check the state itself.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/token_sha.h"
#include "spec/depth_policy.h"
#include "spec/draft_model_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/toy_target.h"
#include "spec/verifier.h"

namespace sluice {
namespace {

constexpr int32_t k_vocab = 200;

// Proposes random ids, some outside the vocabulary: the decoder must cut those and verify the
// rest, and the output must not change.
class garbage_drafter final : public drafter {
public:
    std::string_view name() const override { return "garbage"; }
    void reset() override { rng_.seed(99); }
    int32_t propose(std::span<const int32_t>, int32_t max_n, std::span<int32_t> out) override {
        ++stats_.calls;
        std::uniform_int_distribution<int32_t> d(-2, k_vocab + 2);
        int32_t n = std::uniform_int_distribution<int32_t>(0, max_n)(rng_);
        for (int32_t i = 0; i < n; ++i) out[size_t(i)] = d(rng_);
        if (n == 0) ++stats_.empty;
        return n;
    }

private:
    std::mt19937 rng_{99};
};

// Knows the serial answer and proposes exactly its continuation: every draft must be accepted.
class oracle_drafter final : public drafter {
public:
    oracle_drafter(std::vector<int32_t> prompt, std::vector<int32_t> answer)
        : prompt_(std::move(prompt)), answer_(std::move(answer)) {}
    std::string_view name() const override { return "oracle"; }
    void reset() override {}
    int32_t propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) override {
        ++stats_.calls;
        size_t done = ctx.size() - prompt_.size();
        int32_t n = 0;
        while (n < max_n && done + size_t(n) < answer_.size()) {
            out[size_t(n)] = answer_[done + size_t(n)];
            ++n;
        }
        if (n == 0) ++stats_.empty;
        return n;
    }

private:
    std::vector<int32_t> prompt_, answer_;
};

// 24 prompts of 3..48 tokens, some with repeated stretches (prompt lookup has something to find).
std::vector<std::vector<int32_t>> make_prompts() {
    std::mt19937 rng(2024);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 24; ++i) {
        int32_t len = std::uniform_int_distribution<int32_t>(3, 48)(rng);
        std::vector<int32_t> p;
        while (int32_t(p.size()) < len) {
            if (p.size() > 6 && rng() % 3 == 0) {  // copy an earlier stretch
                size_t from = rng() % (p.size() - 4);
                for (size_t j = 0; j < 4; ++j) p.push_back(p[from + j]);
            } else {
                p.push_back(int32_t(rng() % k_vocab));
            }
        }
        p.resize(size_t(len));
        prompts.push_back(p);
    }
    return prompts;
}

struct sampling_case {
    std::string name;
    sampling_params params;
};

std::vector<sampling_case> sampling_cases() {
    std::vector<sampling_case> c;
    c.push_back({"greedy", sampling_params::greedy()});
    for (uint64_t seed : {1ull, 7ull, 123456789ull}) {
        sampling_params p;  // temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
        p.seed = seed;
        c.push_back({"seed" + std::to_string(seed), p});
    }
    sampling_params pen;
    pen.seed = 5;
    pen.temperature = 1.1f;
    pen.top_k = 0;
    pen.repeat_penalty = 1.3f;
    pen.frequency_penalty = 0.2f;
    pen.presence_penalty = 0.1f;
    pen.penalty_last_n = 16;
    c.push_back({"penalties", pen});
    return c;
}

struct run_out {
    decode_result res;
    std::vector<int32_t> state;  // the target's committed tokens afterwards
};

run_out run(const std::vector<int32_t>& prompt, const sampling_params& sp, decode_options opt, drafter* d,
            depth_policy* policy = nullptr) {
    toy_target target(toy_params{});
    keyed_sampler sampler(k_vocab, sp);
    speculative_decoder dec(target, sampler, d, policy);
    run_out r;
    r.res = dec.generate(prompt, opt);
    r.state = target.committed();
    return r;
}

// What the target must hold after a generation: the context minus its pending last token.
std::vector<int32_t> expected_state(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
    std::vector<int32_t> ctx = prompt;
    ctx.insert(ctx.end(), out.begin(), out.end());
    ctx.pop_back();
    return ctx;
}

void expect_same_as_serial(const run_out& serial, const run_out& drafted, const std::string& what) {
    ASSERT_EQ(drafted.res.tokens, serial.res.tokens) << what;
    ASSERT_EQ(drafted.res.token_sha, serial.res.token_sha) << what;
    ASSERT_EQ(drafted.res.reason, serial.res.reason) << what;
    ASSERT_EQ(drafted.state, serial.state) << what << ": committed state differs (rollback)";
}

TEST(spec_decode, serial_decoding_commits_one_row_per_token) {
    auto prompts = make_prompts();
    decode_options opt;
    opt.max_tokens = 40;
    auto r = run(prompts[0], sampling_params{}, opt, nullptr);
    EXPECT_EQ(r.res.tokens.size(), 40u);
    EXPECT_EQ(r.res.stats.steps, 40);
    EXPECT_EQ(r.res.stats.rows_max, 1);
    EXPECT_EQ(r.res.token_sha, token_sha_hex(r.res.tokens));
    EXPECT_EQ(r.state, expected_state(prompts[0], r.res.tokens));
}

TEST(spec_decode, drafted_equals_serial_for_every_drafter) {
    auto prompts = make_prompts();
    decode_options opt;
    opt.max_tokens = 64;
    int64_t ngram_accepted = 0, ngram_proposed = 0, dm_accepted = 0, dm_proposed = 0;
    int64_t ngram_steps = 0, tokens = 0;
    for (const auto& sc : sampling_cases()) {
        for (size_t pi = 0; pi < prompts.size(); ++pi) {
            const auto& prompt = prompts[pi];
            std::string what = sc.name + " prompt " + std::to_string(pi);
            run_out serial = run(prompt, sc.params, opt, nullptr);
            ASSERT_EQ(serial.state, expected_state(prompt, serial.res.tokens)) << what;
            tokens += int64_t(serial.res.tokens.size());

            ngram_drafter ng;
            run_out a = run(prompt, sc.params, opt, &ng);
            expect_same_as_serial(serial, a, what + " ngram");
            ngram_accepted += a.res.stats.drafts_accepted;
            ngram_proposed += a.res.stats.drafts_proposed;
            ngram_steps += a.res.stats.steps;

            garbage_drafter gd;
            expect_same_as_serial(serial, run(prompt, sc.params, opt, &gd), what + " garbage");

            oracle_drafter od(prompt, serial.res.tokens);
            run_out o = run(prompt, sc.params, opt, &od);
            expect_same_as_serial(serial, o, what + " oracle");
            ASSERT_GT(o.res.stats.drafts_proposed, 0) << what;
            ASSERT_EQ(o.res.stats.drafts_accepted, o.res.stats.drafts_proposed) << what << ": the oracle is always right";
            ASSERT_LT(o.res.stats.steps, int64_t(serial.res.tokens.size())) << what;

            // Draft model: same Markov part as the target, another whole-prefix part, and a
            // vocabulary padded by 3 ids the target does not have.
            toy_target draft(toy_params{.n_vocab = k_vocab + 3, .seed = 1, .variant = 42});
            draft_model_drafter dm(draft, sc.params);
            run_out m = run(prompt, sc.params, opt, &dm);
            expect_same_as_serial(serial, m, what + " draft model");
            dm_accepted += m.res.stats.drafts_accepted;
            dm_proposed += m.res.stats.drafts_proposed;
        }
    }
    // The drafters do their job on this repetitive toy: drafts get accepted and windows shrink
    // the number of steps.
    EXPECT_GT(ngram_accepted, ngram_proposed / 10) << ngram_accepted << " of " << ngram_proposed;
    EXPECT_LT(ngram_steps, tokens);
    EXPECT_GT(dm_accepted, dm_proposed * 2 / 5) << dm_accepted << " of " << dm_proposed;
}

TEST(spec_decode, every_window_size_gives_the_same_tokens) {
    auto prompts = make_prompts();
    for (const auto& sc : sampling_cases()) {
        for (size_t pi = 0; pi < prompts.size(); pi += 3) {
            decode_options opt;
            opt.max_tokens = 48;
            run_out serial = run(prompts[pi], sc.params, opt, nullptr);
            for (int32_t w : {1, 2, 3, 5, 9, 16}) {
                opt.max_window = w;
                oracle_drafter od(prompts[pi], serial.res.tokens);
                run_out o = run(prompts[pi], sc.params, opt, &od);
                expect_same_as_serial(serial, o, sc.name + " window " + std::to_string(w));
                if (w > 1) {
                    EXPECT_EQ(o.res.stats.rows_max, w);
                }
                ngram_drafter ng;
                expect_same_as_serial(serial, run(prompts[pi], sc.params, opt, &ng), "ngram window " + std::to_string(w));
            }
        }
    }
}

TEST(spec_decode, window_cut_by_max_tokens_commits_what_serial_commits) {
    auto prompts = make_prompts();
    for (const auto& sc : sampling_cases()) {
        decode_options full;
        full.max_tokens = 40;
        run_out reference = run(prompts[1], sc.params, full, nullptr);
        for (int32_t m = 0; m <= 25; ++m) {
            decode_options opt;
            opt.max_tokens = m;
            run_out serial = run(prompts[1], sc.params, opt, nullptr);
            ASSERT_EQ(serial.res.tokens,
                      std::vector<int32_t>(reference.res.tokens.begin(), reference.res.tokens.begin() + m));
            oracle_drafter od(prompts[1], reference.res.tokens);  // drafts run past max_tokens
            expect_same_as_serial(serial, run(prompts[1], sc.params, opt, &od), sc.name + " max_tokens " + std::to_string(m));
            ngram_drafter ng;
            expect_same_as_serial(serial, run(prompts[1], sc.params, opt, &ng), sc.name + " ngram max_tokens " + std::to_string(m));
        }
    }
}

TEST(spec_decode, window_cut_by_eos_commits_what_serial_commits) {
    auto prompts = make_prompts();
    for (const auto& sc : sampling_cases()) {
        for (size_t pi = 0; pi < prompts.size(); pi += 2) {
            decode_options full;
            full.max_tokens = 60;
            run_out reference = run(prompts[pi], sc.params, full, nullptr);
            // Each of a few generated tokens in turn plays EOS: serial stops at its first
            // occurrence without emitting it, and the drafted run, whose window holds drafts past
            // it, stops at the same place.
            for (size_t at : {size_t(0), size_t(5), size_t(17), size_t(40)}) {
                decode_options opt = full;
                opt.eos = {reference.res.tokens[at]};
                run_out serial = run(prompts[pi], sc.params, opt, nullptr);
                ASSERT_EQ(serial.res.reason, stop_reason::eos);
                ASSERT_LE(serial.res.tokens.size(), at);
                oracle_drafter od(prompts[pi], reference.res.tokens);
                run_out o = run(prompts[pi], sc.params, opt, &od);
                expect_same_as_serial(serial, o, sc.name + " eos");
                // The target holds the prompt and every emitted token but the pending last one.
                std::vector<int32_t> ctx = prompts[pi];
                ctx.insert(ctx.end(), serial.res.tokens.begin(), serial.res.tokens.end());
                ctx.pop_back();
                ASSERT_EQ(o.state, ctx);
                ngram_drafter ng;
                expect_same_as_serial(serial, run(prompts[pi], sc.params, opt, &ng), sc.name + " ngram eos");
            }
        }
    }
}

TEST(spec_decode, window_cut_by_stop_callback_commits_what_serial_commits) {
    auto prompts = make_prompts();
    for (const auto& sc : sampling_cases()) {
        for (size_t pi = 1; pi < prompts.size(); pi += 2) {
            decode_options full;
            full.max_tokens = 60;
            run_out reference = run(prompts[pi], sc.params, full, nullptr);
            for (size_t at : {size_t(1), size_t(8), size_t(30)}) {
                // A two-token "stop string": stop after the pair that ends at `at`.
                int32_t a = reference.res.tokens[at - 1], b = reference.res.tokens[at];
                decode_options opt = full;
                int calls = 0;
                opt.stop = [a, b, &calls](std::span<const int32_t> gen) {
                    ++calls;
                    return gen.size() >= 2 && gen[gen.size() - 2] == a && gen.back() == b;
                };
                run_out serial = run(prompts[pi], sc.params, opt, nullptr);
                ASSERT_EQ(serial.res.reason, stop_reason::stop);
                ASSERT_LE(serial.res.tokens.size(), at + 1);
                int serial_calls = calls;
                calls = 0;
                oracle_drafter od(prompts[pi], reference.res.tokens);
                expect_same_as_serial(serial, run(prompts[pi], sc.params, opt, &od), sc.name + " stop");
                EXPECT_EQ(calls, serial_calls) << "the callback sees every emitted token once";
                garbage_drafter gd;
                expect_same_as_serial(serial, run(prompts[pi], sc.params, opt, &gd), sc.name + " garbage stop");
            }
        }
    }
}

TEST(spec_decode, depth_policy_changes_speed_never_tokens) {
    auto prompts = make_prompts();
    for (const auto& sc : sampling_cases()) {
        decode_options opt;
        opt.max_tokens = 64;
        opt.calibrate_policy = false;
        run_out serial = run(prompts[2], sc.params, opt, nullptr);

        // Windows that cost a lot per row with a drafter that is always wrong: the policy turns
        // drafting off (probing now and then), and the output is still serial's.
        depth_policy_params pp;
        pp.probe_every = 8;
        depth_policy costly(pp);
        for (int32_t r = 1; r <= 16; ++r) costly.set_cost(r, double(r));
        garbage_drafter gd;
        run_out g = run(prompts[2], sc.params, opt, &gd, &costly);
        expect_same_as_serial(serial, g, sc.name + " costly windows");
        EXPECT_GT(g.res.stats.steps_drafting_off, 0);

        // Flat costs with the oracle: deep windows, few steps.
        depth_policy flat;
        for (int32_t r = 1; r <= 16; ++r) flat.set_cost(r, 1.0);
        oracle_drafter od(prompts[2], serial.res.tokens);
        run_out o = run(prompts[2], sc.params, opt, &od, &flat);
        expect_same_as_serial(serial, o, sc.name + " flat windows");
        EXPECT_LE(o.res.stats.steps, 8);

        // Calibrated on the toy (noisy timings): whatever depths it picks, same tokens.
        decode_options cal = opt;
        cal.calibrate_policy = true;
        depth_policy measured;
        ngram_drafter ng;
        run_out n = run(prompts[2], sc.params, cal, &ng, &measured);
        EXPECT_TRUE(measured.calibrated());
        expect_same_as_serial(serial, n, sc.name + " calibrated");
    }
}

TEST(spec_decode, generation_resumes_from_a_target_holding_a_prompt_prefix) {
    auto prompts = make_prompts();
    decode_options opt;
    opt.max_tokens = 30;
    for (const auto& sc : sampling_cases()) {
        const auto& prompt = prompts[3];
        run_out fresh = run(prompt, sc.params, opt, nullptr);
        // A target that already holds half the prompt (a prefix-cache hit).
        toy_target target(toy_params{});
        std::vector<float> logits(prompt.size() * k_vocab);
        size_t half = prompt.size() / 2;
        target.forward(std::span<const int32_t>(prompt.data(), half), logits.data());
        target.commit(int32_t(half));
        keyed_sampler sampler(k_vocab, sc.params);
        ngram_drafter ng;
        speculative_decoder dec(target, sampler, &ng);
        decode_result r = dec.generate(prompt, opt);
        EXPECT_EQ(r.tokens, fresh.res.tokens) << sc.name;
        EXPECT_EQ(r.stats.prompt_rows, int64_t(prompt.size() - 1 - half));
    }
}

TEST(spec_decode, bad_requests_are_rejected) {
    toy_target target(toy_params{});
    keyed_sampler sampler(k_vocab, sampling_params::greedy());
    speculative_decoder dec(target, sampler);
    decode_options opt;
    EXPECT_THROW(dec.generate(std::vector<int32_t>{}, opt), error);
    EXPECT_THROW(dec.generate(std::vector<int32_t>{1, k_vocab}, opt), error);
    opt.max_window = 17;
    EXPECT_THROW(dec.generate(std::vector<int32_t>{1, 2}, opt), error);
    keyed_sampler wrong(k_vocab + 1, sampling_params::greedy());
    EXPECT_THROW(speculative_decoder(target, wrong), error);
}

TEST(spec_decode, stats_report_rows_acceptance_and_drafter) {
    auto prompts = make_prompts();
    decode_options opt;
    opt.max_tokens = 50;
    run_out serial = run(prompts[4], sampling_params::greedy(), opt, nullptr);
    oracle_drafter od(prompts[4], serial.res.tokens);
    run_out o = run(prompts[4], sampling_params::greedy(), opt, &od);
    const spec_stats& s = o.res.stats;
    EXPECT_EQ(s.tokens, 50);
    EXPECT_EQ(s.rows_total, s.drafts_proposed + s.steps);
    // Windows of 16, 16, 16 rows, then 2 (only 2 tokens were still wanted).
    EXPECT_EQ(s.steps, 4);
    EXPECT_EQ(s.rows_max, 16);
    EXPECT_EQ(s.rows_min, 2);
    EXPECT_DOUBLE_EQ(s.rows_mean(), 50.0 / 4.0);
    EXPECT_DOUBLE_EQ(s.acceptance_rate(), 1.0);
    EXPECT_DOUBLE_EQ(s.accepted_per_step(), 50.0 / double(s.steps));
    EXPECT_EQ(s.drafter_name, "oracle");
    EXPECT_EQ(s.drafter.accepted, s.drafts_accepted);
    EXPECT_NE(s.summary().find("acceptance 1.000"), std::string::npos) << s.summary();
    EXPECT_NE(serial.res.stats.summary().find("drafter none"), std::string::npos);
}

}  // namespace
}  // namespace sluice
