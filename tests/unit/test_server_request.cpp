// OpenAI request parsing and validation (src/server/openai_request.h): every field's type and
// range, the refusals that must never be silent, and the error object's shape.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace sluice;

request_limits limits() {
    request_limits l;
    l.n_vocab = 1000;
    return l;
}

openai_request ok(endpoint kind, const std::string& body) {
    parse_result r = parse_openai_request(kind, body, limits());
    if (auto* e = std::get_if<api_error>(&r)) ADD_FAILURE() << body << " -> " << e->message;
    return std::holds_alternative<openai_request>(r) ? std::get<openai_request>(r) : openai_request{};
}

api_error err(endpoint kind, const std::string& body) {
    parse_result r = parse_openai_request(kind, body, limits());
    if (std::holds_alternative<openai_request>(r)) {
        ADD_FAILURE() << "accepted: " << body;
        return {};
    }
    return std::get<api_error>(r);
}

api_error chat_err(const std::string& fields) {
    return err(endpoint::chat, R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}");
}

TEST(server_request, chat_request_fields_are_read) {
    const openai_request r = ok(endpoint::chat, R"({
        "model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 50, "max_completion_tokens": 20,
        "stop": ["a", "bc"], "temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.1, "seed": 42,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
        "logit_bias": {"17": 5, "3": -100}, "logprobs": true, "top_logprobs": 3, "n": 2, "user": "u"})");
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.messages.size(), 2u);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.max_tokens, 20);  // the smaller of max_tokens and max_completion_tokens
    EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_FLOAT_EQ(r.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.top_p, 0.9f);
    EXPECT_EQ(r.top_k, 7);
    EXPECT_FLOAT_EQ(r.min_p, 0.1f);
    ASSERT_TRUE(r.seed.has_value());
    EXPECT_EQ(*r.seed, 42u);
    EXPECT_FLOAT_EQ(r.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(r.repetition_penalty, 1.1f);
    ASSERT_EQ(r.logit_bias.size(), 2u);  // sorted by id
    EXPECT_EQ(r.logit_bias[0].first, 3);
    EXPECT_FLOAT_EQ(r.logit_bias[0].second, -100.0f);
    EXPECT_EQ(r.logit_bias[1].first, 17);
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 3);
    EXPECT_EQ(r.n, 2);
}

TEST(server_request, defaults_are_openai_defaults) {
    const openai_request r = ok(endpoint::chat, R"({"messages":[{"role":"user","content":"hi"}]})");
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.max_tokens, -1);
    EXPECT_FLOAT_EQ(r.temperature, 1.0f);
    EXPECT_FLOAT_EQ(r.top_p, 1.0f);
    EXPECT_EQ(r.top_k, 0);
    EXPECT_FALSE(r.seed.has_value());
    EXPECT_EQ(r.n, 1);
    EXPECT_TRUE(r.tools.is_null());
    EXPECT_FALSE(r.parse_tool_calls);
}

TEST(server_request, null_means_absent) {
    const openai_request r = ok(endpoint::chat,
                                R"({"messages":[{"role":"user","content":"hi"}],"temperature":null,"stop":null,"n":null})");
    EXPECT_FLOAT_EQ(r.temperature, 1.0f);
    EXPECT_TRUE(r.stop.empty());
}

TEST(server_request, malformed_json_is_rejected) {
    for (const char* body : {"", "{", "{\"messages\": [}", "nul", "{\"a\":1,}", "\xff\xfe"}) {
        const api_error e = err(endpoint::chat, body);
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.type, "invalid_request_error");
        EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
    }
    EXPECT_NE(err(endpoint::chat, "[1,2]").message.find("must be a JSON object"), std::string::npos);
}

