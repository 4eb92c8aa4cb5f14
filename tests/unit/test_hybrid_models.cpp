// E1/E2 and the recurrent-state transaction for the hybrid Qwen MoEs (qwen3next, qwen35moe) on
// the golden fixtures' F32 GGUFs (llama.cpp's converter output, tests/golden/fixtures/*_mtp/):
// a verify window of 1..8 rows gives the bits of serial decoding; rolling a window back with
// kv_cache::truncate (or by a forward at an earlier pos0) and decoding on gives the bits of
// serial decoding; prefill chunks of any length and 1/2/3 threads give the same bits.
#include "core/error.h"
#include "io/model_file.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice {
namespace {

constexpr int k_ctx = 64, k_rows = 16;

struct opened {
    std::unique_ptr<model_file> f;
    std::unique_ptr<model> m;
    int n_vocab = 0;
};

opened open_fixture(const std::string& name) {
    const std::filesystem::path p =
        std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures" / name / "converted-F32.gguf";
    opened o;
    o.f = model_file::open(p);
    o.m = load_model(*o.f, {});
    o.n_vocab = o.m->hparams().n_vocab;
    return o;
}

std::vector<int32_t> tokens(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 101 + 11) % 380;
    return t;
}

// Logits [n, n_vocab] of every position, fed in chunks of `chunk` rows.
std::vector<float> run_chunks(model& m, const std::vector<int32_t>& ids, int chunk, int threads) {
    thread_pool pool(threads, {.pin = false});
    forward_scratch s = m.make_scratch(k_rows, pool);
    kv_cache kv(m.kv_shape_for(k_ctx));
    const size_t V = static_cast<size_t>(m.hparams().n_vocab);
    std::vector<float> out(ids.size() * V);
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(chunk)) {
        const size_t n = std::min(ids.size() - i, static_cast<size_t>(chunk));
        m.forward(std::span<const int32_t>(ids.data() + i, n), static_cast<int32_t>(i), kv, s, out.data() + i * V);
    }
    return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

class hybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(hybrid, loads_with_recurrent_layers_and_mtp_block) {
    opened o = open_fixture(GetParam());
    const model_hparams& hp = o.m->hparams();
    EXPECT_EQ(hp.n_layer, 4);        // block_count 5 minus the MTP layer
    EXPECT_EQ(hp.n_rec_layer, 3);    // 3 DeltaNet layers, 1 attention layer
    kv_cache kv(o.m->kv_shape_for(k_ctx));
    EXPECT_FALSE(kv.recurrent().empty());
}

TEST_P(hybrid, window_rows_match_single_row) {
    opened o = open_fixture(GetParam());
    const std::vector<int32_t> ids = tokens(5 + 8, 1);
    const std::vector<float> serial = run_chunks(*o.m, ids, 1, 2);
    const size_t V = static_cast<size_t>(o.n_vocab);
    thread_pool pool(2, {.pin = false});
    forward_scratch s = o.m->make_scratch(k_rows, pool);
    for (int T = 1; T <= 8; ++T) {
        kv_cache kv(o.m->kv_shape_for(k_ctx));
        std::vector<float> out(static_cast<size_t>(T) * V);
        for (int i = 0; i < 5; ++i) o.m->forward(std::span<const int32_t>(ids.data() + i, 1), i, kv, s, out.data());
        o.m->forward(std::span<const int32_t>(ids.data() + 5, static_cast<size_t>(T)), 5, kv, s, out.data());
        for (int r = 0; r < T; ++r)
            EXPECT_TRUE(same_bits(out.data() + static_cast<size_t>(r) * V, serial.data() + static_cast<size_t>(5 + r) * V, V))
                << "window of " << T << " rows, row " << r;
    }
}

TEST_P(hybrid, rolled_back_window_then_serial_equals_serial) {
    opened o = open_fixture(GetParam());
    const std::vector<int32_t> ids = tokens(6 + 10, 2);
    const std::vector<float> serial = run_chunks(*o.m, ids, 1, 1);
    const size_t V = static_cast<size_t>(o.n_vocab);
    thread_pool pool(1, {.pin = false});
    forward_scratch s = o.m->make_scratch(k_rows, pool);
    std::vector<float> out(k_rows * V);
    for (int keep = 0; keep <= 8; ++keep) {
        for (bool by_truncate : {true, false}) {
            kv_cache kv(o.m->kv_shape_for(k_ctx));
            o.m->forward(std::span<const int32_t>(ids.data(), 6), 0, kv, s, out.data());
            // A verify window: the first `keep` rows are the true tokens, the rest wrong drafts.
            std::vector<int32_t> win(ids.begin() + 6, ids.begin() + 14);
            for (int r = keep; r < 8; ++r) win[static_cast<size_t>(r)] = (win[static_cast<size_t>(r)] + 7) % 380;
            o.m->forward(win, 6, kv, s, out.data());
            if (by_truncate) kv.truncate(6 + keep);   // else the next forward's pos0 rolls back
            for (int p = 6 + keep; p < 16; ++p) {
                o.m->forward(std::span<const int32_t>(ids.data() + p, 1), p, kv, s, out.data());
                ASSERT_TRUE(same_bits(out.data(), serial.data() + static_cast<size_t>(p) * V, V))
                    << "kept " << keep << " rows (" << (by_truncate ? "truncate" : "pos0") << "), position " << p;
            }
        }
    }
}

