// Chat templates: renders a model's chat template (tokenizer.chat_template from the GGUF, or
// chat_template from tokenizer_config.json) over a conversation, producing exactly the string
// transformers' apply_chat_template produces (jinja2 with trim_blocks and lstrip_blocks, tojson
// as json.dumps(ensure_ascii=False), raise_exception as an error).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

namespace jinja {
struct node;
}

struct chat_request {
    // Key order matters (tojson and items() keep it), hence ordered_json.
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
    nlohmann::ordered_json tools;  // null when no tools are given (transformers passes None)
    bool add_generation_prompt = false;
    // Further template variables: bos_token, eos_token, enable_thinking, ...
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// A parsed template, reusable across requests.
class chat_template {
public:
    // Throws sluice::error "jinja: line L, column C: ..." on a syntax error, an unknown filter or
    // test, or an unclosed block.
    explicit chat_template(std::string_view text);
    ~chat_template();
    chat_template(chat_template&&) noexcept;
    chat_template& operator=(chat_template&&) noexcept;

    // Throws sluice::error "jinja: line L: ..." on a render error (undefined operand,
    // raise_exception from the template, type error).
    std::string render(const chat_request& req) const;

private:
    std::unique_ptr<jinja::node> root_;
};

// One-shot form of the above.
std::string render_chat_template(std::string_view text, const chat_request& req);

class metadata;
// tokenizer.chat_template of a GGUF, or nullopt when the file has none.
std::optional<std::string> chat_template_from_metadata(const metadata& md);
// chat_template of a tokenizer_config.json: a string, or a list of {"name", "template"} from
// which `name` is chosen (transformers' convention; "default" unless the request asks for
// "tool_use" etc.). nullopt when absent; throws sluice::error on any other shape.
std::optional<std::string> chat_template_from_tokenizer_config(const nlohmann::json& config,
                                                               std::string_view name = "default");

}  // namespace sluice
