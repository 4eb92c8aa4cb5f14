// Read-only memory of a whole file. By default a mapping: weights are never copied at load,
// tensor views point into the mapping, which lives as long as the model_file that owns it.
// file_access::read copies the file into anonymous memory advised for transparent huge pages
// instead (`--no-mmap`): a slower start and memory the kernel cannot drop under pressure, but
// the CPU kernels stream weights through 2 MiB pages rather than 4 KiB ones. Measured
// 2026-12-02 on the 2-core AMD EPYC, `sluice bench` tg32, 8-layer Qwen3-30B-A3B-shaped Q4_K_M
// file, three rounds interleaved: 53.8 / 58.3 / 57.8 tok/s against 50.5 / 51.4 / 48.2 mapped
// (llama.cpp, which copies Q4_K into its repacked buffer either way: 57.7 mapped, 56.3 with
// `--load-mode none`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>

namespace sluice {

enum class file_access : uint8_t {
    map,    // mmap the file (the default)
    read,   // copy it into anonymous memory with transparent huge pages (`--no-mmap`)
};

// A --no-mmap read as it goes (a start's progress: minutes for a large model): called with the
// file, the bytes read so far and its size, first with 0 and then after every piece.
using read_progress = std::function<void(const std::filesystem::path& file, uint64_t done, uint64_t total)>;

class mapped_file {
public:
    mapped_file() = default;
    // Maps `path` read-only. Throws sluice::error naming the path and the OS error.
    // An empty file maps to an empty span (mmap cannot map zero bytes).
    // file_access::read: the same bytes, read into memory (made read-only once filled).
    // progress (optional): file_access::read's pieces as they are read.
    explicit mapped_file(const std::filesystem::path& path, file_access access = file_access::map,
                         const read_progress* progress = nullptr);
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
