// Continuous batching keeps E1: the rows of several sequences in one forward (each at its own
// position of its own KV cache) give, row for row, the logits and K/V bits of each sequence run
// alone one row at a time; and the serving engine's replies, with requests sharing steps,
// equal each request served alone. On every golden fixture (tests/golden/fixtures: random
// llama, qwen3, qwen3moe and qwen2moe models).
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "sluice/engine.h"
#include "sluice/serving.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

std::filesystem::path fixture(const std::string& name) {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests" / "golden" / "fixtures" / name / "model-Q8_0.gguf";
}

const char* const k_fixtures[] = {"llama_gqa2_tied", "qwen3_gqa4",        "qwen3_yarn",           "qwen2moe_shexp",
                                  "qwen3moe_e8_k2",  "qwen3moe_e64_k8", "qwen3moe_e8_k1_nonorm"};

std::vector<int32_t> random_tokens(std::mt19937& g, int n, int n_vocab) {
    std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(g);
    return t;
}

// Every row's logits of one sequence run alone, one row per forward; and its final cache.
struct solo_run {
    std::vector<float> logits;   // [n, n_vocab]
    std::unique_ptr<kv_cache> kv;
};

solo_run run_solo(model& net, thread_pool& pool, const std::vector<int32_t>& toks, int n_ctx) {
    const int nv = net.hparams().n_vocab;
    solo_run r;
    r.kv = std::make_unique<kv_cache>(net.kv_shape_for(n_ctx));
    forward_scratch s = net.make_scratch(1, pool);
    r.logits.resize(toks.size() * size_t(nv));
    for (size_t i = 0; i < toks.size(); ++i)
        net.forward(std::span<const int32_t>(&toks[i], 1), int32_t(i), *r.kv, s, r.logits.data() + i * size_t(nv));
    return r;
}

bool same_kv_rows(const kv_cache& a, const kv_cache& b, int32_t n) {
    const size_t bytes = size_t(n) * size_t(a.row_floats()) * sizeof(float);
    for (int il = 0; il < a.shape().n_layer; ++il)
        if (std::memcmp(a.k(il), b.k(il), bytes) != 0 || std::memcmp(a.v(il), b.v(il), bytes) != 0) return false;
    return true;
}

TEST(batch_forward, batched_rows_equal_solo_rows_on_every_fixture) {
    for (const char* name : k_fixtures) {
        SCOPED_TRACE(name);
        auto file = model_file::open(fixture(name));
        auto net = load_model(*file, {});
        const int nv = net->hparams().n_vocab;
        thread_pool pool(2);
        std::mt19937 g(1234);
        // Three sequences of different lengths, each advanced by a different chunk size per
        // step (a long prefill, a one-row decoder, a small window), all in the same forwards.
        const std::vector<int> lens = {45, 9, 30};
        const std::vector<int> chunk = {11, 1, 4};
        const int n_ctx = 64;
        std::vector<std::vector<int32_t>> seqs;
        std::vector<solo_run> solo;
        for (int len : lens) {
            seqs.push_back(random_tokens(g, len, nv));
            solo.push_back(run_solo(*net, pool, seqs.back(), n_ctx));
        }
        std::vector<std::unique_ptr<kv_cache>> kvs;
        for (size_t i = 0; i < seqs.size(); ++i) kvs.push_back(std::make_unique<kv_cache>(net->kv_shape_for(n_ctx)));
        forward_scratch s = net->make_scratch(16, pool);
        std::vector<float> logits(16 * size_t(nv));
        std::vector<int> done(seqs.size(), 0);
        int steps = 0, mismatches = 0;
        for (;;) {
            std::vector<batch_segment> batch;
            std::vector<size_t> who;
            for (size_t i = 0; i < seqs.size(); ++i) {
                const int n = std::min(chunk[i], lens[i] - done[i]);
                if (n <= 0) continue;
                batch_segment seg;
                seg.tokens = std::span<const int32_t>(seqs[i].data() + done[i], size_t(n));
                seg.pos0 = done[i];
                seg.kv = kvs[i].get();
                // Every other step asks for the last row's logits only.
                seg.n_logits = steps % 2 ? 1 : n;
                batch.push_back(seg);
                who.push_back(i);
            }
            if (batch.empty()) break;
            net->forward_batch(batch, s, logits.data());
            size_t off = 0;
            for (size_t b = 0; b < batch.size(); ++b) {
                const size_t i = who[b];
                const int n = int(batch[b].tokens.size());
                for (int r = n - batch[b].n_logits; r < n; ++r, ++off) {
                    const float* want = solo[i].logits.data() + size_t(done[i] + r) * size_t(nv);
                    if (std::memcmp(want, logits.data() + off * size_t(nv), size_t(nv) * sizeof(float)) != 0) ++mismatches;
                }
                done[i] += n;
                EXPECT_EQ(kvs[i]->n_pos(), done[i]);
            }
            ++steps;
        }
        EXPECT_EQ(mismatches, 0);
        EXPECT_GT(steps, 3);
        for (size_t i = 0; i < seqs.size(); ++i) EXPECT_TRUE(same_kv_rows(*kvs[i], *solo[i].kv, lens[i])) << "sequence " << i;
    }
}

