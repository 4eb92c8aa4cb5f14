// jinja values: Python's str/repr/json.dumps/== rules, written out (see jinja_value.h).
#include "server/jinja_value.h"

#include "core/error.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace sluice::jinja {

const value* value::find(const std::string& key) const {
    if (k != kind::dict) return nullptr;
    for (const auto& [name, v] : *d)
        if (name == key) return &v;
    return nullptr;
}

value call_args::get(size_t idx, const char* name, value fallback) const {
    for (const auto& [n, v] : kw)
        if (n == name) return v;
    if (idx < pos.size()) return pos[idx];
    return fallback;
}

const char* kind_name(const value& v) {
    switch (v.k) {
        case value::kind::undefined: return "undefined";
        case value::kind::none: return "NoneType";
        case value::kind::boolean: return "bool";
        case value::kind::integer: return "int";
        case value::kind::floating: return "float";
        case value::kind::string: return "str";
        case value::kind::list: return "list";
        case value::kind::dict: return v.is_namespace ? "Namespace" : "dict";
        case value::kind::func: return "function";
    }
    return "?";
}

bool truthy(const value& v) {
    switch (v.k) {
        case value::kind::undefined:
        case value::kind::none: return false;
        case value::kind::boolean: return v.b;
        case value::kind::integer: return v.i != 0;
        case value::kind::floating: return v.f != 0.0;
        case value::kind::string: return !v.s.empty();
        case value::kind::list: return !v.l->empty();
        case value::kind::dict: return v.is_namespace || !v.d->empty();
        case value::kind::func: return true;
    }
    return false;
}

// Python's float.__repr__: the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), scientific (at least two exponent digits) otherwise.
std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, r.ptr);
    std::string sign;
    if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
    size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    int exp = std::stoi(sci.substr(e + 1));
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp >= 0) {
            std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
            while (ip.size() < size_t(exp + 1)) ip += '0';
            std::string fp = digits.size() > size_t(exp + 1) ? digits.substr(exp + 1) : "0";
            out = ip + "." + fp;
        } else {
            out = "0." + std::string(-exp - 1, '0') + digits;
        }
        return sign + out;
    }
    std::string out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + out + eb;
}

static std::string repr_string(const std::string& s) {
    bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == q) { out += '\\'; out += char(c); }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", c);
            out += b;
        } else out += char(c);
    }
    out += q;
    return out;
}

// A walk one level deeper than `depth`: refused past k_max_walk_depth.
static int deeper(int depth) {
    if (depth >= k_max_walk_depth)
        fail("jinja: a value nested deeper than {} (a namespace that holds itself?)", k_max_walk_depth);
    return depth + 1;
}

// Printed text grows by at least a byte for every item walked, so this bounds the walk too (a
// list of two references to a list of two references..., 40 levels deep, has 2^40 items).
static void check_text_size(const std::string& out) {
    if (out.size() > k_max_text_bytes) fail("jinja: a value whose text exceeds 64 MiB");
}

// str(v) (repr = false) or repr(v), appended to out.
static void print_rec(const value& v, bool repr, int depth, std::string& out) {
    switch (v.k) {
        case value::kind::undefined: out += repr ? "Undefined" : ""; return;
        case value::kind::none: out += "None"; return;
        case value::kind::boolean: out += v.b ? "True" : "False"; return;
        case value::kind::integer: out += std::to_string(v.i); return;
        case value::kind::floating: out += float_repr(v.f); return;
        case value::kind::string: out += repr ? repr_string(v.s) : v.s; return;
        case value::kind::list: {
            const int inner = deeper(depth);
            out += v.is_tuple ? "(" : "[";
            for (size_t i = 0; i < v.l->size(); i++) {
                if (i) out += ", ";
                print_rec((*v.l)[i], true, inner, out);
                check_text_size(out);
            }
            out += !v.is_tuple ? "]" : v.l->size() == 1 ? ",)" : ")";
            return;
        }
        case value::kind::dict: {
            if (v.is_namespace) {
                out += "<Namespace>";
                return;
            }
            const int inner = deeper(depth);
            out += "{";
            bool first = true;
            for (const auto& [k, x] : *v.d) {
                out += (first ? "" : ", ") + repr_string(k) + ": ";
                print_rec(x, true, inner, out);
                check_text_size(out);
                first = false;
            }
            out += "}";
            return;
        }
        case value::kind::func: out += "<function>"; return;
    }
}

std::string to_str(const value& v) {
    if (v.k == value::kind::string) return v.s;
    std::string out;
    print_rec(v, false, 0, out);
    return out;
}

std::string to_repr(const value& v) {
    std::string out;
    print_rec(v, true, 0, out);
    return out;
}

static std::string json_string(const std::string& s, bool ensure_ascii) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size(); i++) {
        unsigned char c = s[i];
        if (ensure_ascii && c >= 0x80) {  // decode one UTF-8 sequence, emit \uXXXX
            int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
            uint32_t cp = c & (n == 3 ? 0x07 : n == 2 ? 0x0F : 0x1F);
            for (int k = 0; k < n && i + 1 < s.size(); k++) cp = (cp << 6) | (s[++i] & 0x3F);
            auto u = [&](uint32_t x) {
                char b[16];
                std::snprintf(b, sizeof b, "\\u%04x", unsigned(x));
                out += b;
            };
            if (cp >= 0x10000) {
                cp -= 0x10000;
                u(0xD800 + (cp >> 10));
                u(0xDC00 + (cp & 0x3FF));
            } else u(cp);
            continue;
        }
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", c);
                    out += b;
                } else out += char(c);
        }
    }
    return out + "\"";
}

