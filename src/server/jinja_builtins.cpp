// jinja builtins (see jinja_builtins.h). Strings are held as UTF-8; length, indexing, slicing,
// reversing and iteration count code points, as Python's str does.
#include "server/jinja_builtins.h"

#include "server/jinja_ast.h"

#include "core/error.h"

#include <algorithm>
#include <limits>
#include <ctime>

namespace sluice::jinja {
namespace {

const char* const k_ws = " \t\n\r\f\v";

// Where the code points of a UTF-8 string begin (a stray byte counts as one), then s.size():
// code point i is s[at[i], at[i + 1]). Offsets, not copies: a 64 MiB string's code points held
// as strings took 2 GB.
std::vector<uint32_t> code_point_starts(const std::string& s) {
    if (s.size() > UINT32_MAX) fail("jinja: a string of {} bytes is too long to index", s.size());
    std::vector<uint32_t> at;
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (i + n > s.size()) n = 1;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80) n = 1;
        at.push_back(uint32_t(i));
        i += n;
    }
    at.push_back(uint32_t(s.size()));
    return at;
}

std::string code_point(const std::string& s, const std::vector<uint32_t>& at, size_t i) {
    return s.substr(at[i], at[i + 1] - at[i]);
}

size_t n_code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

std::string strip(const std::string& s, const value& chars, bool left, bool right) {
    std::string set = chars.is_string() ? chars.s : k_ws;
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && set.find(s[b]) != std::string::npos) b++;
    if (right)
        while (e > b && set.find(s[e - 1]) != std::string::npos) e--;
    return s.substr(b, e - b);
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    // The result's size is known before it is built (a million-byte `to` inserted between a
    // million characters asked for a terabyte): refused past the renderer's 64 MiB.
    if (to.size() > from.size()) {
        uint64_t matches = 0;
        if (from.empty()) matches = s.size() + 1;
        else
            for (size_t f = s.find(from); f != std::string::npos; f = s.find(from, f + from.size())) ++matches;
        if (count >= 0 && uint64_t(count) < matches) matches = uint64_t(count);
        if (s.size() + matches * (to.size() - from.size()) > k_max_text_bytes)
            fail("jinja: replace: the result would exceed 64 MiB");
    }
    std::string out;
    size_t pos = 0;
    int64_t n = 0;
    if (from.empty()) {  // Python inserts `to` between every character
        for (size_t i = 0; i <= s.size(); i++) {
            if (count < 0 || n < count) { out += to; n++; }
            if (i < s.size()) out += s[i];
        }
        return out;
    }
    while (true) {
        size_t f = s.find(from, pos);
        if (f == std::string::npos || (count >= 0 && n >= count)) break;
        out += s.substr(pos, f - pos) + to;
        pos = f + from.size();
        n++;
    }
    return out + s.substr(pos);
}

value split(const std::string& s, const value& sep, int64_t maxsplit) {
    list_t parts;
    auto add = [&](std::string part) {
        if (parts.size() == k_max_list_items) fail("jinja: split: more than {} parts", k_max_list_items);
        parts.push_back(value::str(std::move(part)));
    };
    if (!sep.is_string() || sep.is_none()) {  // Python: runs of whitespace, no empty parts
        size_t i = 0;
        while (true) {
            while (i < s.size() && std::string(k_ws).find(s[i]) != std::string::npos) i++;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
                add(s.substr(i));   // Python keeps the rest's trailing whitespace
                break;
            }
            size_t j = i;
            while (j < s.size() && std::string(k_ws).find(s[j]) == std::string::npos) j++;
            add(s.substr(i, j - i));
            i = j;
        }
        return value::list(std::move(parts));
    }
    if (sep.s.empty()) fail("jinja: split: empty separator");
    size_t pos = 0;
    while (true) {
        size_t f = s.find(sep.s, pos);
        if (f == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit)) break;
        add(s.substr(pos, f - pos));
        pos = f + sep.s.size();
    }
    add(s.substr(pos));
    return value::list(std::move(parts));
}

