// src/placement/routing_profile.h: a profile round-trips through its file; every malformed file
// (bad magic, version, counts, sizes, checksum, truncation) and a profile of another model are
// rejected with a clear error; calibration through the real forward counts k_used choices per
// token in every MoE layer and is the same on a second run.
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "placement/model_identity.h"
#include "placement/progress.h"
#include "placement/routing_profile.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace sluice::placement {
namespace {

routing_profile small_profile() {
    routing_profile p;
    p.model = {123456, 0xabcdef0123456789ull};
    p.n_layer = 2;
    p.n_expert = 4;
    p.k_used = 2;
    p.n_tokens = 5;
    p.counts = {5, 3, 2, 0,   // layer 0: 10 = 5 tokens x 2
                0, 0, 0, 0};  // layer 1: a dense layer
    return p;
}

std::string error_of(std::span<const std::byte> b) {
    try {
        parse_profile(b, "p");
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

void set64(std::vector<std::byte>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
void set32(std::vector<std::byte>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void reseal(std::vector<std::byte>& b) { set64(b, b.size() - 8, fnv1a64(b.data(), b.size() - 8)); }

std::filesystem::path temp_dir() {
    auto d = std::filesystem::temp_directory_path() / ("sluice_placement_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
}

TEST(placement_profile, profile_round_trips_through_its_file) {
    const routing_profile p = small_profile();
    const auto path = temp_dir() / "m.profile.bin";
    write_profile(path, p);
    const routing_profile q = read_profile(path);
    EXPECT_EQ(q.model, p.model);
    EXPECT_EQ(q.n_layer, 2u);
    EXPECT_EQ(q.n_expert, 4u);
    EXPECT_EQ(q.k_used, 2u);
    EXPECT_EQ(q.n_tokens, 5u);
    EXPECT_EQ(q.counts, p.counts);
    EXPECT_EQ(q.count(0, 1), 3u);
    std::filesystem::remove_all(path.parent_path());   // the test's own folder (ctest runs each test alone)
}

// `sluice profile -o PATH` writes a new file and renames it over PATH: a device or FIFO there was
// replaced by a regular file (run as root, -o /dev/full did that to /dev/full). Refused now, and
// the node is left as it was.
TEST(placement_profile, writing_over_a_fifo_or_directory_is_refused) {
    const auto dir = temp_dir();
    const auto fifo = dir / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::filesystem::create_directories(dir / "sub");
    for (const auto& path : {fifo, dir / "sub"}) {
        try {
            write_profile(path, small_profile());
            ADD_FAILURE() << path << ": written";
        } catch (const sluice::error& e) {
            EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(std::filesystem::is_fifo(fifo));
    std::filesystem::remove_all(dir);
}

TEST(placement_profile, malformed_profile_is_rejected) {
    const std::vector<std::byte> good = serialize_profile(small_profile());
    EXPECT_EQ(error_of(good), "");
    {
        auto b = good;
        b[0] = std::byte{'X'};
        EXPECT_NE(error_of(b).find("bad magic"), std::string::npos);
    }
    {
        auto b = good;
        set32(b, 8, 2);
        reseal(b);
        EXPECT_NE(error_of(b).find("version 2"), std::string::npos);
    }
    {
        auto b = good;
        set32(b, 12, 0);
        reseal(b);
        EXPECT_NE(error_of(b).find("n_layer 0"), std::string::npos);
    }
    {
        auto b = good;
        set32(b, 16, 70000);
        reseal(b);
        EXPECT_NE(error_of(b).find("n_expert 70000"), std::string::npos);
    }
    {
        auto b = good;
        set32(b, 20, 5);
        reseal(b);
        EXPECT_NE(error_of(b).find("k_used 5"), std::string::npos);
    }
    {
        auto b = good;
        set32(b, 12, 3);   // 3 layers claimed, 2 present
        reseal(b);
        EXPECT_NE(error_of(b).find("expected"), std::string::npos);
    }
    {
        auto b = good;
        b.resize(b.size() - 9);   // truncated
        EXPECT_NE(error_of(b).find("bytes"), std::string::npos);
    }
    {
        auto b = good;
        b[50] ^= std::byte{1};   // a flipped bit in the counts
        EXPECT_NE(error_of(b).find("checksum"), std::string::npos);
    }
    {
        auto b = good;
        set64(b, 48, 6);   // a count above n_tokens
        reseal(b);
        EXPECT_NE(error_of(b).find("exceeds"), std::string::npos);
    }
    {
        auto b = good;
        set64(b, 48, 4);   // layer sums to 9, not 10
        reseal(b);
        EXPECT_NE(error_of(b).find("sum to 9"), std::string::npos);
    }
    EXPECT_NE(error_of({}).find("at least"), std::string::npos);
}

TEST(placement_profile, profile_of_another_model_is_rejected) {
    const auto dir = temp_dir();
    const auto model = dir / "model.gguf";
    const routing_profile p = small_profile();
    write_profile(default_profile_path(model), p);
    EXPECT_EQ(default_profile_path(model), dir / "model.gguf.profile.bin");
    const auto same = load_profile_for(model, p.model);
    ASSERT_TRUE(same.has_value());
    EXPECT_EQ(same->counts, p.counts);
    try {
        load_profile_for(model, model_identity{123457, p.model.table_hash});
        FAIL() << "a mismatching profile was accepted";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("sluice profile"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(load_profile_for(dir / "other.gguf", p.model).has_value());
    std::filesystem::remove_all(dir);
}

TEST(placement_profile, calibration_counts_k_choices_per_token_in_every_moe_layer) {
    const std::filesystem::path path = std::filesystem::path(SLUICE_SOURCE_DIR) / "models/sluice-moe-25m-Q8_0.gguf";
    auto f = model_file::open(path);
    auto tok = tokenizer::for_model(*f, path);
    auto net = load_model(*f, load_options{256});
    const model_hparams& hp = net->hparams();
    ASSERT_GT(hp.n_expert, 0);
    const model_identity id = identify_model(path, *f);
    const std::string text =
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
        "The quick brown fox jumps over the lazy dog. Mixture-of-experts models route each token to a few experts.";
    calibration_options o;
    o.n_threads = 2;
    o.n_ctx = 40;   // several passes: the cache is cleared between them
    progress prog(nullptr, progress_style::silent);
    const routing_profile p = calibrate_profile(*net, id, *tok, text, o, &prog);
    EXPECT_EQ(p.model, id);
    EXPECT_EQ(p.n_layer, static_cast<uint32_t>(hp.n_layer));
    EXPECT_EQ(p.n_expert, static_cast<uint32_t>(hp.n_expert));
    EXPECT_EQ(p.n_tokens, tok->encode(text, false, true).size());
    EXPECT_GT(p.n_tokens, 40u);
    for (uint32_t l = 0; l < p.n_layer; ++l) {
        const auto* c = p.counts.data() + l * p.n_expert;
        EXPECT_EQ(std::accumulate(c, c + p.n_expert, uint64_t{0}), p.n_tokens * p.k_used) << "layer " << l;
    }
    // The file it makes parses back, and a second calibration gives the same counts.
    const std::vector<std::byte> bytes = serialize_profile(p);
    EXPECT_EQ(parse_profile(bytes, "p").counts, p.counts);
    EXPECT_EQ(calibrate_profile(*net, id, *tok, text, o, nullptr).counts, p.counts);
    // The identity depends on the tensor table: another model has another one.
    const std::filesystem::path draft = std::filesystem::path(SLUICE_SOURCE_DIR) / "models/sluice-draft-5m-Q8_0.gguf";
    auto fd = model_file::open(draft);
    EXPECT_FALSE(identify_model(draft, *fd) == id);
}

TEST(placement_profile, the_routing_observer_never_changes_the_logits) {
    const std::filesystem::path path = std::filesystem::path(SLUICE_SOURCE_DIR) / "models/sluice-moe-25m-Q8_0.gguf";
    auto f = model_file::open(path);
    auto tok = tokenizer::for_model(*f, path);
    auto net = load_model(*f, load_options{64});
    const model_hparams& hp = net->hparams();
    const std::vector<token_id> ids = tok->encode("def fib(n): return n", false, true);
    thread_pool pool(2);
    std::vector<std::vector<float>> out;
    routing_recorder rec(hp.n_layer, hp.n_expert);
    for (int observed = 0; observed < 2; ++observed) {
        forward_scratch s = net->make_scratch(32, pool);
        if (observed) rec.attach(s);
        kv_cache kv(net->kv_shape_for(64));
        std::vector<float> logits(ids.size() * static_cast<size_t>(hp.n_vocab));
        net->forward(ids, 0, kv, s, logits.data());
        out.push_back(std::move(logits));
    }
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);
    EXPECT_EQ(std::accumulate(rec.counts().begin(), rec.counts().end(), uint64_t{0}),
              ids.size() * static_cast<uint64_t>(hp.n_expert_used) * static_cast<uint64_t>(hp.n_layer));
}

}  // namespace
}  // namespace sluice::placement
