// The serving engine (include/sluice/serving.h): one scheduler thread runs steps; a step puts
// the next rows of every active request into one batched forward (model::forward_batch):
// prefill chunks of new requests, within prefill_rows_per_step so decoding never stalls, and a
// verify window per decoding request (its pending token, plus drafts when it drafts). Each
// window is then walked exactly as the speculative decoder walks it (src/spec/verifier.cpp):
// row i's token is the keyed pick at its absolute position with the committed context as
// history, a draft is kept only while it equals its row's pick, and the KV rows after the last
// kept one are rolled back. Since every row's logits are the bits its solo run gives (E1), a
// request's tokens are its solo run's tokens, whatever else shares its steps.
//
// Draft depth: a request with a drafter (and generate_params::adaptive_depth) chooses the drafts
// of each window with its own depth_policy (src/spec/depth_policy.h), as `sluice run --spec`
// does: the cost of windows of 1..16 rows is measured once per engine (before the first such
// request's first window) and shared, and each request keeps its own acceptance, so a request
// whose drafts stop paying runs serial windows until they pay again. The depth changes only the
// rows of a step, never a token.
//
// MTP drafting (hybrid models whose file has an MTP layer): each request owns an MTP head (its
// own one-layer KV cache and buffers) and an mtp_drafter fed after every step with its segment's
// kept rows and their residual stream, which the batched forward leaves in the scratch
// (hybrid_model::forward_batch), so no two requests share MTP state. The output rows of a
// trimmed draft vocabulary are gathered once per engine and shared read-only.
//
// After a request, its committed KV rows go to the prefix cache (src/kv/prefix_cache.h); a
// request whose prompt shares a prefix with a checkpoint restores those rows and prefills only
// the rest (E5).
#include "runtime/serving_engine_impl.h"

#include <utility>

