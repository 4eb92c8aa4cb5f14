// keyed_sampler: the token at absolute position p is a pure function of (logits at p, the
// request's sampling parameters, the token history before p, seed, p) -- E4 in DESIGN.md.
//
// Order of the transforms (fixed; the first two follow llama.cpp's sampler chain, the rest
// follow the brief and Hugging Face's logits warpers, which apply temperature before top-p):
//   1. logit_bias        l[id] += bias (a bias of -inf bans the id)
//   2. penalties         over the last penalty_last_n history tokens, for each id seen c > 0
//                        times: l = l > 0 ? l / repeat : l * repeat;  l -= c * frequency +
//                        presence  (llama.cpp's penalties sampler, same formula)
//   3. temperature       l /= temperature (temperature < 1e-6 or top_k == 1 means greedy: the
//                        argmax after steps 1-2, ties to the lowest id, and nothing below runs)
//   4. top_k             keep the k best by (l desc, id asc)
//   5. top_p             softmax over the kept ids (double); keep the shortest prefix in
//                        (l desc, id asc) order whose mass reaches top_p (at least one id)
//   6. min_p             keep ids with p >= min_p * p_max, i.e. l >= l_max + log(min_p)
//   7. Gumbel-max        pick argmax over kept ids of l + g(id), g = -log(-log(u)),
//                        u = (x + 0.5) * 2^-32, x = Philox4x32-10(key = seed (lo, hi),
//                        counter = (p low 32 bits, id, p high 32 bits, 0)).v[0]; ties go to the
//                        lowest id. argmax(l + Gumbel) is a draw from softmax(l) over the kept ids.
// Steps 4-6 each keep a prefix of the ids in (logit desc, id asc) order, a strict total order,
// so the kept set does not depend on the sort algorithm or on how much of the order is sorted
// (the code sorts only as far as the filters look). NaN logits count as -inf. The pick allocates nothing: the sampler
// owns its scratch, sized to n_vocab at construction.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace sluice {

struct sampling_params {
    float temperature = 0.8f;       // < 1e-6 (k_min_sampling_temperature): greedy
    int32_t top_k = 40;             // <= 0: off; 1: greedy
    float top_p = 0.95f;            // >= 1: off
    float min_p = 0.05f;            // <= 0: off
    uint64_t seed = 0;              // the Philox key: (seed & 0xffffffff, seed >> 32)
    std::vector<std::pair<int32_t, float>> logit_bias;  // (id, added to the logit)
    int32_t penalty_last_n = 64;    // history tokens the penalties look at; -1: all, 0: off
    float repeat_penalty = 1.0f;    // 1: off
    float frequency_penalty = 0.0f; // 0: off
    float presence_penalty = 0.0f;  // 0: off

    static sampling_params greedy() {
        sampling_params p;
        p.temperature = 0.0f;
        return p;
    }
};

// Temperatures below this decode greedily (sampler.cpp says why).
inline constexpr float k_min_sampling_temperature = 1e-6f;

class keyed_sampler {
public:
    // Validates the parameters (bias ids in [0, n_vocab), finite temperature, ...); throws
    // sluice::error on a bad one.
    keyed_sampler(int32_t n_vocab, sampling_params params);

    // The token at absolute position `position` (the index the picked token will have in the
    // whole context, prompt included). logits: [n_vocab] for that position, read only.
    // history: the tokens at positions [0, position) -- exactly what serial decoding would have
    // committed, which is what the penalties see.
    int32_t pick(const float* logits, int64_t position, std::span<const int32_t> history);

    // Steps 1-6 only: fills adjusted_logits() (logit_bias, penalties, temperature applied) and
    // candidates() (the ids steps 4-6 keep; in (logit desc, id asc) order after top_k or top_p,
    // in no particular order otherwise). For tests and for reporting; pick() calls it.
    void prepare(const float* logits, std::span<const int32_t> history);
    std::span<const float> adjusted_logits() const { return work_; }
    std::span<const int32_t> candidates() const { return {order_.data(), size_t(n_kept_)}; }

    // The Gumbel noise of (seed, position, id) that step 7 adds.
    static double gumbel(uint64_t seed, int64_t position, int32_t id);

    bool is_greedy() const { return greedy_; }
    int32_t n_vocab() const { return n_vocab_; }
    const sampling_params& params() const { return params_; }

private:
    void apply_bias_and_penalties(std::span<const int32_t> history);

    int32_t n_vocab_;
    sampling_params params_;
    bool greedy_;
    std::vector<float> work_;     // [n_vocab] the adjusted logits of the current pick
    std::vector<int32_t> order_;  // [n_vocab] ids; the first n_kept_ are the candidates
    std::vector<int32_t> counts_; // [n_vocab] occurrences in the penalty window; all 0 between picks
    int32_t n_kept_ = 0;
};

}  // namespace sluice
