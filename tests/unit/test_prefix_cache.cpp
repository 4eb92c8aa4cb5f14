// The prefix cache (src/kv/prefix_cache.h) and E5: restoring a checkpoint's rows and
// prefilling the rest writes the bits a fresh prefill writes, and a follow-up conversation turn
// served from the cache gives the token_sha the same turn served fresh gives.
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "models/model.h"
#include "sluice/serving.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <vector>

namespace sluice {
namespace {

std::filesystem::path fixture(const std::string& name) {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "golden" / "fixtures" / name / "model-Q8_0.gguf";
}

kv_shape small_shape(int n_ctx) {
    kv_shape s;
    s.n_layer = 2;
    s.n_ctx = n_ctx;
    s.n_kv_head = 2;
    s.head_dim = 4;
    return s;
}

// small_shape's rows beside a recurrent state of `layers` layers of conv + ssm floats (one
// checkpointed row: these tests roll back no windows).
kv_shape hybrid_shape(int n_ctx, int layers, int conv, int ssm) {
    kv_shape s = small_shape(n_ctx);
    s.rec.n_layer = layers;
    s.rec.conv_floats = conv;
    s.rec.ssm_floats = ssm;
    s.rec.n_ckpt = 1;
    return s;
}

// A cache whose row p of layer il holds the value f(token at p, p, il) in every float.
void fill(kv_cache& kv, const std::vector<int32_t>& toks) {
    const int64_t rf = kv.row_floats();
    for (int il = 0; il < kv.shape().n_layer; ++il)
        for (size_t p = 0; p < toks.size(); ++p)
            for (int64_t j = 0; j < rf; ++j) {
                kv.k(il)[int64_t(p) * rf + j] = float(toks[p] * 1000 + int(p) * 10 + il);
                kv.v(il)[int64_t(p) * rf + j] = -float(toks[p] * 1000 + int(p) * 10 + il);
            }
    kv.set_n_pos(int32_t(toks.size()));
}

bool rows_equal(const kv_cache& a, const kv_cache& b, int32_t n) {
    const size_t bytes = size_t(n) * size_t(a.row_floats()) * sizeof(float);
    for (int il = 0; il < a.shape().n_layer; ++il)
        if (std::memcmp(a.k(il), b.k(il), bytes) != 0 || std::memcmp(a.v(il), b.v(il), bytes) != 0) return false;
    return true;
}

// The recurrent state's rollback: the checkpoint slots a window writes restore any of its rows;
// with host_slots false (a model that keeps the state elsewhere) only the bookkeeping moves.
TEST(recurrent_state, windows_roll_back_through_their_slots_or_their_bookkeeping) {
    recurrent_shape sh{2, 3, 5, 16};   // 2 layers of 3 + 5 floats, up to 16 checkpointed rows
    recurrent_state r(sh);
    // A window of 4 rows at 0: each row checkpoints the state it starts from, then writes its
    // position into every float.
    r.begin_window(0, 4);
    for (int32_t pos = 0; pos < 4; ++pos)
        for (int l = 0; l < 2; ++l) {
            r.checkpoint(l, pos);
            std::fill(r.conv(l), r.conv(l) + 8, static_cast<float>(pos + 1));
        }
    r.end_window(4);
    EXPECT_TRUE(r.can_rewind(2) && r.can_rewind(0) && !r.can_rewind(5));
    r.rewind(2);   // the state after rows 0 and 1
    EXPECT_EQ(r.length(), 2);
    EXPECT_EQ(r.live()[0], 2.0f);
    EXPECT_EQ(r.live()[15], 2.0f);
    EXPECT_FALSE(r.can_rewind(3));   // slots past 2 describe a future that no longer exists
    // Bookkeeping only: the same rules, live() untouched by a rollback.
    r.begin_window(2, 3, /*host_slots=*/false);
    std::fill(r.conv(0), r.conv(0) + 16, 9.0f);
    r.end_window(5);
    EXPECT_TRUE(r.can_rewind(3) && r.can_rewind(2) && !r.can_rewind(1));
    r.rewind(3);
    EXPECT_EQ(r.length(), 3);
    EXPECT_EQ(r.live()[0], 9.0f);
    EXPECT_THROW(r.rewind(1), std::exception);
}

// The release hook a model that keeps its own copy of a cache sets (the CUDA model's VRAM copy):
// it runs once when this address stops holding the rows, never for a copy.
TEST(kv_cache, release_hook_runs_once_when_the_rows_leave_the_address) {
    kv_shape sh;
    sh.n_layer = 1;
    sh.n_ctx = 4;
    sh.n_kv_head = 1;
    sh.head_dim = 2;
    int runs = 0;
    {
        kv_cache a(sh);
        a.on_release([&] { ++runs; });
        kv_cache copy(a);   // another cache: no hook
        EXPECT_EQ(runs, 0);
    }
    EXPECT_EQ(runs, 1);   // a destroyed; the copy ran nothing
    {
        kv_cache a(sh);
        a.on_release([&] { ++runs; });
        kv_cache b(std::move(a));   // a's rows left a's address
        EXPECT_EQ(runs, 2);
        b.on_release([&] { ++runs; });
        kv_cache c(sh);
        b = c;   // b's rows replaced
        EXPECT_EQ(runs, 3);
    }
    EXPECT_EQ(runs, 3);   // nothing set again after the assignment
    {
        kv_cache a(sh);
        a.on_release([&] { runs += 10; });
        a.on_release([&] { ++runs; });   // replaces the first, which never runs
    }
    EXPECT_EQ(runs, 4);
}

TEST(prefix_cache, restores_the_longest_common_prefix) {
    prefix_cache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 9, 9};
    kv_cache ka(small_shape(16)), kb(small_shape(16));
    fill(ka, a);
    fill(kb, b);
    EXPECT_TRUE(c.store(a, ka));
    EXPECT_TRUE(c.store(b, kb));
    EXPECT_EQ(c.entries(), 2u);

