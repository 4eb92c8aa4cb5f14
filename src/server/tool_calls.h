// The assistant's raw text split into what OpenAI's API returns separately: `content`,
// `reasoning_content` (the <think>...</think> part of thinking models such as Qwen3) and
// `tool_calls`, with the arguments returned as a JSON string. A <tool_call> block holds either
// JSON (Qwen3, Hermes: {"name": ..., "arguments": {...}}) or the XML form of Qwen3-Coder and
// Qwen3.5 (<function=NAME><parameter=P>value</parameter>...</function>), whose values are typed
// by the tool's JSON Schema. Works incrementally so that streaming sends the same pieces as
// deltas; a marker split across tokens is held back until it is complete.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct tool_call {
    std::string id;         // "call_" + 24 characters
    std::string name;
    std::string arguments;  // a JSON text (an object, as OpenAI sends it)
};

struct output_delta {
    std::string content;
    std::string reasoning;
    std::vector<tool_call> calls;
    bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
    void append(output_delta&& o);
};

struct output_parser_options {
    bool think = false;           // split out <think>...</think>
    bool start_in_think = false;  // the prompt already opened <think> (the template's generation prompt)
    bool tool_calls = false;      // parse <tool_call> blocks (the request has tools)
    // The declared tools: name -> parameter -> its JSON Schema type ("string", "integer", ...),
    // which types the values of XML-form calls (a parameter not listed stays a string, vLLM's
    // qwen3_coder rule). A call of a tool not declared here is content, as OpenAI never returns
    // one; with no tools listed, every name is taken.
    std::map<std::string, std::map<std::string, std::string>> param_types;
};

class output_parser {
public:
    explicit output_parser(output_parser_options o, std::function<std::string()> make_id = {});

    output_delta push(std::string_view text);
    // End of generation: everything held back. An unterminated <tool_call> whose body is a
    // complete call still counts (a model may stop right after the JSON); otherwise its text is
    // returned as content.
    output_delta finish();
    int n_calls() const { return n_calls_; }

private:
    enum class mode { content, think, tool };
    void emit_text(output_delta& out, std::string_view text, bool final);
    void close_section(output_delta& out);
    bool parse_call(std::string_view body, output_delta& out);
    bool parse_xml_call(std::string_view body, output_delta& out);
    bool declared(const std::string& name) const { return o_.param_types.empty() || o_.param_types.count(name); }

    output_parser_options o_;
    std::function<std::string()> make_id_;
    mode mode_ = mode::content;
    std::string buf_;         // text not yet classified (it may begin a marker)
    std::string pending_ws_;  // trailing whitespace of the current section, emitted once more follows
    std::string call_ws_;     // the whitespace before the open <tool_call>
    bool section_start_ = true;  // whitespace at the start of a section is dropped
    bool seen_content_ = false;
    int n_calls_ = 0;
};

// A fresh OpenAI-style tool call id: "call_" + 24 random alphanumerics.
std::string new_tool_call_id();

// Whether a rendered chat prompt leaves the model inside a <think> block (Qwen3's thinking
// templates open it in the generation prompt).
bool prompt_opens_think(std::string_view rendered_prompt);

}  // namespace sluice
