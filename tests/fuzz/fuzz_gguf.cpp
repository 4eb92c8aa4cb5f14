// libFuzzer target for the GGUF reader: any byte string either parses, with every metadata
// value and every tensor's byte range readable, or is rejected with sluice::error. Anything
// else (a crash, a sanitizer report, another exception type, an allocation the input's size
// cannot justify) is a bug.
#include "core/error.h"
#include "io/gguf.h"
#include "io/inspect.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        auto m = sluice::open_gguf_memory(bytes, "fuzz");
        size_t sink = 0;
        for (const auto& [key, v] : m->meta().all()) {
            sink += sluice::meta_value_text(v).size();
            sink += sluice::meta_value_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
        }
        for (const auto& t : m->tensors()) {
            // First and last byte of the range the reader vouched for, and the row arithmetic
            // model code will do with it.
            const auto* p = reinterpret_cast<const uint8_t*>(t.data);
            sink += p[0] + p[t.nbytes - 1] + t.shape_string().size();
            sink += static_cast<size_t>(t.row(t.n_rows() - 1) - t.data) + t.row_bytes();
        }
        volatile size_t keep = sink;
        (void)keep;
    } catch (const sluice::error&) {
    }
    return 0;
}