bool starts_or_ends(const std::string& s, const value& arg, bool ends) {
    auto one = [&](const value& x) {
        if (!x.is_string()) fail("jinja: startswith/endswith: expected a string, got {}", kind_name(x));
        if (x.s.size() > s.size()) return false;
        return ends ? s.compare(s.size() - x.s.size(), x.s.size(), x.s) == 0 : s.compare(0, x.s.size(), x.s) == 0;
    };
    if (arg.k == value::kind::list) {
        for (const auto& x : *arg.l)
            if (one(x)) return true;
        return false;
    }
    return one(arg);
}

int64_t as_int(const value& v, const char* what) {
    if (v.k == value::kind::integer) return v.i;
    if (v.k == value::kind::boolean) return v.b;
    fail("jinja: {}: expected an integer, got {}", what, kind_name(v));
}

std::string upper(std::string s, bool up) {
    for (char& c : s)
        if ((unsigned char)c < 0x80) c = char(up ? std::toupper(c) : std::tolower(c));
    return s;
}

// str.find, rfind and count over s[start:end] (code point indices, Python's clamping); find and
// rfind give a code point index.
value search(const std::string& s, const std::string& name, call_args& a) {
    const value sub = a.get(0, "sub");
    if (!sub.is_string()) fail("jinja: {}: must be str, not {}", name, kind_name(sub));
    const auto at = code_point_starts(s);
    const int64_t n = int64_t(at.size()) - 1;
    // Python's index rule, before the clamp to n (a start past the end finds nothing, not even '').
    auto index = [&](const value& v, int64_t dflt) {
        if (v.is_undefined() || v.is_none()) return dflt;
        const int64_t i = as_int(v, name.c_str());
        return i < 0 ? (i < -n ? 0 : i + n) : i;   // no i + n overflow: i >= -n there
    };
    const int64_t b = index(a.get(1, "start"), 0), e = std::min(index(a.get(2, "end"), n), n);
    if (b > e) return value::integer(name == "count" ? 0 : -1);
    const std::string_view hay = std::string_view(s).substr(at[size_t(b)], at[size_t(e)] - at[size_t(b)]);
    // A byte offset in hay as a code point index in s (sub is whole code points, so it starts on one).
    auto cp_index = [&](size_t byte) {
        return int64_t(std::upper_bound(at.begin(), at.end(), uint32_t(at[size_t(b)] + byte)) - at.begin()) - 1;
    };
    if (name == "count") {
        if (sub.s.empty()) return value::integer(e - b + 1);
        int64_t c = 0;
        for (size_t f = hay.find(sub.s); f != std::string_view::npos; f = hay.find(sub.s, f + sub.s.size())) ++c;
        return value::integer(c);
    }
    const size_t f = name == "find" ? hay.find(sub.s) : hay.rfind(sub.s);
    return value::integer(f == std::string_view::npos ? -1 : cp_index(f));
}

// str.format: {} (automatic numbering), {0} and {name} replacement fields and {{ }}, each value as
// str() prints it. Format specs and conversions (!r, :>5) are not supported and end in an error.
std::string format(const std::string& s, call_args& a) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
            out += c;
            ++i;
            continue;
        }
        if (c == '}') fail("jinja: format: single '}}' encountered in format string");
        if (c != '{') {
            out += c;
            continue;
        }
        const size_t close = s.find('}', i);
        if (close == std::string::npos) fail("jinja: format: single '{{' encountered in format string");
        const std::string field = s.substr(i + 1, close - i - 1);
        if (field.find_first_of(":!{[.") != std::string::npos)
            fail("jinja: format: the replacement field '{{{}}}' is not supported (only {{}}, {{0}} and {{name}})", field);
        value v;
        if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
            const size_t k = field.empty() ? auto_index++ : size_t(std::stoull(field.substr(0, 9)));
            if (k >= a.pos.size()) fail("jinja: format: replacement index {} out of range for {} arguments", k, a.pos.size());
            v = a.pos[k];
        } else {
            auto kw = std::find_if(a.kw.begin(), a.kw.end(), [&](const auto& p) { return p.first == field; });
            if (kw == a.kw.end()) fail("jinja: format: no argument named '{}'", field);
            v = kw->second;
        }
        out += to_str(v);
        if (out.size() > k_max_text_bytes) fail("jinja: format: the result would exceed 64 MiB");
        i = close;
    }
    return out;
}

