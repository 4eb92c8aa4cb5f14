// The serving engine's windows (serving_engine.cpp runs the steps): the walk of a request's
// verify window as the verifier walks it, the MTP head fed with the kept rows, the end of a
// request (its result, its prefix-cache checkpoint, on_done).
#include "runtime/serving_engine_impl.h"

#include <fmt/core.h>

namespace sluice {

using namespace serving_detail;

namespace {

// Log-softmax of one row, OpenAI style: the chosen id's and the best k ids' log probabilities.
void fill_logprobs(const tokenizer& tok, const float* l, int32_t n_vocab, int32_t chosen, int k, token_event& ev) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n_vocab; ++i)
        if (l[i] > mx) mx = l[i];   // NaN compares false: it counts as -inf
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i)
        if (l[i] > -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(l[i]) - mx);
    const double lse = static_cast<double>(mx) + std::log(sum);
    auto lp = [&](int32_t i) {
        return l[i] > -std::numeric_limits<float>::infinity() ? static_cast<float>(static_cast<double>(l[i]) - lse)
                                                               : -std::numeric_limits<float>::infinity();
    };
    ev.logprob = lp(chosen);
    ev.top.clear();
    if (k <= 0) return;
    // The k best by (logit desc, id asc): an insertion into a sorted list of at most k ids.
    int32_t best[k_max_top_logprobs];
    int n = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (!(l[i] > -std::numeric_limits<float>::infinity())) continue;
        if (n == k && !(l[i] > l[best[n - 1]])) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && l[i] > l[best[j - 1]]) {
            best[j] = best[j - 1];
            --j;
        }
        best[j] = i;
    }
    for (int j = 0; j < n; ++j) ev.top.push_back(token_logprob{best[j], tok.text_of(best[j]), lp(best[j])});
}

}  // namespace

// The verifier's walk (src/spec/verifier.cpp) over this request's window rows.
void serving_engine::impl::walk_window(request_state& r, const float* l) {
    const int32_t rows = r.n_drafts + 1;
    int32_t emitted = 0, accepted = 0;
    const char* finish_reason = nullptr;
    const char* stop = nullptr;
    for (int32_t i = 0; i < rows; ++i) {
        const float* row = l + static_cast<size_t>(i) * static_cast<size_t>(n_vocab);
        const int32_t tok = r.sampler->pick(row, static_cast<int64_t>(r.context.size()), r.context);
        const bool kept_draft = i < r.n_drafts && tok == r.proposal[size_t(i)];
        if (std::find(eog.begin(), eog.end(), tok) != eog.end()) {
            finish_reason = "stop", stop = "eog";
            break;
        }
        r.context.push_back(tok);
        r.sha.update(tok);
        ++r.generated;
        ++emitted;
        if (kept_draft) ++accepted;

        token_event& ev = r.event;
        ev.id = tok;
        ev.text = r.text->push(tok);
        if (r.req.top_logprobs >= 0) {
            std::copy(row, row + n_vocab, r.biased.begin());
            for (const auto& [id, bias] : r.req.logit_bias) r.biased[size_t(id)] += bias;
            fill_logprobs(*target.tok, r.biased.data(), n_vocab, tok, r.req.top_logprobs, ev);
        }
        bool go_on = true;
        if (r.on_token) {
            try {
                go_on = r.on_token(ev);
            } catch (...) {
                go_on = false;   // a callback that throws ends its own request, nothing else
            }
        }
        if (r.generated >= r.max_tokens) {
            finish_reason = "length", stop = r.ctx_capped ? "ctx" : "n_predict";
            break;
        }
        if (!go_on) {
            finish_reason = "stop", stop = "stop";
            break;
        }
        if (!kept_draft) break;   // that was the bonus token
    }
    // Rows 0..emitted-1 carried the old pending token and the kept drafts: keep them (and the
    // prompt rows before them); roll back the rest.
    r.kv->truncate(r.pos0 + r.n_prefill + emitted);
    if (r.mtp && !finish_reason) {
        absorb_mtp(r, r.n_prefill + emitted);
    } else if (r.mtp && r.req.use_prefix_cache) {
        // The request drafts no more, but its checkpoint keeps the head's rows, which need these
        // too. A failure here keeps the checkpoint without them (save() then finds the drafter
        // behind) and ends nothing else.
        try {
            absorb_mtp(r, r.n_prefill + emitted);
        } catch (const std::exception& e) {
            fmt::print(stderr, "prefix cache: the MTP head's last rows were not folded in: {}\n", e.what());
        }
    }
    r.spec.add_window(rows, r.n_drafts, accepted, emitted);
    if (r.n_drafts > 0) {
        // A window cut by a stop says nothing about the drafts after the cut.
        r.drafts->observe(accepted, finish_reason ? accepted : r.n_drafts);
        if (r.use_policy && !finish_reason) r.policy.record_acceptance(accepted, r.n_drafts);
    }
    if (finish_reason) finish(r, finish_reason, stop);
}

