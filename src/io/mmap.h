// Read-only memory mapping of a whole file. Weights are never copied at load: tensor views
// point into the mapping, which lives as long as the model_file that owns it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace sluice {

class mapped_file {
public:
    mapped_file() = default;
    // Maps `path` read-only. Throws sluice::error naming the path and the OS error.
    // An empty file maps to an empty span (mmap cannot map zero bytes).
    explicit mapped_file(const std::filesystem::path& path);
    ~mapped_file();
    mapped_file(mapped_file&& o) noexcept;
    mapped_file& operator=(mapped_file&& o) noexcept;
    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;

    std::span<const std::byte> bytes() const { return {data_, size_}; }
    const std::filesystem::path& path() const { return path_; }

private:
    void release() noexcept;
    std::filesystem::path path_;
    const std::byte* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace sluice
