// The malformed-GGUF corpus (tools/make_malformed_gguf.py): every file breaks one rule of the
// format and must be rejected with a sluice::error that names the problem; the valid files in
// the same folder must open with the tensor count the manifest gives.
#include "core/error.h"
#include "io/gguf.h"
#include "io/mmap.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace sluice {
namespace {

const std::filesystem::path k_dir = std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/data/malformed_gguf";

nlohmann::json load_manifest() {
    std::ifstream in(k_dir / "manifest.json");
    if (!in) throw std::runtime_error("missing " + (k_dir / "manifest.json").string());
    return nlohmann::json::parse(in);
}

TEST(gguf_malformed, malformed_gguf_is_rejected) {
    const auto manifest = load_manifest();
    ASSERT_GE(manifest["rejected"].size(), 40u);
    for (const auto& [file, expect] : manifest["rejected"].items()) {
        SCOPED_TRACE(file);
        const std::string want = expect.get<std::string>();
        try {
            auto m = open_gguf(k_dir / file);
            ADD_FAILURE() << file << " opened, expected an error containing: " << want;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
                << file << ": got \"" << e.what() << "\", expected it to contain \"" << want << "\"";
            EXPECT_EQ(std::string(e.what()).rfind("gguf: ", 0), 0u) << e.what();
        }
    }
}

// The in-memory entry point (the fuzzer's) rejects the same single files with the same
// words; split sets are only followed from files, so they are left out here.
TEST(gguf_malformed, memory_parser_rejects_what_the_file_parser_rejects) {
    const auto manifest = load_manifest();
    for (const auto& [file, expect] : manifest["rejected"].items()) {
        if (file.rfind("split_", 0) == 0) continue;
        SCOPED_TRACE(file);
        mapped_file map(k_dir / file);
        EXPECT_THROW(
            {
                try {
                    open_gguf_memory(map.bytes(), file);
                } catch (const error& e) {
                    EXPECT_NE(std::string(e.what()).find(expect.get<std::string>()), std::string::npos) << e.what();
                    throw;
                }
            },
            error);
    }
}

TEST(gguf_malformed, valid_corpus_files_open) {
    const auto manifest = load_manifest();
    ASSERT_GE(manifest["valid"].size(), 3u);
    for (const auto& [file, count] : manifest["valid"].items()) {
        SCOPED_TRACE(file);
        auto m = open_gguf(k_dir / file);
        EXPECT_EQ(m->tensors().size(), count.get<size_t>());
        EXPECT_EQ(m->architecture(), "llama");
        for (const auto& t : m->tensors()) {
            ASSERT_NE(t.data, nullptr);
            EXPECT_EQ(t.nbytes, bytes_for(t.type, static_cast<uint64_t>(t.n_elems())).value());
        }
    }
}

}  // namespace
}  // namespace sluice