namespace sluice {

using namespace serving_detail;


namespace {

// One sequence of the target model as a verify_target over a scratch KV cache, for the depth
// policy's calibration: windows at position 0, never kept.
class scratch_target final : public verify_target {
public:
    scratch_target(model& net, kv_cache& kv, forward_scratch& s) : net_(net), kv_(kv), s_(s) {}
    int32_t n_vocab() const override { return net_.hparams().n_vocab; }
    int32_t n_past() const override { return 0; }
    void forward(std::span<const int32_t> tokens, float* logits) override {
        net_.forward(tokens, 0, kv_, s_, logits);   // pos0 0 rolls back the last window's rows
    }
    void commit(int32_t) override { kv_.truncate(0); }   // calibration keeps nothing

private:
    model& net_;
    kv_cache& kv_;
    forward_scratch& s_;
};

}  // namespace

// Times windows of 1..16 rows alone (median of interleaved rounds, src/spec/depth_policy.cpp) on
// a KV cache of its own: nothing of it stays.
void serving_engine::impl::calibrate_costs(int32_t token) {
    const auto t0 = steady::now();
    kv_cache kv(target.net->kv_shape_for(k_max_window));
    scratch_target t(*target.net, kv, scratch);
    costs.calibrate(t, std::span<float>(logits.data(), static_cast<size_t>(k_max_window) * static_cast<size_t>(n_vocab)),
                    token);
    costs_measured = true;
    std::lock_guard<std::mutex> lk(mu);
    m.depth_calibration_seconds = seconds(t0, steady::now());
}

// Drafts for this step's window of a decoding request, at most `cap` (> 0), written to
// r.proposal; the verifier's choice (src/spec/verifier.cpp) with the request's own policy.
int32_t serving_engine::impl::choose_drafts(request_state& r, int32_t cap) {
    auto valid_prefix = [&](int32_t n, int32_t limit) {
        n = std::clamp(n, 0, limit);
        for (int32_t i = 0; i < n; ++i)
            if (r.proposal[size_t(i)] < 0 || r.proposal[size_t(i)] >= n_vocab) return i;
        return n;
    };
    if (!r.use_policy) return valid_prefix(r.drafts->propose(r.context, cap, r.proposal), cap);
    r.policy.adopt_costs(costs);
    if (r.drafts->cheap_proposals()) {
        // The longest proposal, cut draft by draft from the drafter's confidence.
        int32_t n_d = valid_prefix(r.drafts->propose(r.context, cap, r.proposal), cap);
        if (n_d > 0) {
            std::span<double> keep(r.confidence.data(), size_t(n_d));
            n_d = r.drafts->confidence(keep) ? r.policy.choose_for(keep) : std::min(n_d, r.policy.choose());
            if (n_d == 0) ++r.spec.steps_drafting_off;
        }
        return n_d;
    }
    const int32_t depth = std::min(cap, r.policy.choose());
    const bool drafted_last = std::exchange(r.drafted_last, depth > 0);
    if (depth == 0) {
        ++r.spec.steps_drafting_off;
        return 0;
    }
    // Timed as the verifier times it (src/spec/verifier.cpp says which windows count).
    const auto d0 = steady::now();
    const int32_t n_d = valid_prefix(r.drafts->propose(r.context, depth, r.proposal), depth);
    if (n_d > 0 && drafted_last) r.policy.record_draft_cost(seconds(d0, steady::now()), n_d);
    return n_d;
}

serving_engine::serving_engine(std::unique_ptr<impl> p) : p_(std::move(p)) {}

serving_engine::~serving_engine() { shutdown(true); }

std::unique_ptr<serving_engine> serving_engine::open(const serving_options& o) {
    if (o.max_batch < 1 || o.max_batch > 256) fail("serving: max_batch: expected 1..256, got {}", o.max_batch);
    if (o.max_queue < 0) fail("serving: max_queue: expected >= 0, got {}", o.max_queue);
    if (o.prefill_rows_per_step < 0 || o.prefill_rows_per_step > k_max_prefill_rows_per_step)
        fail("serving: prefill_rows_per_step: expected 1..{} (0: the model's prefill forward), got {}",
             k_max_prefill_rows_per_step, o.prefill_rows_per_step);
    auto p = std::make_unique<impl>();
    p->opt = o;
    const engine_options& eo = o.engine;
    const file_access access = eo.mmap ? file_access::map : file_access::read;
    p->target = open_target(eo);
    p->opt.engine.on_load_phase = nullptr;   // it may hold the caller's objects; loading is done
#ifdef SLUICE_HAVE_CUDA
    p->experts_split = eo.gpu >= 0 && cuda_placement_of(*p->target.net).split;
#endif
    if (o.prefill_rows_per_step == 0) p->opt.prefill_rows_per_step = default_prefill_rows(*p->target.net, eo.gpu);
    const model_hparams& hp = p->target.net->hparams();
    p->n_ctx = eo.n_ctx > 0 ? eo.n_ctx : std::min(hp.n_ctx_train, 4096);
    p->n_vocab = hp.n_vocab;
    if (!eo.draft_model_path.empty()) {
        p->draft = std::make_unique<loaded_model>(loaded_model::open(eo.draft_model_path, eo.n_ctx, {}, access));
        check_vocab_compatible(p->target.vocab(), p->draft->vocab());
        if (p->draft->net->hparams().n_vocab != hp.n_vocab)
            fail("draft model: {}: its output has {} logits but the target's has {}", eo.draft_model_path.string(),
                 p->draft->net->hparams().n_vocab, hp.n_vocab);
    }
    for (int32_t id = 0; id < p->target.tok->n_vocab(); ++id)
        if (p->target.tok->is_end_of_generation(id)) p->eog.push_back(id);
    p->has_mtp = has_mtp_head(*p->target.net);
    if (p->has_mtp) {
        const std::filesystem::path model_path = p->target.path;
        const std::filesystem::path vp =
            !eo.draft_vocab_path.empty() ? eo.draft_vocab_path : default_draft_vocab_path(model_path);
        if (!eo.draft_vocab_path.empty() || std::filesystem::exists(vp)) {
            p->draft_rows = gather_mtp_draft_rows(*p->target.net, read_draft_vocab(vp, hp.n_vocab));
            p->mtp_summary = fmt::format("MTP head, draft vocabulary of {} of {} ids ({})", p->draft_rows->ids.size(),
                                         hp.n_vocab, vp.string());
        } else {
            p->mtp_summary = fmt::format("MTP head, whole vocabulary ({} ids)", hp.n_vocab);
        }
    } else if (!eo.draft_vocab_path.empty()) {
        fail("draft vocabulary {}: the model has no MTP head to use it", eo.draft_vocab_path.string());
    }

    const int threads = eo.n_threads > 0 ? eo.n_threads : usable_cpus();
    p->numa = setup_numa(eo.numa, threads, *p->target.file);
    thread_pool_options po;
    po.numa = p->numa.topology;
    p->pool = std::make_unique<thread_pool>(threads, po);
    const int window_rows = o.max_batch * k_max_window;
    p->scratch = p->target.net->make_scratch(p->opt.prefill_rows_per_step + window_rows, *p->pool);
    p->logits.resize(static_cast<size_t>(window_rows) * static_cast<size_t>(p->n_vocab));
    p->batch.reserve(static_cast<size_t>(o.max_batch));
    p->in_batch.reserve(static_cast<size_t>(o.max_batch));
    p->active.reserve(static_cast<size_t>(o.max_batch));
    p->admitted.reserve(static_cast<size_t>(o.max_batch));
    p->cache = std::make_unique<prefix_cache>(o.prefix_cache_bytes);
    p->m.ready = true;
    p->m.phase = "ready";
    impl* raw = p.get();
    p->worker = std::thread([raw] { raw->run(); });
    return std::unique_ptr<serving_engine>(new serving_engine(std::move(p)));
}

int64_t serving_engine::submit(completion_request r, token_callback on_token, done_callback on_done) {
    auto st = std::make_unique<request_state>();
    st->req = std::move(r);
    st->on_token = std::move(on_token);
    st->on_done = std::move(on_done);
    {
        std::lock_guard<std::mutex> lk(p_->mu);
        if (!p_->stopping) {
            // Every request passes through the queue, so it holds max_queue waiting requests
            // beyond the batch's free slots (with max_queue 0 an idle server still takes max_batch).
            const int64_t free_slots = std::max<int64_t>(0, p_->opt.max_batch - p_->slots_taken);
            if (static_cast<int64_t>(p_->queue.size()) >= p_->opt.max_queue + free_slots)
                return std::max<int64_t>(static_cast<int64_t>(p_->queue.size()), 1);
            p_->queue.push_back(std::move(st));
            p_->m.queue_depth = static_cast<int64_t>(p_->queue.size());
            p_->cv.notify_one();
            return 0;
        }
    }
    // Shutting down: the request ends at once, on this thread.
    completion_result res;
    res.finish_reason = "error";
    res.error = "the engine is shutting down";
    if (st->on_done) st->on_done(res);
    return 0;
}

std::vector<int32_t> serving_engine::tokenize(std::string_view text, bool parse_special) const {
    const tokenizer& tok = *p_->target.tok;
    std::vector<int32_t> ids = tok.encode(text, parse_special, /*add_bos=*/true);
    // A rendered chat template may already start with the BOS text: never two BOS.
    if (ids.size() >= 2 && tok.bos() >= 0 && ids[0] == tok.bos() && ids[1] == tok.bos()) ids.erase(ids.begin());
    return ids;
}

std::string serving_engine::token_text(int32_t id) const {
    return id < 0 ? std::string{} : p_->target.tok->text_of(id);
}
int32_t serving_engine::n_vocab() const { return p_->n_vocab; }
int32_t serving_engine::n_ctx() const { return p_->n_ctx; }
int serving_engine::prefill_rows_per_step() const { return p_->opt.prefill_rows_per_step; }
bool serving_engine::is_eog(int32_t id) const {
    return std::find(p_->eog.begin(), p_->eog.end(), id) != p_->eog.end();
}
std::string serving_engine::chat_template() const { return std::string(p_->target.tok->chat_template()); }
std::string serving_engine::bos_text() const {
    const int32_t b = p_->target.tok->bos();
    return b >= 0 ? p_->target.tok->token_bytes(b) : std::string();
}
std::string serving_engine::eos_text() const {
    const int32_t e = p_->target.tok->eos();
    return e >= 0 ? p_->target.tok->token_bytes(e) : std::string();
}
std::string serving_engine::model_name() const { return p_->target.path.filename().string(); }
std::string serving_engine::mtp_summary() const { return p_->mtp_summary; }

serving_metrics serving_engine::metrics() const {
    std::lock_guard<std::mutex> lk(p_->mu);
    return p_->m;
}

std::string serving_engine::placement_metrics_text() const {
    std::optional<placement::placement_metrics> pm;
    {
        std::lock_guard<std::mutex> lk(p_->mu);
        pm = p_->placement;
    }
    return pm ? pm->to_prometheus() : std::string();
}

void serving_engine::shutdown(bool cancel_in_flight) {
    {
        std::lock_guard<std::mutex> lk(p_->mu);
        if (!p_->stopping) p_->m.phase = "stopping";
        p_->stopping = true;
        p_->cancel_all = p_->cancel_all || cancel_in_flight;
        p_->cv.notify_all();
    }
    if (p_->worker.joinable() && p_->worker.get_id() != std::this_thread::get_id()) p_->worker.join();
    std::lock_guard<std::mutex> lk(p_->mu);
    p_->m.ready = false;
}

// ---- the scheduler thread ------------------------------------------------------------------

void serving_engine::impl::run() {
    for (;;) {
        bool cancel = false;
        {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] { return stopping || !queue.empty() || !active.empty(); });
            cancel = cancel_all;
            if (stopping && queue.empty() && active.empty()) break;
            // A request whose client went away while it waited leaves the queue now, not when a
            // slot frees: it held its queue place (429s for live clients) until then.
            for (auto it = queue.begin(); it != queue.end();) {
                if ((*it)->req.cancel && (*it)->req.cancel->load()) {
                    admitted.push_back(std::move(*it));
                    it = queue.erase(it);
                    ++slots_taken;   // finish() gives it back
                } else {
                    ++it;
                }
            }
            const size_t dropped = admitted.size();
            while (!queue.empty() &&
                   (cancel || active.size() + admitted.size() - dropped < static_cast<size_t>(opt.max_batch))) {
                admitted.push_back(std::move(queue.front()));
                queue.pop_front();
                ++slots_taken;
            }
            m.queue_depth = static_cast<int64_t>(queue.size());
        }
        for (auto& r : admitted) {
            if (cancel || (r->req.cancel && r->req.cancel->load())) {
                finish(*r, "cancelled", "cancelled");
            } else if (admit(*r)) {
                active.push_back(std::move(r));
            }
        }
        admitted.clear();
        // Cancellations: shutdown(true) and per-request flags end requests between steps.
        for (auto& r : active)
            if (cancel || (r->req.cancel && r->req.cancel->load())) finish(*r, "cancelled", "cancelled");
        std::erase_if(active, [](const auto& r) { return r->finished; });
        {
            std::lock_guard<std::mutex> lk(mu);
            m.active = static_cast<int64_t>(active.size());
        }
        if (active.empty()) continue;
        try {
            step();
        } catch (const std::exception& e) {
            // Not expected (windows are checked before the forward), but one failed step must
            // not take the scheduler down: its requests end with the error.
            for (request_state* r : in_batch)
                if (!r->finished) finish(*r, "error", "error", e.what());
        }
        std::erase_if(active, [](const auto& r) { return r->finished; });
        // Refreshed here too: after the last request ends the thread sleeps in cv.wait, and
        // the gauge must not keep showing the finished request until the next one arrives.
        std::lock_guard<std::mutex> lk(mu);
        m.active = static_cast<int64_t>(active.size());
    }
}

