// The MTP (nextn) head of the hybrid Qwen MoEs (qwen3next, qwen35moe): the equations are in
// spec/mtp.h; the block is one gated-attention decoder layer with the MoE FFN and shared expert,
// run with the same row-exact CPU blocks as the trunk (E1/E2 hold for its rows), against its own
// one-layer KV cache.
#pragma once

#include "spec/mtp.h"

#include "models/hybrid_model.h"
#include "spec/draft_vocab.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace sluice {

// The head's output projection restricted to a trimmed draft vocabulary (spec/draft_vocab.h):
// the listed rows of the output matrix, gathered once per model and shared, read-only, by every
// head (each request of the server has its own head).
struct mtp_draft_rows {
    std::vector<int32_t> ids;       // [n] the token id of each gathered row
    std::vector<std::byte> bytes;   // [n, row_bytes] the rows, in the matrix's own format
    tensor_view matrix;             // [n_embd, n] over `bytes`
};
// Null when m has no MTP head. Throws when the vocabulary's n_vocab is not the model's.
std::shared_ptr<const mtp_draft_rows> gather_mtp_draft_rows(const model& m, const draft_vocab& v);

// True when m is a hybrid model (the CPU's, or load_model_cuda's) whose file carries an MTP
// (nextn) block (make_mtp_head gives a head).
bool has_mtp_head(const model& m);

// The MTP head of `m`, or null when m is not a hybrid model or its file has no nextn block. A
// CUDA model's head runs on its device (models/cuda_model.h: make_cuda_mtp_head), in the bits of
// the CPU's.
// n_ctx: positions its cache holds (the session's); max_rows: rows per forward (>= 1).
// draft_rows (optional, from gather_mtp_draft_rows(m, ...)): logits() then holds the listed ids'
// logits, each the bits the whole projection gives it (a column's dot product never depends on
// the others, E1/E2), and -inf for every other id, so no pick can land outside the list.
// `m` and `pool` must outlive the head.
std::unique_ptr<mtp_head> make_mtp_head(model& m, thread_pool& pool, int n_ctx, int max_rows,
                                        std::shared_ptr<const mtp_draft_rows> draft_rows = nullptr);

}  // namespace sluice