TEST(server_request, wrong_types_are_rejected_with_the_parameter_named) {
    EXPECT_EQ(chat_err(R"("temperature":"hot")").param, "temperature");
    EXPECT_EQ(chat_err(R"("max_tokens":1.5)").param, "max_tokens");
    EXPECT_EQ(chat_err(R"("stream":1)").param, "stream");
    EXPECT_EQ(chat_err(R"("stop":5)").param, "stop");
    EXPECT_EQ(chat_err(R"("stop":["a",3])").param, "stop[1]");
    EXPECT_EQ(chat_err(R"("seed":1.5)").param, "seed");
    EXPECT_EQ(chat_err(R"("user":5)").param, "user");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":"hi"})").param, "messages");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[]})").param, "messages");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[{"role":"robot","content":"x"}]})").param, "messages[0].role");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[{"role":"user","name":3,"content":"x"}]})").param, "messages[0].name");
}

TEST(server_request, negative_and_huge_numbers_are_rejected) {
    EXPECT_EQ(chat_err(R"("max_tokens":0)").param, "max_tokens");
    EXPECT_EQ(chat_err(R"("max_tokens":-5)").param, "max_tokens");
    EXPECT_EQ(chat_err(R"("max_tokens":99999999999999999999)").param, "max_tokens");
    EXPECT_EQ(chat_err(R"("temperature":2.5)").param, "temperature");
    EXPECT_EQ(chat_err(R"("temperature":-0.1)").param, "temperature");
    EXPECT_EQ(chat_err(R"("temperature":1e400)").status, 400);
    EXPECT_EQ(chat_err(R"("top_p":1.01)").param, "top_p");
    EXPECT_EQ(chat_err(R"("top_k":-1)").param, "top_k");
    EXPECT_EQ(chat_err(R"("n":0)").param, "n");
    EXPECT_EQ(chat_err(R"("n":17)").param, "n");
    EXPECT_EQ(chat_err(R"("top_logprobs":21,"logprobs":true)").param, "top_logprobs");
    EXPECT_EQ(chat_err(R"("presence_penalty":3)").param, "presence_penalty");
    EXPECT_EQ(chat_err(R"("repetition_penalty":0)").param, "repetition_penalty");
    // As in JSON Schema, 2.0 is an integer; 2.5 is not.
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"n":2.0})").n, 2);
    EXPECT_EQ(ok(endpoint::completions, R"({"prompt":[5.0]})").prompt_ids, std::vector<int32_t>{5});
    EXPECT_EQ(chat_err(R"("n":2.5)").param, "n");
    EXPECT_GT(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"repetition_penalty":5e-324})")
                  .repetition_penalty, 0.0f);
}

TEST(server_request, unknown_fields_are_rejected_not_ignored) {
    const api_error e = chat_err(R"("mirostat":2)");
    EXPECT_EQ(e.param, "mirostat");
    EXPECT_NE(e.message.find("unknown parameter"), std::string::npos);
    // A completions-only field on the chat endpoint, and the reverse.
    EXPECT_EQ(chat_err(R"("echo":false)").param, "echo");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":"x","messages":[]})").param, "messages");
    EXPECT_EQ(chat_err(R"("stream_options":{"include_usage":true,"x":1})").param, "stream_options.x");
    EXPECT_EQ(err(endpoint::chat, R"({"messages":[{"role":"user","content":"x","color":"red"}]})").param,
              "messages[0].color");
}

TEST(server_request, response_format_json_is_refused_with_a_400_that_says_so) {
    for (const char* type : {"json_object", "json_schema"}) {
        const api_error e = chat_err(std::string(R"("response_format":{"type":")") + type + "\"}");
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.param, "response_format");
        EXPECT_EQ(e.code, "unsupported_parameter");
        EXPECT_NE(e.message.find("not supported"), std::string::npos) << e.message;
    }
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}})").n, 1);
}

TEST(server_request, logit_bias_ids_are_validated) {
    EXPECT_NE(chat_err(R"("logit_bias":{"1000":1})").message.find("out of range"), std::string::npos);
    EXPECT_EQ(chat_err(R"("logit_bias":{"-1":1})").param, "logit_bias");
    EXPECT_EQ(chat_err(R"("logit_bias":{"abc":1})").param, "logit_bias");
    EXPECT_EQ(chat_err(R"("logit_bias":{"5":101})").param, "logit_bias");
    EXPECT_EQ(chat_err(R"("logit_bias":{"5":"x"})").param, "logit_bias");
    EXPECT_EQ(chat_err(R"("logit_bias":[1])").param, "logit_bias");
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"999":-1}})").logit_bias.size(),
              1u);
}