    kv_cache out(small_shape(16));
    const std::vector<int32_t> q = {1, 2, 3, 4, 7, 7, 7};   // shares 4 tokens with a, 2 with b
    EXPECT_EQ(c.restore(q, 100, out), 4);
    EXPECT_EQ(out.n_pos(), 4);
    EXPECT_TRUE(rows_equal(out, ka, 4));
    EXPECT_EQ(c.restore(q, 3, out), 3);   // capped by the caller (the prompt's last token stays)
    EXPECT_EQ(c.restore(std::vector<int32_t>{8, 1, 2}, 100, out), 0);
    EXPECT_EQ(out.n_pos(), 0);
    EXPECT_EQ(c.stats().hits, 2);
    EXPECT_EQ(c.stats().lookups, 3);
}

// Hybrid models: the recurrent state exists at the checkpoint's length only, so a checkpoint
// comes back (rows and state) only when all of its tokens begin the prompt.
TEST(prefix_cache, a_recurrent_state_comes_back_only_with_the_whole_checkpoint) {
    const kv_shape s = hybrid_shape(64, 2, 3, 5);
    const std::vector<int32_t> toks{5, 6, 7, 8, 9};
    kv_cache a(s);
    std::vector<float> state(2 * (3 + 5));
    for (size_t i = 0; i < state.size(); ++i) state[i] = float(i) + 0.5f;
    a.recurrent().assign(state, 5);
    fill(a, toks);
    prefix_cache c(1 << 20);
    ASSERT_TRUE(c.store(toks, a));
    kv_cache b(s);
    // The prompt leaves the checkpoint after 3 tokens: no state of length 3 exists, a miss.
    EXPECT_EQ(c.restore(std::vector<int32_t>{5, 6, 7, 1, 2, 3}, 100, b), 0);
    EXPECT_EQ(b.n_pos(), 0);
    EXPECT_EQ(b.recurrent().length(), 0);
    // The whole checkpoint begins the prompt but max_rows is shorter: a miss, not 4 rows.
    EXPECT_EQ(c.restore(std::vector<int32_t>{5, 6, 7, 8, 9, 10}, 4, b), 0);
    // Rows and state back.
    EXPECT_EQ(c.restore(std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11}, 6, b), 5);
    EXPECT_EQ(b.n_pos(), 5);
    EXPECT_EQ(b.recurrent().length(), 5);
    EXPECT_EQ(b.recurrent().live(), state);
    EXPECT_TRUE(rows_equal(a, b, 5));
    // Only the restored length can be rolled back to (and 0): no checkpoint slots came with it.
    EXPECT_FALSE(b.can_truncate(4));
    EXPECT_TRUE(b.can_truncate(0));
    // A store at a length the state does not hold keeps nothing.
    EXPECT_FALSE(c.store(std::span<const int32_t>(toks).first(3), a));
    EXPECT_EQ(c.entries(), 1u);
    // An attention-only cache of the same rows never takes a checkpoint with a state.
    kv_cache plain(small_shape(64));
    EXPECT_EQ(c.restore(std::vector<int32_t>{5, 6, 7, 8, 9, 10}, 100, plain), 0);
}

