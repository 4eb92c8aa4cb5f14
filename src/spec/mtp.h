// MTP heads: the interface only. Filling it is a later issue's work (qwen3next / qwen35moe
// MTP layers, glm4moe and deepseek2 nextn layers): those models carry small extra layers that
// read the target's last hidden state and predict the tokens after the next one, so drafting
// costs a fraction of a layer and needs no second model.
//
// How it will plug in: the target's verify forward also exposes the hidden state of each row;
// after a window the decoder hands the hidden state of the row that produced the bonus token
// to an mtp_head, which proposes the continuation. mtp_drafter adapts an mtp_head to the
// drafter interface so the verifier, the depth policy and the statistics treat it like any
// other drafter (and, as for every drafter, its proposals can never change the output).
#pragma once

#include <cstdint>
#include <span>

#include "spec/drafter.h"

namespace sluice {

struct mtp_head {
    virtual ~mtp_head() = default;
    // How many tokens ahead the model's MTP layers predict (1 for Qwen3-Next, the nextn count
    // for GLM-4.5 / DeepSeek-V3); proposals never exceed it.
    virtual int32_t depth() const = 0;
    // hidden: [n_embd] the target's final hidden state at the row whose pick was `last_token`;
    // position: the absolute position of the first proposed token. Writes up to max_n ids to
    // out and returns how many.
    virtual int32_t propose(std::span<const float> hidden, int32_t last_token, int64_t position, int32_t max_n,
                            std::span<int32_t> out) = 0;
};

}  // namespace sluice
