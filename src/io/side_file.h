// The JSON files beside a model's weights (config.json, tokenizer.json, tokenizer_config.json,
// model.safetensors.index.json), read whole before they are parsed.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace sluice {

// The largest side file read: tokenizer.json is the big one (Gemma 3's is 33 MB).
inline constexpr size_t k_max_side_file_bytes = size_t{256} << 20;

// The bytes of p, which must be a regular file (after links: a tokenizer.json linked to
// /dev/zero was read until memory ran out) of at most max_bytes (a 1 GiB config.json took 2 GB
// of memory to read). Errors name `what` and the path.
std::string read_side_file(const std::filesystem::path& p, std::string_view what,
                           size_t max_bytes = k_max_side_file_bytes);

}  // namespace sluice
