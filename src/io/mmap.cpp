#include "io/mmap.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace sluice {

namespace {

// The file's bytes in anonymous memory advised for transparent huge pages, read-only once
// filled. Reads in 64 MiB pieces; a short read (the file shrank) is an error, not zeros.
void* read_whole(int fd, size_t size, const std::filesystem::path& path, const read_progress* progress) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        const int e = errno;   // before anything below can change it
        fail("cannot allocate {} bytes to read '{}' into (--no-mmap): {}", with_commas(size), path.string(), std::strerror(e));
    }
    // Advice only: without THP support the copy still works, on 4 KiB pages.
    (void)::madvise(p, size, MADV_HUGEPAGE);
    constexpr size_t k_piece = size_t{64} << 20;
    size_t done = 0;
    if (progress && *progress) (*progress)(path, 0, size);
    while (done < size) {
        const ssize_t r = ::pread(fd, static_cast<char*>(p) + done, std::min(size - done, k_piece), static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            const int e = r < 0 ? errno : 0;
            ::munmap(p, size);   // first: building the message may throw
            fail("cannot read '{}' at byte {} of {}: {}", path.string(), with_commas(done), with_commas(size),
                 e != 0 ? std::strerror(e) : "the file ended early");
        }
        done += static_cast<size_t>(r);
        if (progress && *progress) (*progress)(path, done, size);
    }
    if (::mprotect(p, size, PROT_READ) != 0) {
        const int e = errno;
        ::munmap(p, size);
        fail("cannot make the copy of '{}' read-only: {}", path.string(), std::strerror(e));
    }
    return p;
}

}  // namespace

mapped_file::mapped_file(const std::filesystem::path& path, file_access access, const read_progress* progress)
    : path_(path) {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, before the check below can
    // refuse it; it changes nothing for a regular file.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail("cannot open '{}': {}", path.string(), std::strerror(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail("cannot stat '{}': {}", path.string(), std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("'{}' is not a regular file", path.string());
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0 && access == file_access::read) {
        try {
            data_ = static_cast<const std::byte*>(read_whole(fd, size_, path, progress));
        } catch (...) {
            ::close(fd);
            throw;
        }
    } else if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            fail("cannot map '{}' ({} bytes): {}", path.string(), with_commas(size_), std::strerror(e));
        }
        data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
}

mapped_file::~mapped_file() { release(); }

mapped_file::mapped_file(mapped_file&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

mapped_file& mapped_file::operator=(mapped_file&& o) noexcept {
    if (this != &o) {
        release();
        path_ = std::move(o.path_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

void mapped_file::release() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace sluice
