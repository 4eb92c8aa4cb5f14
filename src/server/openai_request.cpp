#include "server/openai_request.h"

#include "core/json_depth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace sluice {

namespace {

using ojson = nlohmann::ordered_json;

struct bad_request {
    api_error e;
};

template <class... Args>
[[noreturn]] void bad(std::string param, fmt::format_string<Args...> f, Args&&... args) {
    api_error e;
    e.message = fmt::format(f, std::forward<Args>(args)...);
    e.param = std::move(param);
    throw bad_request{std::move(e)};
}

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
    api_error e;
    e.message = fmt::format("'{}': {} is not supported by this server", param, what);
    e.param = param;
    e.code = "unsupported_parameter";
    throw bad_request{std::move(e)};
}

const char* type_name(const ojson& v) {
    switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    case ojson::value_t::number_float: return "a number";
    default: return "an integer";
    }
}

bool get_bool(const ojson& v, const std::string& name) {
    if (!v.is_boolean()) bad(name, "'{}': expected a boolean, got {}", name, type_name(v));
    return v.get<bool>();
}

double get_number(const ojson& v, const std::string& name, double lo, double hi) {
    if (!v.is_number()) bad(name, "'{}': expected a number, got {}", name, type_name(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) bad(name, "'{}': expected a number in [{}, {}], got {}", name, lo, hi, x);
    return x;
}

// An integer; as in JSON Schema, a number with no fractional part (2.0) is one.
int64_t get_int(const ojson& v, const std::string& name, int64_t lo, int64_t hi) {
    if (v.is_number_float()) {
        const double x = v.get<double>();
        if (!std::isfinite(x) || x != std::floor(x)) bad(name, "'{}': expected an integer, got {}", name, x);
        // +-2^63 itself is out of range either way: an integer literal beyond int64 arrives here as
        // a double rounded to it (-9223372036854775809 becomes -2^63, which would pass x < lo).
        if (x < static_cast<double>(lo) || x > static_cast<double>(hi) || x >= 9223372036854775808.0 ||
            x <= -9223372036854775808.0)
            bad(name, "'{}': expected an integer in [{}, {}], got {}", name, lo, hi, x);
        return static_cast<int64_t>(x);
    }
    if (!v.is_number_integer()) bad(name, "'{}': expected an integer, got {}", name, type_name(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
        bad(name, "'{}': expected an integer in [{}, {}], got {}", name, lo, hi, v.get<uint64_t>());
    const int64_t x = v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
    if (x < lo || x > hi) bad(name, "'{}': expected an integer in [{}, {}], got {}", name, lo, hi, x);
    return x;
}

const std::string& get_string(const ojson& v, const std::string& name) {
    if (!v.is_string()) bad(name, "'{}': expected a string, got {}", name, type_name(v));
    return v.get_ref<const std::string&>();
}

// Nesting depth, stopping as soon as it passes `limit` (the JSON was parsed without recursion;
// walking it must not recurse without bound either).
bool deeper_than(const ojson& v, int limit) {
    if (limit < 0) return true;
    if (v.is_array() || v.is_object())
        for (const auto& x : v)
            if (deeper_than(x, limit - 1)) return true;
    return false;
}

std::vector<std::string> parse_stop(const ojson& v, const request_limits& lim) {
    std::vector<std::string> out;
    auto add = [&](const ojson& s, const std::string& name) {
        const std::string& str = get_string(s, name);
        if (str.empty()) bad(name, "'{}': a stop string must not be empty", name);
        // Characters (code points), as JSON Schema's maxLength counts them.
        const size_t chars = static_cast<size_t>(
            std::count_if(str.begin(), str.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
        if (chars > lim.max_stop_chars)
            bad(name, "'{}': a stop string has {} characters, at most {} are accepted", name, chars, lim.max_stop_chars);
        out.push_back(str);
    };
    if (v.is_string()) {
        add(v, "stop");
    } else if (v.is_array()) {
        if (static_cast<int>(v.size()) > lim.max_stop)
            bad("stop", "'stop': at most {} stop strings, got {}", lim.max_stop, v.size());
        for (size_t i = 0; i < v.size(); ++i) add(v[i], fmt::format("stop[{}]", i));
    } else {
        bad("stop", "'stop': expected a string or an array of strings, got {}", type_name(v));
    }
    return out;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const ojson& v, const request_limits& lim) {
    if (!v.is_object()) bad("logit_bias", "'logit_bias': expected an object of token id -> bias, got {}", type_name(v));
    std::map<int32_t, float> bias;
    for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string& key = it.key();
        int64_t id = -1;
        // Canonical decimal: no sign, no leading zero (the document's pattern says the same).
        const bool digits = !key.empty() && key.size() <= 10 && (key.size() == 1 || key[0] != '0') &&
                            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits) id = std::stoll(key);
        if (!digits || id > std::numeric_limits<int32_t>::max())
            bad("logit_bias", "'logit_bias': key '{}' is not a token id", key);
        if (lim.n_vocab > 0 && id >= lim.n_vocab)
            bad("logit_bias", "'logit_bias': token id {} is out of range: the vocabulary has {} tokens", id, lim.n_vocab);
        bias[static_cast<int32_t>(id)] =
            static_cast<float>(get_number(it.value(), "logit_bias", -100.0, 100.0));
    }
    return {bias.begin(), bias.end()};
}

std::vector<int32_t> parse_ids(const ojson& v, const request_limits& lim) {
    const uint64_t n_ids = lim.n_vocab > 0 ? static_cast<uint64_t>(lim.n_vocab)
                                           : static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) + 1;
    std::vector<int32_t> ids;
    ids.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        const ojson& x = v[i];
        const bool integral = x.is_number_integer() ||
                              (x.is_number_float() && std::isfinite(x.get<double>()) &&
                               x.get<double>() == std::floor(x.get<double>()));
        if (!integral) bad("prompt", "'prompt': element {} is {}, expected a token id (an integer)", i, type_name(x));
        const double as_double = x.get<double>();
        if (as_double < 0 || as_double >= static_cast<double>(n_ids))
            bad("prompt", "'prompt': token id {} at index {} is out of range: the vocabulary has {} tokens", x.dump(), i,
                n_ids);
        ids.push_back(static_cast<int32_t>(as_double));
    }
    return ids;
}

// One chat message, checked and brought to the form chat templates expect.
ojson parse_message(const ojson& m, size_t i) {
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(at, "'{}': expected an object, got {}", at, type_name(m));
    static const std::set<std::string> known{"role", "content", "name", "tool_calls", "tool_call_id",
                                             "reasoning_content"};
    // Fields of an OpenAI reply's message that clients append to the history as they got it
    // (messages.append(reply.choices[0].message.model_dump())): accepted when they say nothing.
    static const std::set<std::string> reply_only{"refusal", "function_call", "audio", "annotations"};
    for (auto it = m.begin(); it != m.end(); ++it) {
        if (known.count(it.key())) continue;
        const bool empty = it.value().is_null() || (it.value().is_array() && it.value().empty());
        if (!(reply_only.count(it.key()) && empty))
            bad(at + "." + it.key(), "'{}.{}': unknown message field", at, it.key());
    }
    if (!m.contains("role")) bad(at + ".role", "'{}.role': missing", at);
    std::string role = get_string(m["role"], at + ".role");
    static const std::set<std::string> roles{"system", "developer", "user", "assistant", "tool"};
    if (!roles.count(role)) bad(at + ".role", "'{}.role': expected system, developer, user, assistant or tool, got '{}'", at, role);
    if (role == "developer") role = "system";  // what the chat templates know it as

    ojson out = ojson::object();
    out["role"] = role;
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
        // An assistant message that only calls tools has no content; templates concatenate
        // content as a string, so it is the empty string for them.
        out["content"] = "";
    } else if (content->is_string()) {
        out["content"] = *content;
    } else if (content->is_array()) {
        // Text parts joined with newlines, as other OpenAI-compatible servers do.
        std::string text;
        for (size_t k = 0; k < content->size(); ++k) {
            const ojson& part = (*content)[k];
            const std::string pat = fmt::format("{}.content[{}]", at, k);
            if (!part.is_object() || !part.contains("type")) bad(pat, "'{}': expected a content part object with a type", pat);
            const std::string& type = get_string(part["type"], pat + ".type");
            if (type != "text") unsupported(pat + ".type", "content of type '" + type + "'");
            if (!part.contains("text")) bad(pat + ".text", "'{}.text': missing", pat);
            if (k > 0) text += '\n';
            text += get_string(part["text"], pat + ".text");
        }
        out["content"] = text;
    } else {
        bad(at + ".content", "'{}.content': expected a string, an array of content parts or null, got {}", at,
            type_name(*content));
    }
    if (const auto name = m.find("name"); name != m.end() && !name->is_null()) out["name"] = get_string(*name, at + ".name");
    if (const auto r = m.find("reasoning_content"); r != m.end() && !r->is_null())
        out["reasoning_content"] = get_string(*r, at + ".reasoning_content");
    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
        if (!calls->is_array()) bad(at + ".tool_calls", "'{}.tool_calls': expected an array", at);
        ojson list = ojson::array();
        for (size_t k = 0; k < calls->size(); ++k) {
            const ojson& c = (*calls)[k];
            const std::string pat = fmt::format("{}.tool_calls[{}]", at, k);
            if (!c.is_object()) bad(pat, "'{}': expected an object", pat);
            if (c.contains("type") && get_string(c["type"], pat + ".type") != "function")
                unsupported(pat + ".type", "a tool call that is not a function");
            if (!c.contains("function") || !c["function"].is_object()) bad(pat + ".function", "'{}.function': expected an object", pat);
            const ojson& f = c["function"];
            if (!f.contains("name")) bad(pat + ".function.name", "'{}.function.name': missing", pat);
            ojson call = ojson::object();
            if (c.contains("id")) call["id"] = get_string(c["id"], pat + ".id");
            call["type"] = "function";
            ojson fn = ojson::object();
            fn["name"] = get_string(f["name"], pat + ".function.name");
            const auto args = f.find("arguments");
            if (args == f.end() || args->is_null())
                fn["arguments"] = "{}";
            else if (args->is_string() || args->is_object())
                fn["arguments"] = *args;
            else
                bad(pat + ".function.arguments", "'{}.function.arguments': expected a JSON string or an object", pat);
            call["function"] = std::move(fn);
            list.push_back(std::move(call));
        }
        out["tool_calls"] = std::move(list);
    }
    if (const auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
        out["tool_call_id"] = get_string(*id, at + ".tool_call_id");
    }
    return out;
}