TEST_P(hybrid, prefill_chunks_and_threads_give_the_same_bits) {
    opened o = open_fixture(GetParam());
    const std::vector<int32_t> ids = tokens(40, 3);
    const std::vector<float> ref = run_chunks(*o.m, ids, 1, 1);
    for (int chunk : {3, 7, 16})
        for (int threads : {1, 2, 3}) {
            const std::vector<float> got = run_chunks(*o.m, ids, chunk, threads);
            EXPECT_TRUE(same_bits(got.data(), ref.data(), ref.size())) << "chunk " << chunk << ", " << threads << " threads";
        }
}

TEST_P(hybrid, rollback_past_the_last_window_is_refused) {
    opened o = open_fixture(GetParam());
    const std::vector<int32_t> ids = tokens(30, 4);
    thread_pool pool(1, {.pin = false});
    forward_scratch s = o.m->make_scratch(k_rows, pool);
    kv_cache kv(o.m->kv_shape_for(k_ctx));
    std::vector<float> out(k_rows * static_cast<size_t>(o.n_vocab));
    o.m->forward(std::span<const int32_t>(ids.data(), 16), 0, kv, s, out.data());
    o.m->forward(std::span<const int32_t>(ids.data() + 16, 4), 16, kv, s, out.data());
    EXPECT_FALSE(kv.can_truncate(10));
    EXPECT_THROW(kv.truncate(10), error);
    EXPECT_EQ(kv.n_pos(), 20);   // unchanged by the refused rollback
    EXPECT_THROW(o.m->forward(std::span<const int32_t>(ids.data() + 10, 1), 10, kv, s, out.data()), error);
    EXPECT_TRUE(kv.can_truncate(17));
    kv.truncate(0);   // always possible: the empty state
    EXPECT_EQ(kv.recurrent().length(), 0);
}

TEST_P(hybrid, batched_segments_give_the_bits_of_single_sequences) {
    opened o = open_fixture(GetParam());
    const std::vector<int32_t> a = tokens(12, 5), b = tokens(9, 6);
    const std::vector<float> ra = run_chunks(*o.m, a, 1, 2), rb = run_chunks(*o.m, b, 1, 2);
    const size_t V = static_cast<size_t>(o.n_vocab);
    thread_pool pool(2, {.pin = false});
    forward_scratch s = o.m->make_scratch(k_rows, pool);
    kv_cache ka(o.m->kv_shape_for(k_ctx)), kb(o.m->kv_shape_for(k_ctx));
    std::vector<float> out(k_rows * V);
    // Prefill a's first 8 and b's first 4 rows in one batch, then one row of each per step.
    batch_segment seg[2];
    seg[0] = {std::span<const int32_t>(a.data(), 8), 0, &ka, 8};
    seg[1] = {std::span<const int32_t>(b.data(), 4), 0, &kb, 4};
    o.m->forward_batch(seg, s, out.data());
    for (int r = 0; r < 8; ++r) EXPECT_TRUE(same_bits(out.data() + size_t(r) * V, ra.data() + size_t(r) * V, V)) << "a row " << r;
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(same_bits(out.data() + size_t(8 + r) * V, rb.data() + size_t(r) * V, V)) << "b row " << r;
    for (int i = 0; i < 4; ++i) {
        seg[0] = {std::span<const int32_t>(a.data() + 8 + i, 1), 8 + i, &ka, 1};
        seg[1] = {std::span<const int32_t>(b.data() + 4 + i, 1), 4 + i, &kb, 1};
        o.m->forward_batch(seg, s, out.data());
        EXPECT_TRUE(same_bits(out.data(), ra.data() + size_t(8 + i) * V, V)) << "a position " << 8 + i;
        EXPECT_TRUE(same_bits(out.data() + V, rb.data() + size_t(4 + i) * V, V)) << "b position " << 4 + i;
    }
}

INSTANTIATE_TEST_SUITE_P(fixtures, hybrid, ::testing::Values("qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"),
                         [](const auto& info) { return std::string(info.param).substr(0, 9); });

}  // namespace
}  // namespace sluice
