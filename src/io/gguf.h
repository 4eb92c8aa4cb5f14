// GGUF files (versions 2 and 3), split files (name-00001-of-00003.gguf) included.
#pragma once

#include "io/model_file.h"

#include <filesystem>
#include <memory>

namespace sluice {

// Opens a GGUF file, or every part of a split set when `path` names one part.
// Throws sluice::error naming the field and the value on malformed input.
std::unique_ptr<model_file> open_gguf(const std::filesystem::path& path);

}  // namespace sluice