TEST(prefix_cache, a_longer_checkpoint_replaces_its_prefixes) {
    prefix_cache c(1 << 20);
    const std::vector<int32_t> turn1 = {1, 2, 3}, turn2 = {1, 2, 3, 4, 5};
    kv_cache k1(small_shape(16)), k2(small_shape(16));
    fill(k1, turn1);
    fill(k2, turn2);
    c.store(turn1, k1);
    const size_t one = c.bytes();
    c.store(turn2, k2);
    EXPECT_EQ(c.entries(), 1u);
    EXPECT_GT(c.bytes(), one);
    c.store(turn1, k1);   // covered by turn2: nothing new
    EXPECT_EQ(c.entries(), 1u);
    kv_cache out(small_shape(16));
    EXPECT_EQ(c.restore(turn2, 100, out), 5);
    EXPECT_TRUE(rows_equal(out, k2, 5));
}

// With a recurrent state a longer checkpoint does not cover its prefixes: their state is at their
// own length. The serving engine keeps a hybrid's prompt and its whole request: the same prompt
// sent again restores the first, a next turn the second.
TEST(prefix_cache, a_longer_recurrent_checkpoint_keeps_its_prefixes) {
    const kv_shape s = hybrid_shape(16, 1, 2, 2);
    const std::vector<int32_t> prompt = {1, 2, 3}, request = {1, 2, 3, 4, 5};
    kv_cache k1(s), k2(s);
    const std::vector<float> st1{1, 2, 3, 4}, st2{5, 6, 7, 8};
    k1.recurrent().assign(st1, 3);
    k2.recurrent().assign(st2, 5);
    fill(k1, prompt);
    fill(k2, request);
    prefix_cache c(1 << 20);
    ASSERT_TRUE(c.store(prompt, k1));
    ASSERT_TRUE(c.store(request, k2));
    EXPECT_EQ(c.entries(), 2u);
    kv_cache out(s);
    EXPECT_EQ(c.restore(std::vector<int32_t>{1, 2, 3, 9}, 3, out), 3);   // the prompt again
    EXPECT_EQ(out.recurrent().live(), st1);
    EXPECT_TRUE(rows_equal(out, k1, 3));
    EXPECT_EQ(c.restore(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 5, out), 5);   // the next turn
    EXPECT_EQ(out.recurrent().live(), st2);
    EXPECT_TRUE(rows_equal(out, k2, 5));
}

// A drafter's state kept beside the rows (the MTP head's, `aux`): a request that needs it takes
// only checkpoints that kept one, whole; a checkpoint with it replaces the same tokens without.
TEST(prefix_cache, a_drafters_state_comes_back_only_from_checkpoints_that_kept_it) {
    const kv_shape s = hybrid_shape(16, 1, 2, 2);
    const std::vector<int32_t> toks = {1, 2, 3, 4};
    kv_cache k(s);
    k.recurrent().assign(std::vector<float>{1, 2, 3, 4}, 4);
    fill(k, toks);
    prefix_cache c(1 << 20);
    ASSERT_TRUE(c.store(toks, k));
    kv_cache out(s);
    std::vector<float> aux;
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    EXPECT_EQ(c.restore(prompt, 4, out, &aux), 0);   // no drafter's state kept
    EXPECT_EQ(c.restore(prompt, 4, out), 4);         // a request without a drafter takes it
    const size_t plain = c.bytes();
    const std::vector<float> head = {7, 8, 9};
    ASSERT_TRUE(c.store(toks, k, head));
    EXPECT_EQ(c.entries(), 1u);                      // replaced, not added
    EXPECT_EQ(c.bytes(), plain + head.size() * sizeof(float));
    EXPECT_EQ(c.restore(prompt, 4, out, &aux), 4);
    EXPECT_EQ(aux, head);
    EXPECT_EQ(c.restore(prompt, 4, out), 4);
    ASSERT_TRUE(c.store(toks, k));                   // without: the one with the state stays
    EXPECT_EQ(c.restore(prompt, 4, out, &aux), 4);
    EXPECT_EQ(aux, head);

    // A replacement that does not fit the budget leaves the checkpoint it would have replaced.
    prefix_cache tight(plain);
    ASSERT_TRUE(tight.store(toks, k));
    EXPECT_FALSE(tight.store(toks, k, head));
    EXPECT_EQ(tight.entries(), 1u);
    EXPECT_EQ(tight.restore(prompt, 4, out), 4);

    // Attention rows alone (no recurrent state): a checkpoint with a drafter's state is still
    // whole-only, so a longer one without it neither covers nor evicts it.
    const kv_shape a = small_shape(16);
    kv_cache k4(a), k6(a);
    fill(k4, toks);
    const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};
    fill(k6, six);
    prefix_cache rows(1 << 20);
    ASSERT_TRUE(rows.store(six, k6));
    ASSERT_TRUE(rows.store(toks, k4, head));         // not covered by the longer rows
    ASSERT_TRUE(rows.store(six, k6));
    EXPECT_EQ(rows.entries(), 2u);
    kv_cache out_a(a);
    EXPECT_EQ(rows.restore(six, 5, out_a, &aux), 4);
    EXPECT_EQ(aux, head);
}