static void json_rec(const value& v, const json_options& opt, int level, std::string& out) {
    const int indent = opt.indent;
    auto newline = [&](int lvl) {
        if (indent < 0) return;
        out += '\n';
        out.append(size_t(indent) * size_t(lvl), ' ');
    };
    std::string item_sep = !opt.item_sep.empty() ? opt.item_sep : indent >= 0 ? "," : ", ";
    std::string key_sep = !opt.key_sep.empty() ? opt.key_sep : ": ";
    switch (v.k) {
        case value::kind::none: out += "null"; return;
        case value::kind::boolean: out += v.b ? "true" : "false"; return;
        case value::kind::integer: out += std::to_string(v.i); return;
        case value::kind::floating:
            if (std::isnan(v.f)) out += "NaN";
            else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
            else out += float_repr(v.f);
            return;
        case value::kind::string: out += json_string(v.s, opt.ensure_ascii); return;
        case value::kind::list:
            if (v.l->empty()) { out += "[]"; return; }
            deeper(level);
            out += "[";
            for (size_t i = 0; i < v.l->size(); i++) {
                if (i) out += item_sep;
                newline(level + 1);
                json_rec((*v.l)[i], opt, level + 1, out);
                check_text_size(out);
            }
            newline(level);
            out += "]";
            return;
        case value::kind::dict: {
            if (v.d->empty()) { out += "{}"; return; }
            deeper(level);
            out += "{";
            bool first = true;
            std::vector<const std::pair<std::string, value>*> entries;
            for (const auto& e : *v.d) entries.push_back(&e);
            if (opt.sort_keys)
                std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
            for (const auto* e : entries) {
                if (!first) out += item_sep;
                first = false;
                newline(level + 1);
                out += json_string(e->first, opt.ensure_ascii) + key_sep;
                json_rec(e->second, opt, level + 1, out);
                check_text_size(out);
            }
            newline(level);
            out += "}";
            return;
        }
        case value::kind::undefined:
            fail("jinja: tojson: Object of type Undefined is not JSON serializable{}",
                 v.s.empty() ? "" : " ('" + v.s + "')");
        case value::kind::func: fail("jinja: tojson: a function is not JSON serializable");
    }
}

std::string to_json(const value& v, const json_options& opt) {
    std::string out;
    json_rec(v, opt, 0, out);
    return out;
}

static double as_double(const value& v) {
    if (v.k == value::kind::floating) return v.f;
    if (v.k == value::kind::boolean) return v.b ? 1 : 0;
    return double(v.i);
}

// One more list or dict item for == or < to visit, at `depth`.
static int visit(compare_budget& budget, int depth) {
    if (--budget.items_left < 0) fail("jinja: comparisons visited more than 2^24 list and dict items in one render");
    return deeper(depth);
}

static bool equals_rec(const value& a, const value& b, compare_budget& budget, int depth) {
    if (a.is_number() && b.is_number()) {
        if (a.k != value::kind::floating && b.k != value::kind::floating)
            return (a.k == value::kind::boolean ? a.b : a.i) == (b.k == value::kind::boolean ? b.b : b.i);
        return as_double(a) == as_double(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
        case value::kind::undefined:
        case value::kind::none: return true;
        case value::kind::string: return a.s == b.s;
        case value::kind::list:
            if (a.l->size() != b.l->size()) return false;
            for (size_t i = 0; i < a.l->size(); i++)
                if (!equals_rec((*a.l)[i], (*b.l)[i], budget, visit(budget, depth))) return false;
            return true;
        case value::kind::dict:
            if (a.d->size() != b.d->size()) return false;
            for (const auto& [k, x] : *a.d) {
                budget.items_left -= int64_t(b.d->size());   // find() walks b's entries
                const value* y = b.find(k);
                if (!y || !equals_rec(x, *y, budget, visit(budget, depth))) return false;
            }
            return true;
        case value::kind::func: return a.fn == b.fn;
        default: return false;
    }
}

bool equals(const value& a, const value& b, compare_budget& budget) { return equals_rec(a, b, budget, 0); }

static bool less_rec(const value& a, const value& b, compare_budget& budget, int depth) {
    if (a.is_number() && b.is_number()) {
        if (a.k == value::kind::integer && b.k == value::kind::integer) return a.i < b.i;
        return as_double(a) < as_double(b);
    }
    if (a.is_string() && b.is_string()) return a.s < b.s;
    if (a.k == value::kind::list && b.k == value::kind::list) {
        for (size_t i = 0; i < a.l->size() && i < b.l->size(); i++) {
            const int inner = visit(budget, depth);
            if (less_rec((*a.l)[i], (*b.l)[i], budget, inner)) return true;
            if (less_rec((*b.l)[i], (*a.l)[i], budget, inner)) return false;
        }
        return a.l->size() < b.l->size();
    }
    fail("jinja: '<' not supported between instances of '{}' and '{}'", kind_name(a), kind_name(b));
}

bool less(const value& a, const value& b, compare_budget& budget) { return less_rec(a, b, budget, 0); }

value from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return value::none();
        case nlohmann::ordered_json::value_t::boolean: return value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
        case nlohmann::ordered_json::value_t::number_unsigned: return value::integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_float: return value::floating(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return value::str(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            list_t l;
            for (const auto& e : j) l.push_back(from_json(e));
            return value::list(std::move(l));
        }
        case nlohmann::ordered_json::value_t::object: {
            dict_t d;
            for (const auto& [k, e] : j.items()) d.emplace_back(k, from_json(e));
            return value::dict(std::move(d));
        }
        default: fail("jinja: unsupported JSON value of type '{}'", j.type_name());
    }
}

}  // namespace sluice::jinja
