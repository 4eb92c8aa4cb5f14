// src/placement/expert_arena.h: every (layer, expert) repacked as one 64-byte-aligned blob in
// one page-aligned region; the CPU expert pool computing from the arena gives the bits it gives
// from the GGUF tensors (golden MoE fixtures and the shipped model); the cache file beside the
// model is reused when it matches and rebuilt when it is stale or truncated.
#include "core/thread_pool.h"
#include "io/model_file.h"
#include "models/model.h"
#include "moe/expert_pool.h"
#include "placement/expert_arena.h"
#include "placement/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice::placement {
namespace {

std::filesystem::path src(const std::string& rel) { return std::filesystem::path(SLUICE_SOURCE_DIR) / rel; }

std::filesystem::path temp_dir() {
    auto d = std::filesystem::temp_directory_path() / ("sluice_arena_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
}

// For every MoE layer: random windows of rows through the pool from the tensors and from the
// arena, compared bit for bit.
void expect_arena_bits_equal_tensor_bits(const std::filesystem::path& path) {
    SCOPED_TRACE(path.string());
    auto f = model_file::open(path);
    auto net = load_model(*f, load_options{64});
    const model_hparams& hp = net->hparams();
    ASSERT_GT(hp.n_expert, 0);
    arena_options o;
    o.use_cache_file = false;
    auto a = expert_arena::open(path, *f, hp.n_layer, hp.n_expert, o);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->region()) % 4096, 0u);
    EXPECT_FALSE(a->from_cache());
    thread_pool pool(2);
    const int max_rows = 16;
    moe::expert_scratch s = moe::make_expert_scratch(max_rows, hp.n_expert_used, hp.n_expert, hp.n_embd, hp.n_ff_exp);
    std::mt19937 g(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    int layers = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        const blob_layout& l = a->layout(il);
        if (!l.present) continue;
        ++layers;
        EXPECT_EQ(l.blob_stride % 64, 0u);
        EXPECT_EQ(l.up_offset % 64, 0u);
        EXPECT_EQ(l.down_offset % 64, 0u);
        EXPECT_EQ(l.layer_offset % 4096, 0u);
        const moe::expert_bank from_arena = a->bank(il);
        moe::expert_bank from_file = from_arena;
        from_file.blobs = nullptr;
        // Each blob holds the expert's three slices, byte for byte.
        for (int e = 0; e < hp.n_expert; e += std::max(1, hp.n_expert / 5)) {
            const std::byte* b = a->blob(il, e);
            EXPECT_EQ(std::memcmp(b + l.gate_offset, from_file.gate->data + e * l.gate_bytes, l.gate_bytes), 0);
            EXPECT_EQ(std::memcmp(b + l.up_offset, from_file.up->data + e * l.up_bytes, l.up_bytes), 0);
            EXPECT_EQ(std::memcmp(b + l.down_offset, from_file.down->data + e * l.down_bytes, l.down_bytes), 0);
        }
        for (int rows : {1, 5, 16}) {
            const size_t K = static_cast<size_t>(hp.n_expert_used), E = static_cast<size_t>(hp.n_embd);
            std::vector<float> x(rows * E), w(rows * K), y1(rows * E), y2(rows * E);
            std::vector<int32_t> ids(rows * K);
            for (auto& v : x) v = d(g);
            for (int r = 0; r < rows; ++r) {
                std::vector<int32_t> perm(static_cast<size_t>(hp.n_expert));
                std::iota(perm.begin(), perm.end(), 0);
                std::shuffle(perm.begin(), perm.end(), g);
                for (size_t k = 0; k < K; ++k) {
                    ids[r * K + k] = perm[k];
                    w[r * K + k] = 1.0f / static_cast<float>(k + 1);
                }
            }
            moe::run_experts(pool, from_file, x.data(), ids.data(), w.data(), rows, s, y1.data());
            moe::run_experts(pool, from_arena, x.data(), ids.data(), w.data(), rows, s, y2.data());
            EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0) << "layer " << il << ", " << rows << " rows";
        }
    }
    EXPECT_GT(layers, 0);
}

