// jinja lexer: text and tags, with jinja2's whitespace control for trim_blocks=True and
// lstrip_blocks=True:
//   {%- / -%} (and {{- -}} {#- -#}) strip all whitespace before / after the tag;
//   a block or comment tag that ends without '-' or '+' eats one newline after it (trim_blocks);
//   a block or comment tag that starts without '-' or '+' and has only spaces/tabs before it on
//   its line removes them (lstrip_blocks).
// Like jinja2 (keep_trailing_newline=False) one trailing newline of the source is dropped.
#include "server/jinja_ast.h"

#include "core/error.h"

#include <cctype>

namespace sluice::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct lexer {
    std::string src;
    size_t pos = 0;
    int line = 1, col = 1;
    std::vector<token> out;

    [[noreturn]] void error(int l, int c, const std::string& what) {
        fail("jinja: line {}, column {}: {}", l, c, what);
    }
    void advance(size_t n) {
        for (size_t i = 0; i < n && pos < src.size(); i++, pos++) {
            if (src[pos] == '\n') { line++; col = 1; } else col++;
        }
    }
    bool at(const char* s) const { return src.compare(pos, std::char_traits<char>::length(s), s) == 0; }

    void run() {
        bool line_start = true;  // the text that follows starts a line (for lstrip_blocks)
        while (pos < src.size()) {
            // Text up to the next tag opening.
            size_t start = pos;
            int tl = line, tc = col;
            size_t next = src.size();
            for (size_t p = pos; p + 1 < src.size(); p++) {
                if (src[p] == '{' && (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#')) {
                    next = p;
                    break;
                }
            }
            std::string text = src.substr(start, next - start);
            advance(next - start);
            char tag = 0, lmod = 0;
            if (pos < src.size()) {
                tag = src[pos + 1];
                if (pos + 2 < src.size() && (src[pos + 2] == '-' || src[pos + 2] == '+')) lmod = src[pos + 2];
            }
            if (lmod == '-') {
                while (!text.empty() && is_ws(text.back())) text.pop_back();
            } else if (tag && tag != '{' && lmod != '+') {
                size_t nl = text.rfind('\n');
                size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
                if (l_pos > 0 || line_start) {
                    bool blank = true;
                    for (size_t i = l_pos; i < text.size(); i++)
                        if (text[i] != ' ' && text[i] != '\t') blank = false;
                    if (blank) text.resize(l_pos);
                }
            }
            if (!text.empty()) out.push_back({token::kind::text, text, tl, tc});
            if (!tag) break;
            int ol = line, oc = col;
            advance(lmod ? 3 : 2);
            char rmod = 0;
            if (tag == '#') {
                size_t end = src.find("#}", pos);
                if (end == std::string::npos) error(ol, oc, "unclosed comment: expected '#}'");
                if (end > pos && (src[end - 1] == '-' || src[end - 1] == '+')) rmod = src[end - 1];
                advance(end + 2 - pos);
            } else {
                out.push_back({tag == '{' ? token::kind::var_begin : token::kind::block_begin, "", ol, oc});
                rmod = lex_expr(tag == '{' ? '}' : '%', ol, oc);
            }
            line_start = false;
            if (rmod == '-') {
                while (pos < src.size() && is_ws(src[pos])) {
                    line_start = src[pos] == '\n';
                    advance(1);
                }
            } else if (tag != '{' && rmod != '+' && pos < src.size() && src[pos] == '\n') {
                advance(1);
                line_start = true;
            }
        }
        out.push_back({token::kind::eof, "", line, col});
    }

    // Tokens of one {{ }} or {% %} up to its closing "<close>}"; returns the '-'/'+' modifier.
    char lex_expr(char close, int ol, int oc) {
        int depth = 0;  // brackets opened inside the tag: '}}' in a dict literal is not the end
        static const char* const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        while (true) {
            while (pos < src.size() && is_ws(src[pos])) advance(1);
            if (pos >= src.size())
                error(ol, oc, fmt::format("unclosed tag: expected '{}}}' before the end of the template", close));
            char c = src[pos];
            if (depth == 0) {
                for (char m : {'-', '+'}) {
                    if (c == m && pos + 2 < src.size() + 0 && src[pos + 1] == close && src[pos + 2] == '}') {
                        out.push_back({close == '}' ? token::kind::var_end : token::kind::block_end, "", line, col});
                        advance(3);
                        return m;
                    }
                }
                if (c == close && pos + 1 < src.size() && src[pos + 1] == '}') {
                    out.push_back({close == '}' ? token::kind::var_end : token::kind::block_end, "", line, col});
                    advance(2);
                    return 0;
                }
            }
            int tl = line, tc = col;
            if (std::isalpha((unsigned char)c) || c == '_') {
                size_t e = pos;
                while (e < src.size() && (std::isalnum((unsigned char)src[e]) || src[e] == '_')) e++;
                out.push_back({token::kind::name, src.substr(pos, e - pos), tl, tc});
                advance(e - pos);
            } else if (std::isdigit((unsigned char)c)) {
                size_t e = pos;
                bool is_float = false;
                while (e < src.size() && (std::isdigit((unsigned char)src[e]) || src[e] == '_')) e++;
                // x.1.0 is x[1][0]: a number right after a '.' has no fraction (jinja2's lookbehind).
                const bool after_dot = pos > 0 && src[pos - 1] == '.';
                if (!after_dot && e + 1 < src.size() && src[e] == '.' && std::isdigit((unsigned char)src[e + 1])) {
                    is_float = true;
                    e++;
                    while (e < src.size() && (std::isdigit((unsigned char)src[e]) || src[e] == '_')) e++;
                }
                // Exponent: 1e3, 2.5E-4 (a float in jinja2 even without a '.').
                if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
                    size_t x = e + 1;
                    if (x < src.size() && (src[x] == '+' || src[x] == '-')) x++;
                    if (x < src.size() && std::isdigit((unsigned char)src[x])) {
                        is_float = true;
                        e = x;
                        while (e < src.size() && (std::isdigit((unsigned char)src[e]) || src[e] == '_')) e++;
                    }
                }
                std::string num;
                for (size_t i = pos; i < e; i++)
                    if (src[i] != '_') num += src[i];
                out.push_back({is_float ? token::kind::floating : token::kind::integer, num, tl, tc});
                advance(e - pos);
            } else if (c == '\'' || c == '"') {
                out.push_back({token::kind::string, lex_string(c, tl, tc), tl, tc});
            } else {
                std::string op(1, c);
                for (const char* o : ops2)
                    if (at(o)) op = o;
                if (op == "(" || op == "[" || op == "{") depth++;
                if ((op == ")" || op == "]" || op == "}") && depth > 0) depth--;
                if (std::string("+-*/%~<>=()[]{}.,:|!").find(c) == std::string::npos || op == "!")
                    error(tl, tc, fmt::format("unexpected character '{}'", c));
                out.push_back({token::kind::op, op, tl, tc});
                advance(op.size());
            }
        }
    }

