// jinja parser: recursive descent with jinja2's operator precedence (lowest first):
//   a if c else b | or | and | not | comparisons and (not) in | + - | ~ | * / // % | ** |
//   unary - + | primary with .attr [sub] (call), then | filters and `is` tests.
// So `'\n' + x | trim + '\n'` is '\n' + (x|trim) + '\n', and `not x is defined` is
// not (x is defined), as in jinja2.
#include "server/jinja_ast.h"

#include "core/error.h"

#include <algorithm>
#include <initializer_list>

namespace sluice::jinja {
namespace {

// Templates come from model files: bound the nesting so a hostile one cannot overflow the stack.
constexpr int k_max_depth = 200;

struct parser {
    const std::vector<token>& t;
    size_t p = 0;
    int depth = 0;
    int if_depth = 0;  // inside the body of an if: unknown filters/tests fail at render time
    struct nest {
        parser& ps;
        explicit nest(parser& x) : ps(x) {
            if (++ps.depth > k_max_depth)
                ps.error(ps.cur(), fmt::format("nesting deeper than {} levels", k_max_depth));
        }
        ~nest() { ps.depth--; }
    };

    const token& cur() const { return t[p]; }
    [[noreturn]] void error(const token& at, const std::string& what) {
        fail("jinja: line {}, column {}: {}", at.line, at.col, what);
    }
    bool is_op(const char* s) const { return cur().k == token::kind::op && cur().s == s; }
    bool is_name(const char* s) const { return cur().k == token::kind::name && cur().s == s; }
    void expect_op(const char* s) {
        if (!is_op(s)) error(cur(), fmt::format("expected '{}', got {}", s, describe(cur())));
        p++;
    }
    std::string expect_name() {
        if (cur().k != token::kind::name) error(cur(), fmt::format("expected a name, got {}", describe(cur())));
        return t[p++].s;
    }
    static std::string describe(const token& tk) {
        switch (tk.k) {
            case token::kind::eof: return "the end of the template";
            case token::kind::block_end: return "'%}'";
            case token::kind::var_end: return "'}}'";
            case token::kind::text: return "text";
            default: return "'" + tk.s + "'";
        }
    }
    node_ptr make(node::kind k, const token& at) {
        auto n = std::make_unique<node>();
        n->k = k;
        n->line = at.line;
        n->col = at.col;
        return n;
    }

    // ---- statements ----
    // Parses statements until a block tag whose keyword is in `ends` (returned, tag consumed up
    // to after the keyword) or the end of the template (only allowed when `ends` is empty).
    node_ptr parse_block(std::initializer_list<const char*> ends, std::string* ended_by, const token& opener) {
        auto blk = make(node::kind::block, cur());
        while (true) {
            const token& tk = cur();
            if (tk.k == token::kind::eof) {
                if (ends.size() == 0) return blk;
                std::string want;
                for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
                error(tk, fmt::format("unclosed block opened at line {}, column {}: expected {} before the end of the template",
                                      opener.line, opener.col, want));
            }
            if (tk.k == token::kind::text) {
                auto n = make(node::kind::text, tk);
                n->name = tk.s;
                blk->kids.push_back(std::move(n));
                p++;
            } else if (tk.k == token::kind::var_begin) {
                p++;
                auto n = make(node::kind::output, tk);
                n->kids.push_back(parse_expr_or_tuple());  // {{ a, b }} prints a tuple
                if (cur().k != token::kind::var_end) error(cur(), fmt::format("expected '}}}}', got {}", describe(cur())));
                p++;
                blk->kids.push_back(std::move(n));
            } else if (tk.k == token::kind::block_begin) {
                const token& kw = t[p + 1];
                if (kw.k != token::kind::name) error(kw, fmt::format("expected a statement keyword, got {}", describe(kw)));
                for (const char* e : ends) {
                    if (kw.s == e) {
                        p += 2;
                        *ended_by = kw.s;
                        return blk;
                    }
                }
                p += 2;
                blk->kids.push_back(parse_statement(kw));
            } else {
                error(tk, fmt::format("unexpected {}", describe(tk)));
            }
        }
    }
    void end_tag() {
        if (cur().k != token::kind::block_end) error(cur(), fmt::format("expected '%}}', got {}", describe(cur())));
        p++;
    }