// Validates and sets up a request; on a bad one ends it with "error" and returns false.
bool serving_engine::impl::admit(request_state& r) {
    try {
        const completion_request& q = r.req;
        const generate_params& p = q.params;
        r.t_admit = steady::now();
        r.n_prompt = static_cast<int32_t>(q.prompt.size());
        if (r.n_prompt == 0) fail("the prompt is empty");
        for (size_t i = 0; i < q.prompt.size(); ++i)
            if (q.prompt[i] < 0 || q.prompt[i] >= n_vocab)
                fail("prompt token {} is {}: expected an id in [0, {})", i, q.prompt[i], n_vocab);
        if (r.n_prompt >= n_ctx)
            fail("the prompt has {} tokens but the context holds {}", r.n_prompt, n_ctx);
        if (q.top_logprobs < -1 || q.top_logprobs > k_max_top_logprobs)
            fail("top_logprobs: expected -1..{}, got {}", k_max_top_logprobs, q.top_logprobs);
        const bool drafting = p.drafter != drafter_kind::none;
        if (drafting && (p.max_window < 1 || p.max_window > k_max_window))
            fail("max_window: expected 1..{}, got {}", k_max_window, p.max_window);
        if (p.drafter == drafter_kind::draft_model && !draft)
            fail("the draft-model drafter needs a draft model (engine_options::draft_model_path)");
        if (p.drafter == drafter_kind::mtp && !has_mtp)
            fail("the MTP drafter needs a model whose file has MTP (nextn) layers (a qwen35moe or qwen3next file "
                 "converted with them); the served model has none");
        const int32_t room = n_ctx - r.n_prompt;
        r.max_tokens = p.n_predict < 0 ? room : std::min(p.n_predict, room);
        r.ctx_capped = p.n_predict < 0 || p.n_predict > room;

        sampling_params sp = sampling_params_of(p);
        sp.logit_bias = q.logit_bias;
        r.sampler = std::make_unique<keyed_sampler>(n_vocab, sp);

        // The KV holds every position a window can reach: the last generated token is never
        // forwarded and a window never drafts past max_tokens (n_prompt + max_tokens - 2).
        r.kv = std::make_unique<kv_cache>(target.net->kv_shape_for(r.n_prompt + std::max(r.max_tokens, 1)));
        // Hybrid models: a checkpoint restores with its recurrent state when all of it begins the
        // prompt (kv/prefix_cache.h). The MTP head must have folded in every row before the
        // ones it drafts from: an MTP request takes only checkpoints that kept the head's rows
        // (`mtp_saved`, given to its drafter below).
        std::vector<float> mtp_saved;
        if (q.use_prefix_cache) {
            r.result.cached_tokens =
                cache->restore(q.prompt, r.n_prompt - 1, *r.kv, p.drafter == drafter_kind::mtp ? &mtp_saved : nullptr);
        }
        // A hybrid's state exists only at the lengths it passes, and the end-of-request checkpoint
        // holds it after the reply: a request that repeats this prompt (a regenerate, n > 1 sent
        // as several requests) or rewrites the reply (a template that drops past reasoning)
        // would miss. So the prompt is checkpointed too, once its rows are prefilled.
        // (Not when it cannot be kept: its step would delay the first token for nothing.)
        // Decided again if a restore is undone below.
        auto wants_prompt_checkpoint = [&] {
            return q.use_prefix_cache && !r.kv->recurrent().empty() && r.result.cached_tokens < r.n_prompt - 1 &&
                   cache->can_hold(static_cast<size_t>(r.n_prompt - 1), r.kv->shape());
        };
        r.checkpoint_prompt = wants_prompt_checkpoint();
        r.context.reserve(static_cast<size_t>(r.n_prompt + r.max_tokens + 1));
        r.context.assign(q.prompt.begin(), q.prompt.end());
        r.rows.reserve(static_cast<size_t>(opt.prefill_rows_per_step + k_max_window));
        r.proposal.resize(k_max_window);
        r.text = std::make_unique<stream_decoder>(*target.tok);
        if (q.top_logprobs >= 0) {
            r.biased.resize(static_cast<size_t>(n_vocab));
            r.event.top.reserve(k_max_top_logprobs);
        }
        if (p.drafter == drafter_kind::mtp) {
            // Positions up to the last window's chained drafts; rows: a window's at most (a prefill
            // chunk is folded in by pieces).
            r.head = make_mtp_head(*target.net, *pool, r.n_prompt + r.max_tokens + k_max_window, k_max_window, draft_rows);
            mtp_drafter_params mp;
            mp.max_draft = std::clamp(p.max_window - 1, 1, k_mtp_max_drafts);   // as `sluice run --spec mtp`
            auto d = std::make_unique<mtp_drafter>(*r.head, sp, mp);
            if (r.result.cached_tokens > 0) {
                try {
                    d->restore(mtp_saved, r.result.cached_tokens);
                } catch (const std::exception& e) {
                    // The checkpoint's head rows do not fit this head: a full prefill instead.
                    fmt::print(stderr, "prefix cache: the MTP head's rows were not restored: {}\n", e.what());
                    r.kv->clear();
                    r.result.cached_tokens = 0;
                    r.checkpoint_prompt = wants_prompt_checkpoint();
                }
            }
            r.mtp = d.get();
            r.drafts = std::move(d);
        } else if (p.drafter == drafter_kind::ngram) {
            r.drafts = std::make_unique<ngram_drafter>();
        } else if (p.drafter == drafter_kind::draft_model) {
            session_options so;
            so.n_ctx = std::min(n_ctx, r.n_prompt + r.max_tokens + k_max_window);
            so.n_threads = 1;   // the draft model is small; the pool belongs to the target's steps
            so.prefill_chunk = k_draft_rows;
            r.draft_session = std::make_unique<session>(*draft->net, so);
            r.draft_target = std::make_unique<session_target>(*r.draft_session, k_draft_rows);
            draft_model_params dp;
            dp.prompt_chunk = k_draft_rows;
            r.drafts = std::make_unique<draft_model_drafter>(*r.draft_target, sp, dp);
        }
        if (r.drafts) {
            r.drafts->reset();
            r.drafts->reset_stats();
            r.use_policy = p.adaptive_depth && opt.calibrate_depth_policy && p.max_window > 1;
            if (r.use_policy) {
                if (!costs_measured) calibrate_costs(q.prompt.back());
                r.policy.reset_request();
                r.confidence.resize(k_max_window);
            }
        }
        // A GPU model's copy of the restored rows, once nothing can undo the restore.
        if (r.result.cached_tokens > 0) target.net->load_kv_from_host(*r.kv);
        r.spec.drafter_name = r.drafts && p.max_window > 1 ? std::string(r.drafts->name()) : "none";
        r.spec.prompt_rows = r.n_prompt - 1 - r.result.cached_tokens;
        {
            std::lock_guard<std::mutex> lk(mu);
            m.prompt_tokens += r.n_prompt;
            m.cached_prompt_tokens += r.result.cached_tokens;
        }
        if (r.max_tokens == 0) {
            finish(r, "length", r.ctx_capped ? "ctx" : "n_predict");
            return false;
        }
        return true;
    } catch (const std::exception& e) {
        finish(r, "error", "error", e.what());
        return false;
    }
}

