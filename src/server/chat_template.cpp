// Chat templates over our Jinja2 subset (see chat_template.h and jinja_ast.h).
#include "server/chat_template.h"

#include "core/error.h"
#include "server/jinja_ast.h"

namespace sluice {

chat_template::chat_template(std::string_view text) : root_(jinja::parse(jinja::lex(text))) {}
chat_template::~chat_template() = default;
chat_template::chat_template(chat_template&&) noexcept = default;
chat_template& chat_template::operator=(chat_template&&) noexcept = default;

std::string chat_template::render(const chat_request& req) const {
    if (!req.messages.is_array())
        fail("chat template: messages: expected a JSON array, got {}", req.messages.type_name());
    if (!req.tools.is_null() && !req.tools.is_array())
        fail("chat template: tools: expected a JSON array or null, got {}", req.tools.type_name());
    if (!req.extra.is_object()) fail("chat template: extra variables: expected a JSON object, got {}", req.extra.type_name());
    jinja::dict_t vars;
    // Same variables, same order of precedence as transformers: its keyword arguments
    // (special tokens, enable_thinking, ...) come last and may not override these three.
    vars.emplace_back("messages", jinja::from_json(req.messages));
    vars.emplace_back("tools", jinja::from_json(req.tools));
    vars.emplace_back("add_generation_prompt", jinja::value::boolean(req.add_generation_prompt));
    for (const auto& [k, v] : req.extra.items()) {
        if (k == "messages" || k == "tools" || k == "add_generation_prompt")
            fail("chat template: extra variable '{}' would shadow a request field", k);
        vars.emplace_back(k, jinja::from_json(v));
    }
    return jinja::render(*root_, vars);
}

std::string render_chat_template(std::string_view text, const chat_request& req) {
    return chat_template(text).render(req);
}

}  // namespace sluice