TEST(prefix_cache, evicts_least_recently_used_within_its_budget) {
    kv_cache k(small_shape(16));
    const std::vector<int32_t> a = {1, 1, 1, 1}, b = {2, 2, 2, 2}, d = {3, 3, 3, 3};
    // One 4-row checkpoint: 4 ids + 4 rows x 2 layers x (K, V) x 8 floats.
    const size_t one = 4 * 4 + 4 * 2 * 2 * 8 * 4;
    prefix_cache c(2 * one);
    fill(k, a);
    c.store(a, k);
    fill(k, b);
    c.store(b, k);
    EXPECT_EQ(c.bytes(), 2 * one);
    kv_cache out(small_shape(16));
    EXPECT_EQ(c.restore(a, 100, out), 4);   // a is now the most recently used
    fill(k, d);
    c.store(d, k);                          // b goes
    EXPECT_EQ(c.entries(), 2u);
    EXPECT_LE(c.bytes(), 2 * one);
    EXPECT_EQ(c.restore(b, 100, out), 0);
    EXPECT_EQ(c.restore(a, 100, out), 4);
    EXPECT_EQ(c.restore(d, 100, out), 4);
    prefix_cache tiny(one - 1);
    EXPECT_FALSE(tiny.store(a, k));         // larger than the whole budget
    EXPECT_EQ(tiny.bytes(), 0u);
}

TEST(prefix_cache, restored_rows_then_suffix_prefill_equal_a_fresh_prefill) {
    for (const char* name : {"qwen3moe_e8_k2", "llama_gqa2_tied", "qwen3_yarn"}) {
        SCOPED_TRACE(name);
        auto file = model_file::open(fixture(name));
        auto net = load_model(*file, {});
        const int nv = net->hparams().n_vocab;
        thread_pool pool(2);
        std::mt19937 g(31);
        std::uniform_int_distribution<int32_t> d(0, nv - 1);
        std::vector<int32_t> toks(70);
        for (auto& t : toks) t = d(g);
        const int n_ctx = 96;
        forward_scratch s = net->make_scratch(32, pool);
        std::vector<float> fresh_logits(32 * size_t(nv)), resumed_logits(32 * size_t(nv));

        // Fresh: the whole sequence in chunks of 32.
        kv_cache fresh(net->kv_shape_for(n_ctx));
        for (size_t i = 0; i < toks.size(); i += 32) {
            const size_t n = std::min<size_t>(32, toks.size() - i);
            net->forward(std::span<const int32_t>(toks.data() + i, n), int32_t(i), fresh, s, fresh_logits.data());
        }
        // Resumed: 23 rows from a checkpoint of a different request that shared them (its own
        // continuation differs), then the rest in chunks of 13 (an unaligned boundary).
        std::vector<int32_t> other(toks.begin(), toks.begin() + 23);
        other.push_back((toks[23] + 1) % nv);
        kv_cache first(net->kv_shape_for(n_ctx));
        net->forward(other, 0, first, s, resumed_logits.data());
        prefix_cache c(size_t(1) << 26);
        ASSERT_TRUE(c.store(other, first));
        kv_cache resumed(net->kv_shape_for(n_ctx));
        ASSERT_EQ(c.restore(toks, int32_t(toks.size()) - 1, resumed), 23);
        size_t last_n = 0;
        for (size_t i = 23; i < toks.size(); i += 13) {
            last_n = std::min<size_t>(13, toks.size() - i);
            net->forward(std::span<const int32_t>(toks.data() + i, last_n), int32_t(i), resumed, s, resumed_logits.data());
        }
        EXPECT_TRUE(rows_equal(fresh, resumed, int32_t(toks.size())));
        // The last row's logits: fresh's last chunk is 70 - 64 = 6 rows, resumed's is 70 - 62 = 8.
        EXPECT_EQ(std::memcmp(fresh_logits.data() + 5 * size_t(nv), resumed_logits.data() + (last_n - 1) * size_t(nv),
                              size_t(nv) * sizeof(float)),
                  0);
    }
}

