#include "placement/model_identity.h"

#include "core/error.h"
#include "io/model_file.h"

#include <cstdio>
#include <system_error>
#include <unistd.h>

namespace sluice::placement {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

model_identity identify_model(const std::filesystem::path& path, const model_file& f) {
    model_identity id;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        for (const auto& e : std::filesystem::directory_iterator(path, ec))
            if (e.is_regular_file(ec)) id.file_bytes += e.file_size(ec);
    } else {
        id.file_bytes = std::filesystem::file_size(path, ec);
        if (ec) fail("model identity: {}: cannot read its size ({})", path.string(), ec.message());
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (const tensor_view& t : f.tensors()) {
        h = fnv1a64(t.name.data(), t.name.size() + 1, h);   // the terminating NUL separates names
        const uint32_t type = static_cast<uint32_t>(t.type);
        const int32_t nd = t.n_dims;
        h = fnv1a64(&type, sizeof type, h);
        h = fnv1a64(&nd, sizeof nd, h);
        h = fnv1a64(t.ne.data(), sizeof(int64_t) * t.ne.size(), h);
        h = fnv1a64(&t.nbytes, sizeof t.nbytes, h);
    }
    id.table_hash = h;
    return id;
}

std::filesystem::path sibling_path(const std::filesystem::path& model, const std::string& suffix) {
    std::string s = model.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s + "." + suffix;
}

void write_file_atomically(const std::filesystem::path& path, std::initializer_list<std::span<const std::byte>> pieces) {
    // The rename below replaces whatever the path names: a device (/dev/null, run as root), a
    // FIFO or a directory must be refused, not turned into a file. A symlink to a regular file (or
    // a dangling one) is replaced by the new file, as before.
    std::error_code st_ec;
    const auto st = std::filesystem::status(path, st_ec);
    if (!st_ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
        fail("{}: exists and is not a regular file; not replacing it", path.string());
    const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail("{}: cannot write the file", tmp.string());
    bool ok = true;
    size_t n = 0;
    for (std::span<const std::byte> p : pieces) {
        ok = ok && std::fwrite(p.data(), 1, p.size(), f) == p.size();
        n += p.size();
    }
    ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    if (std::fclose(f) != 0 || !ok) {
        std::remove(tmp.c_str());
        fail("{}: writing {} bytes failed", tmp.string(), n);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        fail("{}: cannot rename the new file into place ({})", path.string(), ec.message());
    }
}

}  // namespace sluice::placement
