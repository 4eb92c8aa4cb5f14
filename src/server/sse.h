// Server-sent events as OpenAI streams them: each event is one `data: <json>` line followed by
// a blank line, and the stream ends with `data: [DONE]`. JSON is written with invalid UTF-8
// replaced by U+FFFD (a token's bytes may be part of a code point), never with an exception.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Compact JSON text; invalid UTF-8 in strings becomes U+FFFD.
std::string json_text(const nlohmann::json& j);
std::string json_text(const nlohmann::ordered_json& j);

std::string sse_event(const nlohmann::ordered_json& data);  // "data: {...}\n\n"
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// The payloads of the `data:` fields of a complete event stream, in order ("[DONE]" included).
// Lines starting with ':' are comments; a multi-line data field is joined with '\n' (the SSE
// specification's rules, enough to read what sse_event writes and what other servers send).
std::vector<std::string> sse_payloads(std::string_view stream);

}  // namespace sluice
