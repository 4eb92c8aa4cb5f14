#include "io/side_file.h"

#include "core/error.h"

#include <fstream>
#include <system_error>

namespace sluice {

std::string read_side_file(const std::filesystem::path& p, std::string_view what, size_t max_bytes) {
    std::error_code ec;
    const auto st = std::filesystem::status(p, ec);
    if (st.type() == std::filesystem::file_type::not_found) fail("{}: '{}' does not exist", what, p.string());
    if (ec) fail("{}: '{}' cannot be read: {}", what, p.string(), ec.message());
    if (!std::filesystem::is_regular_file(st)) fail("{}: '{}' is not a regular file", what, p.string());
    const uintmax_t size = std::filesystem::file_size(p, ec);
    if (ec) fail("{}: '{}' cannot be read: {}", what, p.string(), ec.message());
    if (size > max_bytes) fail("{}: '{}' is {} bytes, more than the {} a side file may hold", what, p.string(), size, max_bytes);
    std::ifstream f(p, std::ios::binary);
    if (!f) fail("{}: cannot open '{}'", what, p.string());
    std::string text(static_cast<size_t>(size), '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    // A file that shrank since it was measured gives what it now holds.
    text.resize(static_cast<size_t>(f.gcount()));
    return text;
}

}  // namespace sluice