void serving_engine::impl::step() {
    batch.clear();
    in_batch.clear();
    int32_t budget = opt.prefill_rows_per_step;
    int64_t off_windows = 0;   // windows the depth policy left without drafts this step
    int64_t batch_rows = 0;    // rows stacked so far
    for (auto& up : active) {
        request_state& r = *up;
        r.has_window = false;
        r.pos0 = r.kv->n_pos();
        // Prompt rows still to prefill before the first window (0 once decoding).
        const int32_t pending = std::max(0, r.n_prompt - 1 - r.pos0);
        r.n_prefill = std::min(pending, budget);
        if (pending > 0 && r.n_prefill == 0) continue;     // waits for the next step's budget
        budget -= r.n_prefill;
        r.rows.assign(r.context.begin() + r.pos0, r.context.begin() + r.pos0 + r.n_prefill);
        r.n_drafts = 0;
        // The prompt's last rows go alone when its checkpoint is wanted (the window's rows
        // would move the state past it); the first window comes in the next step.
        if (r.n_prefill == pending && !(pending > 0 && r.checkpoint_prompt)) {
            // The window: the pending token plus drafts, never more than the tokens still wanted
            // (a window emits at most drafts + 1), cut at the first id outside the vocabulary.
            r.has_window = true;
            int32_t cap = r.drafts ? r.req.params.max_window - 1 : 0;
            cap = std::min(cap, r.max_tokens - r.generated - 1);
            // The MTP head drafts from the hidden state of the last committed row: while this
            // step still carries prompt rows (the prompt's last chunk), the rows before the
            // window are not committed yet, so it has nothing to draft from. (A prompt prefilled
            // by pieces across steps, as concurrent requests share the prefill budget, left the
            // head a row behind the context: propose() threw.)
            if (r.mtp && r.n_prefill > 0) cap = 0;
            if (cap > 0) {
                const int64_t off0 = r.spec.steps_drafting_off;
                try {
                    r.n_drafts = choose_drafts(r, cap);
                } catch (const std::exception& e) {
                    // A drafter that throws ends its own request: it is not in this step's batch,
                    // so the step's handler would not end it and it would throw again each step.
                    finish(r, "error", "error", fmt::format("drafting failed: {}", e.what()));
                    budget += r.n_prefill;
                    continue;
                }
                off_windows += r.spec.steps_drafting_off - off0;
            }
            r.rows.push_back(r.context.back());
            r.rows.insert(r.rows.end(), r.proposal.begin(), r.proposal.begin() + r.n_drafts);
        }
        r.row0 = batch_rows;
        batch_rows += static_cast<int64_t>(r.rows.size());
        batch_segment g;
        g.tokens = r.rows;
        g.pos0 = r.pos0;
        g.kv = r.kv.get();
        g.n_logits = r.has_window ? r.n_drafts + 1 : 0;
        batch.push_back(g);
        in_batch.push_back(&r);
    }
    if (batch.empty()) return;

    const auto t0 = steady::now();
    target.net->forward_batch(batch, scratch, logits.data());
    const auto t1 = steady::now();
    int64_t rows = 0;
    for (const batch_segment& g : batch) rows += static_cast<int64_t>(g.tokens.size());

    // A step that carried one request's window and nothing else timed that window: the shared
    // costs follow the machine's load (depth_policy::record_cost clips each sample).
    if (costs_measured && batch.size() == 1 && in_batch[0]->has_window && in_batch[0]->n_prefill == 0)
        costs.record_cost(in_batch[0]->n_drafts + 1, seconds(t0, t1));

    int64_t gen = 0, drafted = 0, accepted = 0;
    std::array<int64_t, serving_metrics::k_depths> drafted_at{}, accepted_at{};
    size_t off = 0;   // logit rows used so far
    for (request_state* r : in_batch) {
        if (!r->has_window) {
            if (r->mtp) absorb_mtp(*r, r->n_prefill);   // a prefill chunk: every row is kept
            if (r->checkpoint_prompt && r->kv->n_pos() == r->n_prompt - 1) {
                r->checkpoint_prompt = false;
                store_checkpoint(*r, static_cast<size_t>(r->n_prompt - 1));
            }
            continue;
        }
        const int32_t g0 = r->generated;
        const int64_t a0 = r->spec.drafts_accepted;
        if (!r->first_done) {
            r->first_done = true;
            r->t_first = t1;
        }
        walk_window(*r, logits.data() + off * static_cast<size_t>(n_vocab));
        off += static_cast<size_t>(r->n_drafts + 1);
        gen += r->generated - g0;
        drafted += r->n_drafts;
        accepted += r->spec.drafts_accepted - a0;
        for (int32_t d = 0; d < std::min<int32_t>(r->n_drafts, serving_metrics::k_depths); ++d) {
            ++drafted_at[size_t(d)];
            if (d < r->spec.drafts_accepted - a0) ++accepted_at[size_t(d)];
        }
    }
    std::optional<placement::placement_metrics> pm;
#ifdef SLUICE_HAVE_CUDA
    if (experts_split) pm = cuda_placement_metrics(*target.net);
#endif
    std::lock_guard<std::mutex> lk(mu);
    if (pm) placement = *pm;
    m.steps += 1;
    m.rows += rows;
    m.max_segments = std::max<int64_t>(m.max_segments, static_cast<int64_t>(batch.size()));
    m.generated_tokens += gen;
    m.drafted += drafted;
    m.accepted += accepted;
    for (size_t d = 0; d < drafted_at.size(); ++d) {
        m.drafted_at[d] += drafted_at[d];
        m.accepted_at[d] += accepted_at[d];
    }
    m.windows_drafting_off += off_windows;
    m.decode_seconds += seconds(t0, t1);
}

}  // namespace sluice
