// The oracle drafters of `sluice bench` (runtime/bench.cpp): drafts whose acceptance is set, not
// hoped for, so a speculative run's speed can be measured at a chosen acceptance on any model
// (a synthetic file's random weights draft nothing worth keeping).
#pragma once

#include "spec/drafter.h"
#include "spec/mtp_drafter.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>

namespace sluice::bench_oracle {

// Proposes the model's own greedy continuation (the tape), each draft replaced by a wrong token
// with probability 1 - accept: the verifier keeps a draft exactly when it equals the tape, so the
// acceptance is what the coin says. The tape is indexed by position: the context's length minus
// the prompt's is the number of tokens generated so far.
class oracle_drafter final : public drafter {
public:
    oracle_drafter(std::span<const int32_t> tape, size_t prompt_len, double accept, int32_t n_vocab, uint64_t seed)
        : tape_(tape), prompt_len_(prompt_len), accept_(accept), n_vocab_(n_vocab), seed_(seed), rng_(seed) {}

    std::string_view name() const override { return "oracle"; }
    void reset() override { rng_.seed(seed_); }

    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override {
        ++stats_.calls;
        const size_t k = context.size() - prompt_len_;  // tokens generated so far
        int32_t n = 0;
        std::uniform_real_distribution<double> coin(0.0, 1.0);
        for (; n < max_n && k + size_t(n) < tape_.size(); ++n) {
            int32_t t = tape_[k + size_t(n)];
            if (coin(rng_) >= accept_ && n_vocab_ > 1)  // any other id: the verifier's pick is the tape's token
                t = int32_t((int64_t(t) + 1 + int64_t(rng_() % uint64_t(n_vocab_ - 1))) % n_vocab_);
            out[size_t(n)] = t;
        }
        if (n == 0) ++stats_.empty;
        return n;
    }

private:
    std::span<const int32_t> tape_;
    size_t prompt_len_;
    double accept_;
    int32_t n_vocab_;
    uint64_t seed_;
    std::mt19937_64 rng_;
};

// The oracle's drafts at the MTP head's cost: the head folds in every committed row and proposes
// as in a real run (spec/mtp_drafter.h), then the oracle's tokens replace its proposals. So the
// acceptance is the oracle's and the time includes drafting: what a run whose MTP head is
// accepted at that rate would cost (a synthetic model's random head drafts nothing worth keeping).
class mtp_paced_oracle final : public drafter {
public:
    mtp_paced_oracle(mtp_drafter& head, oracle_drafter& oracle) : head_(head), oracle_(oracle) {}
    std::string_view name() const override { return "oracle at the MTP head's cost"; }
    void reset() override { oracle_.reset(); }
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override {
        ++stats_.calls;
        std::array<int32_t, 16> paid{};
        head_.propose(context, std::min<int32_t>(max_n, int32_t(paid.size())), paid);
        return oracle_.propose(context, max_n, out);
    }

private:
    mtp_drafter& head_;
    oracle_drafter& oracle_;
};

}  // namespace sluice::bench_oracle
