// libFuzzer target for the safetensors header parser: any byte string either parses into
// entries whose byte ranges lie inside the input and do not overlap, or is rejected with
// sluice::error. Anything else (a crash, a sanitizer report, another exception) is a bug.
#include "core/error.h"
#include "io/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
    try {
        auto h = sluice::parse_safetensors(file, "fuzz");
        uint64_t prev_end = h.data_start;
        for (const auto& t : h.tensors) {
            // The parser's promises, checked independently of how it keeps them.
            if (t.offset < h.data_start || t.offset + t.nbytes > size) std::abort();
            if (t.nbytes != 0 && t.offset < prev_end) std::abort();
            if (t.nbytes != 0) prev_end = t.offset + t.nbytes;
            volatile std::byte sink{};
            if (t.nbytes) sink = file[t.offset + t.nbytes - 1];  // touch the last byte
            (void)sink;
        }
    } catch (const sluice::error&) {
    }
    return 0;
}
