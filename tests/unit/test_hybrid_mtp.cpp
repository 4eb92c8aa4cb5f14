// MTP drafting for the hybrid Qwen MoEs (issue 11 item 3) on the golden fixtures' F32 GGUFs,
// whose MTP (nextn) block holds random weights (tools/make_hybrid_golden.py):
//   - the head computes the equations of spec/mtp.h: checked against a scalar double-precision
//     re-implementation written here from the equations and llama.cpp's tensor names (it shares
//     no code with src/: it reads the F32 tensors itself);
//   - the head's drafts and logits are a function of the committed context alone: a drafted
//     generation's every proposal (its rows of rejected drafts rolled back, its windows folded in
//     one by one) equals, bit for bit, the proposal of a fresh head fed that context in one prefill;
//   - drafted = serial, token for token, greedy and sampled, with windows cut by max_tokens and by
//     a stop callback.
#include "core/error.h"
#include "io/model_file.h"
#include "models/hybrid_mtp.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/mtp_drafter.h"
#include "spec/verifier.h"

#include "mtp_recording.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice {
namespace {

constexpr int k_ctx = 96, k_rows = 16;

std::filesystem::path fixture(const std::string& name) {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures" / name / "converted-F32.gguf";
}

std::vector<int32_t> tokens(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 53 + salt * 97 + 5) % 380;
    return t;
}

// ---- the scalar reference -------------------------------------------------------------------

struct ref_mtp {
    const model_file& f;
    int E, V, n_head, n_kv, hd, n_rot, n_exp, k_used, ff, ff_sh;
    double eps, base;
    bool renorm;
    std::vector<std::vector<double>> K, Vc;   // per position [n_kv*hd]

    explicit ref_mtp(const model_file& file, const model_hparams& hp)
        : f(file), E(hp.n_embd), V(hp.n_vocab), n_head(hp.n_head), n_kv(hp.n_kv_head), hd(hp.head_dim),
          n_rot(hp.rope.n_rot), n_exp(hp.n_expert), k_used(hp.n_expert_used), ff(hp.n_ff_exp), ff_sh(hp.n_ff_shexp),
          eps(hp.rms_eps), base(hp.rope.freq_base), renorm(hp.expert_weights_norm) {}

    const float* t(const std::string& name) const {
        const tensor_view& tv = f.require(name);
        EXPECT_EQ(tv.type, dtype::f32) << name;
        return reinterpret_cast<const float*>(tv.data);
    }
    std::string b(const std::string& what) const { return "blk.4." + what; }   // the fixtures' MTP block

    std::vector<double> rms(const std::vector<double>& x, const float* w) const {
        double ss = 0;
        for (double v : x) ss += v * v;
        const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
        return y;
    }
    // y = W x for W with ne = {n_in, n_out} (row o holds n_in weights).
    static std::vector<double> mat(const float* W, const std::vector<double>& x, int n_out) {
        std::vector<double> y(size_t(n_out), 0.0);
        for (int o = 0; o < n_out; ++o)
            for (size_t i = 0; i < x.size(); ++i) y[size_t(o)] += double(W[size_t(o) * x.size() + i]) * x[i];
        return y;
    }
    static double sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

