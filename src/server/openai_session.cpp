#include "server/openai_session.h"

#include "server/sse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace sluice {

namespace {

using ojson = nlohmann::ordered_json;

ojson byte_list(const std::string& s) {
    ojson a = ojson::array();
    for (unsigned char b : s) a.push_back(static_cast<int>(b));
    return a;
}

}  // namespace

std::string new_reply_id(std::string_view prefix) {
    static std::mutex m;
    static std::mt19937_64 rng{std::random_device{}()};
    static const char k_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::lock_guard<std::mutex> lock(m);
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id += k_chars[rng() % (sizeof k_chars - 1)];
    return id;
}

openai_session::openai_session(session_config c, std::shared_ptr<const serving_backend> backend)
    : c_(std::move(c)), backend_(std::move(backend)) {
    choices_.reserve(c_.seeds.size());
    for (size_t i = 0; i < c_.seeds.size(); ++i) {
        choices_.emplace_back(c_);
        cancel_flags_.push_back(std::make_shared<std::atomic<bool>>(false));
    }
}

token_callback openai_session::on_token(int i, std::function<void()> first_token) {
    auto self = shared_from_this();
    return [self, i, first_token = std::move(first_token)](const token_event& ev) -> bool {
        if (self->cancelled_.load()) return false;
        if (!self->first_token_seen_.exchange(true) && first_token) first_token();
        // The end-of-generation token is not text the client sees.
        const bool eog = self->backend_->is_eog(ev.id);
        std::lock_guard<std::mutex> lock(self->m_);
        choice& ch = self->choices_[static_cast<size_t>(i)];
        if (ch.stop_hit || ch.done) return false;
        if (self->c_.logprobs && !eog) ch.queued.tokens.push_back(token_record{ev.id, ev.logprob, ev.top});
        if (!eog) {
            const std::string text = ch.stop.push(ev.text);
            ch.queued.delta.append(ch.parser.push(text));
            if (ch.stop.stopped()) {
                ch.stop_hit = true;
                ch.queued.delta.append(ch.parser.finish());
            }
        }
        self->news_ = true;
        self->cv_.notify_all();
        return !ch.stop_hit;
    };
}

done_callback openai_session::on_done(int i) {
    auto self = shared_from_this();
    return [self, i](const completion_result& r) {
        std::lock_guard<std::mutex> lock(self->m_);
        choice& ch = self->choices_[static_cast<size_t>(i)];
        if (ch.done) return;
        if (!ch.stop_hit) {
            // Bytes the engine's stream decoder still held, then the text held back for a stop
            // string that never came.
            if (!r.text_tail.empty()) ch.queued.delta.append(ch.parser.push(ch.stop.push(r.text_tail)));
            if (ch.stop.stopped()) ch.stop_hit = true;
            ch.queued.delta.append(ch.parser.push(ch.stop.flush()));
            ch.queued.delta.append(ch.parser.finish());
        }
        ch.result = r;
        ch.done = true;
        self->news_ = true;
        self->cv_.notify_all();
    };
}

std::shared_ptr<std::atomic<bool>> openai_session::cancel_flag(int i) {
    std::lock_guard<std::mutex> lock(m_);
    return cancel_flags_[static_cast<size_t>(i)];
}

void openai_session::cancel() {
    cancelled_.store(true);
    // Also ends requests that are still in their prefill (no token callback to refuse yet).
    for (const auto& f : cancel_flags_) f->store(true);
    std::lock_guard<std::mutex> lock(m_);
    news_ = true;
    cv_.notify_all();
}

bool openai_session::all_done() const {
    std::lock_guard<std::mutex> lock(m_);
    for (const choice& ch : choices_)
        if (!ch.done) return false;
    return true;
}

bool openai_session::wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, timeout, [&] { return news_; });
    news_ = false;
    for (const choice& ch : choices_)
        if (!ch.done) return false;
    return true;
}

std::string openai_session::finish_reason(const choice& ch) const {
    std::string r = ch.stop_hit ? "stop" : ch.result.finish_reason;
    if (r == "stop" && ch.total.calls.size() > 0) r = "tool_calls";
    return r;
}

namespace {

// Acceptance per draft depth: [{"depth": 1, "proposed": P, "accepted": A, "acceptance": A/P}, ...]
// over the depths that saw drafts (proposed[d] counts the windows whose draft d+1 was proposed).
ojson depth_table(const std::vector<int64_t>& proposed, const std::vector<int64_t>& accepted) {
    ojson t = ojson::array();
    for (size_t d = 0; d < proposed.size() && proposed[d] > 0; ++d) {
        const int64_t a = d < accepted.size() ? accepted[d] : 0;
        t.push_back(ojson{{"depth", d + 1},
                          {"proposed", proposed[d]},
                          {"accepted", a},
                          {"acceptance", double(a) / double(proposed[d])}});
    }
    return t;
}

}  // namespace