ojson parse_tools(const ojson& v) {
    if (!v.is_array()) bad("tools", "'tools': expected an array, got {}", type_name(v));
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string at = fmt::format("tools[{}]", i);
        const ojson& t = v[i];
        if (!t.is_object()) bad(at, "'{}': expected an object", at);
        if (!t.contains("type") || get_string(t["type"], at + ".type") != "function")
            unsupported(at + ".type", "a tool that is not of type 'function'");
        if (!t.contains("function") || !t["function"].is_object()) bad(at + ".function", "'{}.function': expected an object", at);
        const ojson& f = t["function"];
        if (!f.contains("name")) bad(at + ".function.name", "'{}.function.name': missing", at);
        if (get_string(f["name"], at + ".function.name").empty()) bad(at + ".function.name", "'{}.function.name': empty", at);
        if (f.contains("description") && !f["description"].is_null()) get_string(f["description"], at + ".function.description");
        if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
            bad(at + ".function.parameters", "'{}.function.parameters': expected a JSON Schema object", at);
    }
    return v;
}

openai_request parse(endpoint kind, std::string_view body, const request_limits& lim) {
    // Before the parse: a tree nested 400,000 deep parses, but is then copied recursively when the
    // object holding it grows (ordered_json keeps its members in a vector), and that overflowed
    // the thread's stack. 1,024 levels copy in a few tens of KB of stack; messages and tools are
    // held to max_depth below, with the field named.
    constexpr size_t k_max_body_depth = 1024;
    if (json_nesting_depth(body) > k_max_body_depth)
        bad("", "the request body is nested deeper than {} levels", k_max_body_depth);
    const ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad("", "the request body is not valid JSON");
    if (!j.is_object()) bad("", "the request body must be a JSON object, got {}", type_name(j));

    openai_request r;
    r.kind = kind;
    const bool chat = kind == endpoint::chat;
    // Fields that do not change the tokens (bookkeeping for OpenAI's platform) are accepted.
    static const std::set<std::string> common{"model", "stream", "stream_options", "max_tokens", "stop", "temperature",
                                              "top_p", "top_k", "min_p", "seed", "presence_penalty",
                                              "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "n",
                                              "user", "metadata", "store", "service_tier", "speculative",
                                              "prompt_cache_key", "safety_identifier"};
    static const std::set<std::string> chat_only{"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                 "tool_choice", "parallel_tool_calls", "response_format",
                                                 "chat_template_kwargs"};
    static const std::set<std::string> completion_only{"prompt", "echo", "suffix", "best_of"};
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        if (!common.count(k) && !(chat ? chat_only : completion_only).count(k))
            bad(k, "'{}': unknown parameter for {}", k, chat ? "/v1/chat/completions" : "/v1/completions");
    }
    auto field = [&](const char* name) -> const ojson* {
        const auto it = j.find(name);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    };

    if (auto v = field("model")) r.model = get_string(*v, "model");
    if (auto v = field("user")) get_string(*v, "user");
    if (auto v = field("service_tier")) get_string(*v, "service_tier");
    for (const char* k : {"prompt_cache_key", "safety_identifier"})   // OpenAI's bookkeeping: no token changes
        if (auto v = field(k)) get_string(*v, k);
    if (auto v = field("store")) get_bool(*v, "store");
    if (auto v = field("metadata"); v && !v->is_object())
        bad("metadata", "'metadata': expected an object, got {}", type_name(*v));
    if (auto v = field("stream")) r.stream = get_bool(*v, "stream");
    if (auto v = field("stream_options")) {
        if (!v->is_object()) bad("stream_options", "'stream_options': expected an object, got {}", type_name(*v));
        for (auto it = v->begin(); it != v->end(); ++it) {
            if (it.key() != "include_usage") bad("stream_options." + it.key(), "'stream_options.{}': unknown option", it.key());
            if (!it.value().is_null()) r.include_usage = get_bool(it.value(), "stream_options.include_usage");
        }
    }
    for (const char* name : {"max_tokens", "max_completion_tokens"})
        if (auto v = field(name)) {
            const int m = static_cast<int>(get_int(*v, name, 1, lim.max_tokens));
            r.max_tokens = r.max_tokens < 0 ? m : std::min(r.max_tokens, m);
        }
    if (auto v = field("stop")) r.stop = parse_stop(*v, lim);
    if (auto v = field("temperature")) r.temperature = static_cast<float>(get_number(*v, "temperature", 0.0, 2.0));
    if (auto v = field("top_p")) r.top_p = static_cast<float>(get_number(*v, "top_p", 0.0, 1.0));
    if (auto v = field("top_k")) r.top_k = static_cast<int32_t>(get_int(*v, "top_k", 0, 1 << 30));
    if (auto v = field("min_p")) r.min_p = static_cast<float>(get_number(*v, "min_p", 0.0, 1.0));
    if (auto v = field("seed")) {
        // An int64, as OpenAI takes it; negative seeds keep their two's complement bits.
        r.seed = static_cast<uint64_t>(get_int(*v, "seed", std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
    }
    if (auto v = field("presence_penalty")) r.presence_penalty = static_cast<float>(get_number(*v, "presence_penalty", -2.0, 2.0));
    if (auto v = field("frequency_penalty")) r.frequency_penalty = static_cast<float>(get_number(*v, "frequency_penalty", -2.0, 2.0));
    if (auto v = field("repetition_penalty")) {
        const double x = get_number(*v, "repetition_penalty", 0.0, 10.0);
        if (x <= 0.0) bad("repetition_penalty", "'repetition_penalty': expected a number in (0, 10], got 0");
        // Positive below float's range (5e-324) stays positive.
        r.repetition_penalty = std::max(static_cast<float>(x), std::numeric_limits<float>::min());
    }
    if (auto v = field("logit_bias")) r.logit_bias = parse_logit_bias(*v, lim);
    if (auto v = field("n")) r.n = static_cast<int>(get_int(*v, "n", 1, lim.max_n));
    if (auto v = field("speculative")) r.speculative = get_bool(*v, "speculative");

    if (chat) {
        if (auto v = field("logprobs")) r.logprobs = get_bool(*v, "logprobs");
        if (auto v = field("top_logprobs")) {
            // Without 'logprobs': true no log probabilities are returned at all (the tokens are
            // the same either way).
            r.top_logprobs = static_cast<int>(get_int(*v, "top_logprobs", 0, 20));
        }
        const ojson* msgs = field("messages");
        if (!msgs) bad("messages", "'messages': missing");
        if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages': expected a non-empty array");
        if (deeper_than(*msgs, lim.max_depth)) bad("messages", "'messages': nested deeper than {} levels", lim.max_depth);
        for (size_t i = 0; i < msgs->size(); ++i) r.messages.push_back(parse_message((*msgs)[i], i));
        if (auto v = field("tools")) {
            if (deeper_than(*v, lim.max_depth)) bad("tools", "'tools': nested deeper than {} levels", lim.max_depth);
            if (!v->empty()) r.tools = parse_tools(*v);
        }
        bool tools_off = false;
        if (auto v = field("tool_choice")) {
            if (v->is_string() && (v->get<std::string>() == "none" || v->get<std::string>() == "auto"))
                tools_off = v->get<std::string>() == "none";
            else if (v->is_string() && v->get<std::string>() == "required")
                unsupported("tool_choice", "tool_choice 'required' (the output is not constrained)");
            else if (v->is_object())
                unsupported("tool_choice", "forcing a named tool (the output is not constrained)");
            else
                bad("tool_choice", "'tool_choice': expected \"none\", \"auto\", \"required\" or an object");
        }
        if (auto v = field("parallel_tool_calls")) get_bool(*v, "parallel_tool_calls");
        if (tools_off) r.tools = nullptr;  // the template is rendered without them: no call can be made
        // No tools declared (null or []): no output is a call (the parser takes any name when it
        // has no list).
        if (r.tools.is_array() && r.tools.empty()) r.tools = nullptr;
        r.parse_tool_calls = !r.tools.is_null();
        if (auto v = field("response_format")) {
            if (!v->is_object() || !v->contains("type") || !(*v)["type"].is_string())
                bad("response_format", "'response_format': expected an object with a type");
            const std::string type = (*v)["type"].get<std::string>();
            if (type == "json_object" || type == "json_schema")
                unsupported("response_format", "response_format '" + type + "' (sluice does not constrain its output)");
            if (type != "text") bad("response_format", "'response_format.type': expected text, json_object or json_schema");
        }
        if (auto v = field("chat_template_kwargs")) {
            if (!v->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs': expected an object");
            // Only variables the supported templates read; anything else would be ignored.
            for (auto it = v->begin(); it != v->end(); ++it) {
                if (it.key() != "enable_thinking")
                    bad("chat_template_kwargs." + it.key(), "'chat_template_kwargs.{}': unknown template variable "
                        "(supported: enable_thinking)", it.key());
                get_bool(it.value(), "chat_template_kwargs.enable_thinking");
            }
            r.template_kwargs = *v;
        }
    } else {
        if (auto v = field("logprobs")) {
            r.top_logprobs = static_cast<int>(get_int(*v, "logprobs", 0, 20));
            r.logprobs = true;
        }
        const ojson* p = field("prompt");
        if (!p) bad("prompt", "'prompt': missing");
        if (p->is_string()) {
            r.prompt = p->get<std::string>();
        } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
            r.prompt_ids = parse_ids(*p, lim);
            r.prompt_is_ids = true;
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            r.prompt = (*p)[0].get<std::string>();
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array() && !(*p)[0].empty()) {
            r.prompt_ids = parse_ids((*p)[0], lim);
            r.prompt_is_ids = true;
        } else if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
            unsupported("prompt", "a batch of several prompts in one request (send one request per prompt)");
        } else {
            bad("prompt", "'prompt': expected a string, an array of token ids, or a one-element array of either");
        }
        if (!r.prompt_is_ids && r.prompt.empty()) bad("prompt", "'prompt': empty");
        if (auto v = field("echo"); v && get_bool(*v, "echo")) unsupported("echo", "echo");
        if (auto v = field("suffix"); v && !get_string(*v, "suffix").empty()) unsupported("suffix", "suffix (fill-in-the-middle)");
        if (auto v = field("best_of"); v && get_int(*v, "best_of", 1, lim.max_n) != 1) unsupported("best_of", "best_of > 1");
    }
    return r;
}

}  // namespace