    // One row at position pos (== positions so far): returns h' and fills logits.
    std::vector<double> row(const std::vector<double>& hidden, int32_t tok, int pos, std::vector<double>& logits) {
        const float* emb = t("token_embd.weight");   // tied fixtures, no nextn.embed_tokens
        std::vector<double> e(emb + size_t(tok) * E, emb + size_t(tok + 1) * E);
        std::vector<double> cat = rms(e, t(b("nextn.enorm.weight")));
        std::vector<double> hn = rms(hidden, t(b("nextn.hnorm.weight")));
        cat.insert(cat.end(), hn.begin(), hn.end());   // embedding first, then the hidden state
        std::vector<double> x = mat(t(b("nextn.eh_proj.weight")), cat, E);

        // Gated attention: q|gate per head, q/k RMSNorm, NeoX rope on the first n_rot dims.
        std::vector<double> xn = rms(x, t(b("attn_norm.weight")));
        std::vector<double> qg = mat(t(b("attn_q.weight")), xn, 2 * n_head * hd);
        std::vector<double> k = mat(t(b("attn_k.weight")), xn, n_kv * hd);
        std::vector<double> v = mat(t(b("attn_v.weight")), xn, n_kv * hd);
        auto rope = [&](double* h) {
            for (int i = 0; i < n_rot / 2; ++i) {
                const double th = pos * std::pow(base, -2.0 * i / n_rot);
                const double a = h[i], c = h[i + n_rot / 2];
                h[i] = a * std::cos(th) - c * std::sin(th);
                h[i + n_rot / 2] = a * std::sin(th) + c * std::cos(th);
            }
        };
        for (int h = 0; h < n_kv; ++h) {
            std::vector<double> kh(k.begin() + h * hd, k.begin() + (h + 1) * hd);
            kh = rms(kh, t(b("attn_k_norm.weight")));
            rope(kh.data());
            std::copy(kh.begin(), kh.end(), k.begin() + h * hd);
        }
        K.push_back(k);
        Vc.push_back(v);
        std::vector<double> att(size_t(n_head * hd), 0.0);
        for (int h = 0; h < n_head; ++h) {
            std::vector<double> q(qg.begin() + h * 2 * hd, qg.begin() + h * 2 * hd + hd);
            q = rms(q, t(b("attn_q_norm.weight")));
            rope(q.data());
            const int kvh = h / (n_head / n_kv);
            std::vector<double> sc(K.size());
            double mx = -1e300;
            for (size_t p = 0; p < K.size(); ++p) {
                double s = 0;
                for (int d = 0; d < hd; ++d) s += q[size_t(d)] * K[p][size_t(kvh * hd + d)];
                sc[p] = s / std::sqrt(double(hd));
                mx = std::max(mx, sc[p]);
            }
            double den = 0;
            for (double& s : sc) den += (s = std::exp(s - mx));
            for (size_t p = 0; p < K.size(); ++p)
                for (int d = 0; d < hd; ++d) att[size_t(h * hd + d)] += sc[p] / den * Vc[p][size_t(kvh * hd + d)];
            for (int d = 0; d < hd; ++d) att[size_t(h * hd + d)] *= sigm(qg[size_t(h * 2 * hd + hd + d)]);
        }
        std::vector<double> o = mat(t(b("attn_output.weight")), att, E);
        for (int i = 0; i < E; ++i) x[size_t(i)] += o[size_t(i)];

        // MoE: softmax router, top-k (renormalised), SwiGLU experts, sigmoid-gated shared expert.
        xn = rms(x, t(b("post_attention_norm.weight")));
        std::vector<double> r = mat(t(b("ffn_gate_inp.weight")), xn, n_exp);
        const double rm = *std::max_element(r.begin(), r.end());
        double rs = 0;
        for (double& z : r) rs += (z = std::exp(z - rm));
        for (double& z : r) z /= rs;
        std::vector<int> ids(static_cast<size_t>(n_exp));
        for (int i = 0; i < n_exp; ++i) ids[size_t(i)] = i;
        std::stable_sort(ids.begin(), ids.end(), [&](int a, int c) { return r[size_t(a)] > r[size_t(c)]; });
        double wsum = 0;
        for (int j = 0; j < k_used; ++j) wsum += r[size_t(ids[size_t(j)])];
        auto swiglu = [&](const float* wg, const float* wu, const float* wd, int n_ff) {
            std::vector<double> a = mat(wg, xn, n_ff), c = mat(wu, xn, n_ff);
            for (int i = 0; i < n_ff; ++i) a[size_t(i)] = a[size_t(i)] * sigm(a[size_t(i)]) * c[size_t(i)];
            return mat(wd, a, E);
        };
        std::vector<double> y(size_t(E), 0.0);
        for (int j = 0; j < k_used; ++j) {
            const int ex = ids[size_t(j)];
            const double w = renorm ? r[size_t(ex)] / wsum : r[size_t(ex)];
            std::vector<double> ye = swiglu(t(b("ffn_gate_exps.weight")) + size_t(ex) * E * ff,
                                            t(b("ffn_up_exps.weight")) + size_t(ex) * E * ff,
                                            t(b("ffn_down_exps.weight")) + size_t(ex) * ff * E, ff);
            for (int i = 0; i < E; ++i) y[size_t(i)] += w * ye[size_t(i)];
        }
        std::vector<double> sh = swiglu(t(b("ffn_gate_shexp.weight")), t(b("ffn_up_shexp.weight")),
                                        t(b("ffn_down_shexp.weight")), ff_sh);
        const double g = sigm(mat(t(b("ffn_gate_inp_shexp.weight")), xn, 1)[0]);
        for (int i = 0; i < E; ++i) x[size_t(i)] += y[size_t(i)] + g * sh[size_t(i)];

        std::vector<double> hout = rms(x, t(b("nextn.shared_head_norm.weight")));
        logits = mat(t("token_embd.weight"), hout, V);
        return hout;
    }
};

