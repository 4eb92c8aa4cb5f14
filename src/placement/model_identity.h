// What ties a file written beside a model (its routing profile, its repacked experts) to that
// model: the model's size on disk and a hash of its tensor table. A file whose identity differs
// belongs to another model (or an older version of this one) and is never used.
#pragma once

#include <cstdint>
#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>

namespace sluice {
class model_file;
}

namespace sluice::placement {

struct model_identity {
    uint64_t file_bytes = 0;   // the GGUF file's size, or the sum of a directory's regular files
    uint64_t table_hash = 0;   // FNV-1a 64 over every tensor's name, type, shape and byte count, in order
    bool operator==(const model_identity&) const = default;
};

model_identity identify_model(const std::filesystem::path& path, const model_file& f);

// "<model>.<suffix>" beside the model (a directory's trailing separator dropped first):
// sibling_path("m.gguf", "profile.bin") = "m.gguf.profile.bin".
std::filesystem::path sibling_path(const std::filesystem::path& model, const std::string& suffix);

// FNV-1a 64 of bytes, continuing from h (checksums of the files written here).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);

// Writes the pieces, in order, to `path` through a temporary file renamed over it, so a reader
// sees the old file or the whole new one, never a torn one. Throws naming the path on failure.
void write_file_atomically(const std::filesystem::path& path, std::initializer_list<std::span<const std::byte>> pieces);

}  // namespace sluice::placement