value string_method(const std::string& s, const std::string& name, call_args& a) {
    if (name == "startswith" || name == "endswith") return value::boolean(starts_or_ends(s, a.get(0, "prefix"), name == "endswith"));
    if (name == "strip") return value::str(strip(s, a.get(0, "chars"), true, true));
    if (name == "lstrip") return value::str(strip(s, a.get(0, "chars"), true, false));
    if (name == "rstrip") return value::str(strip(s, a.get(0, "chars"), false, true));
    if (name == "split") {
        value mx = a.get(1, "maxsplit", value::integer(-1));
        return split(s, a.get(0, "sep"), as_int(mx, "split"));
    }
    if (name == "upper") return value::str(upper(s, true));
    if (name == "lower") return value::str(upper(s, false));
    if (name == "replace") {
        value from = a.get(0, "old"), to = a.get(1, "new");
        if (!from.is_string() || !to.is_string()) fail("jinja: replace: expected two strings");
        return value::str(replace(s, from.s, to.s, as_int(a.get(2, "count", value::integer(-1)), "replace")));
    }
    if (name == "find" || name == "rfind" || name == "count") return search(s, name, a);
    if (name == "format") return value::str(format(s, a));
    if (name == "title" || name == "capitalize") {
        std::string o = s;
        bool start = true;
        for (char& c : o) {
            bool alpha = std::isalpha((unsigned char)c);
            c = char(start && alpha ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c));
            start = name == "title" ? !alpha : false;
        }
        return value::str(o);
    }
    fail("jinja: 'str object' has no attribute '{}'", name);
}

const char* const k_str_methods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "upper",
                                     "lower", "replace", "find", "rfind", "count", "format", "title", "capitalize"};
const char* const k_dict_methods[] = {"items", "keys", "values", "get"};

value items_of(const value& d) {
    list_t l;
    for (const auto& [k, v] : *d.d) l.push_back(value::tuple({value::str(k), v}));
    return value::list(std::move(l));
}

value dict_method(const value& d, const std::string& name, call_args& a) {
    if (name == "items") return items_of(d);
    list_t l;
    if (name == "keys" || name == "values") {
        for (const auto& [k, v] : *d.d) l.push_back(name == "keys" ? value::str(k) : v);
        return value::list(std::move(l));
    }
    // get(key, default=None)
    value key = a.get(0, "key");
    const value* v = key.is_string() ? d.find(key.s) : nullptr;
    return v ? *v : a.get(1, "default", value::none());
}

size_t length(const value& v) {
    switch (v.k) {
        case value::kind::string: return n_code_points(v.s);
        case value::kind::list: return v.l->size();
        case value::kind::dict: return v.d->size();
        case value::kind::undefined: return 0;
        default: fail("jinja: length: object of type '{}' has no len()", kind_name(v));
    }
}

// selectattr/rejectattr/map(attribute=): dotted attribute lookup as jinja2 does.
value attr_path(const value& v, const std::string& path) {
    value cur = v;
    size_t pos = 0;
    while (true) {
        size_t dot = path.find('.', pos);
        std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        cur = get_item(cur, value::str(part));
        if (dot == std::string::npos) return cur;
        pos = dot + 1;
    }
}

}  // namespace

