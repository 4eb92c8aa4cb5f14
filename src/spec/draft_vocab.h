// A trimmed draft vocabulary: the token ids an MTP head's output projection computes when it
// drafts (issue 11), most frequent first, read from a small text file beside the model that
// tools/make_draft_vocab.py writes from a calibration text. A draft is only a proposal, so a
// draft head that can never propose an id outside the list changes the speed, never a token.
//
// The file (UTF-8 text; blank lines and lines starting with '#' are skipped anywhere):
//   sluice-draft-vocab 1        the format and its version
//   n_vocab 151936              the model's logits per row: a file made for another vocabulary is refused
//   count 32768                 the ids that follow
//   <id>                        count lines, one id each: distinct, in [0, n_vocab)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace sluice {

struct draft_vocab {
    int32_t n_vocab = 0;         // the vocabulary the ids index
    std::vector<int32_t> ids;    // distinct ids in [0, n_vocab), in the file's order
};

// Parses `text` (from `where`, for the messages) for a model of n_vocab logits. Throws
// sluice::error naming the line and what was expected on a malformed or mismatched file.
draft_vocab parse_draft_vocab(std::string_view text, int32_t n_vocab, std::string_view where);
draft_vocab read_draft_vocab(const std::filesystem::path& path, int32_t n_vocab);

// Where a model's draft vocabulary is looked for when none is named: "<model>.draft-vocab"
// (a Hugging Face directory: "<dir>/draft-vocab").
std::filesystem::path default_draft_vocab_path(const std::filesystem::path& model);

}  // namespace sluice
