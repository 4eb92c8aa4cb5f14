// Hugging Face directories: config.json + model.safetensors (or model.safetensors.index.json
// with shards). Tensors are exposed under llama.cpp's GGUF names and config values under its
// GGUF keys, so model code cannot tell the two formats apart.
#pragma once

#include "io/model_file.h"

#include <filesystem>
#include <memory>

namespace sluice {

// Opens a directory holding config.json. Throws sluice::error naming the file and field.
std::unique_ptr<model_file> open_hf_directory(const std::filesystem::path& dir);

}  // namespace sluice
