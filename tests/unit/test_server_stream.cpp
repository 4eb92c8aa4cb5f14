// The text pipeline of a reply: stop strings with streaming holdback, the content / reasoning /
// tool-call split, SSE framing, and the Prometheus text of /metrics.
#include "server/metrics.h"
#include "server/sse.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace sluice;

// Feeds `pieces` one by one; returns what was emitted, piece by piece, then the flush.
std::vector<std::string> feed(stop_matcher& m, const std::vector<std::string>& pieces) {
    std::vector<std::string> out;
    for (const auto& p : pieces) out.push_back(m.push(p));
    out.push_back(m.flush());
    return out;
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += x;
    return s;
}

TEST(server_stop, the_stop_string_ends_the_text_and_is_not_returned) {
    stop_matcher m({"END"});
    const auto out = feed(m, {"hello ", "world END and more", "ignored"});
    EXPECT_EQ(joined(out), "hello world ");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(out[2], "");  // nothing after the stop
}

TEST(server_stop, text_that_may_begin_a_stop_string_is_held_back_then_flushed) {
    stop_matcher m({"</end>"});
    EXPECT_EQ(m.push("abc</"), "abc");   // "</" may begin the stop string
    EXPECT_EQ(m.push("e"), "");          // "</e" still may
    EXPECT_EQ(m.push("x"), "</ex");      // no longer: released
    EXPECT_EQ(m.push("</en"), "");
    EXPECT_EQ(m.flush(), "</en");        // the end of generation flushes it
    EXPECT_FALSE(m.stopped());
}

TEST(server_stop, a_stop_string_split_across_tokens_is_found) {
    stop_matcher m({"\n\nUser:"});
    EXPECT_EQ(joined(feed(m, {"Sure.", "\n", "\nUs", "er", ":", " hi"})), "Sure.");
    EXPECT_TRUE(m.stopped());
}

TEST(server_stop, the_earliest_of_several_stop_strings_wins) {
    stop_matcher m({"xyz", "b"});
    EXPECT_EQ(m.push("aaxyzb"), "aa");
    stop_matcher m2({"bc", "abcd"});
    EXPECT_EQ(joined(feed(m2, {"zab", "cd"})), "z");  // "abcd" begins before "bc"
}

TEST(server_stop, without_stop_strings_text_passes_unchanged) {
    stop_matcher m;
    EXPECT_EQ(m.push("a<"), "a<");
    EXPECT_EQ(m.flush(), "");
}

TEST(server_stop, held_text_never_splits_a_code_point) {
    stop_matcher m({"\xc3\xa9t\xc3\xa9"});  // "été"
    EXPECT_EQ(m.push("caf\xc3\xa9"), "caf");  // "é" may begin "été"
    EXPECT_EQ(m.push("!"), "\xc3\xa9!");
}

// Runs the parser over `pieces` and gathers everything it returned.
output_delta parse_all(output_parser& p, const std::vector<std::string>& pieces) {
    output_delta all;
    for (const auto& s : pieces) all.append(p.push(s));
    all.append(p.finish());
    return all;
}

std::vector<std::string> chars_of(const std::string& s) {
    std::vector<std::string> v;
    for (char c : s) v.emplace_back(1, c);
    return v;
}

int counter = 0;
std::string test_id() { return "call_" + std::to_string(++counter); }

