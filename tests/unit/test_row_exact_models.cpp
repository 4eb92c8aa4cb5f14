// Model-level E1/E2 for every quantised weight format the CPU kernels have: on small random
// llama (dense) and qwen3moe (MoE, through the expert pool) models built in memory with every
// row 256 wide (so K-quant and I-quant blocks tile it), the logits of every row are the same bits
// for prefill chunks of 1, 7 and 32 rows and for 1, 2 and 3 threads, and so is the greedy
// continuation that follows.
#include "io/model_file.h"
#include "models/model.h"
#include "quant/quant.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

class mem_file final : public model_file {
public:
    metadata m;
    std::vector<tensor_view> ts;
    std::vector<std::vector<std::byte>> store;

    const metadata& meta() const override { return m; }
    std::span<const tensor_view> tensors() const override { return ts; }
    std::string_view format() const override { return "gguf"; }

    void set_int(const std::string& k, int64_t v) { m.set(k, meta_value{meta_type::u32, v}); }
    void set_float(const std::string& k, double v) { m.set(k, meta_value{meta_type::f32, v}); }
    void set_string(const std::string& k, std::string v) { m.set(k, meta_value{meta_type::string, std::move(v)}); }

    // Random N(0, scale) values (norm weights: 1 + that) stored as `type`, shape ne (GGML order).
    void add(const std::string& name, std::vector<int64_t> ne, std::mt19937& g, dtype type, float scale) {
        int64_t n = 1;
        for (auto e : ne) n *= e;
        std::normal_distribution<float> d(0.0f, scale);
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = d(g);
        if (name.find("norm") != std::string::npos)
            for (auto& x : v) x = 1.0f + x;
        tensor_view t;
        t.name = name;
        t.type = type;
        t.n_dims = static_cast<int>(ne.size());
        for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i];
        const uint64_t row_bytes = *bytes_for(type, static_cast<uint64_t>(ne[0]));
        const int64_t rows = n / ne[0];
        std::vector<std::byte> bytes(row_bytes * static_cast<uint64_t>(rows));
        // At most 32 rows quantised (the I-quant quantisers search grids and are slow); the other
        // rows repeat them in a random order: any mix of valid rows tests the same promise.
        const int64_t distinct = std::min<int64_t>(rows, 32);
        for (int64_t r = 0; r < distinct; ++r) quant::quantize_row(type, v.data() + r * ne[0], bytes.data() + r * row_bytes, ne[0]);
        std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
        for (int64_t r = distinct; r < rows; ++r) std::memcpy(bytes.data() + r * row_bytes, bytes.data() + pick(g) * row_bytes, row_bytes);
        store.push_back(std::move(bytes));
        t.data = store.back().data();
        t.nbytes = store.back().size();
        ts.push_back(t);
    }
};

constexpr int k_embd = 256, k_head = 4, k_kv = 2, k_hd = 64, k_ff = 512, k_vocab = 96;
constexpr int k_expert = 8, k_used = 3, k_ff_exp = 256;

// arch "llama" (dense FFN) or "qwen3moe"; matrices in `wt`, the embedding in q8_0 (a 2-D table
// any format could hold; q8_0 keeps get_row cheap), norms and the router f32.
std::unique_ptr<mem_file> make_model(const std::string& a, dtype wt) {
    auto f = std::make_unique<mem_file>();
    f->store.reserve(64);   // tensor_views point into it
    std::mt19937 g(1234);
    const bool moe = a == "qwen3moe";
    f->set_string("general.architecture", a);
    f->set_int(a + ".embedding_length", k_embd);
    f->set_int(a + ".block_count", 2);
    f->set_int(a + ".context_length", 256);
    f->set_int(a + ".attention.head_count", k_head);
    f->set_int(a + ".attention.head_count_kv", k_kv);
    f->set_int(a + ".attention.key_length", k_hd);
    f->set_int(a + ".attention.value_length", k_hd);
    f->set_int(a + ".feed_forward_length", k_ff);
    f->set_float(a + ".attention.layer_norm_rms_epsilon", 1e-6);
    f->set_float(a + ".rope.freq_base", 10000.0);
    if (moe) {
        f->set_int(a + ".expert_count", k_expert);
        f->set_int(a + ".expert_used_count", k_used);
        f->set_int(a + ".expert_feed_forward_length", k_ff_exp);
    }
    const int64_t E = k_embd, nq = k_head * k_hd, nkv = k_kv * k_hd;
    f->add("token_embd.weight", {E, k_vocab}, g, dtype::q8_0, 1.0f);
    f->add("output_norm.weight", {E}, g, dtype::f32, 0.1f);
    f->add("output.weight", {E, k_vocab}, g, wt, 0.2f);
    for (int il = 0; il < 2; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        f->add(p + "attn_norm.weight", {E}, g, dtype::f32, 0.1f);
        f->add(p + "attn_q.weight", {E, nq}, g, wt, 0.2f);
        f->add(p + "attn_k.weight", {E, nkv}, g, wt, 0.2f);
        f->add(p + "attn_v.weight", {E, nkv}, g, wt, 0.2f);
        f->add(p + "attn_output.weight", {nq, E}, g, wt, 0.2f);
        if (moe) {
            f->add(p + "attn_q_norm.weight", {k_hd}, g, dtype::f32, 0.1f);
            f->add(p + "attn_k_norm.weight", {k_hd}, g, dtype::f32, 0.1f);
        }
        f->add(p + "ffn_norm.weight", {E}, g, dtype::f32, 0.1f);
        if (moe) {
            f->add(p + "ffn_gate_inp.weight", {E, k_expert}, g, dtype::f32, 1.0f);
            f->add(p + "ffn_gate_exps.weight", {E, k_ff_exp, k_expert}, g, wt, 0.2f);
            f->add(p + "ffn_up_exps.weight", {E, k_ff_exp, k_expert}, g, wt, 0.2f);
            f->add(p + "ffn_down_exps.weight", {k_ff_exp, E, k_expert}, g, wt, 0.2f);
        } else {
            f->add(p + "ffn_gate.weight", {E, k_ff}, g, wt, 0.2f);
            f->add(p + "ffn_up.weight", {E, k_ff}, g, wt, 0.2f);
            f->add(p + "ffn_down.weight", {k_ff, E}, g, wt, 0.2f);
        }
    }
    return f;
}

