// The HTTP server end to end over loopback, against the scripted backend of test_server_fake.h:
// every endpoint, OpenAI's JSON and SSE framing, errors, the queue bound, authentication,
// cancellation of a request whose client went away, draining, metrics.
#include "runtime/token_sha.h"
#include "server/http_lib.h"
#include "server/http_server.h"
#include "server/sse.h"
#include "test_server_fake.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace {

using namespace sluice;
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::vector<std::string> k_hello{"Hel", "lo", ",", " wor", "ld", "!"};

struct running_server {
    std::shared_ptr<test::fake_backend> backend;
    std::unique_ptr<http_server> server;
    std::thread thread;
    int port = 0;

    explicit running_server(std::shared_ptr<test::fake_backend> b, server_options o = {}) : backend(std::move(b)) {
        o.port = 0;
        o.poll = 10ms;
        server = std::make_unique<http_server>(o);
        port = server->bind();
        server->set_backend(backend);
        thread = std::thread([this] { server->run(); });
    }
    explicit running_server(std::vector<std::string> pieces = k_hello)
        : running_server(std::make_shared<test::fake_backend>(std::move(pieces))) {}
    ~running_server() {
        server->stop();
        thread.join();
        backend->shutdown(true);
    }
    std::unique_ptr<httplib::Client> client() const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
        c->set_read_timeout(20, 0);
        return c;
    }
    httplib::Result post(const std::string& path, const std::string& body) const {
        return client()->Post(path.c_str(), body, "application/json");
    }
};

json chat_body(json extra = json::object()) {
    json b{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

std::vector<json> stream_chunks(const std::string& body, bool& done) {
    std::vector<json> out;
    done = false;
    for (const std::string& p : sse_payloads(body)) {
        EXPECT_FALSE(done) << "data after [DONE]";
        if (p == "[DONE]")
            done = true;
        else
            out.push_back(json::parse(p));
    }
    return out;
}

std::vector<int32_t> hello_ids(size_t n = k_hello.size()) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(test::fake_backend::k_eog + 1 + static_cast<int32_t>(i));
    return ids;
}

TEST(server_http, health_ready_models_and_openapi) {
    running_server s;
    auto c = s.client();
    auto h = c->Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    auto r = c->Get("/ready");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["status"], "ready");
    auto m = c->Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 200);
    const json models = json::parse(m->body);
    EXPECT_EQ(models["object"], "list");
    EXPECT_EQ(models["data"][0]["id"], "fake-model");
    auto doc = c->Get("/openapi.json");
    ASSERT_TRUE(doc);
    const json api = json::parse(doc->body);
    EXPECT_EQ(api["openapi"], "3.1.0");
    EXPECT_EQ(api["components"]["schemas"]["LogitBias"]["type"], json::array({"object", "null"}));
    for (const char* path : {"/health", "/ready", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"})
        EXPECT_TRUE(api["paths"].contains(path)) << path;
    // The token id range of the served model is filled in.
    EXPECT_EQ(api["components"]["schemas"]["CompletionRequest"]["properties"]["prompt"]["oneOf"][1]["items"]["maximum"],
              s.backend->n_vocab() - 1);
}

TEST(server_http, not_ready_while_loading) {
    server_options o;
    o.port = 0;
    http_server server(o);
    const int port = server.bind();
    std::thread t([&] { server.run(); });
    httplib::Client c("127.0.0.1", port);
    auto r = c.Get("/ready");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(json::parse(r->body)["status"], "loading");
    auto p = c.Post("/v1/chat/completions", chat_body().dump(), "application/json");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->status, 503);
    EXPECT_EQ(json::parse(p->body)["error"]["code"], "loading");
    server.stop();
    t.join();
}