TEST(server_tool_calls, a_qwen_tool_call_becomes_a_call_with_json_string_arguments) {
    const std::string text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                             "\"days\": 2}}\n</tool_call>";
    for (bool by_char : {false, true}) {
        output_parser p({.think = false, .start_in_think = false, .tool_calls = true}, test_id);
        const output_delta d = parse_all(p, by_char ? chars_of(text) : std::vector<std::string>{text});
        EXPECT_EQ(d.content, "Let me check.");
        ASSERT_EQ(d.calls.size(), 1u);
        EXPECT_EQ(d.calls[0].name, "get_weather");
        EXPECT_EQ(d.calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
        EXPECT_EQ(d.calls[0].id.rfind("call_", 0), 0u);
        EXPECT_EQ(p.n_calls(), 1);
    }
}

TEST(server_tool_calls, several_calls_and_whitespace_between_them) {
    output_parser p({.tool_calls = true}, test_id);
    const output_delta d = parse_all(
        p, {"<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n", "<tool_call>\n{\"name\":\"b\",\"arguments\":"
                                                                             "\"{\\\"k\\\":1}\"}\n</tool_call>"});
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(d.calls.size(), 2u);
    EXPECT_EQ(d.calls[0].arguments, "{}");
    EXPECT_EQ(d.calls[1].name, "b");
    EXPECT_EQ(d.calls[1].arguments, "{\"k\":1}");  // a string argument is kept as given
    EXPECT_NE(d.calls[0].id, d.calls[1].id);
}

TEST(server_tool_calls, the_xml_form_of_qwen3_coder_and_qwen3_5_is_a_call_typed_by_the_schema) {
    // What the Qwen3-Coder and Qwen3.5 templates ask for; it was returned as content.
    const std::string text =
        "I will look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose, CA\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=zip>\n02134\n"
        "</parameter>\n<parameter=filters>\n{\"rain\": [1, 2]}\n</parameter>\n<parameter=note>\nline 1\nline 2\n"
        "</parameter>\n<parameter=unlisted>\n7\n</parameter>\n</function>\n</tool_call>";
    output_parser_options o{.tool_calls = true};
    o.param_types["get_weather"] = {{"city", "string"}, {"days", "integer"}, {"metric", "boolean"},
                                    {"zip", "string"}, {"filters", "object"}, {"note", "string"}};
    o.param_types["now"] = {};
    for (bool by_char : {false, true}) {
        output_parser p(o, test_id);
        const output_delta d = parse_all(p, by_char ? chars_of(text) : std::vector<std::string>{text});
        EXPECT_EQ(d.content, "I will look.");
        ASSERT_EQ(d.calls.size(), 1u);
        EXPECT_EQ(d.calls[0].name, "get_weather");
        EXPECT_EQ(d.calls[0].arguments,
                  "{\"city\":\"San Jose, CA\",\"days\":3,\"metric\":true,\"zip\":\"02134\",\"filters\":{\"rain\":[1,2]},"
                  "\"note\":\"line 1\\nline 2\",\"unlisted\":\"7\"}");
    }
    // A value that is not of its type stays the text; a call without parameters has {}.
    output_parser p(o, test_id);
    const output_delta d = parse_all(
        p, {"<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"
            "<tool_call>\n<function=now>\n</function>\n</tool_call>"});
    ASSERT_EQ(d.calls.size(), 2u);
    EXPECT_EQ(d.calls[0].arguments, "{\"days\":\"three\"}");
    EXPECT_EQ(d.calls[1].name, "now");
    EXPECT_EQ(d.calls[1].arguments, "{}");
    // Malformed (no closing </function>, stray text between parameters, no name) or a tool that
    // was not declared (OpenAI returns only declared ones): content, as written.
    for (const std::string bad : {"<tool_call>\n<function=now>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
                                  "<tool_call>\n<function=now>\nhello\n</function>\n</tool_call>",
                                  "<tool_call>\n<function=>\n</function>\n</tool_call>",
                                  "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",
                                  "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>"}) {
        output_parser q(o, test_id);
        const output_delta e = parse_all(q, {bad});
        EXPECT_TRUE(e.calls.empty()) << bad;
        EXPECT_EQ(e.content, bad);
    }
}

TEST(server_tool_calls, a_call_nested_past_the_tools_bound_stays_content) {
    // The model's text is parsed like a request body: 400,000 levels overflowed the stack.
    output_parser p({.tool_calls = true}, test_id);
    const std::string deep = std::string(400000, '[') + std::string(400000, ']');
    const output_delta d = parse_all(p, {"<tool_call>{\"arguments\":" + deep + ",\"name\":\"a\"}</tool_call>"});
    EXPECT_TRUE(d.calls.empty());
    EXPECT_EQ(d.content.size(), deep.size() + 48);
}

TEST(server_tool_calls, parameters_is_read_as_arguments) {
    output_parser p({.tool_calls = true}, test_id);
    const output_delta d = parse_all(p, {"<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": 1}}</tool_call>"});
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].arguments, "{\"x\":1}");
}

TEST(server_tool_calls, a_malformed_call_stays_content) {
    output_parser p({.tool_calls = true}, test_id);
    const output_delta d = parse_all(p, {"x <tool_call>not json</tool_call> y"});
    EXPECT_TRUE(d.calls.empty());
    EXPECT_EQ(d.content, "x <tool_call>not json</tool_call> y");
}

TEST(server_tool_calls, an_unterminated_call_with_complete_json_counts) {
    output_parser p({.tool_calls = true}, test_id);
    const output_delta d = parse_all(p, {"<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":[1]}}"});
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].arguments, "{\"a\":[1]}");
}

TEST(server_tool_calls, without_tools_the_markers_are_plain_text) {
    output_parser p({}, test_id);
    const std::string text = " <tool_call>{\"name\":\"f\"}</tool_call> <think>x</think> ";
    EXPECT_EQ(parse_all(p, chars_of(text)).content, text);
}

TEST(server_think, reasoning_goes_to_reasoning_content) {
    const std::string text = "<think>\nThe user wants a number.\n</think>\n\nThe answer is 4.";
    for (bool by_char : {false, true}) {
        output_parser p({.think = true}, test_id);
        const output_delta d = parse_all(p, by_char ? chars_of(text) : std::vector<std::string>{text});
        EXPECT_EQ(d.reasoning, "The user wants a number.");
        EXPECT_EQ(d.content, "The answer is 4.");
    }
}

