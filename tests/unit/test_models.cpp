// Model-level promises on small random models built in memory (every architecture): a window's
// rows equal single-row forwards bit for bit (E1), any thread count gives the same bits (E2),
// a rolled-back cache continues exactly as a fresh one, and binding errors say what was
// expected and what was found.
#include "core/error.h"
#include "io/model_file.h"
#include "models/model.h"
#include "quant/quant.h"
#include "runtime/generate.h"
#include "runtime/loaded_model.h"
#include "mem_model_file.h"

#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

using test_support::mem_model_file;

struct spec {
    std::string arch;
    dtype wtype = dtype::f32;
    bool tied = true;
    int n_embd = 64, n_layer = 2, n_head = 4, n_kv = 2, head_dim = 16, n_ff = 96, n_vocab = 100;
    int n_expert = 4, n_used = 2, n_ff_exp = 32, n_ff_shexp = 64;
};

std::unique_ptr<mem_model_file> make_file(const spec& s, uint32_t seed = 42) {
    auto f = std::make_unique<mem_model_file>();
    f->store.reserve(256);   // tensor_views point into it
    std::mt19937 g(seed);
    const std::string a = s.arch;
    const bool moe = a == "qwen3moe" || a == "qwen2moe";
    const bool qk_norm = a == "qwen3" || a == "qwen3moe";
    f->set_string("general.architecture", a);
    f->set_int(a + ".embedding_length", s.n_embd);
    f->set_int(a + ".block_count", s.n_layer);
    f->set_int(a + ".context_length", 256);
    f->set_int(a + ".attention.head_count", s.n_head);
    f->set_int(a + ".attention.head_count_kv", s.n_kv);
    f->set_int(a + ".attention.key_length", s.head_dim);
    f->set_int(a + ".attention.value_length", s.head_dim);
    f->set_int(a + ".feed_forward_length", s.n_ff);
    f->set_float(a + ".attention.layer_norm_rms_epsilon", 1e-6);
    f->set_float(a + ".rope.freq_base", 10000.0);
    if (moe) {
        f->set_int(a + ".expert_count", s.n_expert);
        f->set_int(a + ".expert_used_count", s.n_used);
        f->set_int(a + ".expert_feed_forward_length", s.n_ff_exp);
        if (a == "qwen2moe") f->set_int(a + ".expert_shared_feed_forward_length", s.n_ff_shexp);
    }
    const int64_t E = s.n_embd, nq = s.n_head * s.head_dim, nkv = s.n_kv * s.head_dim;
    f->add("token_embd.weight", {E, s.n_vocab}, g, s.wtype, 1.0f);
    f->add("output_norm.weight", {E}, g);
    if (!s.tied) f->add("output.weight", {E, s.n_vocab}, g, s.wtype);
    for (int il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        f->add(p + "attn_norm.weight", {E}, g);
        f->add(p + "attn_q.weight", {E, nq}, g, s.wtype);
        f->add(p + "attn_k.weight", {E, nkv}, g, s.wtype);
        f->add(p + "attn_v.weight", {E, nkv}, g, s.wtype);
        f->add(p + "attn_output.weight", {nq, E}, g, s.wtype);
        if (a == "qwen2moe") {
            f->add(p + "attn_q.bias", {nq}, g);
            f->add(p + "attn_k.bias", {nkv}, g);
            f->add(p + "attn_v.bias", {nkv}, g);
        }
        if (qk_norm) {
            f->add(p + "attn_q_norm.weight", {s.head_dim}, g);
            f->add(p + "attn_k_norm.weight", {s.head_dim}, g);
        }
        f->add(p + "ffn_norm.weight", {E}, g);
        if (moe) {
            f->add(p + "ffn_gate_inp.weight", {E, s.n_expert}, g, dtype::f32, 1.0f);
            f->add(p + "ffn_gate_exps.weight", {E, s.n_ff_exp, s.n_expert}, g, s.wtype);
            f->add(p + "ffn_up_exps.weight", {E, s.n_ff_exp, s.n_expert}, g, s.wtype);
            f->add(p + "ffn_down_exps.weight", {s.n_ff_exp, E, s.n_expert}, g, s.wtype);
            if (a == "qwen2moe") {
                f->add(p + "ffn_gate_shexp.weight", {E, s.n_ff_shexp}, g, s.wtype);
                f->add(p + "ffn_up_shexp.weight", {E, s.n_ff_shexp}, g, s.wtype);
                f->add(p + "ffn_down_shexp.weight", {s.n_ff_shexp, E}, g, s.wtype);
                f->add(p + "ffn_gate_inp_shexp.weight", {E}, g);
            }
        } else {
            f->add(p + "ffn_gate.weight", {E, s.n_ff}, g, s.wtype);
            f->add(p + "ffn_up.weight", {E, s.n_ff}, g, s.wtype);
            f->add(p + "ffn_down.weight", {s.n_ff, E}, g, s.wtype);
        }
    }
    return f;
}

