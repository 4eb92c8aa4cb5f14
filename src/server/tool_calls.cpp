#include "server/tool_calls.h"

#include "core/json_depth.h"
#include "server/stop_strings.h"

#include <nlohmann/json.hpp>

#include <mutex>
#include <optional>
#include <random>

namespace sluice {

namespace {

// Arguments of a tool call nest as deep as a request's tools may (openai_request.h's max_depth).
constexpr size_t k_max_call_depth = 64;

const std::string k_think_open = "<think>", k_think_close = "</think>";
const std::string k_call_open = "<tool_call>", k_call_close = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// An XML-form parameter's text as the JSON value its schema type asks for; the text itself
// when it is not one (or the type is a string, or unknown).
nlohmann::ordered_json typed_value(std::string_view text, const std::string& type) {
    using ojson = nlohmann::ordered_json;
    const std::string_view t = trim(text);
    if (type == "boolean") {
        if (t == "true" || t == "True") return true;
        if (t == "false" || t == "False") return false;
    } else if (type == "null") {
        if (t == "null" || t == "None") return nullptr;
    } else if (type == "integer" || type == "number" || type == "object" || type == "array") {
        if (json_nesting_depth(t) <= k_max_call_depth) {
            ojson v = ojson::parse(t, nullptr, /*allow_exceptions=*/false);
            const bool fits = type == "integer"  ? v.is_number_integer()
                              : type == "number" ? v.is_number()
                              : type == "object" ? v.is_object()
                                                 : v.is_array();
            if (fits) return v;
        }
    }
    return std::string(text);
}

}  // namespace

void output_delta::append(output_delta&& o) {
    content += o.content;
    reasoning += o.reasoning;
    for (tool_call& c : o.calls) calls.push_back(std::move(c));
}

std::string new_tool_call_id() {
    static std::mutex m;
    static std::mt19937_64 rng{std::random_device{}()};
    static const char k_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::lock_guard<std::mutex> lock(m);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += k_chars[rng() % (sizeof k_chars - 1)];
    return id;
}

bool prompt_opens_think(std::string_view p) {
    const size_t open = p.rfind(k_think_open);
    if (open == std::string_view::npos) return false;
    return p.find(k_think_close, open) == std::string_view::npos;
}

output_parser::output_parser(output_parser_options o, std::function<std::string()> make_id)
    : o_(o), make_id_(make_id ? std::move(make_id) : std::function<std::string()>(new_tool_call_id)) {
    if (o_.think && o_.start_in_think) mode_ = mode::think;
    // The model's first words are content as written, unless the prompt opened <think>.
    section_start_ = mode_ == mode::think;
}

// Text of the current section (content or reasoning). Whitespace at the start of a section is
// dropped (Qwen writes "<think>\n" and "</think>\n\n"), and trailing whitespace is held until
// more text follows, so that the newline before </think> or between tool calls is not sent.
void output_parser::emit_text(output_delta& out, std::string_view text, bool final) {
    if (section_start_) {
        while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
        if (text.empty()) return;
        section_start_ = false;
    }
    size_t end = text.size();
    while (end > 0 && is_space(text[end - 1])) --end;
    std::string& dst = mode_ == mode::think ? out.reasoning : out.content;
    if (end > 0) {
        dst += pending_ws_;
        pending_ws_.clear();
        dst.append(text.substr(0, end));
        if (mode_ == mode::content) seen_content_ = true;
    }
    pending_ws_.append(text.substr(end));
    if (final && mode_ == mode::content && n_calls_ == 0 && seen_content_) {
        dst += pending_ws_;
        pending_ws_.clear();
    }
}

void output_parser::close_section(output_delta&) {
    pending_ws_.clear();
    section_start_ = true;
}

bool output_parser::parse_call(std::string_view body, output_delta& out) {
    body = trim(body);
    if (body.starts_with("<function=")) return parse_xml_call(body, out);
    // The model's text, so as hostile as a request body (openai_request.cpp says why the depth).
    if (json_nesting_depth(body) > k_max_call_depth) return false;
    const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !declared(j["name"].get<std::string>()))
        return false;
    tool_call c;
    c.id = make_id_();
    c.name = j["name"].get<std::string>();
    // "parameters" is what Llama 3's JSON tool calls name them; some Qwen fine-tunes copy that.
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (args == j.end() || args->is_null())
        c.arguments = "{}";
    else if (args->is_string())
        c.arguments = args->get<std::string>();
    else
        c.arguments = args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    out.calls.push_back(std::move(c));
    ++n_calls_;
    return true;
}

