// Model-level E1/E2 for every quantised weight format the CPU kernels have: on small random
// llama (dense) and qwen3moe (MoE, through the expert pool) models built in memory with every
// row 256 wide (so K-quant and I-quant blocks tile it), the logits of every row are the same bits
// for prefill chunks of 1, 7 and 32 rows and for 1, 2 and 3 threads, and so is the greedy
// continuation that follows.
#include "io/model_file.h"
#include "models/model.h"
#include "quant/quant.h"
#include "runtime/generate.h"
#include "mem_model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

using mem_file = test_support::mem_model_file;

constexpr int k_embd = 256, k_head = 4, k_kv = 2, k_hd = 64, k_ff = 512, k_vocab = 96;
constexpr int k_expert = 8, k_used = 3, k_ff_exp = 256;

// arch "llama" (dense FFN) or "qwen3moe"; matrices in `wt`, the embedding in q8_0 (a 2-D table
// any format could hold; q8_0 keeps get_row cheap), norms and the router f32.
std::unique_ptr<mem_file> make_model(const std::string& a, dtype wt) {
    auto f = std::make_unique<mem_file>();
    f->max_distinct_rows = 32;
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