TEST(batch_forward, bad_batches_are_rejected_before_any_work) {
    auto file = model_file::open(fixture("qwen3_gqa4"));
    auto net = load_model(*file, {});
    thread_pool pool(1);
    forward_scratch s = net->make_scratch(4, pool);
    kv_cache a(net->kv_shape_for(8)), b(net->kv_shape_for(8));
    std::vector<float> logits(8 * size_t(net->hparams().n_vocab));
    const std::vector<int32_t> t = {1, 2, 3};
    auto seg = [&](kv_cache* kv, int rows, int pos0) {
        batch_segment g;
        g.tokens = std::span<const int32_t>(t.data(), size_t(rows));
        g.pos0 = pos0;
        g.kv = kv;
        g.n_logits = 1;
        return g;
    };
    std::vector<batch_segment> shared = {seg(&a, 1, 0), seg(&a, 1, 0)};
    EXPECT_THROW(net->forward_batch(shared, s, logits.data()), error);
    std::vector<batch_segment> too_many = {seg(&a, 3, 0), seg(&b, 2, 0)};
    EXPECT_THROW(net->forward_batch(too_many, s, logits.data()), error);
    std::vector<batch_segment> gap = {seg(&a, 1, 2)};   // pos0 past the cache's length
    EXPECT_THROW(net->forward_batch(gap, s, logits.data()), error);
    std::vector<batch_segment> none;
    EXPECT_THROW(net->forward_batch(none, s, logits.data()), error);
    EXPECT_EQ(a.n_pos(), 0);
    EXPECT_EQ(b.n_pos(), 0);
}

// ---- the serving engine ----------------------------------------------------------------------

struct reply {
    completion_result result;
    std::vector<int32_t> streamed;   // ids delivered through on_token
    std::string text;
};

// Submits every request at once and waits for all of them.
std::vector<reply> serve(serving_engine& eng, const std::vector<completion_request>& reqs) {
    std::vector<reply> out(reqs.size());
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        reply* r = &out[i];
        const int64_t q = eng.submit(
            reqs[i],
            [r](const token_event& e) {
                r->streamed.push_back(e.id);
                r->text += e.text;
                return true;
            },
            [&, r](const completion_result& res) {
                std::lock_guard<std::mutex> lk(mu);
                r->result = res;
                ++done;
                cv.notify_all();
            });
        EXPECT_EQ(q, 0);
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == reqs.size(); });
    return out;
}

serving_options options(const std::string& name, int max_batch) {
    serving_options o;
    o.engine.model_path = fixture(name);
    o.engine.n_ctx = 256;
    o.engine.n_threads = 2;
    o.max_batch = max_batch;
    o.prefill_rows_per_step = 16;
    return o;
}

