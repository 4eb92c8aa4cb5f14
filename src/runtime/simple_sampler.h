// A plain sampler for `sluice run` until the keyed one (sampler.h, E4) takes over: greedy
// argmax, or temperature -> top-k -> top-p -> min-p, then a draw from std::mt19937_64 seeded
// once per request. Allocates nothing per token (scratch sized to n_vocab at construction).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sluice {

struct simple_sampler_params {
    float temperature = 0.8f;   // <= 0: greedy
    int32_t top_k = 40;         // <= 0: off
    float top_p = 0.95f;        // >= 1: off
    float min_p = 0.05f;        // <= 0: off
    uint64_t seed = 0;
};

// Argmax of logits[0, n); ties go to the lowest id.
int32_t argmax(const float* logits, int32_t n);

class simple_sampler {
public:
    simple_sampler(int32_t n_vocab, const simple_sampler_params& p);
    int32_t pick(const float* logits);

private:
    simple_sampler_params p_;
    int32_t n_vocab_;
    std::mt19937_64 rng_;
    std::vector<int32_t> ids_;   // [n_vocab] candidate ids, best first
    std::vector<double> probs_;  // [n_vocab] their probabilities
};

}  // namespace sluice
