// toy_target: a deterministic stand-in for a model, for the speculative-decoding tests and for
// trying the decoder without weights. Its logits are a fixed pseudo-random function of the whole
// token prefix: mostly of the last `order` tokens (so text repeats and prompt lookup gets drafts
// accepted), and, at about one position in `prefix_every`, also of a hash of the entire prefix,
// so a state that holds a wrong token anywhere (a rollback bug) changes the output. The state is
// exactly the committed token list: commit() keeps the first rows of the last forward, the rest
// is forgotten, as a KV cache must.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "spec/target.h"

namespace sluice {

struct toy_params {
    int32_t n_vocab = 200;
    uint64_t seed = 1;         // the Markov part: two toys of the same seed agree on it
    uint64_t variant = 0;      // the whole-prefix part: a draft toy uses another variant
    int32_t order = 1;         // tokens of context the Markov part reads
    int32_t prefix_every = 8;  // about 1 position in this many also depends on the whole prefix
    float peak = 12.0f;        // the largest logit; most logits are near 0
};

class toy_target final : public verify_target {
public:
    explicit toy_target(toy_params p = {}) : p_(p) {
        if (p_.n_vocab < 2 || p_.order < 1 || p_.prefix_every < 1) fail("toy target: bad parameters");
        prefix_hash_.push_back(0x243F6A8885A308D3ull);
    }

    int32_t n_vocab() const override { return p_.n_vocab; }
    int32_t n_past() const override { return int32_t(committed_.size()); }

    void forward(std::span<const int32_t> tokens, float* logits) override {
        if (tokens.empty()) fail("toy target: forward: expected at least one row");
        provisional_.assign(tokens.begin(), tokens.end());
        ++forward_calls_;
        rows_forwarded_ += int64_t(tokens.size());
        uint64_t h = prefix_hash_.back();
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || tokens[i] >= p_.n_vocab)
                fail("toy target: forward: row {} token {} outside [0, {})", i, tokens[i], p_.n_vocab);
            h = mix(h ^ uint64_t(uint32_t(tokens[i])));
            row(tokens, i, h, logits + i * size_t(p_.n_vocab));
        }
    }

    void commit(int32_t n) override {
        if (n < 0 || size_t(n) > provisional_.size())
            fail("toy target: commit: {} rows, but the last forward had {}", n, provisional_.size());
        for (int32_t i = 0; i < n; ++i) {
            committed_.push_back(provisional_[size_t(i)]);
            prefix_hash_.push_back(mix(prefix_hash_.back() ^ uint64_t(uint32_t(provisional_[size_t(i)]))));
        }
        provisional_.clear();
    }

    const std::vector<int32_t>& committed() const { return committed_; }
    int64_t forward_calls() const { return forward_calls_; }
    int64_t rows_forwarded() const { return rows_forwarded_; }
    void clear() {
        committed_.clear();
        provisional_.clear();
        prefix_hash_.resize(1);
    }

private:
    static uint64_t mix(uint64_t x) {  // splitmix64's finaliser
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return x ^ (x >> 31);
    }
    static float unit(uint64_t h) { return float(h >> 40) * (1.0f / 16777216.0f); }  // [0, 1)

    // Token at row i of this forward, looking back `order` tokens through the committed state.
    int32_t back(std::span<const int32_t> rows, size_t i, int32_t k) const {
        int64_t j = int64_t(i) - k;
        if (j >= 0) return rows[size_t(j)];
        int64_t c = int64_t(committed_.size()) + j;
        return c >= 0 ? committed_[size_t(c)] : -1;
    }

    void row(std::span<const int32_t> rows, size_t i, uint64_t prefix_h, float* out) const {
        uint64_t m = mix(p_.seed);
        for (int32_t k = 0; k < p_.order; ++k) m = mix(m ^ uint64_t(uint32_t(back(rows, i, k))));
        bool whole = (prefix_h >> 33) % uint64_t(p_.prefix_every) == 0;
        uint64_t w = mix(prefix_h ^ mix(p_.variant + 7));
        for (int32_t v = 0; v < p_.n_vocab; ++v) {
            float u = unit(mix(m ^ uint64_t(v)));
            for (int s = 0; s < 5; ++s) u *= u;
            float l = p_.peak * u;  // u^32: a few large logits (about 2 nats apart), most near 0
            if (whole) l += p_.peak * 0.5f * unit(mix(w ^ uint64_t(v)));
            out[v] = l;
        }
    }

    toy_params p_;
    std::vector<int32_t> committed_;      // the state: tokens at positions [0, n_past)
    std::vector<uint64_t> prefix_hash_;   // [n_past + 1] hash of each committed prefix
    std::vector<int32_t> provisional_;    // rows of the last forward, until commit
    int64_t forward_calls_ = 0;
    int64_t rows_forwarded_ = 0;
};

}  // namespace sluice