bool is_known_filter(const std::string& n) {
    static const char* const names[] = {"tojson", "trim", "length", "count", "upper", "lower", "default", "d",
                                        "join", "first", "last", "replace", "string", "int", "float", "list",
                                        "items", "selectattr", "rejectattr", "map", "safe", "abs", "capitalize",
                                        "title", "reverse", "select", "reject", "dictsort", "min", "max",
                                        "indent", "e", "escape"};
    return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

bool is_known_test(const std::string& n) {
    static const char* const names[] = {"defined", "undefined", "none", "string", "mapping", "sequence",
                                        "iterable", "true", "false", "number", "integer", "float", "boolean",
                                        "even", "odd", "callable", "sameas", "eq", "equalto", "ne", "in",
                                        "lower", "upper", "divisibleby"};
    return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

namespace {

// MarkupSafe's escape (the |e filter): & < > " ' as entities.
std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    if (out.size() > k_max_text_bytes) fail("jinja: escape: the result would exceed 64 MiB");
    return out;
}

// jinja2 3.1's indent(width=4, first=False, blank=False): every line after the first (and the first
// with first=True) gets the indentation, blank lines only with blank=True. Lines end at \n, \r\n,
// \r, \v, \f and \x1c-\x1e, as Python's splitlines() ends them (not at its Unicode separators).
std::string indent(const std::string& s, call_args& a) {
    const value w = a.get(0, "width", value::integer(4));
    const std::string pad = w.is_string() ? w.s : std::string(size_t(std::clamp<int64_t>(as_int(w, "indent"), 0, 1024)), ' ');
    const bool first = truthy(a.get(1, "first", value::boolean(false)));
    const bool blank = truthy(a.get(2, "blank", value::boolean(false)));
    // splitlines(s + "\n"), as jinja2 splits: the segment after the last break is a line too,
    // unless s ends with \r (the \n appended joins it into one \r\n break).
    // Each line is written as it is found (a list of them took 16 bytes a line: 1 GiB for 64 MiB
    // of newlines).
    const std::string_view sv(s);
    std::string out = first ? pad : "";
    bool first_line = true;
    auto line = [&](std::string_view l) {
        if (!first_line) {
            out += '\n';
            if (blank || !l.empty()) out += pad;
        }
        first_line = false;
        out += l;
        if (out.size() > k_max_text_bytes) fail("jinja: indent: the result would exceed 64 MiB");
    };
    size_t b = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c != '\n' && c != '\r' && c != '\v' && c != '\f' && (c < '\x1c' || c > '\x1e')) continue;
        line(sv.substr(b, i - b));
        if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        b = i + 1;
    }
    if (s.empty() || s.back() != '\r') line(sv.substr(b));
    return out;
}

// min/max(case_sensitive=False, attribute=None): the first smallest (largest) item, strings
// compared lower-cased unless case_sensitive; Undefined for an empty sequence.
value min_or_max(const std::string& name, const value& in, call_args& a) {
    const bool cs = truthy(a.get(0, "case_sensitive", value::boolean(false)));
    const value attr = a.get(1, "attribute");
    auto key = [&](const value& x) {
        value k = attr.is_undefined() || attr.is_none() ? x : attr_path(x, to_str(attr));
        if (!cs && k.is_string()) k.s = upper(k.s, false);
        return k;
    };
    const list_t xs = iterate(in);
    if (xs.empty()) return value::undef("No aggregated item, sequence was empty.");
    size_t best = 0;
    value best_key = key(xs[0]);
    for (size_t i = 1; i < xs.size(); ++i) {
        value k = key(xs[i]);
        if (name == "min" ? less(k, best_key, a.budget) : less(best_key, k, a.budget)) best = i, best_key = std::move(k);
    }
    return xs[best];
}

}  // namespace

