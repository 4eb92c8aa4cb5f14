// spec_replay: prompt lookup and the depth policy replayed against the serial output of a real
// model, with a window cost curve given on the command line instead of timed, so that a change
// to the drafter or the policy is judged on what it decides, not on a shared machine's clock.
//
//   spec_replay MODEL COSTS PROMPT_FILE[:chat]...     (COSTS: rows=ms pairs, e.g.
//                                                      1=8.1,2=11.4,3=14,4=14.5,8=23.7,16=49.4)
//
// For each prompt: greedy serial decoding of up to 200 tokens through the engine (the prompt's
// ids and the output), then the speculative decoder over a target that replays that output
// (row i's logits pick the serial token at its position) and takes as long as the curve says a
// window of its rows takes (a spin, so the policy's own timings agree with the curve). The
// modelled speedup is serial's tokens x cost(1) over the sum of the windows' costs; the decoded
// tokens must equal serial's (exit 1 otherwise). Prints one line per prompt; asserts nothing else.
#include <sluice/engine.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/side_file.h"
#include "runtime/sampler.h"
#include "spec/depth_policy.h"
#include "spec/ngram_drafter.h"
#include "spec/target.h"
#include "spec/verifier.h"

using namespace sluice;

namespace {

// The serial output as a target: the token after position p is tape[p + 1] (prompt and output
// together); each forward spins for the curve's cost of its rows.
class tape_target final : public verify_target {
public:
    tape_target(std::vector<int32_t> tape, int32_t n_vocab, const depth_policy& curve)
        : tape_(std::move(tape)), n_vocab_(n_vocab), curve_(curve) {}
    int32_t n_vocab() const override { return n_vocab_; }
    int32_t n_past() const override { return n_past_; }
    void forward(std::span<const int32_t> tokens, float* logits) override {
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::duration<double>(curve_.cost(static_cast<int32_t>(tokens.size())));
        for (size_t i = 0; i < tokens.size(); ++i) {
            float* row = logits + i * static_cast<size_t>(n_vocab_);
            std::fill(row, row + n_vocab_, 0.0f);
            const size_t next = static_cast<size_t>(n_past_) + i + 1;
            row[next < tape_.size() ? tape_[next] : 0] = 1.0f;
        }
        rows_ = static_cast<int32_t>(tokens.size());
        while (std::chrono::steady_clock::now() < until) {
        }
    }
    void commit(int32_t n) override {
        if (n < 0 || n > rows_) fail("tape target: commit: {} rows, but the last forward had {}", n, rows_);
        n_past_ += n;
        rows_ = 0;
    }

private:
    std::vector<int32_t> tape_;
    int32_t n_vocab_;
    const depth_policy& curve_;
    int32_t n_past_ = 0, rows_ = 0;
};

// SPEC_REPLAY_TRACE=1: each window's match length, the drafts proposed, those the policy kept and
// those the target accepted, on stderr.
class traced_drafter final : public drafter {
public:
    std::string_view name() const override { return inner_.name(); }
    void reset() override { inner_.reset(); }
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override {
        proposed_ = inner_.propose(context, max_n, out);
        return proposed_;
    }
    void observe(int32_t accepted, int32_t proposed) override {
        std::fprintf(stderr, "match %2d proposed %2d window %2d accepted %2d\n", inner_.last_match_length(), proposed_,
                     proposed, accepted);
        inner_.observe(accepted, proposed);
    }
    bool confidence(std::span<double> out) const override { return inner_.confidence(out); }
    bool cheap_proposals() const override { return true; }

private:
    ngram_drafter inner_;
    int32_t proposed_ = 0;
};

int run(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: spec_replay MODEL COSTS PROMPT_FILE[:chat]...  (COSTS: rows=ms,...)\n");
        return 2;
    }
    depth_policy curve;
    for (std::string rest = argv[2]; !rest.empty();) {
        const size_t c = rest.find(',');
        const std::string pair = rest.substr(0, c);
        const size_t eq = pair.find('=');
        if (eq == std::string::npos) fail("COSTS: expected rows=ms, got {}", pair);
        curve.set_cost(std::stoi(pair.substr(0, eq)), std::stod(pair.substr(eq + 1)) * 1e-3);
        rest = c == std::string::npos ? "" : rest.substr(c + 1);
    }
    engine_options eo;
    eo.model_path = argv[1];
    eo.n_threads = 2;
    auto eng = engine::open(eo);
    double sum_log = 0;
    int n_prompts = 0;
    bool all_equal = true;
    for (int a = 3; a < argc; ++a) {
        std::string file = argv[a];
        const bool chat = file.size() > 5 && file.substr(file.size() - 5) == ":chat";
        if (chat) file.resize(file.size() - 5);
        generate_params gp;
        gp.n_predict = 200;
        gp.temperature = 0.0f;
        gp.chat = chat;
        const generate_stats serial = eng->generate(read_side_file(file, "prompt file"), gp, nullptr);
        std::vector<int32_t> tape = serial.prompt_tokens;
        tape.insert(tape.end(), serial.tokens.begin(), serial.tokens.end());
        int32_t n_vocab = 0;
        for (const int32_t t : tape) n_vocab = std::max(n_vocab, t + 1);
        tape_target target(tape, n_vocab, curve);
        keyed_sampler sampler(n_vocab, sampling_params::greedy());
        ngram_drafter plain;
        traced_drafter traced;
        drafter& drafter = std::getenv("SPEC_REPLAY_TRACE") ? static_cast<sluice::drafter&>(traced) : plain;
        depth_policy policy;
        policy.adopt_costs(curve);
        speculative_decoder decoder(target, sampler, &drafter, &policy);
        decode_options opt;
        opt.max_tokens = serial.n_decoded;
        opt.calibrate_policy = false;
        const decode_result r = decoder.generate(serial.prompt_tokens, opt);
        double drafted_s = 0;
        for (int32_t k = 1; k <= 16; ++k) drafted_s += double(r.stats.windows_of_rows[size_t(k)]) * curve.cost(k);
        const double serial_s = double(serial.n_decoded) * curve.cost(1);
        const double speedup = serial_s / drafted_s;
        sum_log += std::log(speedup);
        all_equal = all_equal && r.tokens == serial.tokens;
        ++n_prompts;
        fmt::print("{:<40} {:4} tokens  {:4} windows  rows mean {:.2f}  modelled speedup {:.3f}x  {}\n", file,
                   serial.n_decoded, r.stats.steps, r.stats.rows_mean(), speedup,
                   r.tokens == serial.tokens ? "tokens equal" : "TOKENS DIFFER");
    }
    fmt::print("geometric mean {:.3f}x over {} prompts\n", std::exp(sum_log / n_prompts), n_prompts);
    return all_equal ? 0 : 1;   // drafted must equal serial (E1)
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "spec_replay: %s\n", e.what());
        return 1;
    }
}