TEST(server_think, a_prompt_that_opened_think_starts_in_reasoning) {
    EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n"));
    output_parser p({.think = true, .start_in_think = true}, test_id);
    const output_delta d = parse_all(p, chars_of("hmm, 2+2.\n</think>\n\n4"));
    EXPECT_EQ(d.reasoning, "hmm, 2+2.");
    EXPECT_EQ(d.content, "4");
}

TEST(server_think, thinking_then_a_tool_call) {
    output_parser p({.think = true, .tool_calls = true}, test_id);
    const output_delta d =
        parse_all(p, chars_of("<think>need weather</think>\n\n<tool_call>\n{\"name\":\"w\",\"arguments\":{}}\n</tool_call>"));
    EXPECT_EQ(d.reasoning, "need weather");
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "w");
}

TEST(server_think, streamed_pieces_concatenate_to_the_whole_reply) {
    // Per-piece deltas must add up to what one push of the whole text gives.
    const std::string text = "<think> a b </think> c <tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call> d ";
    output_parser whole({.think = true, .tool_calls = true}, test_id), pieces({.think = true, .tool_calls = true}, test_id);
    const output_delta a = parse_all(whole, {text});
    const output_delta b = parse_all(pieces, chars_of(text));
    EXPECT_EQ(a.content, b.content);
    EXPECT_EQ(a.reasoning, b.reasoning);
    EXPECT_EQ(a.calls.size(), b.calls.size());
    EXPECT_EQ(a.content, "cd");  // whitespace next to a call is dropped with it
}

TEST(server_sse, events_are_data_lines_followed_by_a_blank_line) {
    nlohmann::ordered_json j{{"a", 1}, {"b", "x\ny"}};
    EXPECT_EQ(sse_event(j), "data: {\"a\":1,\"b\":\"x\\ny\"}\n\n");
    EXPECT_EQ(std::string(sse_done), "data: [DONE]\n\n");
}

TEST(server_sse, invalid_utf8_is_replaced_not_thrown) {
    nlohmann::ordered_json j{{"t", std::string("a\xe2\x82")}};
    EXPECT_EQ(sse_event(j), "data: {\"t\":\"a\xef\xbf\xbd\"}\n\n");
}

TEST(server_sse, payloads_are_read_back_in_order) {
    const std::string stream = ": comment\n\ndata: {\"x\":1}\n\ndata: a\ndata: b\r\n\r\nevent: e\ndata:[DONE]\n\ndata: cut";
    const auto p = sse_payloads(stream);
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(p[0], "{\"x\":1}");
    EXPECT_EQ(p[1], "a\nb");
    EXPECT_EQ(p[2], "[DONE]");
}

TEST(server_metrics, prometheus_text_has_counters_and_a_cumulative_histogram) {
    server_metrics m;
    m.count_request("/v1/chat/completions", 200);
    m.count_request("/v1/chat/completions", 200);
    m.count_request("/v1/completions", 400);
    m.observe_ttft(0.004);
    m.observe_ttft(0.3);
    m.observe_ttft(100.0);
    serving_metrics e;
    e.ready = true;
    e.queue_depth = 3;
    e.generated_tokens = 50;
    e.decode_seconds = 2.0;
    e.drafted = 10;
    e.accepted = 4;
    const std::string text = m.render(&e);
    auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
    EXPECT_TRUE(has("sluice_requests_total{path=\"/v1/chat/completions\",status=\"200\"} 2")) << text;
    EXPECT_TRUE(has("sluice_requests_total{path=\"/v1/completions\",status=\"400\"} 1"));
    EXPECT_TRUE(has("sluice_time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
    EXPECT_TRUE(has("sluice_time_to_first_token_seconds_bucket{le=\"0.5\"} 2"));
    EXPECT_TRUE(has("sluice_time_to_first_token_seconds_bucket{le=\"30\"} 2"));
    EXPECT_TRUE(has("sluice_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3"));
    EXPECT_TRUE(has("sluice_time_to_first_token_seconds_count 3"));
    EXPECT_TRUE(has("sluice_queue_depth 3"));
    EXPECT_TRUE(has("sluice_decode_tokens_per_second 25"));
    EXPECT_TRUE(has("sluice_draft_acceptance 0.4"));
    EXPECT_TRUE(has("sluice_ready 1"));
    // While loading, only what exists: no engine figures.
    const std::string loading = m.render(nullptr);
    EXPECT_NE(loading.find("sluice_ready 0\n"), std::string::npos);
    EXPECT_EQ(loading.find("sluice_queue_depth"), std::string::npos);
}

}  // namespace