TEST(server_request, stop_is_a_string_or_up_to_four) {
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"stop":"\n"})").stop,
              std::vector<std::string>{"\n"});
    EXPECT_EQ(chat_err(R"("stop":["a","b","c","d","e"])").param, "stop");
    EXPECT_EQ(chat_err(R"("stop":"")").param, "stop");
    EXPECT_EQ(chat_err("\"stop\":\"" + std::string(65, 'x') + "\"").param, "stop");
    // 64 characters of 3 bytes each are 64 characters, as JSON Schema counts them.
    std::string wide;
    for (int i = 0; i < 64; ++i) wide += "\xe2\x82\xac";
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"stop":")" + wide + "\"}").stop.size(), 1u);
}

TEST(server_request, messages_are_normalised_for_the_template) {
    const openai_request r = ok(endpoint::chat, R"({"messages":[
        {"role":"developer","content":"rules"},
        {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
            "function":{"name":"f","arguments":"{\"x\":1}"}}]},
        {"role":"tool","content":"42","tool_call_id":"call_1"}]})");
    EXPECT_EQ(r.messages[0]["role"], "system");
    EXPECT_EQ(r.messages[1]["content"], "a\nb");
    EXPECT_EQ(r.messages[2]["content"], "");  // templates concatenate content as a string
    EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
    EXPECT_EQ(r.messages[3]["tool_call_id"], "call_1");
}

TEST(server_request, seeds_logit_bias_keys_and_template_variables_are_strict) {
    EXPECT_EQ(chat_err(R"("seed":9223372036854775808)").param, "seed");  // past int64
    EXPECT_EQ(*ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"seed":-1})").seed, ~uint64_t{0});
    EXPECT_EQ(chat_err(R"("logit_bias":{"007":1})").param, "logit_bias");  // not canonical
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"0":1}})").logit_bias.size(), 1u);
    EXPECT_EQ(chat_err(R"("chat_template_kwargs":{"foo":1})").param, "chat_template_kwargs.foo");
    EXPECT_EQ(chat_err(R"("chat_template_kwargs":{"enable_thinking":1})").param, "chat_template_kwargs.enable_thinking");
    EXPECT_EQ(ok(endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}})")
                  .template_kwargs["enable_thinking"], false);
}

TEST(server_request, non_text_content_is_refused) {
    const api_error e = err(endpoint::chat,
                            R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})");
    EXPECT_EQ(e.code, "unsupported_parameter");
    EXPECT_EQ(e.param, "messages[0].content[0].type");
}

TEST(server_request, tools_and_tool_choice) {
    const std::string tools = R"("tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}])";
    const std::string base = R"({"messages":[{"role":"user","content":"x"}],)";
    EXPECT_TRUE(ok(endpoint::chat, base + tools + "}").parse_tool_calls);
    const openai_request none = ok(endpoint::chat, base + tools + R"(,"tool_choice":"none"})");
    EXPECT_FALSE(none.parse_tool_calls);
    EXPECT_TRUE(none.tools.is_null());
    EXPECT_EQ(err(endpoint::chat, base + tools + R"(,"tool_choice":"required"})").code, "unsupported_parameter");
    EXPECT_EQ(err(endpoint::chat, base + R"("tools":[{"type":"function","function":{}}]})").param, "tools[0].function.name");
    EXPECT_EQ(err(endpoint::chat, base + R"("tools":[{"type":"code_interpreter"}]})").param, "tools[0].type");
}

TEST(server_request, deep_nesting_is_refused) {
    std::string deep;
    for (int i = 0; i < 100; ++i) deep += "[";
    for (int i = 0; i < 100; ++i) deep += "]";
    const std::string body = R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":)"
                             R"({"name":"f","parameters":{"a":)" + deep + "}}}]}";
    EXPECT_EQ(err(endpoint::chat, body).param, "tools");
    // Refused before the parse: 400,000 levels parsed, then were copied recursively when the
    // body's object grew past "messages", and the server thread's stack overflowed (SIGSEGV).
    const std::string very_deep = std::string(400000, '[') + std::string(400000, ']');
    const api_error e = err(endpoint::chat, R"({"messages":[{"role":"user","content":)" + very_deep + R"(}],"max_tokens":1})");
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find("nested deeper than"), std::string::npos) << e.message;
    // Brackets inside strings are text, not nesting.
    ok(endpoint::chat, R"({"messages":[{"role":"user","content":")" + very_deep + R"("}]})");
}

