#include "io/model_file.h"

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace sluice {

std::unique_ptr<model_file> model_file::open(const std::filesystem::path& path, file_access access,
                                             const read_progress* progress) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st)) fail("model: '{}' does not exist", path.string());
    if (std::filesystem::is_directory(st)) return open_hf_directory(path, access, progress);
    return open_gguf(path, access, progress);
}

const tensor_view* model_file::find(std::string_view name) const {
    for (const auto& t : tensors())
        if (t.name == name) return &t;
    return nullptr;
}

const tensor_view& model_file::require(std::string_view name) const {
    const tensor_view* t = find(name);
    if (!t) fail("model: missing tensor '{}'", name);
    return *t;
}

}  // namespace sluice