value apply_filter(const std::string& name, const value& in, call_args& a) {
    if (name == "default" || name == "d") {
        bool boolean = truthy(a.get(1, "boolean", value::boolean(false)));
        if (in.is_undefined() || (boolean && !truthy(in))) return a.get(0, "default_value", value::str(""));
        return in;
    }
    if (name == "safe" || name == "string") return name == "safe" ? in : value::str(to_str(in));
    if (name == "e" || name == "escape") return value::str(html_escape(to_str(in)));
    if (name == "indent") return value::str(indent(to_str(in), a));
    if (name == "min" || name == "max") return min_or_max(name, in, a);
    // jinja2 yields nothing for a falsy sequence (none included) in these.
    if ((name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr" || name == "map") &&
        !truthy(in))
        return value::list();
    if (name == "tojson") {
        // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
        json_options opt;
        value ind = a.get(1, "indent", value::none());
        // jinja2 takes any indent; past 64 spaces a level it only multiplies the output (an
        // indent of 10^9 asked for gigabytes). A negative one is refused too.
        if (!ind.is_none()) {
            const int64_t i = as_int(ind, "tojson");
            if (i < 0 || i > 64) fail("jinja: tojson: indent {}: expected 0..64", i);
            opt.indent = int(i);
        }
        opt.ensure_ascii = truthy(a.get(0, "ensure_ascii", value::boolean(false)));
        opt.sort_keys = truthy(a.get(3, "sort_keys", value::boolean(false)));
        value seps = a.get(2, "separators", value::none());
        if (!seps.is_none()) {
            if (seps.k != value::kind::list || seps.l->size() != 2 || !(*seps.l)[0].is_string() || !(*seps.l)[1].is_string())
                fail("jinja: tojson: separators: expected a pair of strings");
            opt.item_sep = (*seps.l)[0].s;
            opt.key_sep = (*seps.l)[1].s;
        }
        return value::str(to_json(in, opt));
    }
    if (name == "length" || name == "count") return value::integer(int64_t(length(in)));
    if (name == "trim") return value::str(strip(to_str(in), a.get(0, "chars"), true, true));
    if (name == "upper" || name == "lower") return value::str(upper(to_str(in), name == "upper"));
    if (name == "capitalize" || name == "title") {
        call_args none(a.budget);
        return string_method(to_str(in), name, none);
    }
    if (name == "replace") {
        value from = a.get(0, "old"), to = a.get(1, "new");
        if (!from.is_string() || !to.is_string()) fail("jinja: replace: expected two strings");
        return value::str(replace(to_str(in), from.s, to.s, as_int(a.get(2, "count", value::integer(-1)), "replace")));
    }
    if (name == "join") {
        value sep = a.get(0, "d", value::str(""));
        value attr = a.get(1, "attribute", value::none());
        std::string out;
        list_t xs = iterate(in);
        const std::string sep_s = to_str(sep);
        for (size_t i = 0; i < xs.size(); i++) {
            if (i) out += sep_s;
            out += to_str(attr.is_string() ? attr_path(xs[i], attr.s) : xs[i]);
            // The renderer's 64 MiB bound on any string (a 60 MB separator joined 100,000 times).
            if (out.size() > k_max_text_bytes) fail("jinja: join: the result would exceed 64 MiB");
        }
        return value::str(out);
    }
    if (name == "first" || name == "last") {
        list_t xs = iterate(in);
        if (xs.empty()) return value::undef(name);
        return name == "first" ? xs.front() : xs.back();
    }
    if (name == "list") return value::list(iterate(in));
    if (name == "reverse") {
        if (in.is_string()) {
            const auto at = code_point_starts(in.s);
            std::string r;
            for (size_t i = at.size() - 1; i-- > 0;) r.append(in.s, at[i], at[i + 1] - at[i]);
            return value::str(r);
        }
        list_t xs = iterate(in);
        std::reverse(xs.begin(), xs.end());
        return value::list(std::move(xs));
    }
    if (name == "items") {
        if (in.is_undefined()) return value::list();
        if (in.k != value::kind::dict) fail("jinja: items: expected a mapping, got {}", kind_name(in));
        return items_of(in);
    }
    if (name == "int") {
        if (in.k == value::kind::integer) return in;
        if (in.k == value::kind::floating) return value::integer(int64_t(in.f));
        if (in.k == value::kind::boolean) return value::integer(in.b);
        if (in.is_string()) {
            try {
                size_t used = 0;
                std::string t = strip(in.s, value::none(), true, true);
                int64_t x = std::stoll(t, &used);
                if (used == t.size()) return value::integer(x);
            } catch (const std::exception&) {
            }
        }
        return a.get(0, "default", value::integer(0));
    }
    if (name == "float") {
        if (in.k == value::kind::floating) return in;
        if (in.k == value::kind::integer) return value::floating(double(in.i));
        if (in.is_string()) {
            try {
                return value::floating(std::stod(in.s));
            } catch (const std::exception&) {
            }
        }
        return a.get(0, "default", value::floating(0.0));
    }
    if (name == "abs") {
        if (in.k == value::kind::floating) return value::floating(in.f < 0 ? -in.f : in.f);
        const int64_t x = as_int(in, "abs");
        if (x == std::numeric_limits<int64_t>::min()) fail("jinja: abs: integer overflow");
        return value::integer(x < 0 ? -x : x);
    }
    if (name == "selectattr" || name == "rejectattr") {
        if (a.pos.empty()) fail("jinja: {}: expected an attribute name", name);
        std::string attr = to_str(a.pos[0]);
        call_args targs(a.budget);
        for (size_t i = 2; i < a.pos.size(); i++) targs.pos.push_back(a.pos[i]);
        list_t out;
        for (const auto& x : iterate(in)) {
            value v = attr_path(x, attr);
            bool ok = a.pos.size() > 1 ? apply_test(to_str(a.pos[1]), v, targs) : truthy(v);
            if (ok == (name == "selectattr")) out.push_back(x);
        }
        return value::list(std::move(out));
    }
    if (name == "select" || name == "reject") {
        call_args targs(a.budget);
        for (size_t i = 1; i < a.pos.size(); i++) targs.pos.push_back(a.pos[i]);
        list_t out;
        for (const auto& x : iterate(in)) {
            bool ok = a.pos.empty() ? truthy(x) : apply_test(to_str(a.pos[0]), x, targs);
            if (ok == (name == "select")) out.push_back(x);
        }
        return value::list(std::move(out));
    }
    if (name == "dictsort") {  // dictsort(case_sensitive=False, by='key', reverse=False)
        if (in.k != value::kind::dict) fail("jinja: dictsort: expected a mapping, got {}", kind_name(in));
        bool cs = truthy(a.get(0, "case_sensitive", value::boolean(false)));
        bool by_value = to_str(a.get(1, "by", value::str("key"))) == "value";
        bool rev = truthy(a.get(2, "reverse", value::boolean(false)));
        list_t items = *items_of(in).l;
        auto key = [&](const value& t) {
            value k = (*t.l)[by_value ? 1 : 0];
            if (!cs && k.is_string()) k.s = upper(k.s, false);
            return k;
        };
        std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
            return rev ? less(key(y), key(x), a.budget) : less(key(x), key(y), a.budget);
        });
        return value::list(std::move(items));
    }
    if (name == "map") {
        value attr = a.get(99, "attribute");
        list_t out;
        size_t made = 0;
        for (const auto& x : iterate(in)) {
            if (attr.is_string()) {
                value v = attr_path(x, attr.s);
                if (v.is_undefined()) v = a.get(99, "default");
                out.push_back(v);
            } else {
                if (a.pos.empty()) fail("jinja: map: expected a filter name or attribute=");
                call_args rest(a.budget);
                for (size_t i = 1; i < a.pos.size(); i++) rest.pos.push_back(a.pos[i]);
                out.push_back(apply_filter(to_str(a.pos[0]), x, rest));
                // Each result is bounded, their sum is not: 100,000 indents of a 30 MB string
                // would make 3 TB inside this one call.
                made += out.back().s.size();
                if (made > k_max_text_bytes) fail("jinja: map: the results would hold more than 64 MiB of text");
            }
        }
        return value::list(std::move(out));
    }
    fail("jinja: no filter named '{}'", name);
}

