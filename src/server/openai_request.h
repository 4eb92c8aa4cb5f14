// OpenAI request bodies (POST /v1/chat/completions and /v1/completions) parsed and validated as a
// pure function: JSON text in, a request or an OpenAI-style error out, no socket and no model
// needed (the fuzz target and the unit tests call it directly). Every field is checked for its
// type and range; fields that would change the output and that sluice does not implement
// (response_format json_object/json_schema, tool_choice "required", echo, suffix, best_of > 1,
// non-text content parts) and unknown fields are refused with a 400 that names them: nothing is
// silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice {

// An OpenAI error object: {"error": {"message", "type", "param", "code"}}.
struct api_error {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // "" is sent as null
    std::string code;   // "" is sent as null
};

nlohmann::ordered_json error_body(const api_error& e);

enum class endpoint { chat, completions };

struct request_limits {
    int32_t n_vocab = 0;        // logit_bias and prompt ids must be below it (0: not checked here)
    int max_n = 16;             // choices per request
    int max_stop = 4;           // stop strings (OpenAI's limit)
    size_t max_stop_chars = 64;  // code points per stop string
    int max_tokens = 1 << 20;   // larger max_tokens are refused as nonsense; the context caps the rest
    int max_depth = 64;         // nesting of messages and tools (the template walks them recursively)
};

struct openai_request {
    endpoint kind = endpoint::chat;
    std::string model;  // as sent ("" when absent); the reply names the served model

    // chat: messages normalised for the chat template (content parts joined into a string,
    // role "developer" as "system"), the tools (null when none) and extra template variables.
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;
    bool parse_tool_calls = false;   // tools given and tool_choice is not "none"
    nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();

    // completions: the prompt as text, or as token ids (checked against n_vocab).
    std::string prompt;
    std::vector<int32_t> prompt_ids;
    bool prompt_is_ids = false;

    bool stream = false;
    bool include_usage = false;       // stream_options.include_usage
    int max_tokens = -1;              // -1: not given
    std::vector<std::string> stop;
    // Sampling: OpenAI's defaults (temperature 1, top_p 1), top_k and min_p off unless given.
    float temperature = 1.0f;
    float top_p = 1.0f;
    int32_t top_k = 0;
    float min_p = 0.0f;
    std::optional<uint64_t> seed;     // absent: the server picks one and reports it
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by id
    bool logprobs = false;
    int top_logprobs = 0;             // 0..20 alternatives per token (completions: `logprobs` N)
    int n = 1;
    // sluice's extension "speculative": false serves this request without drafting when the
    // server runs with --spec / --draft-model (true, or absent: the server's setting). Drafting
    // changes the speed only: the tokens are the same either way.
    bool speculative = true;
};

using parse_result = std::variant<openai_request, api_error>;

parse_result parse_openai_request(endpoint kind, std::string_view body, const request_limits& limits);

// The JSON Schema type of each tool parameter (tool name -> parameter -> "string", "integer",
// ...), for typing the values of XML-form tool calls: a type list's first type that is not
// "null"; parameters without a plain type (anyOf, $ref) are left out.
std::map<std::string, std::map<std::string, std::string>> tool_param_types(const nlohmann::ordered_json& tools);

}  // namespace sluice