std::vector<completion_request> mixed_requests(int n_vocab) {
    std::mt19937 g(77);
    std::vector<completion_request> reqs;
    for (int i = 0; i < 6; ++i) {
        completion_request r;
        r.prompt = random_tokens(g, 5 + 13 * i, n_vocab - 3);   // no special ids in the prompt
        r.params.n_predict = 12 + 3 * i;
        r.params.temperature = i % 3 == 0 ? 0.0f : 0.9f;
        r.params.seed = 100 + uint64_t(i);
        r.params.drafter = i % 2 ? drafter_kind::ngram : drafter_kind::none;
        r.params.repeat_penalty = i == 4 ? 1.2f : 1.0f;
        if (i == 5) r.logit_bias = {{10, 3.0f}, {11, -100.0f}};
        r.use_prefix_cache = false;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

TEST(batch_serving, batched_requests_equal_solo_runs) {
    for (const char* name : {"qwen3moe_e8_k2", "llama_gqa2_tied", "qwen2moe_shexp"}) {
        SCOPED_TRACE(name);
        std::vector<reply> solo;
        int n_vocab = 0;
        {
            auto eng = serving_engine::open(options(name, 1));
            n_vocab = eng->n_vocab();
            for (const auto& r : mixed_requests(n_vocab)) solo.push_back(serve(*eng, {r})[0]);
            EXPECT_EQ(eng->metrics().max_segments, 1);
        }
        auto eng = serving_engine::open(options(name, 4));
        std::vector<reply> together = serve(*eng, mixed_requests(n_vocab));
        const serving_metrics m = eng->metrics();
        EXPECT_GE(m.max_segments, 2);   // requests did share steps
        ASSERT_EQ(solo.size(), together.size());
        for (size_t i = 0; i < solo.size(); ++i) {
            SCOPED_TRACE(i);
            EXPECT_NE(solo[i].result.finish_reason, "error") << solo[i].result.error;
            EXPECT_EQ(together[i].result.stats.tokens, solo[i].result.stats.tokens);
            EXPECT_EQ(together[i].result.stats.token_sha, solo[i].result.stats.token_sha);
            EXPECT_EQ(together[i].result.finish_reason, solo[i].result.finish_reason);
            EXPECT_EQ(together[i].streamed, together[i].result.stats.tokens);
            EXPECT_GT(together[i].result.stats.n_decoded, 0);
        }
    }
}

TEST(batch_serving, prompt_rows_per_step_default_to_the_models_prefill_and_change_no_token) {
    const char* name = "qwen3moe_e8_k2";
    std::vector<reply> small, whole;
    {
        auto eng = serving_engine::open(options(name, 2));   // 16 prompt rows a step
        EXPECT_EQ(eng->prefill_rows_per_step(), 16);
        small = serve(*eng, mixed_requests(eng->n_vocab()));
    }
    serving_options o = options(name, 2);
    o.prefill_rows_per_step = 0;   // the model's prefill forward: 512 rows on the CPU
    auto eng = serving_engine::open(o);
    EXPECT_EQ(eng->prefill_rows_per_step(), k_cpu_prefill_rows);
    whole = serve(*eng, mixed_requests(eng->n_vocab()));
    ASSERT_EQ(small.size(), whole.size());
    for (size_t i = 0; i < small.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_NE(whole[i].result.finish_reason, "error") << whole[i].result.error;
        EXPECT_EQ(whole[i].result.stats.token_sha, small[i].result.stats.token_sha);
    }
    for (int bad : {-1, 4097}) {
        o.prefill_rows_per_step = bad;
        EXPECT_THROW(serving_engine::open(o), error) << bad;
    }
}

// A --no-mmap start reports its read as a load phase (what `sluice serve` shows on /ready) that
// reaches 100% and ends; a mapped start reports none; the engine keeps no callback once open.
TEST(batch_serving, a_read_start_reports_its_load_phase) {
    for (const bool mapped : {true, false}) {
        SCOPED_TRACE(mapped ? "mapped" : "read");
        std::vector<std::string> phases;
        serving_options o = options("qwen3moe_e8_k2", 1);
        o.engine.mmap = mapped;
        o.engine.on_load_phase = [&phases](const std::string& s) { phases.push_back(s); };
        auto eng = serving_engine::open(o);
        if (mapped) {
            EXPECT_TRUE(phases.empty());
            continue;
        }
        ASSERT_GE(phases.size(), 3u);
        EXPECT_EQ(phases.front().rfind("reading ", 0), 0u) << phases.front();
        EXPECT_NE(phases[phases.size() - 2].find(" 100%"), std::string::npos) << phases[phases.size() - 2];
        EXPECT_EQ(phases.back(), "");
    }
}

TEST(batch_serving, stops_cancels_and_bounded_queue) {
    auto eng = serving_engine::open(options("qwen3_gqa4", 2));
    std::mt19937 g(5);
    completion_request base;
    base.prompt = random_tokens(g, 20, eng->n_vocab() - 3);
    base.params.n_predict = 40;
    base.params.temperature = 0.0f;

    // on_token returning false ends the request at that token.
    {
        int seen = 0;
        std::mutex mu;
        std::condition_variable cv;
        bool fin = false;
        completion_result res;
        eng->submit(
            base, [&](const token_event&) { return ++seen < 3; },
            [&](const completion_result& r) {
                std::lock_guard<std::mutex> lk(mu);
                res = r;
                fin = true;
                cv.notify_all();
            });
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return fin; });
        EXPECT_EQ(res.finish_reason, "stop");
        EXPECT_EQ(res.stats.n_decoded, 3);
        EXPECT_EQ(seen, 3);
    }
    // A bad request ends with an error and does not disturb the one next to it.
    {
        completion_request bad = base;
        bad.prompt.push_back(eng->n_vocab() + 5);
        completion_request too_long = base;
        too_long.prompt.assign(size_t(eng->n_ctx()), 1);
        auto out = serve(*eng, {bad, base, too_long});
        EXPECT_EQ(out[0].result.finish_reason, "error");
        EXPECT_NE(out[0].result.error.find("expected an id"), std::string::npos) << out[0].result.error;
        EXPECT_EQ(out[1].result.finish_reason, "length");
        EXPECT_EQ(out[1].result.stats.n_decoded, 40);
        EXPECT_EQ(out[2].result.finish_reason, "error");
        EXPECT_NE(out[2].result.error.find("context"), std::string::npos) << out[2].result.error;
    }
    // The cancel flag ends a request between steps with "cancelled".
    {
        completion_request r = base;
        r.params.n_predict = -1;   // until the context is full, unless cancelled
        r.cancel = std::make_shared<std::atomic<bool>>(false);
        auto flag = r.cancel;
        std::mutex mu;
        std::condition_variable cv;
        bool fin = false;
        completion_result res;
        int seen = 0;
        eng->submit(
            r,
            [&, flag](const token_event&) {
                if (++seen == 5) flag->store(true);
                return true;
            },
            [&](const completion_result& x) {
                std::lock_guard<std::mutex> lk(mu);
                res = x;
                fin = true;
                cv.notify_all();
            });
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return fin; });
        EXPECT_EQ(res.finish_reason, "cancelled");
        EXPECT_EQ(res.stats.n_decoded, 5);   // one step after the flag: no more tokens
    }
    eng->shutdown(false);
    EXPECT_EQ(eng->metrics().ready, false);
    // After shutdown: refused with an error, on_done still called once.
    int calls = 0;
    eng->submit(base, nullptr, [&](const completion_result& r) {
        ++calls;
        EXPECT_EQ(r.finish_reason, "error");
    });
    EXPECT_EQ(calls, 1);
}