TEST(server_http, chat_reply_carries_text_usage_and_exactness) {
    running_server s;
    auto r = s.post("/v1/chat/completions", chat_body({{"seed", 7}}).dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(j["model"], "fake-model");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
    // The prompt is the ChatML rendering of the conversation, one fake token per byte.
    const std::string rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_EQ(j["usage"]["prompt_tokens"], rendered.size());
    EXPECT_EQ(j["usage"]["completion_tokens"], k_hello.size());
    EXPECT_EQ(j["usage"]["total_tokens"], rendered.size() + k_hello.size());
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(j["sluice"]["token_sha"], token_sha_hex(hello_ids()));
    EXPECT_EQ(j["sluice"]["exact"], json::array({"E1", "E2", "E4"}));
    EXPECT_EQ(j["sluice"]["seed"], 7);
    EXPECT_EQ(j["sluice"]["spec"]["drafter"], "none");
    // What the backend was asked for.
    const completion_request q = s.backend->last_request();
    EXPECT_EQ(q.params.seed, 7u);
    EXPECT_EQ(q.params.n_predict, -1);
    EXPECT_FLOAT_EQ(q.params.temperature, 1.0f);
    EXPECT_EQ(q.top_logprobs, -1);
    EXPECT_EQ(std::string(q.prompt.begin(), q.prompt.end()), rendered);
}

TEST(server_http, chat_stream_follows_openai_framing) {
    running_server s;
    auto r = s.post("/v1/chat/completions",
                    chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    bool done = false;
    const std::vector<json> chunks = stream_chunks(r->body, done);
    EXPECT_TRUE(done);
    ASSERT_GE(chunks.size(), 4u);
    // First: the role. Then content deltas. Then the finish chunk. Then usage with no choices.
    EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "");
    std::string text;
    for (size_t i = 0; i < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i]["object"], "chat.completion.chunk");
        EXPECT_EQ(chunks[i]["id"], chunks[0]["id"]);
        EXPECT_TRUE(chunks[i].contains("usage"));  // null except in the last chunk
        if (i + 1 < chunks.size()) {
            EXPECT_TRUE(chunks[i]["usage"].is_null());
        }
        if (i > 0 && i + 2 < chunks.size()) {
            EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
            text += chunks[i]["choices"][0]["delta"].value("content", "");
        }
        EXPECT_EQ(chunks[i]["choices"].size(), i + 1 < chunks.size() ? 1u : 0u);
    }
    EXPECT_EQ(text, "Hello, world!");
    const json& fin = chunks[chunks.size() - 2];
    EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(fin["choices"][0]["delta"], json::object());
    EXPECT_EQ(fin["sluice"]["token_sha"], token_sha_hex(hello_ids()));
    const json& usage = chunks.back();
    EXPECT_EQ(usage["choices"], json::array());
    EXPECT_EQ(usage["usage"]["completion_tokens"], k_hello.size());
    EXPECT_TRUE(usage.contains("sluice"));
}

TEST(server_http, completions_json_and_stream) {
    running_server s;
    auto r = s.post("/v1/completions", R"({"prompt":"abc","max_tokens":100})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], "Hello, world!");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
    auto d = s.post("/v1/completions", R"({"prompt":"abc"})");  // OpenAI's default: 16 tokens
    EXPECT_EQ(s.backend->last_request().params.n_predict, 16);
    auto st = s.post("/v1/completions", R"({"prompt":[97,98],"stream":true})");
    ASSERT_TRUE(st);
    bool done = false;
    const auto chunks = stream_chunks(st->body, done);
    EXPECT_TRUE(done);
    std::string text;
    for (const json& c : chunks) {
        EXPECT_EQ(c["object"], "text_completion");
        text += c["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, "Hello, world!");
    EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
    EXPECT_FALSE(chunks.back().contains("usage"));  // not asked for
}

TEST(server_http, a_stop_string_ends_generation_and_is_not_returned) {
    running_server s;
    auto r = s.post("/v1/chat/completions", chat_body({{"stop", json::array({"world", "zzz"})}}).dump());
    ASSERT_TRUE(r);
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, ");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    // Generation ended at the token that completed the stop string, not at the end of the reply.
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
    auto st = s.post("/v1/chat/completions", chat_body({{"stop", "d!"}, {"stream", true}}).dump());
    bool done = false;
    std::string text;
    const auto chunks = stream_chunks(st->body, done);
    for (const json& c : chunks)
        if (!c["choices"].empty()) text += c["choices"][0]["delta"].value("content", "");
    EXPECT_EQ(text, "Hello, worl");
}

TEST(server_http, max_tokens_ends_with_length) {
    running_server s;
    auto r = s.post("/v1/chat/completions", chat_body({{"max_tokens", 2}}).dump());
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(s.backend->last_request().params.n_predict, 2);
}

TEST(server_http, n_choices_use_consecutive_seeds) {
    running_server s;
    auto r = s.post("/v1/chat/completions", chat_body({{"n", 3}, {"seed", 100}}).dump());
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 3u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(j["choices"][i]["index"], i);
        EXPECT_EQ(j["choices"][i]["sluice"]["seed"], 100 + i);
    }
    EXPECT_EQ(j["usage"]["completion_tokens"], 3 * k_hello.size());
    EXPECT_EQ(s.backend->submitted(), 3);
}

TEST(server_http, logprobs_in_openai_format) {
    running_server s;
    auto r = s.post("/v1/chat/completions", chat_body({{"logprobs", true}, {"top_logprobs", 2}}).dump());
    const json j = json::parse(r->body);
    const json& content = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), k_hello.size());
    EXPECT_EQ(content[0]["token"], "Hel");
    EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.25f);
    EXPECT_EQ(content[0]["bytes"], json::array({72, 101, 108}));
    ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "b");
    EXPECT_EQ(s.backend->last_request().top_logprobs, 2);

    auto c = s.post("/v1/completions", R"({"prompt":"ab","logprobs":1,"max_tokens":3})");
    const json k = json::parse(c->body);
    const json& lp = k["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"], json::array({"Hel", "lo", ","}));
    EXPECT_EQ(lp["token_logprobs"].size(), 3u);
    // The best alternative, and the sampled token as OpenAI's legacy format always has it.
    EXPECT_EQ(lp["top_logprobs"][0], json({{"a", -1.0}, {"Hel", -0.25}}));
    EXPECT_EQ(lp["text_offset"], json::array({2, 5, 7}));  // after the 2-byte prompt
}