const std::vector<token_id> k_tokens = {5, 17, 99, 0, 42, 42, 8, 63, 1, 77, 23};

// Logits of every token of k_tokens, run in windows of `window` rows with `threads` threads.
std::vector<float> run(model& m, int window, int threads) {
    session_options o;
    o.n_ctx = 64;
    o.n_threads = threads;
    o.prefill_chunk = window;
    session s(m, o);
    const size_t V = static_cast<size_t>(m.hparams().n_vocab);
    std::vector<float> all;
    for (size_t i = 0; i < k_tokens.size(); i += static_cast<size_t>(window)) {
        const size_t n = std::min(k_tokens.size() - i, static_cast<size_t>(window));
        const float* l = s.forward_all(std::span<const token_id>(k_tokens).subspan(i, n));
        all.insert(all.end(), l, l + n * V);
    }
    return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class every_arch : public ::testing::TestWithParam<std::tuple<const char*, dtype>> {
protected:
    spec make_spec() const {
        spec s;
        s.arch = std::get<0>(GetParam());
        s.wtype = std::get<1>(GetParam());
        s.tied = s.arch != "qwen2moe";
        return s;
    }
};

TEST_P(every_arch, window_rows_match_single_row) {
    auto f = make_file(make_spec());
    auto m = load_model(*f, {});
    const auto single = run(*m, 1, 1);
    for (float x : single) ASSERT_TRUE(std::isfinite(x));
    for (int w : {3, 4, 11}) EXPECT_TRUE(same_bits(single, run(*m, w, 1))) << "window " << w;
}

TEST_P(every_arch, thread_count_does_not_change_bits) {
    auto f = make_file(make_spec());
    auto m = load_model(*f, {});
    const auto one = run(*m, 4, 1);
    EXPECT_TRUE(same_bits(one, run(*m, 4, 2)));
    EXPECT_TRUE(same_bits(one, run(*m, 4, 3)));
}

TEST_P(every_arch, rolled_back_cache_continues_like_a_fresh_one) {
    auto f = make_file(make_spec());
    auto m = load_model(*f, {});
    session_options o;
    o.n_ctx = 32;
    o.prefill_chunk = 8;
    const size_t V = static_cast<size_t>(m->hparams().n_vocab);
    session fresh(*m, o), rolled(*m, o);
    const std::vector<token_id> a = {3, 4, 5, 6, 7}, b = {3, 4, 9, 10};
    rolled.forward_all(a);
    rolled.truncate(2);   // keep 3, 4; drop 5, 6, 7
    const float* lr = rolled.forward_all(std::span<const token_id>(b).subspan(2));
    std::vector<float> got(lr, lr + 2 * V);
    fresh.forward_all(std::span<const token_id>(b).subspan(0, 2));
    const float* lf = fresh.forward_all(std::span<const token_id>(b).subspan(2));
    EXPECT_EQ(0, std::memcmp(got.data(), lf, 2 * V * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(models, every_arch,
                         ::testing::Combine(::testing::Values("llama", "qwen3", "qwen3moe", "qwen2moe"),
                                            ::testing::Values(dtype::f32, dtype::q8_0)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param)) + "_" +
                                    std::string(name(std::get<1>(info.param)));
                         });

TEST(models, untied_output_is_used_when_present) {
    spec s;
    s.arch = "llama";
    auto ft = make_file(s);
    auto tied = load_model(*ft, {});
    s.tied = false;
    auto fu = make_file(s);
    auto untied = load_model(*fu, {});
    EXPECT_FALSE(same_bits(run(*tied, 4, 1), run(*untied, 4, 1)));
}

TEST(models, expert_weights_norm_key_overrides_the_default) {
    spec s;
    s.arch = "qwen3moe";
    auto f = make_file(s);
    auto renorm = load_model(*f, {});
    EXPECT_TRUE(renorm->hparams().expert_weights_norm);
    f->set_bool("qwen3moe.expert_weights_norm", false);
    auto plain = load_model(*f, {});
    EXPECT_FALSE(plain->hparams().expert_weights_norm);
    EXPECT_FALSE(same_bits(run(*renorm, 4, 1), run(*plain, 4, 1)));
}

TEST(models, wrong_shape_is_rejected_with_expected_and_actual) {
    spec s;
    s.arch = "qwen3";
    auto f = make_file(s);
    for (auto& t : f->ts)
        if (t.name == "blk.1.attn_k.weight") t.ne[1] = 16, t.nbytes /= 2;
    try {
        load_model(*f, {});
        FAIL() << "loaded a model with a malformed tensor";
    } catch (const error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("blk.1.attn_k.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("expected [64, 32]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("got [64, 16]"), std::string::npos) << msg;
    }
}

TEST(models, missing_tensor_and_unknown_architecture_are_rejected) {
    spec s;
    s.arch = "qwen2moe";
    auto f = make_file(s);
    std::erase_if(f->ts, [](const tensor_view& t) { return t.name == "blk.0.ffn_gate_inp_shexp.weight"; });
    EXPECT_THROW(load_model(*f, {}), error);
    f->set_string("general.architecture", "mamba");
    try {
        load_model(*f, {});
        FAIL();
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("mamba"), std::string::npos);
    }
}

// A file whose block_count is smaller than the layers its tensors hold (the last layer would be
// dropped without a word), and YaRN floats that are NaN or out of range (generation turned to
// garbage): both are refused at load, naming the key or tensor.
TEST(models, tensors_past_block_count_and_bad_rope_floats_are_rejected) {
    spec s;
    s.arch = "qwen3";
    auto expect_load_error = [](mem_model_file& f, const std::string& want) {
        try {
            load_model(f, {});
            ADD_FAILURE() << "loaded; expected an error containing '" << want << "'";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    };
    auto f = make_file(s);
    f->set_int("qwen3.block_count", 1);
    expect_load_error(*f, "tensor 'blk.1.attn_norm.weight' is of layer 1, but qwen3.block_count is 1");
    for (const char* key : {"qwen3.rope.scaling.attn_factor", "qwen3.rope.scaling.yarn_beta_fast",
                            "qwen3.rope.scaling.yarn_beta_slow"}) {
        auto g = make_file(s);
        g->set_float(key, std::nan(""));
        expect_load_error(*g, key);
    }
    auto y = make_file(s);
    y->set_string("qwen3.rope.scaling.type", "yarn");
    y->set_float("qwen3.rope.scaling.factor", 4.0);
    y->set_float("qwen3.rope.scaling.yarn_ext_factor", -1e9);
    expect_load_error(*y, "qwen3.rope.scaling.yarn_ext_factor");
    // A per-layer head_count_kv array must have an entry a layer (llama.cpp requires it too).
    for (size_t n : {size_t{1}, size_t{3}}) {
        auto h = make_file(s);
        auto arr = std::make_shared<meta_array>();
        arr->elem = meta_type::u32;
        arr->ints.assign(n, s.n_kv);
        h->m.set("qwen3.attention.head_count_kv", meta_value{meta_type::array, arr});
        expect_load_error(*h, "a per-layer array of " + std::to_string(n) + " entries");
    }
    auto ok = make_file(s);
    ok->set_float("qwen3.rope.scaling.attn_factor", 1.0);
    auto arr = std::make_shared<meta_array>();
    arr->elem = meta_type::u32;
    arr->ints.assign(2, s.n_kv);
    ok->m.set("qwen3.attention.head_count_kv", meta_value{meta_type::array, arr});
    EXPECT_NO_THROW(load_model(*ok, {}));
}

// A GGUF whose token list is shorter than its output (260 tokens, 300 rows) loaded and then died
// mid-generation on the first id past the list; a Hugging Face directory may pad its embeddings.
TEST(models, a_gguf_tokenizer_must_cover_every_output_row) {
    try {
        check_tokenizer_covers_output(260, 300, false, "m.gguf");
        ADD_FAILURE() << "a GGUF tokenizer of 260 tokens passed for 300 output rows";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("the tokenizer has 260 tokens but the model's output has 300"),
                  std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(check_tokenizer_covers_output(300, 300, false, "m.gguf"));
    EXPECT_NO_THROW(check_tokenizer_covers_output(260, 300, true, "hf_dir"));
    EXPECT_THROW(check_tokenizer_covers_output(301, 300, true, "hf_dir"), error);
    EXPECT_THROW(check_tokenizer_covers_output(301, 300, false, "m.gguf"), error);
}

TEST(models, bad_window_is_rejected_before_any_work) {
    spec s;
    s.arch = "llama";
    auto f = make_file(s);
    auto m = load_model(*f, {});
    thread_pool pool(1);
    auto scratch = m->make_scratch(4, pool);
    kv_cache kv(m->kv_shape_for(8));
    std::vector<float> logits(4 * 100);
    const std::vector<token_id> bad_id = {1, 100};
    EXPECT_THROW(m->forward(bad_id, 0, kv, scratch, logits.data()), error);
    const std::vector<token_id> too_many = {1, 2, 3, 4, 5};
    EXPECT_THROW(m->forward(too_many, 0, kv, scratch, logits.data()), error);
    const std::vector<token_id> ok = {1, 2};
    EXPECT_THROW(m->forward(ok, 1, kv, scratch, logits.data()), error);   // pos0 past the cache
    EXPECT_THROW(m->forward(ok, 7, kv, scratch, logits.data()), error);
    m->forward(ok, 0, kv, scratch, logits.data());
    EXPECT_EQ(kv.n_pos(), 2);
}

// A model whose forward runs elsewhere (as the CUDA model's does) with a host model's shape.
class device_forward_model final : public model {
public:
    explicit device_forward_model(const model_hparams& hp) : hp_(hp) {}
    const model_hparams& hparams() const override { return hp_; }
    void forward_batch(std::span<const batch_segment>, forward_scratch&, float*) override {}
    bool forward_on_host() const override { return false; }

private:
    model_hparams hp_;
};

TEST(models, a_device_forward_gets_the_residual_rows_and_no_host_buffers) {
    spec s;
    s.arch = "qwen3moe";
    auto f = make_file(s);
    auto host = load_model(*f, {});
    thread_pool pool(1);
    const forward_scratch h = host->make_scratch(8, pool);
    const device_forward_model dev(host->hparams());
    const forward_scratch d = dev.make_scratch(8, pool);
    const size_t E = static_cast<size_t>(host->hparams().n_embd);
    EXPECT_EQ(d.pool, &pool);
    EXPECT_EQ(d.max_rows, 8);
    EXPECT_EQ(d.x.size(), 8 * E);
    EXPECT_EQ(h.x.size(), 8 * E);
    // The host model's buffers exist; the device model's are empty.
    EXPECT_EQ(h.xn.size(), 8 * E);
    EXPECT_FALSE(h.act.empty());
    EXPECT_FALSE(h.router.empty());
    EXPECT_TRUE(d.xn.empty() && d.q.empty() && d.attn.empty() && d.attn_split.empty() && d.gate.empty() &&
                d.act.empty() && d.router.empty() && d.arch.empty());
}

}  // namespace
}  // namespace sluice
