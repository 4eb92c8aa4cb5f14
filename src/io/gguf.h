// GGUF files (versions 2 and 3), split files (name-00001-of-00003.gguf) included.
#pragma once

#include "io/model_file.h"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace sluice {

// Opens a GGUF file, or every part of a split set when `path` names one part.
// Throws sluice::error naming the field and the value on malformed input.
// access: every part mapped or read into memory (io/mmap.h).
std::unique_ptr<model_file> open_gguf(const std::filesystem::path& path, file_access access = file_access::map,
                                      const read_progress* progress = nullptr);

// Parses one GGUF image held in memory (the fuzz target's entry point and tests). `bytes` must
// outlive the returned model: tensor views point into it. Split keys are validated against
// each other but other parts are not looked for. `label` names the image in errors.
std::unique_ptr<model_file> open_gguf_memory(std::span<const std::byte> bytes,
                                             const std::string& label = "<memory>");

// Nested metadata arrays deeper than this are rejected (llama.cpp writes depth 1; the cap keeps
// a hostile file from recursing the stack away).
inline constexpr int k_gguf_max_array_depth = 8;

}  // namespace sluice