double rel_err(const float* got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

int argmax(const float* l, int n) { return int(std::max_element(l, l + n) - l); }
int argmax(const std::vector<double>& l) { return int(std::max_element(l.begin(), l.end()) - l.begin()); }

class hybrid_mtp : public ::testing::TestWithParam<const char*> {};

TEST_P(hybrid_mtp, head_computes_the_equations_of_a_scalar_reference) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    const model_hparams& hp = m->hparams();
    session_options so;
    so.n_ctx = k_ctx;
    so.prefill_chunk = k_rows;
    session s(*m, so);
    auto head = make_mtp_head(*m, s.pool(), k_ctx, k_rows);
    ASSERT_TRUE(head);
    const int L = 10, E = hp.n_embd;
    const std::vector<int32_t> ids = tokens(L + 1, 3);
    s.forward_all(std::span<const int32_t>(ids.data(), size_t(L)));
    std::vector<float> hid(size_t(L) * size_t(E));
    head->target_hidden(s.residual_rows(), L, hid.data());

    ref_mtp ref(*f, hp);
    const float* onorm = reinterpret_cast<const float*>(f->require("output_norm.weight").data);
    // Row by row against the reference (positions 0..L-1, the token after each).
    std::vector<double> want_logits, want_h;
    for (int p = 0; p < L; ++p) {
        std::vector<double> res(s.residual_rows() + size_t(p) * E, s.residual_rows() + size_t(p + 1) * E);
        std::vector<double> h = ref.rms(res, onorm);
        ASSERT_LT(rel_err(hid.data() + size_t(p) * E, h), 1e-4) << "target hidden (output norm) at " << p;
        want_h = ref.row(h, ids[size_t(p + 1)], p, want_logits);
        head->forward(hid.data() + size_t(p) * E, std::span<const int32_t>(&ids[size_t(p + 1)], 1), p, true);
        EXPECT_LT(rel_err(head->out_hidden(0), want_h), 1e-4) << "h' at " << p;
        EXPECT_LT(rel_err(head->logits(), want_logits), 1e-4) << "logits at " << p;
        EXPECT_EQ(argmax(head->logits(), hp.n_vocab), argmax(want_logits)) << p;
    }
    // The same rows in one forward give the bits of the one-row forwards (E1 for the head).
    std::vector<float> last(head->logits(), head->logits() + hp.n_vocab);
    std::vector<float> h_last(head->out_hidden(0), head->out_hidden(0) + E);
    head->truncate(0);
    head->forward(hid.data(), std::span<const int32_t>(ids.data() + 1, size_t(L)), 0, true);
    EXPECT_EQ(std::memcmp(head->logits(), last.data(), last.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(head->out_hidden(L - 1), h_last.data(), h_last.size() * sizeof(float)), 0);

    // The drafter pairs each position's target hidden state with the token after it (prompt
    // prefill, then the pending row at propose), then chains on its own h' and draft: draft 1
    // comes from the reference's row L-1 above, draft 2 from the reference's row L.
    session s2(*m, so);
    auto head2 = make_mtp_head(*m, s2.pool(), k_ctx, k_rows);
    mtp_drafter_params mp;
    mp.max_draft = 2;
    mtp_drafter d(s2, *head2, sampling_params::greedy(), mp);
    d.prefill(std::span<const int32_t>(ids.data(), size_t(L)));
    std::vector<int32_t> out(4);
    ASSERT_EQ(d.propose(ids, 1, out), 1);
    EXPECT_EQ(std::memcmp(head2->logits(), last.data(), last.size() * sizeof(float)), 0);
    EXPECT_EQ(out[0], argmax(want_logits));
    ASSERT_EQ(d.propose(ids, 2, out), 2);   // the same context again: the same rows, then the chain
    EXPECT_EQ(out[0], argmax(want_logits));
    std::vector<double> chain_logits;
    ref.row(want_h, out[0], L, chain_logits);
    EXPECT_LT(rel_err(head2->logits(), chain_logits), 1e-4) << "chained draft";
    EXPECT_EQ(out[1], argmax(chain_logits));
}

using run_result = mtp_generation;

// A generation through the MTP drafter (max_window 1: serial, the drafter unused).
run_result generate(model& m, const std::vector<int32_t>& prompt, const sampling_params& sp, int max_window,
                    int max_tokens, int stop_after = -1) {
    return generate_with_mtp(m, prompt, sp, max_window, max_tokens, k_ctx, k_rows, stop_after);
}

// A session of the model with its MTP head and a drafter over both (max_draft 4), fed through
// the session: what `sluice run --spec mtp` builds.
struct session_drafter {
    session s;
    std::unique_ptr<mtp_head> head;
    mtp_drafter d;
    session_drafter(model& m, const sampling_params& sp, const session_options& so)
        : s(m, so), head(make_mtp_head(m, s.pool(), k_ctx, k_rows)), d(s, *head, sp, params()) {}
    static mtp_drafter_params params() {
        mtp_drafter_params mp;
        mp.max_draft = 4;
        return mp;
    }
};

session_options drafter_session_options() {
    session_options so;
    so.n_ctx = k_ctx;
    so.prefill_chunk = k_rows;
    return so;
}

TEST_P(hybrid_mtp, drafts_are_a_function_of_the_committed_context) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    const sampling_params sp = sampling_params::greedy();
    run_result r = generate(*m, tokens(13, 1), sp, /*max_window=*/5, /*max_tokens=*/30);
    ASSERT_GE(r.calls.size(), 8u);
    for (const auto& c : r.calls) {
        // A fresh session and head fed the context in one prefill.
        session_drafter sd(*m, sp, drafter_session_options());
        sd.d.prefill(std::span<const int32_t>(c.context.data(), c.context.size() - 1));
        std::vector<int32_t> out(16);
        const int32_t n = sd.d.propose(c.context, c.max_n, out);
        ASSERT_EQ(std::vector<int32_t>(out.begin(), out.begin() + n), c.drafts) << "context " << c.context.size();
        ASSERT_EQ(std::memcmp(sd.head->logits(), c.logits.data(), c.logits.size() * sizeof(float)), 0)
            << "context " << c.context.size();
    }
}