// <function=NAME> (<parameter=P> VALUE </parameter>)* </function>, with one newline after the
// opening tag of a value and one before its closing tag dropped (the template writes them).
bool output_parser::parse_xml_call(std::string_view s, output_delta& out) {
    using ojson = nlohmann::ordered_json;
    auto tag_name = [&](std::string_view open) -> std::optional<std::string> {
        if (!s.starts_with(open)) return std::nullopt;
        const size_t close = s.find('>');
        if (close == std::string_view::npos) return std::nullopt;
        std::string name(trim(s.substr(open.size(), close - open.size())));
        s.remove_prefix(close + 1);
        if (name.empty() || name.find_first_of("<\n") != std::string::npos) return std::nullopt;
        return name;
    };
    const auto name = tag_name("<function=");
    if (!name || !declared(*name)) return false;
    const auto tool = o_.param_types.find(*name);
    ojson args = ojson::object();
    for (;;) {
        s = trim(s);
        if (s == "</function>") break;
        const auto param = tag_name("<parameter=");
        if (!param) return false;
        const size_t end = s.find("</parameter>");
        if (end == std::string_view::npos) return false;
        std::string_view value = s.substr(0, end);
        s.remove_prefix(end + std::string_view("</parameter>").size());
        if (value.starts_with('\n')) value.remove_prefix(1);
        if (value.ends_with('\n')) value.remove_suffix(1);
        std::string type;
        if (tool != o_.param_types.end())
            if (auto t = tool->second.find(*param); t != tool->second.end()) type = t->second;
        args[*param] = typed_value(value, type);
    }
    tool_call c;
    c.id = make_id_();
    c.name = *name;
    c.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
    out.calls.push_back(std::move(c));
    ++n_calls_;
    return true;
}

output_delta output_parser::push(std::string_view text) {
    output_delta out;
    if (!o_.think && !o_.tool_calls) {  // nothing to split: the text is the content, verbatim
        out.content.assign(text);
        return out;
    }
    buf_.append(text);
    for (;;) {
        if (mode_ == mode::tool) {
            const size_t end = buf_.find(k_call_close);
            if (end == std::string::npos) break;  // the call's JSON is kept whole until it closes
            const std::string body = buf_.substr(0, end);
            buf_.erase(0, end + k_call_close.size());
            mode_ = mode::content;
            section_start_ = true;
            if (!parse_call(body, out)) {
                // Not a call after all: the text is the model's content, markers included.
                section_start_ = false;
                emit_text(out, call_ws_ + k_call_open + body + k_call_close, false);
            }
            continue;
        }
        std::vector<std::string> markers;
        if (mode_ == mode::think) {
            markers = {k_think_close};
        } else {
            if (o_.think) markers.push_back(k_think_open);
            if (o_.tool_calls) markers.push_back(k_call_open);
        }
        size_t at = std::string::npos;
        const std::string* found = nullptr;
        for (const std::string& m : markers)
            if (size_t p = buf_.find(m); p < at) at = p, found = &m;
        if (found) {
            emit_text(out, std::string_view(buf_).substr(0, at), false);
            buf_.erase(0, at + found->size());
            call_ws_ = pending_ws_;  // given back if the call turns out not to be one
            close_section(out);
            if (*found == k_think_open) mode_ = mode::think;
            else if (*found == k_think_close) mode_ = mode::content;
            else mode_ = mode::tool;
            continue;
        }
        const size_t keep = partial_marker_suffix(buf_, markers);
        emit_text(out, std::string_view(buf_).substr(0, buf_.size() - keep), false);
        buf_.erase(0, buf_.size() - keep);
        break;
    }
    return out;
}

output_delta output_parser::finish() {
    output_delta out;
    if (!o_.think && !o_.tool_calls) return out;
    if (mode_ == mode::tool) {
        const std::string body = buf_;
        buf_.clear();
        mode_ = mode::content;
        section_start_ = true;
        if (!parse_call(body, out)) {
            section_start_ = false;
            emit_text(out, call_ws_ + k_call_open + body, true);
        }
    } else {
        const std::string rest = buf_;
        buf_.clear();
        emit_text(out, rest, true);
    }
    if (mode_ == mode::content && n_calls_ == 0 && seen_content_) {
        out.content += pending_ws_;
    }
    pending_ws_.clear();
    return out;
}

}  // namespace sluice
