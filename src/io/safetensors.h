// Hugging Face directories: config.json + model.safetensors (or model.safetensors.index.json
// with shards). Tensors are exposed under llama.cpp's GGUF names and config values under its
// GGUF keys, so model code cannot tell the two formats apart.
#pragma once

#include "core/dtype.h"
#include "io/model_file.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Opens a directory holding config.json. Throws sluice::error naming the file and field.
// access: its shards mapped or read into memory (io/mmap.h).
std::unique_ptr<model_file> open_hf_directory(const std::filesystem::path& dir, file_access access = file_access::map,
                                              const read_progress* progress = nullptr);

// One tensor of a safetensors file, as its header describes it, after validation.
struct safetensors_tensor {
    std::string name;                 // HF name, e.g. "model.layers.0.mlp.up_proj.weight"
    std::string dtype_name;           // as written: "BF16"
    std::optional<dtype> type;        // nullopt for U8 and BOOL, which GGML has no type for
    uint32_t elem_bytes = 0;
    std::vector<int64_t> shape;       // as written: outermost first (GGML's ne reversed)
    uint64_t offset = 0;              // of the first byte, from the start of the file
    uint64_t nbytes = 0;              // = product(shape) * elem_bytes
};

struct safetensors_header {
    uint64_t data_start = 0;                       // 8 + header length
    std::vector<safetensors_tensor> tensors;       // sorted by offset
    std::map<std::string, std::string> metadata;   // "__metadata__" (strings only)
};

// Parses and validates the header of a safetensors image held in memory: the length within the
// image, JSON, known dtypes, shape products without overflow, every byte range inside the data
// and of the size its shape says, no two ranges overlapping, no duplicate names. `where` names
// the file in errors. Throws sluice::error; never reads outside `file`.
safetensors_header parse_safetensors(std::span<const std::byte> file, std::string_view where);

}  // namespace sluice