// A prefix-cache checkpoint of the drafter (the head's rows and the pending hidden state) restored
// into a fresh head gives the drafts and logits bits of the drafter it was saved from.
TEST_P(hybrid_mtp, a_saved_drafter_restores_to_the_same_drafts) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    const sampling_params sp = sampling_params::greedy();
    const std::vector<int32_t> ctx = tokens(19, 3);
    const int32_t n = static_cast<int32_t>(ctx.size()) - 1;   // committed rows: all but the pending token
    session_drafter sd(*m, sp, drafter_session_options());
    mtp_drafter& d = sd.d;
    const mtp_head* head = sd.head.get();
    d.prefill(std::span<const int32_t>(ctx.data(), static_cast<size_t>(n)));
    std::vector<float> saved;
    EXPECT_FALSE(d.save(n - 1, saved));   // not the drafter's length
    EXPECT_TRUE(saved.empty());
    ASSERT_TRUE(d.save(n, saved));
    ASSERT_EQ(saved.size(), static_cast<size_t>(n - 1) * static_cast<size_t>(head->row_floats()) + size_t(m->hparams().n_embd));
    std::vector<int32_t> want(16), got(16);
    const int32_t nw = d.propose(ctx, 4, want);
    const std::vector<float> want_logits(head->logits(), head->logits() + m->hparams().n_vocab);

    auto head2 = make_mtp_head(*m, sd.s.pool(), k_ctx, k_rows);
    mtp_drafter d2(*head2, sp, session_drafter::params());
    EXPECT_THROW(d2.restore(std::span<const float>(saved).first(saved.size() - 1), n), error);
    d2.restore(saved, n);
    EXPECT_EQ(head2->n_past(), n - 1);
    const int32_t ng = d2.propose(ctx, 4, got);
    ASSERT_EQ(ng, nw);
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + ng), std::vector<int32_t>(want.begin(), want.begin() + nw));
    EXPECT_EQ(std::memcmp(head2->logits(), want_logits.data(), want_logits.size() * sizeof(float)), 0);
}