TEST(placement_arena, arena_bits_equal_tensor_bits_on_golden_moe_fixtures) {
    for (const char* m : {"tests/golden/fixtures/qwen3moe_e8_k2/model-Q8_0.gguf", "tests/golden/fixtures/qwen3moe_e8_k2/model-Q4_1.gguf",
                          "tests/golden/fixtures/qwen3moe_e8_k2/model-F32.gguf",
                          "tests/golden/fixtures/qwen3moe_e64_k8/model-Q8_0.gguf",
                          "tests/golden/fixtures/qwen2moe_shexp/model-Q8_0.gguf"})
        if (std::filesystem::exists(src(m))) expect_arena_bits_equal_tensor_bits(src(m));
        else ADD_FAILURE() << "missing fixture " << m;
}

TEST(placement_arena, arena_bits_equal_tensor_bits_on_the_shipped_model) {
    expect_arena_bits_equal_tensor_bits(src("models/sluice-moe-25m-Q8_0.gguf"));
}

TEST(placement_arena, cache_file_is_reused_when_it_matches_and_rebuilt_when_stale_or_truncated) {
    const auto model = src("tests/golden/fixtures/qwen3moe_e8_k2/model-Q8_0.gguf");
    auto f = model_file::open(model);
    auto net = load_model(*f, load_options{64});
    const model_hparams& hp = net->hparams();
    arena_options o;
    o.cache_path = temp_dir() / "model.experts.bin";
    std::filesystem::remove(o.cache_path);
    std::vector<std::byte> first;
    {
        progress prog(nullptr, progress_style::silent);
        auto a = expert_arena::open(model, *f, hp.n_layer, hp.n_expert, o, &prog);
        EXPECT_FALSE(a->from_cache());
        EXPECT_EQ(prog.done(), a->region_bytes());
        EXPECT_EQ(a->note(), "");
        ASSERT_TRUE(std::filesystem::exists(o.cache_path));
        EXPECT_EQ(std::filesystem::file_size(o.cache_path), expert_arena::header_bytes(hp.n_layer) + a->region_bytes());
        first.assign(a->region(), a->region() + a->region_bytes());
    }
    {
        auto a = expert_arena::open(model, *f, hp.n_layer, hp.n_expert, o);
        EXPECT_TRUE(a->from_cache());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(a->region()) % 4096, 0u);
        ASSERT_EQ(a->region_bytes(), first.size());
        EXPECT_EQ(std::memcmp(a->region(), first.data(), first.size()), 0);
    }
    // Truncated: rebuilt, and the rebuilt file is whole again.
    std::filesystem::resize_file(o.cache_path, std::filesystem::file_size(o.cache_path) - 100);
    {
        auto a = expert_arena::open(model, *f, hp.n_layer, hp.n_expert, o);
        EXPECT_FALSE(a->from_cache());
        EXPECT_NE(a->note().find("rebuilt"), std::string::npos) << a->note();
        EXPECT_EQ(std::memcmp(a->region(), first.data(), first.size()), 0);
    }
    EXPECT_TRUE(expert_arena::open(model, *f, hp.n_layer, hp.n_expert, o)->from_cache());
    // Stale: the header names another model (one byte of its identity changed).
    {
        std::fstream io(o.cache_path, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(24);   // the model's file size
        io.put('\x7f');
    }
    {
        auto a = expert_arena::open(model, *f, hp.n_layer, hp.n_expert, o);
        EXPECT_FALSE(a->from_cache());
        EXPECT_NE(a->note().find("another model"), std::string::npos) << a->note();
    }
    // The cache of one model is never taken for another's.
    const auto other = src("tests/golden/fixtures/qwen3moe_e8_k2/model-Q4_1.gguf");
    auto f2 = model_file::open(other);
    auto a2 = expert_arena::open(other, *f2, hp.n_layer, hp.n_expert, o);
    EXPECT_FALSE(a2->from_cache());
    std::filesystem::remove_all(o.cache_path.parent_path());
}

TEST(placement_arena, model_without_experts_is_rejected) {
    const auto model = src("models/sluice-draft-5m-Q8_0.gguf");
    auto f = model_file::open(model);
    arena_options o;
    o.use_cache_file = false;
    EXPECT_THROW(expert_arena::open(model, *f, 4, 8, o), std::exception);
}

}  // namespace
}  // namespace sluice::placement