// The MTP head folds in the first `kept` rows of this step's segment of r, with their residual
// stream from the batched forward (still in the scratch: nothing runs between).
void serving_engine::impl::absorb_mtp(request_state& r, int32_t kept) {
    const float* res = scratch.x.data() + r.row0 * static_cast<int64_t>(target.net->hparams().n_embd);
    r.mtp->absorb(r.rows, r.pos0, kept, res);
}

void serving_engine::impl::store_checkpoint(request_state& r, size_t n) {
    // A GPU model's rows into the host arrays the checkpoint reads. A checkpoint only saves
    // later prefill: when the copy fails the request goes on, nothing is kept.
    try {
        target.net->sync_kv_to_host(*r.kv);
        std::vector<float> head_rows;   // an MTP drafter's state at n (none when it is not there)
        if (r.mtp) r.mtp->save(static_cast<int32_t>(n), head_rows);
        cache->store(std::span<const int32_t>(r.context.data(), n), *r.kv, std::move(head_rows));
    } catch (const std::exception& e) {
        fmt::print(stderr, "prefix cache: a checkpoint of {} rows was not kept: {}\n", n, e.what());
    }
    std::lock_guard<std::mutex> lk(mu);
    m.prefix_cache_entries = static_cast<int64_t>(cache->entries());
    m.prefix_cache_bytes = static_cast<int64_t>(cache->bytes());
}

// Ends a request: its result, its checkpoint in the prefix cache, on_done (once; `finished`
// marks the request for removal).
void serving_engine::impl::finish(request_state& r, const char* finish_reason, const char* stop_reason,
                                  std::string error) {
    const auto now = steady::now();
    completion_result& res = r.result;
    generate_stats& st = res.stats;
    res.finish_reason = finish_reason;
    res.error = std::move(error);
    st.n_prompt = r.n_prompt;
    st.prompt_tokens = r.req.prompt;
    if (r.context.size() > r.req.prompt.size())
        st.tokens.assign(r.context.begin() + static_cast<std::ptrdiff_t>(r.req.prompt.size()), r.context.end());
    st.n_decoded = static_cast<int>(st.tokens.size());
    st.token_sha = r.sha.hex();
    st.stop_reason = stop_reason;
    if (r.first_done) {
        st.prompt_seconds = seconds(r.t_admit, r.t_first);
        st.decode_seconds = seconds(r.t_first, now);
    }
    if (r.drafts) r.spec.drafter = r.drafts->stats();
    st.drafter = r.spec.drafter_name.empty() ? "none" : r.spec.drafter_name;
    st.verify_steps = r.spec.steps;
    st.rows_min = r.spec.rows_min;
    st.rows_mean = r.spec.rows_mean();
    st.tokens_per_step = r.spec.accepted_per_step();
    st.acceptance = r.spec.acceptance_rate();
    st.proposed_at.clear();
    st.accepted_at.clear();
    for (size_t d = 0; d < r.spec.proposed_at.size() && r.spec.proposed_at[d] > 0; ++d) {
        st.proposed_at.push_back(r.spec.proposed_at[d]);
        st.accepted_at.push_back(r.spec.accepted_at[d]);
    }
    st.spec_summary = r.spec.summary();
    res.drafts_proposed = r.spec.drafts_proposed;
    res.drafts_accepted = r.spec.drafts_accepted;
    res.windows_drafting_off = r.spec.steps_drafting_off;
    res.rows_max = r.spec.rows_max;
    if (r.text) res.text_tail = r.text->flush();

    // The checkpoint: every committed row, keyed by the tokens it holds.
    if (r.kv && r.req.use_prefix_cache && res.finish_reason != "error" && r.kv->n_pos() > 0)
        store_checkpoint(r, static_cast<size_t>(r.kv->n_pos()));
    r.kv.reset();
    r.draft_target.reset();
    r.draft_session.reset();
    if (r.mtp) {   // the head's cache and buffers go now, not when the scheduler drops the request
        r.mtp = nullptr;
        r.drafts.reset();   // before the head it reads
        r.head.reset();
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        if (!r.finished) --slots_taken;
        m.requests_done += 1;
    }
    r.finished = true;
    done_callback done = std::move(r.on_done);
    r.on_done = nullptr;
    r.on_token = nullptr;
    if (done) {
        try {
            done(res);
        } catch (...) {
        }
    }
}

}  // namespace sluice
