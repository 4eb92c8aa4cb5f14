// jinja: tokens, syntax tree and the three stages (lex -> parse -> render) of our Jinja2 subset.
// The subset is what the chat templates of the supported models use; the lexer applies
// whitespace control exactly as jinja2 does with trim_blocks=True, lstrip_blocks=True
// (transformers' settings), so the tree already holds the final literal text.
#pragma once

#include "server/jinja_value.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

struct token {
    enum class kind { text, var_begin, var_end, block_begin, block_end, name, string, integer,
                      floating, op, eof };
    kind k;
    std::string s;  // text, name, string contents (unescaped), operator, number spelling
    int line = 1, col = 1;
};

// Splits a template into tokens; throws sluice::error "jinja: line L, column C: ..." on an
// unclosed tag, comment or string.
std::vector<token> lex(std::string_view source);

struct node {
    enum class kind {
        // expressions
        literal, name, getattr, getitem, slice, call, filter, test, unary, binary, list, dict,
        tuple, cond,
        // statements
        block, text, output, if_, for_, set, set_block, macro, break_, continue_, call_block
    };
    kind k;
    int line = 1, col = 1;
    std::string name;                // identifier, operator, filter/test name, text
    value lit;                       // literal
    std::vector<std::string> names;  // for targets, set targets, macro params, call kwarg names
    std::vector<std::unique_ptr<node>> kids;
    bool negate = false;             // `is not`
    size_t n_pos = 0;                // call/filter/test: kids after the callee that are positional
    int height = 1;                  // expression tree height (bounded by the parser)
};
using node_ptr = std::unique_ptr<node>;

// Parses tokens into a block node; throws sluice::error with line and column on a syntax
// error, an unknown filter or test, or an unclosed block.
node_ptr parse(const std::vector<token>& tokens);

// Renders a parsed template with the given top-level variables.
std::string render(const node& root, const dict_t& vars);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace sluice::jinja