// ---- E5 through the serving engine ---------------------------------------------------------

completion_result serve_one(serving_engine& eng, const completion_request& r) {
    std::mutex mu;
    std::condition_variable cv;
    bool fin = false;
    completion_result res;
    eng.submit(r, nullptr, [&](const completion_result& x) {
        std::lock_guard<std::mutex> lk(mu);
        res = x;
        fin = true;
        cv.notify_all();
    });
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return fin; });
    return res;
}

TEST(prefix_cache, resumed_conversation_equals_fresh) {
    for (const char* name : {"qwen3moe_e8_k2", "qwen3_gqa4", "qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"}) {
        SCOPED_TRACE(name);
        serving_options o;
        o.engine.model_path = std::string(name).ends_with("_mtp") ? fixture(name).parent_path() / "converted-F32.gguf"
                                                                 : fixture(name);
        o.engine.n_ctx = 256;
        o.engine.n_threads = 2;
        o.max_batch = 2;
        o.prefill_rows_per_step = 16;
        auto cached = serving_engine::open(o);
        auto fresh = serving_engine::open(o);
        // The chat turns as the fixture tokenizer renders them (ChatML).
        auto turn = [&](const std::string& role, const std::string& text) {
            return cached->tokenize("<|im_start|>" + role + "\n" + text + "<|im_end|>\n", true);
        };
        for (float temp : {0.0f, 0.9f}) {
            SCOPED_TRACE(temp);
            completion_request r1;
            r1.prompt = turn("user", "the quick brown fox");
            auto head = cached->tokenize("<|im_start|>assistant\n", true);
            r1.prompt.insert(r1.prompt.end(), head.begin(), head.end());
            r1.params.n_predict = 20;
            r1.params.temperature = temp;
            r1.params.seed = 42;
            const completion_result a1 = serve_one(*cached, r1);
            ASSERT_NE(a1.finish_reason, "error") << a1.error;
            // Turn 2: the history (turn 1 and its reply), a new user message.
            completion_request r2 = r1;
            r2.prompt.insert(r2.prompt.end(), a1.stats.tokens.begin(), a1.stats.tokens.end());
            auto rest = turn("user", "jumps over the lazy dog");
            r2.prompt.insert(r2.prompt.end(), rest.begin(), rest.end());
            r2.prompt.insert(r2.prompt.end(), head.begin(), head.end());
            r2.params.seed = 43;
            const completion_result resumed = serve_one(*cached, r2);
            completion_request r2_fresh = r2;
            r2_fresh.use_prefix_cache = false;
            const completion_result from_scratch = serve_one(*fresh, r2_fresh);
            EXPECT_GT(resumed.cached_tokens, int(r1.prompt.size()) - 1);
            EXPECT_EQ(from_scratch.cached_tokens, 0);
            EXPECT_GT(resumed.stats.n_decoded, 0);
            EXPECT_EQ(resumed.stats.tokens, from_scratch.stats.tokens);
            EXPECT_EQ(resumed.stats.token_sha, from_scratch.stats.token_sha);
            EXPECT_EQ(resumed.finish_reason, from_scratch.finish_reason);
        }
        EXPECT_GT(cached->metrics().cached_prompt_tokens, 0);
        EXPECT_GT(cached->metrics().prefix_cache_entries, 0);
    }
}

}  // namespace
}  // namespace sluice