// ChatML with the tools and the calls made before (Qwen's layout, shortened).
const char* const k_tools_template =
    "{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}{% for m in messages %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n";

TEST(server_http, tools_a_template_cannot_show_are_refused) {
    // ChatML (the server's default) has no tools: they, and the calls made before, were dropped
    // from the prompt without a word, and the model answered as if it had none.
    running_server s;
    const json tools = json::array({json{{"type", "function"}, {"function", {{"name", "f"}}}}});
    auto r = s.post("/v1/chat/completions", chat_body({{"tools", tools}}).dump());
    ASSERT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "tools");
    json history = chat_body();
    history["messages"].push_back({{"role", "assistant"}, {"content", ""},
                                   {"tool_calls", json::array({{{"id", "c"}, {"type", "function"},
                                                                {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}});
    history["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", "1"}});
    r = s.post("/v1/chat/completions", history.dump());
    ASSERT_EQ(r->status, 400) << r->body;
    EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("tool_calls"), std::string::npos);
    // No tools (an empty list) drops nothing; the OpenAPI document says what this server takes.
    EXPECT_EQ(s.post("/v1/chat/completions", chat_body({{"tools", json::array()}}).dump())->status, 200);
    const json doc = json::parse(s.client()->Get("/openapi.json")->body);
    EXPECT_EQ(doc["components"]["schemas"]["ChatRequest"]["properties"]["tools"]["maxItems"], 0);
}