TEST_P(hybrid_mtp, drafted_equals_serial) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    const std::vector<sampling_params> modes = greedy_and_sampled();
    int64_t proposed = 0;
    for (size_t mi = 0; mi < modes.size(); ++mi)
        for (int salt = 0; salt < 3; ++salt) {
            const std::vector<int32_t> prompt = tokens(4 + 5 * salt, salt + 10);
            for (auto [max_tokens, stop_after] : {std::pair{20, -1}, std::pair{7, -1}, std::pair{20, 9}}) {
                const run_result serial = generate(*m, prompt, modes[mi], 1, max_tokens, stop_after);
                for (int w : {2, 3, 5}) {
                    const run_result drafted = generate(*m, prompt, modes[mi], w, max_tokens, stop_after);
                    EXPECT_EQ(drafted.res.tokens, serial.res.tokens) << "mode " << mi << " salt " << salt << " window " << w;
                    EXPECT_EQ(drafted.res.token_sha, serial.res.token_sha);
                    EXPECT_EQ(drafted.res.reason, serial.res.reason);
                    proposed += drafted.res.stats.drafts_proposed;
                }
            }
        }
    EXPECT_GT(proposed, 0);   // the windows carried drafts
}

TEST(hybrid_mtp_head, absent_for_models_without_nextn_layers) {
    auto f = model_file::open(std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures/qwen3moe_e8_k2/model-Q8_0.gguf");
    auto m = load_model(*f, {});
    thread_pool_options po;
    po.pin = false;
    thread_pool pool(1, po);
    EXPECT_EQ(make_mtp_head(*m, pool, 32, 4), nullptr);
}

TEST(spec_stats, acceptance_per_depth) {
    spec_stats st;
    st.add_window(4, 3, 1, 2);   // drafts 1..3 proposed, draft 1 kept
    st.add_window(3, 2, 2, 3);   // drafts 1..2 proposed and kept
    st.add_window(1, 0, 0, 1);   // no drafts
    EXPECT_EQ(st.proposed_at[0], 2);
    EXPECT_EQ(st.accepted_at[0], 2);
    EXPECT_EQ(st.proposed_at[1], 2);
    EXPECT_EQ(st.accepted_at[1], 1);
    EXPECT_EQ(st.proposed_at[2], 1);
    EXPECT_EQ(st.accepted_at[2], 0);
    EXPECT_EQ(st.proposed_at[3], 0);
    EXPECT_DOUBLE_EQ(st.acceptance_at(2), 0.5);
    // Windows by their rows (the bench sums each size's cost from these).
    EXPECT_EQ(st.windows_of_rows[1], 1);
    EXPECT_EQ(st.windows_of_rows[3], 1);
    EXPECT_EQ(st.windows_of_rows[4], 1);
    EXPECT_EQ(st.windows_of_rows[2] + st.windows_of_rows[5] + st.windows_of_rows[16], 0);
    EXPECT_NE(st.summary().find("acceptance by depth 1: 1.000 (2/2), 2: 0.500 (1/2), 3: 0.000 (0/1)"),
              std::string::npos)
        << st.summary();
}

INSTANTIATE_TEST_SUITE_P(fixtures, hybrid_mtp, ::testing::Values("qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"),
                         [](const auto& i) { return std::string(i.param); });

}  // namespace
}  // namespace sluice