// 40 prompt tokens (more than one chunk of 32).
std::vector<token_id> prompt() {
    std::vector<token_id> t(40);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<token_id>((i * 37 + 11) % k_vocab);
    return t;
}

struct run_result {
    std::vector<float> logits;        // [40, n_vocab] teacher-forced rows
    std::vector<token_id> greedy;     // 8 tokens of greedy continuation, one row at a time
};

run_result run(model& m, int chunk, int threads) {
    session_options o;
    o.n_ctx = 64;
    o.n_threads = threads;
    o.prefill_chunk = chunk;
    session s(m, o);
    const auto p = prompt();
    run_result r;
    for (size_t i = 0; i < p.size(); i += static_cast<size_t>(chunk)) {
        const size_t n = std::min(p.size() - i, static_cast<size_t>(chunk));
        const float* l = s.forward_all(std::span<const token_id>(p).subspan(i, n));
        r.logits.insert(r.logits.end(), l, l + n * k_vocab);
    }
    const float* last = r.logits.data() + (p.size() - 1) * k_vocab;
    std::vector<float> cur(last, last + k_vocab);
    for (int step = 0; step < 8; ++step) {
        const token_id t = static_cast<token_id>(std::max_element(cur.begin(), cur.end()) - cur.begin());
        r.greedy.push_back(t);
        const float* l = s.decode(t);
        cur.assign(l, l + k_vocab);
    }
    return r;
}

class row_exact_models : public ::testing::TestWithParam<std::tuple<const char*, dtype>> {};

TEST_P(row_exact_models, chunks_and_threads_give_the_same_bits) {
    const auto [arch, wt] = GetParam();
    auto f = make_model(arch, wt);
    auto m = load_model(*f, {});
    const run_result base = run(*m, 1, 1);
    for (float x : base.logits) ASSERT_TRUE(std::isfinite(x));
    for (int chunk : {1, 7, 32}) {
        for (int threads : {1, 2, 3}) {
            if (chunk == 1 && threads == 1) continue;
            const run_result r = run(*m, chunk, threads);
            ASSERT_EQ(r.logits.size(), base.logits.size());
            EXPECT_EQ(0, std::memcmp(r.logits.data(), base.logits.data(), base.logits.size() * sizeof(float)))
                << arch << " " << name(wt) << ": chunk " << chunk << ", " << threads << " threads";
            EXPECT_EQ(r.greedy, base.greedy) << arch << " " << name(wt) << ": chunk " << chunk << ", " << threads << " threads";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(formats, row_exact_models,
                         ::testing::Combine(::testing::Values("llama", "qwen3moe"),
                                            ::testing::Values(dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1,
                                                              dtype::q8_0, dtype::mxfp4, dtype::iq4_nl, dtype::q2_k,
                                                              dtype::q3_k, dtype::q4_k, dtype::q5_k, dtype::q6_k,
                                                              dtype::iq4_xs, dtype::iq3_s, dtype::iq3_xxs,
                                                              dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s, dtype::f16,
                                                              dtype::bf16)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param)) + "_" + std::string(name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace sluice