ojson openai_session::sluice_block(int i) const {
    const choice& ch = choices_[static_cast<size_t>(i)];
    const generate_stats& st = ch.result.stats;
    ojson exact = ojson::array();
    for (const std::string& e : c_.exact) exact.push_back(e);
    if (ch.result.cached_tokens > 0) exact.push_back("E5");  // restored from the prefix cache
    ojson spec = ojson::object();
    spec["drafter"] = st.drafter.empty() ? "none" : st.drafter;
    spec["verify_steps"] = st.verify_steps;
    spec["rows_min"] = st.rows_min;
    spec["rows_mean"] = st.rows_mean;
    spec["tokens_per_step"] = st.tokens_per_step;
    spec["acceptance"] = st.acceptance;
    spec["acceptance_by_depth"] = depth_table(st.proposed_at, st.accepted_at);
    ojson s = ojson::object();
    s["token_sha"] = st.token_sha;
    s["exact"] = std::move(exact);
    // As the request spells seeds: a signed 64-bit integer (a negative seed is the same 64 bits),
    // so the echoed value can be sent back and reproduces the choice.
    s["seed"] = static_cast<int64_t>(c_.seeds[static_cast<size_t>(i)]);
    s["stop_reason"] = st.stop_reason;
    s["spec"] = std::move(spec);
    s["prompt_tok_s"] = st.prompt_tok_s();
    s["decode_tok_s"] = st.decode_tok_s();
    return s;
}

ojson openai_session::usage() const {
    int64_t completion = 0;
    for (const choice& ch : choices_) completion += ch.result.stats.n_decoded;
    ojson u = ojson::object();
    u["prompt_tokens"] = c_.prompt_tokens;
    u["completion_tokens"] = completion;
    u["total_tokens"] = c_.prompt_tokens + completion;
    u["prompt_tokens_details"] = ojson{{"cached_tokens", request_cached_tokens()}};
    u["sluice"] = usage_sluice();
    return u;
}

int openai_session::request_cached_tokens() const {
    // prompt_tokens counts the prompt once although each of the n choices is its own engine
    // request with its own prefix-cache lookup (choices submitted together all miss a cache the
    // first of them has not filled yet). A prompt token was served from cache for the request
    // when no choice had to compute it: the smallest hit over the choices, never above
    // prompt_tokens.
    if (choices_.empty()) return 0;
    int cached = choices_[0].result.cached_tokens;
    for (const choice& ch : choices_) cached = std::min(cached, ch.result.cached_tokens);
    return std::clamp(cached, 0, c_.prompt_tokens);
}

ojson openai_session::usage_sluice() const {
    // The request's drafting over all its choices: windows, rows, drafts and tokens summed, the
    // ratios taken of the sums (a choice of 3 windows weighs less than one of 300).
    int64_t steps = 0, tokens = 0, proposed = 0, kept = 0, off = 0;
    double rows = 0.0;
    int32_t rows_min = 0, rows_max = 0;
    bool drafting = false;
    std::vector<int64_t> proposed_at, accepted_at;   // per draft depth, summed over the choices
    ojson shas = ojson::array();
    for (const choice& ch : choices_) {
        const completion_result& r = ch.result;
        const generate_stats& st = r.stats;
        shas.push_back(st.token_sha);
        drafting = drafting || (!st.drafter.empty() && st.drafter != "none");
        if (st.verify_steps > 0) {
            rows_min = steps == 0 ? st.rows_min : std::min(rows_min, st.rows_min);
            rows_max = std::max(rows_max, r.rows_max);
        }
        steps += st.verify_steps;
        rows += st.rows_mean * double(st.verify_steps);
        tokens += st.n_decoded;   // what the windows committed (an end-of-generation pick is not a token)
        proposed += r.drafts_proposed;
        kept += r.drafts_accepted;
        off += r.windows_drafting_off;
        if (proposed_at.size() < st.proposed_at.size()) {
            proposed_at.resize(st.proposed_at.size());
            accepted_at.resize(st.proposed_at.size());
        }
        for (size_t d = 0; d < st.proposed_at.size(); ++d) {
            proposed_at[d] += st.proposed_at[d];
            accepted_at[d] += d < st.accepted_at.size() ? st.accepted_at[d] : 0;
        }
    }
    ojson s = ojson::object();
    s["token_sha"] = choices_.empty() ? std::string() : choices_[0].result.stats.token_sha;
    s["token_shas"] = std::move(shas);
    s["speculative"] = drafting;
    s["verify_steps"] = steps;
    s["rows_per_verify"] = ojson{{"min", rows_min}, {"mean", steps > 0 ? rows / double(steps) : 0.0}, {"max", rows_max}};
    s["accepted_per_step"] = steps > 0 ? double(tokens) / double(steps) : 0.0;
    s["acceptance"] = proposed > 0 ? double(kept) / double(proposed) : 0.0;
    s["drafts_proposed"] = proposed;
    s["drafts_accepted"] = kept;
    s["windows_drafting_off"] = off;
    s["acceptance_by_depth"] = depth_table(proposed_at, accepted_at);
    return s;
}

