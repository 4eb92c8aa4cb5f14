// The MTP drafter's parts for the server and the trimmed draft vocabulary (issue 11), on the
// golden hybrid fixtures (random MTP layer):
//   - a drafter fed by absorb() (the serving engine's way: rows of its batched forward) proposes,
//     bit for bit, what a session-fed drafter proposes for the same context;
//   - a head with a trimmed draft vocabulary gives each listed id the bits the whole head gives it,
//     and -inf to every other id (so no draft can fall outside the list);
//   - a malformed or mismatched vocabulary file is rejected with the line and what was expected.
#include "core/error.h"
#include "io/model_file.h"
#include "models/hybrid_mtp.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/draft_vocab.h"
#include "spec/mtp_drafter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice {
namespace {

constexpr int k_ctx = 64, k_rows = 16;

std::filesystem::path fixture(const std::string& name) {
    return std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/golden/fixtures" / name / "converted-F32.gguf";
}

std::vector<int32_t> tokens(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 41 + salt * 89 + 3) % 380;
    return t;
}

class mtp_serving_parts : public ::testing::TestWithParam<const char*> {};

TEST_P(mtp_serving_parts, absorb_fed_drafter_proposes_what_a_session_fed_one_proposes) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    session_options so;
    so.n_ctx = k_ctx;
    so.prefill_chunk = k_rows;
    for (int len : {2, 9, 15}) {
        const std::vector<int32_t> ctx = tokens(len, len);
        const std::span<const int32_t> head_of(ctx.data(), ctx.size() - 1);
        session s1(*m, so);
        auto h1 = make_mtp_head(*m, s1.pool(), k_ctx, k_rows);
        mtp_drafter_params mp;
        mp.max_draft = 4;
        mtp_drafter d1(s1, *h1, sampling_params::greedy(), mp);
        d1.prefill(head_of);

        // The absorb() way, the prompt in two forwards of a batch of its own.
        session s2(*m, so);
        auto h2 = make_mtp_head(*m, s2.pool(), k_ctx, /*max_rows=*/3);   // folds rows in pieces
        mtp_drafter d2(*h2, sampling_params::greedy(), mp);
        EXPECT_THROW(d2.target(), error);
        const size_t cut = head_of.size() / 2;
        if (cut > 0) {
            s2.forward_all(head_of.subspan(0, cut));
            d2.absorb(head_of.subspan(0, cut), 0, static_cast<int32_t>(cut), s2.residual_rows());
        }
        s2.forward_all(head_of.subspan(cut));
        d2.absorb(head_of.subspan(cut), static_cast<int32_t>(cut), static_cast<int32_t>(head_of.size() - cut),
                  s2.residual_rows());

        std::vector<int32_t> o1(4), o2(4);
        ASSERT_EQ(d1.propose(ctx, 4, o1), 4);
        ASSERT_EQ(d2.propose(ctx, 4, o2), 4);
        EXPECT_EQ(o1, o2) << "context " << len;
        EXPECT_EQ(std::memcmp(h1->logits(), h2->logits(), sizeof(float) * size_t(h1->n_vocab())), 0);
        // Rows that do not continue the absorbed ones are refused.
        EXPECT_THROW(d2.absorb(ctx, len + 3, 1, s2.residual_rows()), error);
    }
}

TEST_P(mtp_serving_parts, trimmed_head_gives_listed_ids_the_whole_heads_bits) {
    auto f = model_file::open(fixture(GetParam()));
    auto m = load_model(*f, {});
    const int32_t V = m->hparams().n_vocab, E = m->hparams().n_embd;
    draft_vocab v;
    v.n_vocab = V;
    v.ids = {5, 383, 17, 0, 100, 42, 250};
    auto rows = gather_mtp_draft_rows(*m, v);
    ASSERT_TRUE(rows);
    EXPECT_EQ(rows->matrix.ne[1], 7);
    session_options so;
    so.n_ctx = k_ctx;
    session s(*m, so);
    auto full = make_mtp_head(*m, s.pool(), k_ctx, k_rows);
    auto trimmed = make_mtp_head(*m, s.pool(), k_ctx, k_rows, rows);
    const std::vector<int32_t> ids = tokens(9, 2);
    s.forward_all(std::span<const int32_t>(ids.data(), 8));
    std::vector<float> hid(size_t(8) * size_t(E));
    full->target_hidden(s.residual_rows(), 8, hid.data());
    for (int p = 0; p < 8; ++p) {
        full->forward(hid.data() + size_t(p) * E, std::span<const int32_t>(&ids[size_t(p + 1)], 1), p, true);
        trimmed->forward(hid.data() + size_t(p) * E, std::span<const int32_t>(&ids[size_t(p + 1)], 1), p, true);
        for (int32_t id = 0; id < V; ++id) {
            const bool listed = std::find(v.ids.begin(), v.ids.end(), id) != v.ids.end();
            if (listed)
                EXPECT_EQ(std::memcmp(&full->logits()[id], &trimmed->logits()[id], sizeof(float)), 0) << p << " " << id;
            else
                EXPECT_TRUE(std::isinf(trimmed->logits()[id]) && trimmed->logits()[id] < 0) << p << " " << id;
        }
    }
    // A vocabulary of another size is refused.
    v.n_vocab = V + 1;
    EXPECT_THROW(gather_mtp_draft_rows(*m, v), error);
}

INSTANTIATE_TEST_SUITE_P(fixtures, mtp_serving_parts, ::testing::Values("qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"),
                         [](const auto& i) { return std::string(i.param); });

std::string parse_error(const std::string& text, int32_t n_vocab = 10) {
    try {
        parse_draft_vocab(text, n_vocab, "v.txt");
    } catch (const error& e) {
        return e.what();
    }
    return "(accepted)";
}

TEST(draft_vocab, well_formed_file_is_read_in_order) {
    const draft_vocab v = parse_draft_vocab("# made by hand\nsluice-draft-vocab 1\r\nn_vocab 10\ncount 3\n7\n\n0\n9\n", 10, "v");
    EXPECT_EQ(v.n_vocab, 10);
    EXPECT_EQ(v.ids, (std::vector<int32_t>{7, 0, 9}));
}

TEST(draft_vocab, malformed_or_mismatched_file_is_rejected) {
    const std::string h = "sluice-draft-vocab 1\n";
    EXPECT_NE(parse_error("").find("expected the header 'sluice-draft-vocab 1'"), std::string::npos);
    EXPECT_NE(parse_error("sluice-draft-vocab 2\nn_vocab 10\ncount 1\n1\n").find("line 1"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 11\ncount 1\n1\n").find("vocabulary of 11 ids but the model has 10"),
              std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab ten\ncount 1\n1\n").find("line 2: expected 'n_vocab <integer>'"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 0\n").find("count 0: expected 1..10"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 2\n1\n10\n").find("line 5: '10': expected a token id in [0, 10)"),
              std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 2\n1\n-1\n").find("line 5: '-1'"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 2\n1\n1\n").find("id 1 is listed twice"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 2\n1\n").find("lists 1 ids but its count says 2"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 1\n1\n2\n").find("more ids than its count of 1"), std::string::npos);
    EXPECT_NE(parse_error(h + "n_vocab 10\ncount 1\n1 2\n").find("expected a token id"), std::string::npos);
    EXPECT_THROW(read_draft_vocab("/nonexistent/draft-vocab", 10), error);
}

}  // namespace
}  // namespace sluice
