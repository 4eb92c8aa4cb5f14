// One opened model: a GGUF file (split files included) or a Hugging Face directory
// (config.json + *.safetensors + tokenizer.json), seen through the same interface: metadata
// under llama.cpp's GGUF keys and tensors under llama.cpp's GGUF names, every tensor validated
// (type known, shape product and byte range checked against the mapping) before it is exposed.
#pragma once

#include "core/tensor.h"
#include "io/metadata.h"
#include "io/mmap.h"

#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace sluice {

class model_file {
public:
    virtual ~model_file() = default;

    // Opens a .gguf (the first part of a split, or any part), or a directory with config.json.
    // Throws sluice::error with the field, the value and what was expected on bad input.
    // access: mapped (the default) or read into memory (io/mmap.h, `--no-mmap`; progress, when
    // given, hears of every file's pieces as they are read).
    static std::unique_ptr<model_file> open(const std::filesystem::path& path, file_access access = file_access::map,
                                            const read_progress* progress = nullptr);

    virtual const metadata& meta() const = 0;
    virtual std::span<const tensor_view> tensors() const = 0;
    virtual std::string_view format() const = 0;  // "gguf" or "safetensors"

    // nullptr when absent.
    const tensor_view* find(std::string_view name) const;
    // Throws "model: missing tensor 'blk.3.attn_q.weight'".
    const tensor_view& require(std::string_view name) const;
    std::string architecture() const { return meta().require_string("general.architecture"); }
};

}  // namespace sluice