TEST(server_request, completion_prompt_forms) {
    EXPECT_EQ(ok(endpoint::completions, R"({"prompt":"abc"})").prompt, "abc");
    EXPECT_EQ(ok(endpoint::completions, R"({"prompt":["abc"]})").prompt, "abc");
    const openai_request ids = ok(endpoint::completions, R"({"prompt":[1,2,999]})");
    EXPECT_TRUE(ids.prompt_is_ids);
    EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 999}));
    EXPECT_EQ(ok(endpoint::completions, R"({"prompt":[[5]]})").prompt_ids, std::vector<int32_t>{5});
    EXPECT_NE(err(endpoint::completions, R"({"prompt":[1,1000]})").message.find("out of range"), std::string::npos);
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":[-1]})").param, "prompt");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":[1,"a"]})").param, "prompt");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":["a","b"]})").code, "unsupported_parameter");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":""})").param, "prompt");
    EXPECT_EQ(err(endpoint::completions, R"({})").param, "prompt");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":"x","echo":true})").code, "unsupported_parameter");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":"x","suffix":"y"})").code, "unsupported_parameter");
    EXPECT_EQ(err(endpoint::completions, R"({"prompt":"x","best_of":2})").code, "unsupported_parameter");
    const openai_request lp = ok(endpoint::completions, R"({"prompt":"x","logprobs":2})");
    EXPECT_TRUE(lp.logprobs);
    EXPECT_EQ(lp.top_logprobs, 2);
}

TEST(server_request, error_body_has_openai_shape) {
    api_error e;
    e.message = "bad";
    e.param = "stop";
    const auto j = error_body(e);
    EXPECT_EQ(j["error"]["message"], "bad");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "stop");
    EXPECT_TRUE(j["error"]["code"].is_null());
    EXPECT_EQ(j["error"].size(), 4u);
}

}  // namespace

namespace {

TEST(server_request, tool_parameter_types_come_from_the_schemas) {
    const auto tools = nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": ["null", "number"]}, "c": {"anyOf": [{"type": "string"}]},
            "d": {"type": "string", "enum": ["x"]}}}}},
        {"name": "flat", "parameters": {"properties": {"e": {"type": "boolean"}}}},
        {"type": "function", "function": {"name": "no_params"}}])");
    const auto t = tool_param_types(tools);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t.at("f").at("a"), "integer");
    EXPECT_EQ(t.at("f").at("b"), "number");
    EXPECT_FALSE(t.at("f").contains("c"));
    EXPECT_EQ(t.at("f").at("d"), "string");
    EXPECT_EQ(t.at("flat").at("e"), "boolean");
    EXPECT_TRUE(t.at("no_params").empty());
    EXPECT_TRUE(tool_param_types(nlohmann::ordered_json()).empty());
}

}  // namespace

namespace {

TEST(server_request, a_reply_message_appended_as_the_sdk_gives_it_is_accepted) {
    // messages.append(reply.choices[0].message.model_dump()) carries refusal, function_call,
    // audio and annotations: the second turn was refused ("unknown message field").
    const openai_request r = ok(endpoint::chat, R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "refusal": null, "function_call": null, "audio": null,
         "annotations": [], "tool_calls": null}, {"role": "user", "content": "more"}],
        "prompt_cache_key": "k", "safety_identifier": "s"})");
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_FALSE(r.messages[1].contains("refusal"));
    // With something in them they would be dropped unseen: still refused.
    EXPECT_EQ(err(endpoint::chat, R"({"messages": [{"role": "assistant", "content": "", "refusal": "no"}]})").param,
              "messages[0].refusal");
    EXPECT_EQ(chat_err(R"("prompt_cache_key": 3)").param, "prompt_cache_key");
}

}  // namespace
