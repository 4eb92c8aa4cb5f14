// The MTP (nextn) head of the hybrid Qwen MoEs (qwen3next, qwen35moe): the equations are in
// spec/mtp.h; the block is one gated-attention decoder layer with the MoE FFN and shared expert,
// run with the same row-exact CPU blocks as the trunk (E1/E2 hold for its rows), against its own
// one-layer KV cache.
#pragma once

#include "spec/mtp.h"

#include "models/hybrid_model.h"

#include <memory>

namespace sluice {

// The MTP head of `m`, or null when m is not a hybrid model or its file has no nextn block.
// n_ctx: positions its cache holds (the session's); max_rows: rows per forward (>= 1).
// `m` and `pool` must outlive the head.
std::unique_ptr<mtp_head> make_mtp_head(const model& m, thread_pool& pool, int n_ctx, int max_rows);

}  // namespace sluice