    // A Python string literal: jinja2 decodes it with Python's unicode-escape.
    std::string lex_string(char q, int tl, int tc) {
        advance(1);
        std::string s;
        while (true) {
            if (pos >= src.size()) error(tl, tc, "unclosed string literal");
            char c = src[pos];
            if (c == q) { advance(1); return s; }
            if (c != '\\') { s += c; advance(1); continue; }
            if (pos + 1 >= src.size()) error(tl, tc, "unclosed string literal");
            char e = src[pos + 1];
            advance(2);
            switch (e) {
                case 'n': s += '\n'; break;
                case 't': s += '\t'; break;
                case 'r': s += '\r'; break;
                case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
                    // Octal \ooo: up to three digits, the first already consumed.
                    unsigned cp = unsigned(e - '0');
                    for (int k = 0; k < 2 && pos < src.size() && src[pos] >= '0' && src[pos] <= '7'; k++) {
                        cp = cp * 8 + unsigned(src[pos] - '0');
                        advance(1);
                    }
                    append_utf8(s, cp);
                    break;
                }
                case 'a': s += '\a'; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'v': s += '\v'; break;
                case '\\': s += '\\'; break;
                case '\'': s += '\''; break;
                case '"': s += '"'; break;
                case '\n': break;
                case 'x': case 'u': case 'U': {
                    size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    bool hex = pos + n <= src.size();
                    for (size_t k = 0; hex && k < n; k++) hex = std::isxdigit((unsigned char)src[pos + k]);
                    if (!hex) error(line, col, fmt::format("truncated \\{} escape in string literal", e));
                    unsigned long cp = std::stoul(src.substr(pos, n), nullptr, 16);
                    if (cp > 0x10FFFF) error(line, col, "\\U escape beyond U+10FFFF in string literal");
                    advance(n);
                    append_utf8(s, cp);
                    break;
                }
                default: s += '\\'; s += e;  // Python keeps unknown escapes as written
            }
        }
    }

    static void append_utf8(std::string& s, unsigned long cp) {
        if (cp < 0x80) s += char(cp);
        else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
        } else {
            s += char(0xF0 | (cp >> 18)); s += char(0x80 | ((cp >> 12) & 0x3F));
            s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
        }
    }
};

}  // namespace

std::vector<token> lex(std::string_view source) {
    lexer lx;
    // jinja2 normalises newlines (\r\n, \r, \n) to '\n', in string literals too, and drops one
    // trailing newline.
    lx.src.reserve(source.size());
    for (size_t i = 0; i < source.size(); i++) {
        if (source[i] == '\r' && i + 1 < source.size() && source[i + 1] == '\n') continue;
        lx.src += source[i] == '\r' ? '\n' : source[i];
    }
    if (!lx.src.empty() && lx.src.back() == '\n') lx.src.pop_back();
    lx.run();
    return std::move(lx.out);
}

}  // namespace sluice::jinja