bool apply_test(const std::string& name, const value& in, call_args& a) {
    using K = value::kind;
    if (name == "defined") return !in.is_undefined();
    if (name == "undefined") return in.is_undefined();
    if (name == "none") return in.is_none();
    if (name == "string") return in.is_string();
    if (name == "mapping") return in.k == K::dict;
    // Undefined has __len__ and __getitem__, so jinja2 calls it a sequence (and iterable).
    if (name == "sequence") return in.k == K::list || in.k == K::string || in.k == K::dict || in.is_undefined();
    if (name == "iterable") return in.k == K::list || in.k == K::string || in.k == K::dict || in.is_undefined();
    if (name == "true") return in.k == K::boolean && in.b;
    if (name == "false") return in.k == K::boolean && !in.b;
    if (name == "boolean") return in.k == K::boolean;
    if (name == "number") return in.is_number();
    if (name == "integer") return in.k == K::integer;
    if (name == "float") return in.k == K::floating;
    if (name == "callable") return in.k == K::func;
    if (name == "even" || name == "odd") return (as_int(in, name.c_str()) % 2 == 0) == (name == "even");
    if (name == "divisibleby") {
        // x % 0 and INT64_MIN % -1 are undefined in C++ (SIGFPE on x86): jinja2 raises for 0.
        const int64_t x = as_int(in, "divisibleby"), d = as_int(a.get(0, "num"), "divisibleby");
        if (d == 0) fail("jinja: divisibleby 0: integer division or modulo by zero");
        return d == -1 || x % d == 0;
    }
    if (name == "lower") return in.is_string() && upper(in.s, false) == in.s;
    if (name == "upper") return in.is_string() && upper(in.s, true) == in.s;
    value other = a.get(0, "other");
    if (name == "sameas" || name == "eq" || name == "equalto") return equals(in, other, a.budget);
    if (name == "ne") return !equals(in, other, a.budget);
    if (name == "in") {
        if (other.is_string()) return in.is_string() && other.s.find(in.s) != std::string::npos;
        for (const auto& x : iterate(other))
            if (equals(x, in, a.budget)) return true;
        return false;
    }
    fail("jinja: no test named '{}'", name);
}

