// GET /openapi.json: the server's own endpoints as an OpenAPI 3.1 document. Everything it
// declares is true of this server (schemathesis checks the replies against it): request schemas
// accept only what parse_openai_request accepts (they may be narrower: a 400 is always declared),
// and every status code a route can answer is listed. @MAX_ID@ and @MAX_N@ are filled in with
// the served model's last token id and the server's choices-per-request limit.
//
// The text below is written in OpenAPI 3.0's dialect (nullable: true, boolean exclusiveMinimum),
// which reads better, and converted to 3.1 when served: 3.1 is JSON Schema 2020-12, whose
// propertyNames is what lets the document say which logit_bias keys are token ids.
#include "server/http_server.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sluice {

namespace {

constexpr const char* k_document = R"JSON({
  "openapi": "3.0.3",
  "info": {
    "title": "sluice",
    "version": "1",
    "description": "OpenAI-compatible inference server of sluice. Every completion reply carries a 'sluice' object: token_sha (SHA-256 of the generated token ids), the exactness guarantees that held, the seed, and speculative-decoding telemetry."
  },
  "paths": {
    "/health": {
      "get": {
        "summary": "Liveness: the process answers",
        "responses": {"200": {"description": "alive", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}}}
      }
    },
    "/ready": {
      "get": {
        "summary": "Readiness: the model is loaded and producing tokens",
        "responses": {
          "200": {"description": "ready", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}},
          "503": {"description": "loading or stopping (the status says which)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}}
        }
      }
    },
    "/metrics": {
      "get": {
        "summary": "Prometheus metrics (text exposition format 0.0.4)",
        "responses": {"200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}
      }
    },
    "/openapi.json": {
      "get": {
        "summary": "This document",
        "responses": {"200": {"description": "the OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}}}
      }
    },
    "/v1/models": {
      "get": {
        "summary": "The served model",
        "security": [{}, {"bearer": []}],
        "responses": {
          "200": {"description": "one model", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}},
          "401": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/v1/chat/completions": {
      "post": {
        "summary": "Chat completion (JSON, or server-sent events when stream is true)",
        "security": [{}, {"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}}},
        "responses": {
          "200": {"description": "the completion", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/Event"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"},
          "429": {"$ref": "#/components/responses/Busy"},
          "500": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/v1/completions": {
      "post": {
        "summary": "Text completion (JSON, or server-sent events when stream is true)",
        "security": [{}, {"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
        "responses": {
          "200": {"description": "the completion", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/TextCompletion"}},
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/Event"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"},
          "429": {"$ref": "#/components/responses/Busy"},
          "500": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    }
  },
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "only when the server runs with --api-key"}},
    "responses": {
      "Error": {"description": "an OpenAI-style error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Busy": {"description": "the queue is full; retry after the given seconds",
               "headers": {"Retry-After": {"schema": {"type": "string"}}},
               "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    },
    "schemas": {
      "Status": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
      "Event": {
        "type": "object", "required": ["data"],
        "description": "one server-sent event: data is a JSON chunk (or an error object), the last one is [DONE]",
        "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}}
      },
      "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["message", "type", "param", "code"], "properties": {
          "message": {"type": "string"}, "type": {"type": "string"},
          "param": {"type": "string", "nullable": true}, "code": {"type": "string", "nullable": true}}}}
      },
      "ModelList": {
        "type": "object", "required": ["object", "data"],
        "properties": {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": {
          "type": "object", "required": ["id", "object", "created", "owned_by"],
          "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["model"]},
                         "created": {"type": "integer"}, "owned_by": {"type": "string"}}}}}
      },
      "Stop": {
        "nullable": true,
        "oneOf": [
          {"type": "string", "minLength": 1, "maxLength": 64},
          {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1, "maxLength": 64}}
        ]
      },
      "LogitBias": {
        "type": "object", "nullable": true,
        "description": "token id (decimal, below the vocabulary size) -> bias added to its logit",
        "propertyNames": {"pattern": "@ID_PATTERN@"},
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}
      },
      "TextPart": {
        "type": "object", "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}
      },
      "ToolCallIn": {
        "type": "object", "required": ["function"],
        "properties": {
          "id": {"type": "string"},
          "type": {"type": "string", "enum": ["function"]},
          "function": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"},
            "arguments": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "object"}]}}}
        }
      },
      "Message": {
        "type": "object", "required": ["role"], "additionalProperties": false,
        "properties": {
          "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
          "content": {"nullable": true, "description": "null or absent: the empty string",
                      "oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/components/schemas/TextPart"}}]},
          "name": {"type": "string", "nullable": true},
          "tool_calls": {"type": "array", "nullable": true, "items": {"$ref": "#/components/schemas/ToolCallIn"}},
          "tool_call_id": {"type": "string", "nullable": true},
          "reasoning_content": {"type": "string", "nullable": true}
        }
      },
      "Tool": {
        "type": "object", "required": ["type", "function"],
        "properties": {
          "type": {"type": "string", "enum": ["function"]},
          "function": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "minLength": 1}, "description": {"type": "string", "nullable": true},
            "parameters": {"type": "object", "nullable": true}}}
        }
      },
      "StreamOptions": {"type": "object", "nullable": true, "additionalProperties": false,
                        "properties": {"include_usage": {"type": "boolean", "nullable": true}}},
      "ChatRequest": {
        "type": "object", "required": ["messages"], "additionalProperties": false,
        "properties": {
          "model": {"type": "string", "nullable": true, "description": "any name: the server serves one model"},
          "messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Message"}},
          "stream": {"type": "boolean", "nullable": true},
          "stream_options": {"$ref": "#/components/schemas/StreamOptions"},
          "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1048576, "nullable": true},
          "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 1048576, "nullable": true},
          "stop": {"$ref": "#/components/schemas/Stop"},
          "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
          "top_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "top_k": {"type": "integer", "minimum": 0, "maximum": 1073741824, "nullable": true},
          "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "seed": {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true},
          "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "repetition_penalty": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 10, "nullable": true},
          "logit_bias": {"$ref": "#/components/schemas/LogitBias"},
          "logprobs": {"type": "boolean", "nullable": true},
          "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true},
          "n": {"type": "integer", "minimum": 1, "maximum": @MAX_N@, "nullable": true},
          "tools": {"type": "array", "nullable": true, "items": {"$ref": "#/components/schemas/Tool"}},
          "tool_choice": {"type": "string", "enum": ["none", "auto"], "nullable": true},
          "parallel_tool_calls": {"type": "boolean", "nullable": true},
          "response_format": {"type": "object", "nullable": true, "required": ["type"],
                              "description": "only 'text': json_object and json_schema are refused with a 400",
                              "properties": {"type": {"type": "string", "enum": ["text"]}}},
          "chat_template_kwargs": {"type": "object", "nullable": true, "additionalProperties": false,
                                   "properties": {"enable_thinking": {"type": "boolean"}}},
          "user": {"type": "string", "nullable": true},
          "metadata": {"type": "object", "nullable": true},
          "store": {"type": "boolean", "nullable": true},
          "service_tier": {"type": "string", "nullable": true},
          "speculative": {"type": "boolean", "nullable": true,
                          "description": "sluice extension: false serves this request without drafting when the server runs with --spec or --draft-model (absent or true: the server's setting). Drafting changes the speed only, never the tokens: usage.sluice.token_sha is the same either way"}
        }
      },
      "CompletionRequest": {
        "type": "object", "required": ["prompt"], "additionalProperties": false,
        "properties": {
          "model": {"type": "string", "nullable": true, "description": "any name: the server serves one model"},
          "prompt": {"oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": @MAX_ID@}},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "array", "minItems": 1,
              "items": {"type": "integer", "minimum": 0, "maximum": @MAX_ID@}}}]},
          "stream": {"type": "boolean", "nullable": true},
          "stream_options": {"$ref": "#/components/schemas/StreamOptions"},
          "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1048576, "nullable": true},
          "stop": {"$ref": "#/components/schemas/Stop"},
          "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
          "top_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "top_k": {"type": "integer", "minimum": 0, "maximum": 1073741824, "nullable": true},
          "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "seed": {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807, "nullable": true},
          "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "repetition_penalty": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 10, "nullable": true},
          "logit_bias": {"$ref": "#/components/schemas/LogitBias"},
          "logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true},
          "n": {"type": "integer", "minimum": 1, "maximum": @MAX_N@, "nullable": true},
          "echo": {"type": "boolean", "enum": [false], "nullable": true},
          "suffix": {"type": "string", "maxLength": 0, "nullable": true},
          "best_of": {"type": "integer", "enum": [1], "nullable": true},
          "user": {"type": "string", "nullable": true},
          "metadata": {"type": "object", "nullable": true},
          "store": {"type": "boolean", "nullable": true},
          "service_tier": {"type": "string", "nullable": true},
          "speculative": {"type": "boolean", "nullable": true,
                          "description": "sluice extension: false serves this request without drafting when the server runs with --spec or --draft-model (absent or true: the server's setting). Drafting changes the speed only, never the tokens: usage.sluice.token_sha is the same either way"}
        }
      },
      "Usage": {
        "type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"],
        "properties": {"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
                       "total_tokens": {"type": "integer"},
                       "prompt_tokens_details": {"type": "object", "required": ["cached_tokens"],
                                                 "properties": {"cached_tokens": {"type": "integer", "minimum": 0,
                                                   "description": "prompt tokens served from the prefix cache for the request: with n > 1, those no choice had to compute (the smallest hit over the choices)"}}},
                       "sluice": {"$ref": "#/components/schemas/UsageSluice"}}
      },
      "UsageSluice": {
        "type": "object",
        "description": "sluice extension: the request's speculative decoding over all its choices",
        "required": ["token_sha", "token_shas", "speculative", "verify_steps", "rows_per_verify", "accepted_per_step", "acceptance"],
        "properties": {
          "token_sha": {"type": "string", "description": "SHA-256 of the first choice's generated token ids (little-endian u32)"},
          "token_shas": {"type": "array", "items": {"type": "string"}, "description": "each choice's token_sha"},
          "speculative": {"type": "boolean", "description": "whether the request was served with a drafter"},
          "verify_steps": {"type": "integer", "description": "verify windows forwarded (serial decoding: one per token)"},
          "rows_per_verify": {"type": "object", "required": ["min", "mean", "max"],
                              "properties": {"min": {"type": "integer"}, "mean": {"type": "number"}, "max": {"type": "integer"}}},
          "accepted_per_step": {"type": "number", "description": "tokens committed per verify window (1.0: serial)"},
          "acceptance": {"type": "number", "description": "drafts kept / drafts proposed (0 when none were proposed)"},
          "drafts_proposed": {"type": "integer"},
          "drafts_accepted": {"type": "integer"},
          "windows_drafting_off": {"type": "integer", "description": "windows the draft-depth policy ran without drafts because they did not pay"},
          "acceptance_by_depth": {"$ref": "#/components/schemas/AcceptanceByDepth"}
        }
      },
      "AcceptanceByDepth": {
        "type": "array", "description": "sluice extension: per draft depth (1: a window's first draft), the drafts proposed at that depth and the ones kept, over the depths that saw drafts",
        "items": {"type": "object", "required": ["depth", "proposed", "accepted", "acceptance"],
                  "properties": {"depth": {"type": "integer", "minimum": 1}, "proposed": {"type": "integer"},
                                 "accepted": {"type": "integer"}, "acceptance": {"type": "number"}}}
      },
      "Sluice": {
        "type": "object", "required": ["token_sha", "exact", "seed", "spec"],
        "properties": {
          "token_sha": {"type": "string"},
          "exact": {"type": "array", "items": {"type": "string", "enum": ["E1", "E2", "E3", "E4", "E5"]}},
          "seed": {"type": "integer"},
          "stop_reason": {"type": "string"},
          "prompt_tok_s": {"type": "number"},
          "decode_tok_s": {"type": "number"},
          "spec": {"type": "object", "required": ["drafter", "verify_steps", "rows_min", "rows_mean", "tokens_per_step", "acceptance"],
                   "properties": {"drafter": {"type": "string"}, "verify_steps": {"type": "integer"}, "rows_min": {"type": "integer"},
                                  "rows_mean": {"type": "number"}, "tokens_per_step": {"type": "number"}, "acceptance": {"type": "number"},
                                  "acceptance_by_depth": {"$ref": "#/components/schemas/AcceptanceByDepth"}}}
        }
      },
      "ToolCall": {
        "type": "object", "required": ["id", "type", "function"],
        "properties": {"id": {"type": "string"}, "type": {"type": "string", "enum": ["function"]},
                       "function": {"type": "object", "required": ["name", "arguments"],
                                    "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}}}
      },
      "ChatCompletion": {
        "type": "object", "required": ["id", "object", "created", "model", "choices", "usage", "sluice"],
        "properties": {
          "id": {"type": "string"}, "object": {"type": "string", "enum": ["chat.completion"]},
          "created": {"type": "integer"}, "model": {"type": "string"},
          "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"], "properties": {
            "index": {"type": "integer"},
            "message": {"type": "object", "required": ["role", "content"], "properties": {
              "role": {"type": "string", "enum": ["assistant"]},
              "content": {"type": "string", "nullable": true},
              "reasoning_content": {"type": "string"},
              "tool_calls": {"type": "array", "items": {"$ref": "#/components/schemas/ToolCall"}}}},
            "logprobs": {"type": "object", "nullable": true},
            "finish_reason": {"type": "string", "enum": ["stop", "length", "tool_calls", "cancelled"]},
            "sluice": {"$ref": "#/components/schemas/Sluice"}}}},
          "usage": {"$ref": "#/components/schemas/Usage"},
          "sluice": {"$ref": "#/components/schemas/Sluice"}
        }
      },
      "TextCompletion": {
        "type": "object", "required": ["id", "object", "created", "model", "choices", "usage", "sluice"],
        "properties": {
          "id": {"type": "string"}, "object": {"type": "string", "enum": ["text_completion"]},
          "created": {"type": "integer"}, "model": {"type": "string"},
          "choices": {"type": "array", "items": {"type": "object", "required": ["index", "text", "finish_reason"], "properties": {
            "index": {"type": "integer"}, "text": {"type": "string"},
            "logprobs": {"type": "object", "nullable": true},
            "finish_reason": {"type": "string", "enum": ["stop", "length", "cancelled"]},
            "sluice": {"$ref": "#/components/schemas/Sluice"}}}},
          "usage": {"$ref": "#/components/schemas/Usage"},
          "sluice": {"$ref": "#/components/schemas/Sluice"}
        }
      }
    }
  }
}
)JSON";