    node_ptr parse_statement(const token& kw) {
        nest guard(*this);
        const std::string& w = kw.s;
        std::string ended;
        if (w == "if") {
            auto n = make(node::kind::if_, kw);
            n->kids.push_back(parse_expr_or_tuple());
            end_tag();
            // jinja2 >= 3.0 reports an unknown filter or test inside an if block only when it runs.
            if_depth++;
            struct leave { int& d; ~leave() { d--; } } left{if_depth};
            while (true) {
                n->kids.push_back(parse_block({"elif", "else", "endif"}, &ended, kw));
                if (ended == "elif") {
                    n->kids.push_back(parse_expr_or_tuple());
                    end_tag();
                    continue;
                }
                if (ended == "else") {
                    end_tag();
                    n->kids.push_back(parse_block({"endif"}, &ended, kw));
                }
                end_tag();
                return n;
            }
        }
        if (w == "for") {
            auto n = make(node::kind::for_, kw);
            n->names.push_back(expect_name());
            while (is_op(",")) {
                p++;
                n->names.push_back(expect_name());
            }
            if (!is_name("in")) error(cur(), fmt::format("expected 'in', got {}", describe(cur())));
            p++;
            n->kids.push_back(parse_or());  // the iterable (no conditional expression, as in jinja2)
            node_ptr cond;
            if (is_name("if")) {
                p++;
                cond = parse_or();
            }
            if (is_name("recursive")) error(cur(), "recursive for loops are not supported");
            end_tag();
            n->kids.push_back(parse_block({"else", "endfor"}, &ended, kw));
            n->kids.push_back(std::move(cond));
            node_ptr else_body;
            if (ended == "else") {
                end_tag();
                else_body = parse_block({"endfor"}, &ended, kw);
            }
            end_tag();
            n->kids.push_back(std::move(else_body));
            return n;
        }
        if (w == "set") {
            std::string first = expect_name();
            if (cur().k == token::kind::block_end) {  // {% set x %}...{% endset %}
                auto n = make(node::kind::set_block, kw);
                n->names.push_back(first);
                end_tag();
                n->kids.push_back(parse_block({"endset"}, &ended, kw));
                end_tag();
                return n;
            }
            auto n = make(node::kind::set, kw);
            if (is_op(".")) {  // ns.attr = value
                p++;
                n->name = expect_name();
                n->names.push_back(first);
            } else {
                n->names.push_back(first);
                while (is_op(",")) {
                    p++;
                    n->names.push_back(expect_name());
                }
            }
            expect_op("=");
            n->kids.push_back(parse_expr_or_tuple());
            end_tag();
            return n;
        }
        if (w == "macro") {
            auto n = make(node::kind::macro, kw);
            n->name = expect_name();
            expect_op("(");
            std::vector<node_ptr> defaults;
            while (!is_op(")")) {
                n->names.push_back(expect_name());
                if (is_op("=")) {
                    p++;
                    defaults.push_back(parse_expr());
                } else {
                    if (!defaults.empty() && defaults.back()) error(cur(), "non-default argument follows default argument");
                    defaults.push_back(nullptr);
                }
                if (!is_op(",")) break;
                p++;
            }
            expect_op(")");
            end_tag();
            n->kids.push_back(parse_block({"endmacro"}, &ended, kw));
            end_tag();
            for (auto& d : defaults) n->kids.push_back(std::move(d));
            return n;
        }
        if (w == "break" || w == "continue") {
            auto n = make(w == "break" ? node::kind::break_ : node::kind::continue_, kw);
            end_tag();
            return n;
        }
        if (w == "generation") {  // transformers' assistant-mask extension: renders its body
            end_tag();
            auto n = parse_block({"endgeneration"}, &ended, kw);
            end_tag();
            return n;
        }
        error(kw, fmt::format("unknown statement '{}'", w));
    }