value get_attr(const value& obj, const std::string& name) {
    if (obj.is_string() && std::find(std::begin(k_str_methods), std::end(k_str_methods), name) != std::end(k_str_methods)) {
        std::string s = obj.s;
        return value::func([s, name](call_args& a) { return string_method(s, name, a); });
    }
    if (obj.k == value::kind::dict) {
        if (!obj.is_namespace &&
            std::find(std::begin(k_dict_methods), std::end(k_dict_methods), name) != std::end(k_dict_methods)) {
            value d = obj;
            return value::func([d, name](call_args& a) { return dict_method(d, name, a); });
        }
        if (const value* v = obj.find(name)) return *v;
    }
    return value::undef(name);
}

value get_item(const value& obj, const value& key) {
    if (obj.k == value::kind::dict && key.is_string()) {
        if (const value* v = obj.find(key.s)) return *v;
        return get_attr(obj, key.s);
    }
    if ((obj.k == value::kind::list || obj.is_string()) && (key.k == value::kind::integer || key.k == value::kind::boolean)) {
        std::vector<uint32_t> at;
        if (obj.is_string()) at = code_point_starts(obj.s);
        int64_t n = int64_t(obj.k == value::kind::list ? obj.l->size() : at.size() - 1);
        int64_t i = key.k == value::kind::boolean ? key.b : key.i;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return value::undef();
        return obj.k == value::kind::list ? (*obj.l)[size_t(i)] : value::str(code_point(obj.s, at, size_t(i)));
    }
    if (key.is_string()) return get_attr(obj, key.s);
    return value::undef();
}

