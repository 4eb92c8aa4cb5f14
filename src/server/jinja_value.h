// jinja: the values a template computes with, modelled on the Python objects jinja2 sees
// (transformers passes json-decoded dicts/lists/str/int/float/bool/None). Printing, repr, tojson
// and truthiness follow Python so that our output equals jinja2's byte for byte.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::jinja {

// A chat template comes from the model file, and a hostile one must end in an error, not take
// gigabytes, hours or the stack. The bounds on what a render makes and walks:
// - the most bytes any string may hold (values, filter results, printed values, the output);
inline constexpr size_t k_max_text_bytes = size_t{64} << 20;
// - the most items a list may hold (made by +, or from a string's characters or split), and the
//   most bytes of strings a list made by + holds directly (its items are copies);
inline constexpr size_t k_max_list_items = size_t{1} << 20;
// - the deepest any walk over a value goes (printing, tojson, ==, <): a namespace can be set to
//   hold itself, and walking that cycle overflowed the stack.
inline constexpr int k_max_walk_depth = 256;

// List and dict items that == and < may still visit in one render. Lists share their items, so
// a few steps build a list of a million references to one list of a million items, which
// compares for hours (in Python too).
struct compare_budget {
    int64_t items_left = int64_t{1} << 24;
};

struct value;
using list_t = std::vector<value>;
// Insertion-ordered, like a Python dict: tojson and items() must keep the caller's key order.
using dict_t = std::vector<std::pair<std::string, value>>;
struct call_args;
using func_t = std::function<value(call_args&)>;

struct value {
    enum class kind { undefined, none, boolean, integer, floating, string, list, dict, func };
    kind k = kind::undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;  // string payload; for undefined, the name that was looked up (for errors)
    std::shared_ptr<list_t> l;
    std::shared_ptr<dict_t> d;
    std::shared_ptr<func_t> fn;
    bool is_namespace = false;  // namespace(): the one dict whose attributes `set` may assign
    bool is_tuple = false;      // a list that Python would hold as a tuple: repr (a, b), (a,)

    static value undef(std::string name = {}) { value v; v.s = std::move(name); return v; }
    static value none() { value v; v.k = kind::none; return v; }
    static value boolean(bool x) { value v; v.k = kind::boolean; v.b = x; return v; }
    static value integer(int64_t x) { value v; v.k = kind::integer; v.i = x; return v; }
    static value floating(double x) { value v; v.k = kind::floating; v.f = x; return v; }
    static value str(std::string x) { value v; v.k = kind::string; v.s = std::move(x); return v; }
    static value list(list_t x = {}) {
        value v; v.k = kind::list; v.l = std::make_shared<list_t>(std::move(x)); return v;
    }
    static value tuple(list_t x) { value v = list(std::move(x)); v.is_tuple = true; return v; }
    static value dict(dict_t x = {}) {
        value v; v.k = kind::dict; v.d = std::make_shared<dict_t>(std::move(x)); return v;
    }
    static value func(func_t x) {
        value v; v.k = kind::func; v.fn = std::make_shared<func_t>(std::move(x)); return v;
    }

    bool is_undefined() const { return k == kind::undefined; }
    bool is_none() const { return k == kind::none; }
    bool is_string() const { return k == kind::string; }
    bool is_number() const { return k == kind::integer || k == kind::floating || k == kind::boolean; }
    // The dict entry for key, or nullptr.
    const value* find(const std::string& key) const;
};

// Positional and keyword arguments of a call (filter, test, method, macro, global), and the
// render's comparison budget.
struct call_args {
    explicit call_args(compare_budget& b) : budget(b) {}
    compare_budget& budget;
    std::vector<value> pos;
    std::vector<std::pair<std::string, value>> kw;
    // Argument `idx` or keyword `name`, else `fallback`.
    value get(size_t idx, const char* name, value fallback = value::undef()) const;
};

const char* kind_name(const value& v);
bool truthy(const value& v);
// str(v) as Python prints it ({{ v }}, |string, ~): None, True, 1.5, ['a', {'b': 1}].
std::string to_str(const value& v);
// repr(v): strings quoted the way Python chooses ('x', "it's").
std::string to_repr(const value& v);
// json.dumps as transformers' tojson filter calls it (ensure_ascii=False by default).
struct json_options {
    int indent = -1;                 // < 0: None (one line)
    std::string item_sep, key_sep;   // empty: Python's defaults (", " or "," with indent; ": ")
    bool sort_keys = false;
    bool ensure_ascii = false;       // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
// Throws sluice::error on an Undefined or a function (Python raises TypeError).
std::string to_json(const value& v, const json_options& opt = {});
std::string float_repr(double x);
bool equals(const value& a, const value& b, compare_budget& budget);
// a < b for numbers and strings (and lists lexicographically); throws for other pairs.
bool less(const value& a, const value& b, compare_budget& budget);

value from_json(const nlohmann::ordered_json& j);

}  // namespace sluice::jinja
