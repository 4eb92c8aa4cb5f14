// libFuzzer target for a Hugging Face tokenizer.json (tokenizer::from_hf_dir): any text either
// becomes a tokenizer that encodes a few strings to ids in its range and decodes them, or is
// rejected with sluice::error. Anything else (a crash, a stack overflow on deep nesting, a
// sanitizer report, an allocation past -rss_limit_mb, another exception) is a bug. Black-box
// probing found two such inputs before this target existed: 200,000 nested brackets (a stack
// overflow) and a token id of 2^31 - 2 (tables of 2^31 entries).
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

// One directory for the process (from_hf_dir reads files): tokenizer.json is rewritten per input.
const std::filesystem::path& work_dir() {
    static const std::filesystem::path dir = [] {
        std::string t = (std::filesystem::temp_directory_path() / "sluice_fuzz_hf_tok_XXXXXX").string();
        if (!::mkdtemp(t.data())) std::abort();
        return std::filesystem::path(t);
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& dir = work_dir();
    {
        std::ofstream f(dir / "tokenizer.json", std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
        auto tok = sluice::tokenizer::from_hf_dir(dir);
        const int32_t n = tok->n_vocab();
        if (n < 1) std::abort();
        for (const char* s : {"hello world", "", "\xff\xfe", "12345 <|endoftext|>"}) {
            const auto ids = tok->encode(s, true, false);
            for (int32_t id : ids)
                if (id < 0 || id >= n) std::abort();
            (void)tok->decode(ids);   // a vocabulary without some byte tokens decodes lossily: allowed
        }
    } catch (const sluice::error&) {
    }
    return 0;
}