value slice(const value& obj, const value& start, const value& stop, const value& step) {
    if (obj.k != value::kind::list && !obj.is_string()) fail("jinja: cannot slice a '{}'", kind_name(obj));
    std::vector<uint32_t> at;
    if (obj.is_string()) at = code_point_starts(obj.s);
    int64_t n = int64_t(obj.k == value::kind::list ? obj.l->size() : at.size() - 1);
    int64_t st = step.is_none() ? 1 : as_int(step, "slice step");
    if (st == 0) fail("jinja: slice step cannot be zero");
    // Python's slice.indices().
    auto clamp = [&](const value& v, int64_t dflt) {
        if (v.is_none()) return dflt;
        int64_t i = as_int(v, "slice index");
        if (i < 0) i += n;
        if (st > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
    list_t l;
    std::string s;
    // The next index is taken only while it stays inside [b, e): i + st can overflow int64 for
    // a huge step (an index wrapped that way read outside the list).
    for (int64_t i = b; st > 0 ? i < e : i > e;) {
        if (obj.k == value::kind::list) l.push_back((*obj.l)[size_t(i)]);
        else s.append(obj.s, at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
        if (st > 0 ? e - i <= st : e - i >= st) break;   // no -st: INT64_MIN has no negation
        i += st;
    }
    return obj.k == value::kind::list ? value::list(std::move(l)) : value::str(s);
}

list_t iterate(const value& v) {
    switch (v.k) {
        case value::kind::undefined: return {};
        case value::kind::list: return *v.l;
        case value::kind::dict: {
            list_t l;
            for (const auto& [k, x] : *v.d) l.push_back(value::str(k));
            return l;
        }
        case value::kind::string: {
            const auto at = code_point_starts(v.s);
            if (at.size() - 1 > k_max_list_items)
                fail("jinja: a string of {} characters is too long to iterate (at most {})", at.size() - 1, k_max_list_items);
            list_t l;
            for (size_t i = 0; i + 1 < at.size(); i++) l.push_back(value::str(code_point(v.s, at, i)));
            return l;
        }
        default: fail("jinja: '{}' object is not iterable", kind_name(v));
    }
}

value global(const std::string& name) {
    if (name == "raise_exception")
        return value::func([](call_args& a) -> value { fail("jinja: raise_exception: {}", to_str(a.get(0, "message"))); });
    if (name == "namespace")
        return value::func([](call_args& a) {
            dict_t d;
            for (const auto& [k, v] : a.kw) d.emplace_back(k, v);
            value ns = value::dict(std::move(d));
            ns.is_namespace = true;
            return ns;
        });
    if (name == "range")
        return value::func([](call_args& a) {
            int64_t b = 0, e, st = 1;
            if (a.pos.size() == 1) e = as_int(a.pos[0], "range");
            else if (a.pos.size() >= 2) {
                b = as_int(a.pos[0], "range");
                e = as_int(a.pos[1], "range");
                if (a.pos.size() > 2) st = as_int(a.pos[2], "range");
            } else fail("jinja: range expected at least 1 argument");
            if (st == 0) fail("jinja: range() arg 3 must not be zero");
            // jinja2's sandbox (MAX_RANGE) refuses ranges longer than 100,000 items. The count in
            // 128 bits: e - b + st - 1 overflows int64 for ranges near its ends.
            using i128 = __int128;
            const i128 span = st > 0 ? i128(e) - b : i128(b) - e, step = st > 0 ? i128(st) : -i128(st);
            const i128 n = span > 0 ? (span + step - 1) / step : 0;
            if (n > 100000) fail("jinja: range too big: more than 100,000 items");
            list_t l;
            for (i128 k = 0; k < n; ++k) l.push_back(value::integer(int64_t(i128(b) + k * st)));
            return value::list(std::move(l));
        });
    if (name == "strftime_now")
        return value::func([](call_args& a) {
            std::time_t t = std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            char buf[256];
            size_t n = std::strftime(buf, sizeof buf, to_str(a.get(0, "format")).c_str(), &tm);
            return value::str(std::string(buf, n));
        });
    return value::undef(name);
}

}  // namespace sluice::jinja