// A regular expression for the decimal numbers 0..max, without leading zeros: the numbers with
// fewer digits than max, then for each digit of max the numbers that share its prefix and are
// smaller at that digit, then max itself.
std::string decimal_range_pattern(int64_t max) {
    const std::string m = std::to_string(max);
    const size_t n = m.size();
    std::vector<std::string> alts;
    if (n >= 2) alts.push_back("[0-9]");
    if (n >= 3) alts.push_back("[1-9][0-9]{1," + std::to_string(n - 2) + "}");
    for (size_t i = 0; i < n; ++i) {
        const int lo = i == 0 ? (n == 1 ? 0 : 1) : 0, hi = m[i] - '0' - 1;
        if (hi < lo) continue;
        std::string a = m.substr(0, i) + "[" + std::to_string(lo) + "-" + std::to_string(hi) + "]";
        if (n - i - 1 > 0) a += "[0-9]{" + std::to_string(n - i - 1) + "}";
        alts.push_back(a);
    }
    alts.push_back(m);
    std::string p = "^(";
    for (size_t i = 0; i < alts.size(); ++i) p += (i ? "|" : "") + alts[i];
    return p + ")$";
}

using ojson = nlohmann::ordered_json;

// 3.0 -> 3.1: "nullable: true" becomes a "null" member of the type (or an anyOf with null),
// "exclusiveMinimum: true" with "minimum: m" becomes "exclusiveMinimum: m".
void to_openapi_31(ojson& v) {
    if (v.is_array()) {
        for (auto& x : v) to_openapi_31(x);
        return;
    }
    if (!v.is_object()) return;
    for (auto it = v.begin(); it != v.end(); ++it) to_openapi_31(it.value());
    if (const auto ex = v.find("exclusiveMinimum"); ex != v.end() && ex->is_boolean()) {
        const bool on = ex->get<bool>();
        v.erase("exclusiveMinimum");
        if (on && v.contains("minimum")) {
            v["exclusiveMinimum"] = v["minimum"];
            v.erase("minimum");
        }
    }
    const auto nullable = v.find("nullable");
    if (nullable == v.end()) return;
    const bool on = nullable->is_boolean() && nullable->get<bool>();
    v.erase("nullable");
    if (!on) return;
    if (v.contains("type") && v["type"].is_string() && !v.contains("oneOf") && !v.contains("anyOf")) {
        v["type"] = ojson::array({v["type"], "null"});
        if (v.contains("enum")) v["enum"].push_back(nullptr);
    } else {
        ojson inner = std::move(v);
        v = ojson::object();
        v["anyOf"] = ojson::array({std::move(inner), ojson{{"type", "null"}}});
    }
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

}  // namespace

std::string openapi_document(int32_t n_vocab, int max_n, bool template_shows_tools) {
    std::string doc = k_document;
    replace_all(doc, "@MAX_ID@", std::to_string(n_vocab > 0 ? n_vocab - 1 : 2147483647));
    replace_all(doc, "@MAX_N@", std::to_string(max_n));
    replace_all(doc, "@ID_PATTERN@", decimal_range_pattern(n_vocab > 0 ? n_vocab - 1 : 2147483647));
    ojson j = ojson::parse(doc);
    if (!template_shows_tools) {   // the request would be refused: the template cannot show them
        auto& schemas = j["components"]["schemas"];
        for (auto* p : {&schemas["ChatRequest"]["properties"]["tools"], &schemas["Message"]["properties"]["tool_calls"]}) {
            (*p)["maxItems"] = 0;
            (*p)["description"] = "none: the model's chat template does not render tools (serve --chat-template)";
        }
    }
    to_openapi_31(j);
    j["openapi"] = "3.1.0";
    return j.dump(1);
}

}  // namespace sluice
