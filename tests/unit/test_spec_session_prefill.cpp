// The speculative decoder's prompt through a real session (spec/session_target.h): the rows before
// the prompt's last go through session::prefill (the output head for the last row only, no
// [rows, n_vocab] buffer), and that changes no token: the same ids and token_sha as a target that
// forwards and commits them with every row's logits, and as a session that already held them.
// On a plain-attention fixture and a hybrid one (the recurrent state goes through the same
// prefill), greedy and sampled, serial and drafted.
#include "core/error.h"
#include "io/model_file.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/draft_model_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/session_target.h"
#include "spec/verifier.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sluice {
namespace {

std::filesystem::path fixture(const std::string& dir, const std::string& file) {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures" / dir / file;
}

// A session target that declines prefill_without_logits: the decoder forwards the prompt's rows
// itself, every row's logits written, as it did for every target before.
class forwarding_target final : public verify_target {
public:
    explicit forwarding_target(session_target& t) : t_(t) {}
    int32_t n_vocab() const override { return t_.n_vocab(); }
    int32_t n_past() const override { return t_.n_past(); }
    void forward(std::span<const int32_t> tokens, float* logits) override {
        rows_forwarded += int64_t(tokens.size());
        t_.forward(tokens, logits);
    }
    void commit(int32_t n) override { t_.commit(n); }
    int64_t rows_forwarded = 0;

private:
    session_target& t_;
};

std::vector<int32_t> prompt_of(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 101 + 3) % 380;
    return t;
}

enum class prompt_path { prefill_without_logits, forward_and_commit, already_cached };

decode_result run(model& m, const std::vector<int32_t>& prompt, const sampling_params& sp, int window,
                  prompt_path path) {
    session_options so;
    so.n_ctx = 128;
    so.prefill_chunk = 8;   // the session's own chunks: the prompt below takes several
    session s(m, so);
    session_target st(s, 16);
    forwarding_target fwd(st);
    if (path == prompt_path::already_cached)
        s.prefill(std::span<const int32_t>(prompt.data(), prompt.size() - 1));
    keyed_sampler sampler(m.hparams().n_vocab, sp);
    ngram_drafter ng;
    verify_target& t = path == prompt_path::forward_and_commit ? static_cast<verify_target&>(fwd) : st;
    speculative_decoder dec(t, sampler, window > 1 ? &ng : nullptr);
    decode_options opt;
    opt.max_tokens = 24;
    opt.max_window = window;
    opt.prefill_chunk = 5;   // the decoder's chunks where it forwards the prompt itself
    decode_result r = dec.generate(prompt, opt);
    EXPECT_EQ(r.stats.prompt_rows, path == prompt_path::already_cached ? 0 : int64_t(prompt.size() - 1));
    if (path == prompt_path::forward_and_commit) {
        EXPECT_GE(fwd.rows_forwarded, int64_t(prompt.size() - 1));   // the prompt went through forward()
    }
    return r;
}

class spec_session_prefill : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(spec_session_prefill, the_prompts_path_changes_no_token) {
    auto f = model_file::open(fixture(GetParam().first, GetParam().second));
    auto m = load_model(*f, {});
    sampling_params sampled;
    sampled.temperature = 0.8f;
    sampled.seed = 7;
    int compared = 0;
    for (const sampling_params& sp : {sampling_params::greedy(), sampled})
        for (int window : {1, 4})
            for (int salt = 0; salt < 2; ++salt) {
                // Repeats, so the n-gram drafter has something to propose.
                std::vector<int32_t> prompt = prompt_of(14, salt);
                prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 9);
                const decode_result a = run(*m, prompt, sp, window, prompt_path::prefill_without_logits);
                const decode_result b = run(*m, prompt, sp, window, prompt_path::forward_and_commit);
                const decode_result c = run(*m, prompt, sp, window, prompt_path::already_cached);
                ASSERT_EQ(a.tokens.size(), 24u);
                EXPECT_EQ(a.tokens, b.tokens) << "window " << window << " salt " << salt;
                EXPECT_EQ(a.token_sha, b.token_sha);
                EXPECT_EQ(a.tokens, c.tokens) << "window " << window << " salt " << salt;
                EXPECT_EQ(a.token_sha, c.token_sha);
                ++compared;
            }
    EXPECT_EQ(compared, 8);
}

INSTANTIATE_TEST_SUITE_P(fixtures, spec_session_prefill,
                         ::testing::Values(std::pair{"qwen3moe_e8_k2", "model-Q8_0.gguf"},
                                           std::pair{"qwen35moe_e4_k2_mtp", "converted-F32.gguf"}));

// The draft-model drafter catches up on the context through the same prefill: with the target
// model as its own draft model, greedy, every draft it makes is the target's pick, so every one is
// kept; a catch-up that lost or changed a row would draft from another context.
TEST(spec_session_prefill_target, a_draft_model_catches_up_without_logits_and_drafts_what_the_target_picks) {
    auto f = model_file::open(fixture("qwen3moe_e8_k2", "model-Q8_0.gguf"));
    auto m = load_model(*f, {});
    session_options so;
    so.n_ctx = 128;
    so.prefill_chunk = 8;
    session target_session(*m, so), draft_session(*m, so);
    session_target target(target_session, 16), draft(draft_session, 16);
    keyed_sampler sampler(m->hparams().n_vocab, sampling_params::greedy());
    draft_model_drafter dm(draft, sampling_params::greedy(), draft_model_params{.max_draft = 3, .prompt_chunk = 4});
    speculative_decoder dec(target, sampler, &dm);
    decode_options opt;
    opt.max_tokens = 20;
    opt.max_window = 4;
    const std::vector<int32_t> prompt = prompt_of(19, 5);
    const decode_result r = dec.generate(prompt, opt);
    const decode_result serial = run(*m, prompt, sampling_params::greedy(), 1, prompt_path::prefill_without_logits);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(serial.tokens.begin(), serial.tokens.begin() + 20));
    EXPECT_GT(r.stats.drafts_proposed, 0);
    EXPECT_EQ(r.stats.drafts_accepted, r.stats.drafts_proposed);
}

TEST(spec_session_prefill_target, commits_the_rows_and_drops_a_windows_provisional_rows_first) {
    auto f = model_file::open(fixture("qwen3moe_e8_k2", "model-Q8_0.gguf"));
    auto m = load_model(*f, {});
    session_options so;
    so.n_ctx = 64;
    session s(*m, so);
    session_target t(s, 16);
    const std::vector<int32_t> prompt = prompt_of(10, 3);
    ASSERT_TRUE(t.prefill_without_logits(std::span<const int32_t>(prompt.data(), 6)));
    EXPECT_EQ(t.n_past(), 6);
    std::vector<float> logits(size_t(2) * size_t(t.n_vocab()));
    t.forward(std::span<const int32_t>(prompt.data() + 6, 2), logits.data());
    t.commit(1);
    EXPECT_EQ(t.n_past(), 7);
    ASSERT_TRUE(t.prefill_without_logits(std::span<const int32_t>(prompt.data() + 7, 2)));
    EXPECT_EQ(t.n_past(), 9);
    // Rows of a forward never committed are dropped first, as a second forward drops them.
    t.forward(std::span<const int32_t>(prompt.data() + 9, 1), logits.data());
    ASSERT_TRUE(t.prefill_without_logits(std::span<const int32_t>(prompt.data() + 9, 1)));
    EXPECT_EQ(t.n_past(), 10);
    EXPECT_THROW(t.commit(0), error);   // nothing is provisional any more
}

}  // namespace
}  // namespace sluice