// A request that runs until the context is full, or until its own cancel flag is set.
completion_request until_cancelled(const serving_engine& eng) {
    std::mt19937 g(9);
    completion_request r;
    r.prompt = random_tokens(g, 10, eng.n_vocab() - 3);
    r.params.n_predict = -1;
    r.cancel = std::make_shared<std::atomic<bool>>(false);
    return r;
}

TEST(batch_serving, full_queue_returns_its_length) {
    serving_options o = options("qwen3_gqa4", 1);
    o.max_queue = 2;
    auto eng = serving_engine::open(o);
    completion_request r = until_cancelled(*eng);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    auto on_done = [&](const completion_result&) {
        std::lock_guard<std::mutex> lk(mu);
        ++done;
        cv.notify_all();
    };
    // The first request is taken by the scheduler; wait until it runs so the queue is empty.
    EXPECT_EQ(eng->submit(r, nullptr, on_done), 0);
    while (eng->metrics().active == 0) std::this_thread::yield();
    EXPECT_EQ(eng->submit(r, nullptr, on_done), 0);
    EXPECT_EQ(eng->submit(r, nullptr, on_done), 0);
    EXPECT_EQ(eng->submit(r, nullptr, on_done), 2);   // full: two are waiting
    EXPECT_EQ(eng->metrics().queue_depth, 2);
    r.cancel->store(true);   // the same flag ends all three
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == 3; });
}

TEST(batch_serving, a_cancelled_queued_request_frees_its_place_while_the_batch_runs) {
    // A client that went away while its request waited held the queue place until a batch slot
    // freed, so live clients got 429s behind it (2 long streams, 2 dropped waiters: 429s for as
    // long as the streams ran).
    serving_options o = options("qwen3_gqa4", 1);
    o.max_queue = 1;
    auto eng = serving_engine::open(o);
    const completion_request running = until_cancelled(*eng), waiting = until_cancelled(*eng);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> finished;
    auto on_done = [&](const completion_result& res) {
        std::lock_guard<std::mutex> lk(mu);
        finished.push_back(res.finish_reason);
        cv.notify_all();
    };
    EXPECT_EQ(eng->submit(running, nullptr, on_done), 0);
    while (eng->metrics().active == 0) std::this_thread::yield();
    EXPECT_EQ(eng->submit(waiting, nullptr, on_done), 0);
    EXPECT_EQ(eng->submit(waiting, nullptr, on_done), 1);   // the queue is full
    waiting.cancel->store(true);
    {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !finished.empty(); });
        EXPECT_EQ(finished[0], "cancelled");
    }
    EXPECT_EQ(eng->metrics().active, 1);   // the running request goes on
    EXPECT_EQ(eng->metrics().queue_depth, 0);
    const completion_request next = until_cancelled(*eng);
    EXPECT_EQ(eng->submit(next, nullptr, on_done), 0);   // its place is free
    running.cancel->store(true);
    next.cancel->store(true);
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return finished.size() == 3; });
}

}  // namespace
}  // namespace sluice