    // ---- expressions ----
    node_ptr parse_expr_or_tuple() {
        const token& at = cur();
        auto first = parse_expr();
        if (!is_op(",")) return first;
        auto tup = make(node::kind::tuple, at);
        tup->kids.push_back(std::move(first));
        while (is_op(",")) {
            p++;
            if (is_op(")") || cur().k == token::kind::block_end || cur().k == token::kind::var_end) break;  // (1,)
            tup->kids.push_back(parse_expr());
        }
        return tup;
    }

    node_ptr parse_expr() {
        const token& at = cur();
        auto e = parse_or();
        if (is_name("if")) {
            p++;
            auto n = make(node::kind::cond, at);
            auto c = parse_or();
            node_ptr other;
            if (is_name("else")) {
                p++;
                // `a if b else c if d else ...` recurses once per link: counted like any other
                // nesting (100,000 links overflowed the stack while the model loaded).
                nest guard(*this);
                other = parse_expr();
            }
            n->kids.push_back(std::move(e));
            n->kids.push_back(std::move(c));
            n->kids.push_back(std::move(other));
            return grown(std::move(n));
        }
        return e;
    }
    // Left-deep chains (a+b+c..., a.b.c..., x|f|g...) are built in loops, not by recursion;
    // their height is bounded here so that rendering (recursive) cannot overflow the stack.
    node_ptr grown(node_ptr n) {
        for (const auto& k : n->kids)
            if (k) n->height = std::max(n->height, k->height + 1);
        if (n->height > 4 * k_max_depth)
            fail("jinja: line {}, column {}: expression nested deeper than {} levels", n->line, n->col, 4 * k_max_depth);
        return n;
    }
    node_ptr binary(const token& at, std::string op, node_ptr a, node_ptr b) {
        auto n = make(node::kind::binary, at);
        n->name = std::move(op);
        n->kids.push_back(std::move(a));
        n->kids.push_back(std::move(b));
        return grown(std::move(n));
    }
    node_ptr parse_or() {
        auto a = parse_and();
        while (is_name("or")) {
            const token& at = t[p++];
            a = binary(at, "or", std::move(a), parse_and());
        }
        return a;
    }
    node_ptr parse_and() {
        auto a = parse_not();
        while (is_name("and")) {
            const token& at = t[p++];
            a = binary(at, "and", std::move(a), parse_not());
        }
        return a;
    }
    node_ptr parse_not() {
        nest guard(*this);
        if (is_name("not")) {
            auto n = make(node::kind::unary, t[p++]);
            n->name = "not";
            n->kids.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }
    // a < b, or a chain a < b <= c ... (Python's: (a < b) and (b <= c), b evaluated once): one
    // binary node "compare" whose kids are the operands and names the operators.
    node_ptr parse_compare() {
        auto a = parse_math1();
        if (!is_compare_op()) return a;
        const token& at = cur();
        std::vector<std::string> ops;
        std::vector<node_ptr> operands;
        operands.push_back(std::move(a));
        while (is_compare_op()) {
            const bool not_in = is_name("not");
            ops.push_back(not_in ? "not in" : cur().s);
            p += not_in ? 2 : 1;
            operands.push_back(parse_math1());
        }
        if (ops.size() == 1) return binary(at, ops[0], std::move(operands[0]), std::move(operands[1]));
        auto n = make(node::kind::binary, at);
        n->name = "compare";
        n->names = std::move(ops);
        n->kids = std::move(operands);
        return grown(std::move(n));
    }
    bool is_compare_op() {
        const token& at = cur();
        return (at.k == token::kind::op && (at.s == "==" || at.s == "!=" || at.s == "<" || at.s == ">" ||
                                            at.s == "<=" || at.s == ">=")) ||
               is_name("in") || (is_name("not") && t[p + 1].k == token::kind::name && t[p + 1].s == "in");
    }
    node_ptr parse_math1() {
        auto a = parse_concat();
        while (is_op("+") || is_op("-")) {
            const token& at = t[p++];
            a = binary(at, at.s, std::move(a), parse_concat());
        }
        return a;
    }
    node_ptr parse_concat() {
        auto a = parse_math2();
        while (is_op("~")) {
            const token& at = t[p++];
            a = binary(at, "~", std::move(a), parse_math2());
        }
        return a;
    }
    node_ptr parse_math2() {
        auto a = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const token& at = t[p++];
            a = binary(at, at.s, std::move(a), parse_pow());
        }
        return a;
    }
    node_ptr parse_pow() {
        auto a = parse_unary(true);
        while (is_op("**")) {
            const token& at = t[p++];
            a = binary(at, "**", std::move(a), parse_unary(true));
        }
        return a;
    }
    node_ptr parse_unary(bool with_filter) {
        nest guard(*this);
        node_ptr n;
        if (is_op("-") || is_op("+")) {
            n = make(node::kind::unary, cur());
            n->name = t[p++].s;
            n->kids.push_back(parse_unary(false));
        } else {
            n = parse_postfix(parse_primary());
        }
        if (with_filter) n = parse_filters(std::move(n));
        return n;
    }
    node_ptr parse_primary() {
        const token& tk = cur();
        switch (tk.k) {
            case token::kind::name: {
                p++;
                auto n = make(node::kind::literal, tk);
                if (tk.s == "true" || tk.s == "True") n->lit = value::boolean(true);
                else if (tk.s == "false" || tk.s == "False") n->lit = value::boolean(false);
                else if (tk.s == "none" || tk.s == "None") n->lit = value::none();
                else {
                    n->k = node::kind::name;
                    n->name = tk.s;
                }
                return n;
            }
            case token::kind::string: {
                std::string s;
                while (cur().k == token::kind::string) s += t[p++].s;  // adjacent literals join
                auto n = make(node::kind::literal, tk);
                n->lit = value::str(s);
                return n;
            }
            case token::kind::integer: {
                p++;
                auto n = make(node::kind::literal, tk);
                try {
                    n->lit = value::integer(std::stoll(tk.s));
                } catch (const std::exception&) {
                    error(tk, fmt::format("integer literal {} does not fit in 64 bits", tk.s));
                }
                return n;
            }
            case token::kind::floating: {
                p++;
                auto n = make(node::kind::literal, tk);
                n->lit = value::floating(std::strtod(tk.s.c_str(), nullptr));  // overflow: inf, as Python
                return n;
            }
            case token::kind::op:
                if (tk.s == "(") {
                    p++;
                    if (is_op(")")) {
                        p++;
                        return make(node::kind::tuple, tk);
                    }
                    auto e = parse_expr_or_tuple();
                    expect_op(")");
                    return e;
                }
                if (tk.s == "[") {
                    p++;
                    auto n = make(node::kind::list, tk);
                    while (!is_op("]")) {
                        n->kids.push_back(parse_expr());
                        if (!is_op(",")) break;
                        p++;
                    }
                    expect_op("]");
                    return n;
                }
                if (tk.s == "{") {
                    p++;
                    auto n = make(node::kind::dict, tk);
                    while (!is_op("}")) {
                        n->kids.push_back(parse_expr());
                        expect_op(":");
                        n->kids.push_back(parse_expr());
                        if (!is_op(",")) break;
                        p++;
                    }
                    expect_op("}");
                    return n;
                }
                break;
            default: break;
        }
        error(tk, fmt::format("unexpected {} in expression", describe(tk)));
    }
    // Call arguments after '(' up to ')': positional then keyword (name=value).
    void parse_args(node& n) {
        expect_op("(");
        while (!is_op(")")) {
            if (cur().k == token::kind::name && t[p + 1].k == token::kind::op && t[p + 1].s == "=") {
                n.names.push_back(t[p].s);
                p += 2;
                n.kids.push_back(parse_expr());
            } else {
                if (!n.names.empty()) error(cur(), "positional argument follows keyword argument");
                n.kids.push_back(parse_expr());
                n.n_pos++;
            }
            if (!is_op(",")) break;
            p++;
        }
        expect_op(")");
    }
    node_ptr parse_postfix(node_ptr n) {
        while (true) {
            const token& at = cur();
            if (is_op(".")) {
                p++;
                if (cur().k == token::kind::integer) {   // x.0 is x[0], as jinja2 reads it
                    auto g = make(node::kind::getitem, at);
                    g->kids.push_back(std::move(n));
                    g->kids.push_back(parse_primary());
                    n = grown(std::move(g));
                    continue;
                }
                auto g = make(node::kind::getattr, at);
                g->name = expect_name();
                g->kids.push_back(std::move(n));
                n = grown(std::move(g));
            } else if (is_op("[")) {
                p++;
                node_ptr parts[3];
                bool is_slice = false;
                for (int i = 0; i < 3; i++) {
                    if (!is_op(":") && !is_op("]")) parts[i] = parse_expr();
                    if (i < 2 && is_op(":")) {
                        is_slice = true;
                        p++;
                    } else break;
                }
                expect_op("]");
                auto g = make(is_slice ? node::kind::slice : node::kind::getitem, at);
                g->kids.push_back(std::move(n));
                if (!is_slice && !parts[0]) error(at, "expected a subscript");
                for (int i = 0; i < (is_slice ? 3 : 1); i++) g->kids.push_back(std::move(parts[i]));
                n = grown(std::move(g));
            } else if (is_op("(")) {
                auto c = make(node::kind::call, at);
                c->kids.push_back(std::move(n));
                parse_args(*c);
                n = grown(std::move(c));
            } else {
                return n;
            }
        }
    }
    node_ptr parse_filters(node_ptr n) {
        while (true) {
            if (is_op("|")) {
                p++;
                const token& at = cur();
                auto f = make(node::kind::filter, at);
                f->name = expect_name();
                if (!is_known_filter(f->name) && if_depth == 0) error(at, fmt::format("no filter named '{}'", f->name));
                f->kids.push_back(std::move(n));
                if (is_op("(")) parse_args(*f);
                n = grown(std::move(f));
            } else if (is_name("is")) {
                p++;
                auto f = make(node::kind::test, cur());
                if (is_name("not")) {
                    f->negate = true;
                    p++;
                }
                const token& at = cur();
                // `is none` / `is true` arrive as names; accept them as test names.
                f->name = expect_name();
                if (!is_known_test(f->name) && if_depth == 0) error(at, fmt::format("no test named '{}'", f->name));
                f->kids.push_back(std::move(n));
                if (is_op("(")) parse_args(*f);
                else if (cur().k == token::kind::string || cur().k == token::kind::integer ||
                         cur().k == token::kind::floating || (cur().k == token::kind::name && !is_name("and") &&
                         !is_name("or") && !is_name("else") && !is_name("if") && !is_name("in") && !is_name("not"))) {
                    f->kids.push_back(parse_primary());  // `is sameas x`, `is divisibleby 3`
                    f->n_pos = 1;
                }
                n = grown(std::move(f));
            } else {
                return n;
            }
        }
    }
};

}  // namespace

node_ptr parse(const std::vector<token>& tokens) {
    parser ps{tokens};
    std::string ended;
    return ps.parse_block({}, &ended, tokens.front());
}

}  // namespace sluice::jinja