ojson openai_session::chunk(ojson choices) const {
    ojson j = ojson::object();
    j["id"] = c_.id;
    j["object"] = c_.kind == endpoint::chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = c_.created;
    j["model"] = c_.model;
    j["choices"] = std::move(choices);
    if (c_.include_usage) j["usage"] = nullptr;
    return j;
}

ojson openai_session::chat_logprobs(const std::vector<token_record>& tokens) const {
    ojson content = ojson::array();
    for (const token_record& t : tokens) {
        const std::string text = backend_->token_text(t.id);
        ojson e = ojson::object();
        e["token"] = text;
        e["logprob"] = t.logprob;
        e["bytes"] = byte_list(text);
        ojson top = ojson::array();
        for (const token_logprob& alt : t.top) {
            if (static_cast<int>(top.size()) >= c_.top_logprobs) break;
            top.push_back(ojson{{"token", alt.text}, {"logprob", alt.logprob}, {"bytes", byte_list(alt.text)}});
        }
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
    }
    return ojson{{"content", std::move(content)}, {"refusal", nullptr}};
}

ojson openai_session::completion_logprobs(const std::vector<token_record>& tokens, size_t& offset) const {
    ojson toks = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    for (const token_record& t : tokens) {
        const std::string text = backend_->token_text(t.id);
        toks.push_back(text);
        lps.push_back(t.logprob);
        ojson top = ojson::object();
        for (const token_logprob& alt : t.top) {
            if (static_cast<int>(top.size()) >= c_.top_logprobs) break;
            top[alt.text] = alt.logprob;
        }
        // OpenAI's legacy format always has the sampled token too (up to logprobs + 1 entries).
        if (c_.top_logprobs > 0 && !top.contains(text)) top[text] = t.logprob;
        tops.push_back(std::move(top));
        offsets.push_back(offset);
        offset += text.size();
    }
    return ojson{{"tokens", std::move(toks)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)},
                 {"text_offset", std::move(offsets)}};
}

std::optional<api_error> openai_session::failure() const {
    std::lock_guard<std::mutex> lock(m_);
    for (const choice& ch : choices_)
        if (ch.done && ch.result.finish_reason == "error") {
            api_error e;
            e.status = 500;
            e.type = "server_error";
            e.message = "generation failed: " + ch.result.error;
            return e;
        }
    // Cancelled before any token (the shutdown grace ran out while it waited in the queue): a 503
    // the client can retry elsewhere, not a 200 with an empty text.
    const bool none_started = std::all_of(choices_.begin(), choices_.end(), [](const choice& ch) {
        return ch.done && ch.result.finish_reason == "cancelled" && ch.result.stats.n_decoded == 0;
    });
    if (none_started && !choices_.empty()) {
        api_error e;
        e.status = 503;
        e.type = "server_error";
        e.code = "shutting_down";
        e.message = "the server stopped before the request started";
        return e;
    }
    return std::nullopt;
}

