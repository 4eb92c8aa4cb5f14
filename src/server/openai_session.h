// One OpenAI request in flight: the n choices submitted to the backend, the state their token
// callbacks (on the backend's scheduler thread) share with the HTTP thread, and the JSON the API
// returns, whole or as server-sent events.
//
// The scheduler thread does only what must happen within the step: stop strings (so that
// on_token can return false at once), the content / reasoning / tool-call split, and the
// client-gone check. JSON is built on the HTTP thread from what the callbacks queued.
#pragma once

#include "server/backend.h"
#include "server/openai_request.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

struct session_config {
    endpoint kind = endpoint::chat;
    std::string id;                      // "chatcmpl-..." / "cmpl-..."
    std::string model;                   // the served model's name
    int64_t created = 0;                 // unix seconds
    bool stream = false, include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    std::vector<std::string> stop;
    output_parser_options parser;        // chat: think / tool-call splitting
    std::vector<uint64_t> seeds;         // one per choice (n = seeds.size())
    int prompt_tokens = 0;
    size_t prompt_bytes = 0;             // completions' text_offset starts after the prompt
    std::vector<std::string> exact;      // guarantees the backend holds for every reply
};

class openai_session : public std::enable_shared_from_this<openai_session> {
public:
    openai_session(session_config c, std::shared_ptr<const serving_backend> backend);

    // Callbacks for choice i (they keep the session alive). first_token is called once, on the
    // first token of any choice (time to first token).
    token_callback on_token(int i, std::function<void()> first_token = {});
    done_callback on_done(int i);

    // The client went away (or the request was refused half-way): every callback returns false
    // from now on, so the backend ends the choices within one step.
    void cancel();
    // completion_request::cancel for choice i: set by cancel().
    std::shared_ptr<std::atomic<bool>> cancel_flag(int i);
    bool cancelled() const { return cancelled_.load(); }

    // HTTP thread: waits up to `timeout` for news; true when every choice is done.
    bool wait(std::chrono::milliseconds timeout);
    bool all_done() const;

    // Streaming: the SSE text for everything that happened since the last call; once all choices
    // are done it ends with the usage chunk (when asked) and `data: [DONE]`, and stream_ended()
    // becomes true.
    std::string take_events();
    bool stream_ended() const { return ended_; }

    // Non-streaming: the reply (call once all choices are done), or the error a choice ended with.
    nlohmann::ordered_json reply();
    std::optional<api_error> failure() const;

private:
    struct token_record {
        int32_t id = 0;
        float logprob = 0.0f;
        std::vector<token_logprob> top;
    };
    struct pending {  // queued by the callbacks for the HTTP thread
        output_delta delta;
        std::vector<token_record> tokens;
    };
    struct choice {
        stop_matcher stop;
        output_parser parser;
        bool stop_hit = false;
        bool done = false;
        completion_result result;
        pending queued;             // not yet taken by the HTTP thread
        // HTTP thread only:
        bool finish_sent = false;
        output_delta total;         // everything so far (non-streaming reply)
        std::vector<token_record> all_tokens;
        int calls_sent = 0;         // tool_calls index of the next call in the stream
        size_t text_offset = 0;     // completions: bytes before the next token
        explicit choice(const session_config& c) : stop(c.stop), parser(c.parser), text_offset(c.prompt_bytes) {}
    };

    std::string finish_reason(const choice& c) const;
    nlohmann::ordered_json sluice_block(int i) const;
    // OpenAI's usage, plus `sluice`: the request's drafting statistics over its choices.
    nlohmann::ordered_json usage() const;
    nlohmann::ordered_json usage_sluice() const;
    int request_cached_tokens() const;
    nlohmann::ordered_json chunk(nlohmann::ordered_json choices) const;
    nlohmann::ordered_json chat_logprobs(const std::vector<token_record>& t) const;
    nlohmann::ordered_json completion_logprobs(const std::vector<token_record>& t, size_t& offset) const;

    session_config c_;
    std::shared_ptr<const serving_backend> backend_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<choice> choices_;  // guarded by m_ except the HTTP-only fields
    std::vector<std::shared_ptr<std::atomic<bool>>> cancel_flags_;  // fixed after construction
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> first_token_seen_{false};
    bool news_ = false;
    bool role_sent_ = false;
    bool ended_ = false;
};

// Unique ids for replies: prefix + 24 random alphanumerics.
std::string new_reply_id(std::string_view prefix);

}  // namespace sluice