TEST(server_http, tool_calls_are_parsed_and_streamed) {
    auto b = std::make_shared<test::fake_backend>(std::vector<std::string>{
        "Checking.", "<tool_", "call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}",
        "\n</tool_call>"}, 2ms, 4, 4, /*n_ctx=*/1024);   // the tools take ~170 prompt tokens
    b->template_ = k_tools_template;
    running_server s(b);
    const json tools = json::array({json{{"type", "function"},
                                         {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
    auto r = s.post("/v1/chat/completions", chat_body({{"tools", tools}}).dump());
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    const json& msg = j["choices"][0]["message"];
    EXPECT_EQ(msg["content"], "Checking.");
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

    auto st = s.post("/v1/chat/completions", chat_body({{"tools", tools}, {"stream", true}}).dump());
    bool done = false;
    const auto chunks = stream_chunks(st->body, done);
    json calls = json::array();
    std::string text;
    for (const json& c : chunks) {
        const json& delta = c["choices"][0]["delta"];
        text += delta.value("content", "");
        if (delta.contains("tool_calls"))
            for (const json& tc : delta["tool_calls"]) calls.push_back(tc);
    }
    EXPECT_EQ(text, "Checking.");
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["index"], 0);
    EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
    // Without tools in the request the same text is plain content.
    auto plain = s.post("/v1/chat/completions", chat_body().dump());
    EXPECT_NE(json::parse(plain->body)["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
              std::string::npos);
}

TEST(server_http, thinking_goes_to_reasoning_content) {
    auto b = std::make_shared<test::fake_backend>(std::vector<std::string>{"2 and 2", " make 4.", "\n</think>\n\n", "4"});
    // A Qwen3-style template that opens <think> in the generation prompt.
    b->template_ = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
    running_server s(b);
    const json j = json::parse(s.post("/v1/chat/completions", chat_body().dump())->body);
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "2 and 2 make 4.");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "4");
    bool done = false;
    std::string reasoning;
    for (const json& c : stream_chunks(s.post("/v1/chat/completions", chat_body({{"stream", true}}).dump())->body, done))
        reasoning += c["choices"][0]["delta"].value("reasoning_content", "");
    EXPECT_EQ(reasoning, "2 and 2 make 4.");
}

TEST(server_http, bad_requests_get_openai_error_objects) {
    running_server s;
    auto bad = s.post("/v1/chat/completions", "{not json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    const json e = json::parse(bad->body);
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(e["error"].contains("param"));
    EXPECT_TRUE(e["error"].contains("code"));
    auto ids = s.post("/v1/completions", R"({"prompt":[1, 100000]})");
    EXPECT_EQ(ids->status, 400);
    EXPECT_NE(json::parse(ids->body)["error"]["message"].get<std::string>().find("out of range"), std::string::npos);
    // The fake's context holds 64 tokens; this prompt is 100 bytes = 100 tokens.
    auto longp = s.post("/v1/completions", json{{"prompt", std::string(100, 'x')}}.dump());
    EXPECT_EQ(longp->status, 400);
    const std::string msg = json::parse(longp->body)["error"]["message"];
    EXPECT_NE(msg.find("100 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64"), std::string::npos) << msg;
    EXPECT_EQ(json::parse(longp->body)["error"]["code"], "context_length_exceeded");
    auto wrong = s.client()->Delete("/v1/models");
    EXPECT_EQ(wrong->status, 405);
    EXPECT_EQ(wrong->get_header_value("Allow"), "GET");
    EXPECT_EQ(s.client()->Get("/v1/chat/completions")->status, 405);
    auto nf = s.client()->Get("/v1/nothing");
    EXPECT_EQ(nf->status, 404);
    EXPECT_EQ(json::parse(nf->body)["error"]["code"], "not_found");
    EXPECT_EQ(s.backend->submitted(), 0);  // none of them reached the engine
}

TEST(server_http, bodies_over_the_limit_get_413) {
    server_options o;
    o.max_body_bytes = 1000;
    running_server s(std::make_shared<test::fake_backend>(k_hello), o);
    auto r = s.post("/v1/completions", json{{"prompt", std::string(5000, 'x')}}.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
}

TEST(server_http, the_api_key_is_required_on_the_api_only) {
    server_options o;
    o.api_key = "sekret";
    running_server s(std::make_shared<test::fake_backend>(k_hello), o);
    auto c = s.client();
    auto no = c->Post("/v1/chat/completions", chat_body().dump(), "application/json");
    EXPECT_EQ(no->status, 401);
    EXPECT_EQ(json::parse(no->body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(c->Get("/v1/models", {{"Authorization", "Bearer wrong"}})->status, 401);
    EXPECT_EQ(c->Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status, 200);
    EXPECT_EQ(c->Get("/health")->status, 200);
    EXPECT_EQ(c->Get("/metrics")->status, 200);
}

TEST(server_http, a_full_queue_answers_429_with_retry_after) {
    // One decoding slot, one queue place, the backend paused: the third request finds no room.
    auto b = std::make_shared<test::fake_backend>(k_hello, 2ms, /*max_active=*/1, /*max_queue=*/1);
    b->set_paused(true);
    running_server s(b);
    auto first = std::async(std::launch::async, [&] { return s.post("/v1/chat/completions", chat_body().dump()); });
    while (b->submitted() < 1) std::this_thread::sleep_for(1ms);
    auto busy = s.post("/v1/chat/completions", chat_body().dump());
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 429);
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(busy->body)["error"]["code"], "rate_limit_exceeded");
    b->set_paused(false);
    auto r = first.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);  // the request that was queued is unaffected
}

TEST(server_http, a_request_cancelled_before_it_started_is_a_503) {
    // The shutdown grace ran out while the request waited: it was answered 200 with an empty
    // text and finish_reason "cancelled"; a 503 tells the client to retry elsewhere.
    auto b = std::make_shared<test::fake_backend>(k_hello, 2ms, /*max_active=*/1, /*max_queue=*/1);
    b->set_paused(true);
    running_server s(b);
    auto waiting = std::async(std::launch::async, [&] { return s.post("/v1/chat/completions", chat_body().dump()); });
    while (b->submitted() < 1) std::this_thread::sleep_for(1ms);
    b->shutdown(/*cancel_in_flight=*/true);
    auto r = waiting.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "shutting_down");
}

TEST(server_http, a_client_that_disconnects_cancels_its_request) {
    std::vector<std::string> many(2000, "x");
    auto b = std::make_shared<test::fake_backend>(many, 5ms);
    running_server s(b);
    httplib::Client c("127.0.0.1", s.port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = chat_body({{"stream", true}}).dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 5; };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    c.send(req, res, err);
    EXPECT_GE(chunks, 5) << httplib::to_string(err) << " " << res.status;
    // The backend sees the request end as cancelled long before its 2000 tokens (10 s).
    const auto t0 = std::chrono::steady_clock::now();
    while (b->cancelled() == 0 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(b->cancelled(), 1);
    EXPECT_LT(b->metrics().generated_tokens, 1000);
    EXPECT_EQ(s.server->in_flight(), 0);
}

TEST(server_http, a_client_that_disconnects_before_any_reply_cancels_its_request) {
    // Non-streaming: nothing is written until the end, so the server watches the socket itself.
    std::vector<std::string> many(2000, "x");
    auto b = std::make_shared<test::fake_backend>(many, 5ms);
    running_server s(b);
    httplib::Client c("127.0.0.1", s.port);
    c.set_read_timeout(0, 200000);  // the client gives up after 0.2 s and closes the connection
    auto r = c.Post("/v1/chat/completions", chat_body().dump(), "application/json");
    EXPECT_FALSE(r);
    c.stop();
    const auto t0 = std::chrono::steady_clock::now();
    while (b->cancelled() == 0 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(b->cancelled(), 1);
    EXPECT_LT(b->metrics().generated_tokens, 1000);
}

TEST(server_http, metrics_count_requests_by_status) {
    running_server s;
    s.post("/v1/chat/completions", chat_body().dump());
    s.post("/v1/chat/completions", chat_body().dump());
    s.post("/v1/chat/completions", "[]");
    // A request is counted once its reply is written, which may be just after the client read it
    // (each on its own server thread, so the last reply's count can land before an earlier one's):
    // wait for all three.
    std::string text;
    for (int i = 0; i < 400; ++i) {
        text = s.client()->Get("/metrics")->body;
        if (text.find("status=\"400\"} 1\n") != std::string::npos && text.find("status=\"200\"} 2\n") != std::string::npos)
            break;
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_NE(text.find("sluice_requests_total{path=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos)
        << text;
    EXPECT_NE(text.find("sluice_requests_total{path=\"/v1/chat/completions\",status=\"400\"} 1\n"), std::string::npos);
    EXPECT_NE(text.find("sluice_time_to_first_token_seconds_count 2\n"), std::string::npos);
    EXPECT_NE(text.find("sluice_generated_tokens_total 12\n"), std::string::npos);
}

TEST(server_http, draining_refuses_new_requests_and_reports_stopping) {
    running_server s;
    s.server->begin_drain();
    auto r = s.post("/v1/chat/completions", chat_body().dump());
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "shutting_down");
    auto ready = s.client()->Get("/ready");
    EXPECT_EQ(ready->status, 503);
    EXPECT_EQ(json::parse(ready->body)["status"], "stopping");
    EXPECT_EQ(s.client()->Get("/health")->status, 200);
}

TEST(server_http, concurrent_requests_each_get_their_own_reply) {
    auto b = std::make_shared<test::fake_backend>(k_hello, 1ms, 4, 64);
    running_server s(b);
    std::vector<std::future<std::string>> replies;
    for (int i = 0; i < 16; ++i)
        replies.push_back(std::async(std::launch::async, [&, i] {
            const bool bad = i % 4 == 3;  // a bad request among good ones affects nothing
            auto r = s.post("/v1/chat/completions", bad ? std::string("{") : chat_body({{"max_tokens", 1 + i % 6}}).dump());
            return r ? std::to_string(r->status) + " " + r->body : "no reply: " + httplib::to_string(r.error());
        }));
    for (int i = 0; i < 16; ++i) {
        const std::string r = replies[static_cast<size_t>(i)].get();
        if (i % 4 == 3) {
            EXPECT_EQ(r.rfind("400 ", 0), 0u) << r;
            continue;
        }
        ASSERT_EQ(r.rfind("200 ", 0), 0u) << r;
        const json j = json::parse(r.substr(4));
        std::string want;
        for (int k = 0; k < 1 + i % 6; ++k) want += k_hello[static_cast<size_t>(k)];
        EXPECT_EQ(j["choices"][0]["message"]["content"], want);
    }
}

}  // namespace