std::string openai_session::take_events() {
    // Move what the callbacks queued out of the lock; build JSON without it.
    std::vector<pending> got(choices_.size());
    std::vector<bool> done(choices_.size());
    {
        std::lock_guard<std::mutex> lock(m_);
        for (size_t i = 0; i < choices_.size(); ++i) {
            got[i] = std::move(choices_[i].queued);
            choices_[i].queued = pending{};
            done[i] = choices_[i].done;
        }
    }
    const bool chat = c_.kind == endpoint::chat;
    std::string out;
    if (chat && !role_sent_) {  // OpenAI's first chunk: the role, with empty content
        role_sent_ = true;
        for (size_t i = 0; i < choices_.size(); ++i) {
            ojson ch = ojson::object();
            ch["index"] = i;
            ch["delta"] = ojson{{"role", "assistant"}, {"content", ""}};
            ch["logprobs"] = nullptr;
            ch["finish_reason"] = nullptr;
            out += sse_event(chunk(ojson::array({std::move(ch)})));
        }
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
        choice& c = choices_[i];
        if (c.finish_sent) continue;
        pending& p = got[i];
        const bool finishing = done[i];
        const bool has_text = !p.delta.empty();
        if (has_text || (!p.tokens.empty() && c_.logprobs)) {
            ojson ch = ojson::object();
            ch["index"] = i;
            if (chat) {
                ojson delta = ojson::object();
                if (!p.delta.reasoning.empty()) delta["reasoning_content"] = p.delta.reasoning;
                if (!p.delta.content.empty()) delta["content"] = p.delta.content;
                if (!p.delta.calls.empty()) {
                    ojson calls = ojson::array();
                    for (const tool_call& tc : p.delta.calls)
                        calls.push_back(ojson{{"index", c.calls_sent++},
                                              {"id", tc.id},
                                              {"type", "function"},
                                              {"function", ojson{{"name", tc.name}, {"arguments", tc.arguments}}}});
                    delta["tool_calls"] = std::move(calls);
                }
                ch["delta"] = std::move(delta);
                ch["logprobs"] = c_.logprobs ? chat_logprobs(p.tokens) : ojson(nullptr);
            } else {
                ch["text"] = p.delta.content;
                ch["logprobs"] = c_.logprobs ? completion_logprobs(p.tokens, c.text_offset) : ojson(nullptr);
            }
            ch["finish_reason"] = nullptr;
            out += sse_event(chunk(ojson::array({std::move(ch)})));
        }
        for (token_record& t : p.tokens) c.all_tokens.push_back(std::move(t));
        c.total.append(std::move(p.delta));
        if (finishing) {
            c.finish_sent = true;
            if (c.result.finish_reason == "error") {
                api_error e;
                e.status = 500;
                e.type = "server_error";
                e.message = "generation failed: " + c.result.error;
                out += sse_event(error_body(e));
                continue;
            }
            ojson ch = ojson::object();
            ch["index"] = i;
            if (chat)
                ch["delta"] = ojson::object();
            else
                ch["text"] = "";
            ch["logprobs"] = nullptr;
            ch["finish_reason"] = finish_reason(c);
            ojson last = chunk(ojson::array({std::move(ch)}));
            last["sluice"] = sluice_block(static_cast<int>(i));
            out += sse_event(last);
        }
    }
    bool all = true;
    for (const choice& c : choices_) all = all && c.finish_sent;
    if (all && !ended_) {
        if (c_.include_usage) {
            ojson u = chunk(ojson::array());
            u["usage"] = usage();
            u["sluice"] = sluice_block(0);
            out += sse_event(u);
        }
        out += sse_done;
        ended_ = true;
    }
    return out;
}

ojson openai_session::reply() {
    take_events();  // moves everything queued into each choice's totals (the text is discarded)
    const bool chat = c_.kind == endpoint::chat;
    ojson list = ojson::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        choice& c = choices_[i];
        ojson ch = ojson::object();
        ch["index"] = i;
        if (chat) {
            ojson msg = ojson::object();
            msg["role"] = "assistant";
            msg["content"] = c.total.content.empty() && !c.total.calls.empty() ? ojson(nullptr) : ojson(c.total.content);
            if (!c.total.reasoning.empty()) msg["reasoning_content"] = c.total.reasoning;
            if (!c.total.calls.empty()) {
                ojson calls = ojson::array();
                for (const tool_call& tc : c.total.calls)
                    calls.push_back(ojson{{"id", tc.id},
                                          {"type", "function"},
                                          {"function", ojson{{"name", tc.name}, {"arguments", tc.arguments}}}});
                msg["tool_calls"] = std::move(calls);
            }
            ch["message"] = std::move(msg);
            ch["logprobs"] = c_.logprobs ? chat_logprobs(c.all_tokens) : ojson(nullptr);
        } else {
            ch["text"] = c.total.content;
            size_t offset = c_.prompt_bytes;
            ch["logprobs"] = c_.logprobs ? completion_logprobs(c.all_tokens, offset) : ojson(nullptr);
        }
        ch["finish_reason"] = finish_reason(c);
        if (choices_.size() > 1) ch["sluice"] = sluice_block(static_cast<int>(i));
        list.push_back(std::move(ch));
    }
    ojson j = ojson::object();
    j["id"] = c_.id;
    j["object"] = chat ? "chat.completion" : "text_completion";
    j["created"] = c_.created;
    j["model"] = c_.model;
    j["choices"] = std::move(list);
    j["usage"] = usage();
    j["sluice"] = sluice_block(0);
    return j;
}

}  // namespace sluice