ojson error_body(const api_error& e) {
    ojson err = ojson::object();
    err["message"] = e.message;
    err["type"] = e.type;
    err["param"] = e.param.empty() ? ojson(nullptr) : ojson(e.param);
    err["code"] = e.code.empty() ? ojson(nullptr) : ojson(e.code);
    ojson body = ojson::object();
    body["error"] = std::move(err);
    return body;
}

parse_result parse_openai_request(endpoint kind, std::string_view body, const request_limits& limits) {
    try {
        return parse(kind, body, limits);
    } catch (const bad_request& b) {
        return b.e;
    } catch (const std::exception& e) {
        // nlohmann's type errors (a value read as the wrong type slipped through): still a 400.
        api_error err;
        err.message = std::string("invalid request: ") + e.what();
        return err;
    }
}

std::map<std::string, std::map<std::string, std::string>> tool_param_types(const nlohmann::ordered_json& tools) {
    std::map<std::string, std::map<std::string, std::string>> out;
    if (!tools.is_array()) return out;
    for (const auto& t : tools) {
        // {"type": "function", "function": {...}}, or the function object itself.
        const auto& f = t.is_object() && t.contains("function") ? t["function"] : t;
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) continue;
        auto& params = out[f["name"].get<std::string>()];
        const auto p = f.find("parameters");
        if (p == f.end() || !p->is_object()) continue;
        const auto props = p->find("properties");
        if (props == p->end() || !props->is_object()) continue;
        for (auto it = props->begin(); it != props->end(); ++it) {
            if (!it.value().is_object()) continue;
            const auto type = it.value().find("type");
            if (type == it.value().end()) continue;
            if (type->is_string()) {
                params[it.key()] = type->get<std::string>();
            } else if (type->is_array()) {
                for (const auto& x : *type)
                    if (x.is_string() && x != "null") {
                        params[it.key()] = x.get<std::string>();
                        break;
                    }
            }
        }
    }
    return out;
}

}  // namespace sluice
