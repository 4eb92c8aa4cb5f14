// jinja evaluator: walks the tree. Scoping follows jinja2: each for-loop iteration and each
// macro call gets its own frame, so `set` inside a loop does not leak out (hence namespace()),
// while `set` inside an if writes to the enclosing frame.
#include "server/jinja_ast.h"
#include "server/jinja_builtins.h"

#include "core/error.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <map>
#include <unordered_set>

namespace sluice::jinja {
namespace {

// A render's budgets. A chat template comes from the model file: a hostile one must end in a
// clear error, not a stack overflow, a hang or gigabytes of memory (each was reached before
// these: a macro recursing through a default argument, 64 macro levels of 790-deep expressions,
// three nested range(100000) loops, a string doubled 60 times).
// Nested eval() frames, all macros together. 2,000 overflowed an 8 MB stack under
// AddressSanitizer's larger frames; at 600 the hostile-template tests pass in a release build
// with a 512 KB stack. Real templates nest a few dozen levels.
constexpr int k_max_eval_depth = 600;
constexpr int64_t k_max_loop_steps = 1'000'000;     // loop iterations and macro calls in one render
constexpr double k_max_render_seconds = 10.0;       // a render's wall time (each step may copy a long string)

struct renderer {
    std::vector<std::map<std::string, value>> frames;
    enum class ctl { none, brk, cont } flow = ctl::none;
    int call_depth = 0;  // macro calls in progress: recursion is bounded, not a stack overflow
    int eval_depth = 0;
    int64_t loop_steps = 0;
    compare_budget budget;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    // Namespaces assigned to in this render: one set to hold itself (ns.a = ns, or a list that
    // holds it) is a reference cycle its shared_ptrs never free, so they are emptied at the end.
    std::unordered_set<std::shared_ptr<dict_t>> assigned;

    ~renderer() {
        for (const auto& d : assigned) d->clear();
    }

    // One loop iteration or macro call: counted, and the clock read (~20 ns, 20 ms for the most
    // steps a render may take; one step can copy 64 MiB, so reading it every 1,024 let a render
    // run for a minute).
    void step(const node& n) {
        if (++loop_steps > k_max_loop_steps)
            error(n, fmt::format("more than {} loop iterations and macro calls in one render", k_max_loop_steps));
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > k_max_render_seconds)
            error(n, fmt::format("the render ran longer than {} s", k_max_render_seconds));
    }

    void check_text(const node& n, size_t bytes) {
        if (bytes > k_max_text_bytes) error(n, fmt::format("a string of {} bytes exceeds 64 MiB", bytes));
    }

    [[noreturn]] void error(const node& n, const std::string& what) {
        fail("jinja: line {}: {}", n.line, what);
    }
    value lookup(const std::string& name) {
        for (size_t i = frames.size(); i-- > 0;) {
            auto it = frames[i].find(name);
            if (it != frames[i].end()) return it->second;
        }
        value g = global(name);
        if (!g.is_undefined()) return g;
        return value::undef(name);
    }
    // Undefined may be printed, tested and iterated, but not used as an operand.
    const value& defined(const node& n, const value& v) {
        if (v.is_undefined()) error(n, fmt::format("'{}' is undefined", v.s.empty() ? "value" : v.s));
        return v;
    }

    value eval_args(const node& n, size_t first, call_args& a) {
        size_t n_kw = n.names.size();
        size_t total = n.kids.size() - first;
        for (size_t i = 0; i < total - n_kw; i++) a.pos.push_back(eval(*n.kids[first + i]));
        for (size_t i = 0; i < n_kw; i++) a.kw.emplace_back(n.names[i], eval(*n.kids[first + total - n_kw + i]));
        return value::none();
    }

    value compare(const node& n, const std::string& op, const value& a, const value& b) {
        if (op == "==") return value::boolean(equals(a, b, budget));
        if (op == "!=") return value::boolean(!equals(a, b, budget));
        if (op == "in") return value::boolean(contains(n, b, a));
        if (op == "not in") return value::boolean(!contains(n, b, a));
        defined(n, a);
        defined(n, b);
        try {
            if (op == "<") return value::boolean(less(a, b, budget));
            if (op == ">") return value::boolean(less(b, a, budget));
            if (op == "<=") return value::boolean(!less(b, a, budget));
            return value::boolean(!less(a, b, budget));
        } catch (const sluice::error& e) {
            error(n, std::string(e.what()).substr(7));
        }
    }

    value arith(const node& n, const std::string& op, const value& a, const value& b) {
        defined(n, a);
        defined(n, b);
        if (op == "+") {
            if (a.is_string() && b.is_string()) {
                check_text(n, a.s.size() + b.s.size());
                return value::str(a.s + b.s);
            }
            if (a.k == value::kind::list && b.k == value::kind::list) {
                if (a.l->size() + b.l->size() > k_max_list_items)
                    error(n, fmt::format("a list of {} items exceeds {}", a.l->size() + b.l->size(), k_max_list_items));
                // The items are copies, strings included: doubling a list of one 60 MB string ten
                // times held 60 GB.
                size_t bytes = 0;
                for (const value* side : {&a, &b})
                    for (const value& x : *side->l) bytes += x.s.size();
                if (bytes > k_max_text_bytes)
                    error(n, fmt::format("a list holding {} bytes of strings exceeds 64 MiB", bytes));
                list_t l = *a.l;
                l.insert(l.end(), b.l->begin(), b.l->end());
                return value::list(std::move(l));
            }
        }
        if (op == "*") {
            if (a.is_string() && b.k == value::kind::integer) {
                // Divided, not multiplied: size * count wraps past 2^64 (4 bytes x 2^62 gave 0).
                if (a.s.empty() || b.i <= 0) return value::str("");   // '' * 2^62 looped 2^62 times
                if (uint64_t(b.i) > k_max_text_bytes / a.s.size())
                    error(n, fmt::format("string repetition of {} bytes x {} exceeds 64 MiB", a.s.size(), b.i));
                std::string s;
                for (int64_t i = 0; i < b.i; i++) s += a.s;
                return value::str(s);
            }
        }
        if (op == "%" && a.is_string()) error(n, "printf-style '%' formatting is not supported");
        if (!a.is_number() || !b.is_number())
            error(n, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, kind_name(a), kind_name(b)));
        bool ints = a.k != value::kind::floating && b.k != value::kind::floating;
        auto iv = [](const value& v) { return v.k == value::kind::boolean ? int64_t(v.b) : v.i; };
        auto dv = [&](const value& v) { return v.k == value::kind::floating ? v.f : double(iv(v)); };
        if (op == "/") {
            if (dv(b) == 0) error(n, "division by zero");
            return value::floating(dv(a) / dv(b));
        }
        if (ints) {
            int64_t x = iv(a), y = iv(b), res = 0;
            // Python integers are unbounded; ours are 64-bit and refuse to wrap.
            bool over = (op == "+" && __builtin_add_overflow(x, y, &res)) || (op == "-" && __builtin_sub_overflow(x, y, &res)) ||
                        (op == "*" && __builtin_mul_overflow(x, y, &res));
            if (over) error(n, fmt::format("integer overflow in {} {} {}", x, op, y));
            if (op == "+" || op == "-" || op == "*") return value::integer(res);
            if (op == "**") {
                double pw = std::pow(double(x), double(y));
                if (y < 0) return value::floating(pw);
                if (!(std::fabs(pw) < 9.2e18)) error(n, fmt::format("integer overflow in {} ** {}", x, y));
                return value::integer(int64_t(pw));
            }
            if (y == -1 && x == INT64_MIN) error(n, "integer overflow in division");
            if (y == 0) error(n, "integer division or modulo by zero");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) { q--; r += y; }  // Python floors
            return value::integer(op == "//" ? q : r);
        }
        double x = dv(a), y = dv(b);
        if (op == "+") return value::floating(x + y);
        if (op == "-") return value::floating(x - y);
        if (op == "*") return value::floating(x * y);
        if (op == "**") return value::floating(std::pow(x, y));
        if (y == 0) error(n, "float division or modulo by zero");
        double q = std::floor(x / y);
        return value::floating(op == "//" ? q : x - q * y);
    }

    bool contains(const node& n, const value& hay, const value& needle) {
        if (hay.is_string()) {
            if (!needle.is_string()) error(n, fmt::format("'in <string>' requires string as left operand, not {}", kind_name(needle)));
            return hay.s.find(needle.s) != std::string::npos;
        }
        if (hay.k == value::kind::list) {
            for (const auto& x : *hay.l)
                if (equals(x, needle, budget)) return true;
            return false;
        }
        if (hay.k == value::kind::dict) return needle.is_string() && hay.find(needle.s);
        if (hay.is_undefined()) return false;
        error(n, fmt::format("argument of type '{}' is not iterable", kind_name(hay)));
    }

    value eval(const node& n) {
        if (eval_depth >= k_max_eval_depth) error(n, fmt::format("expressions and macro calls nested deeper than {}", k_max_eval_depth));
        ++eval_depth;
        struct leave {
            int& d;
            ~leave() { --d; }
        } guard{eval_depth};
        return eval_node(n);
    }

    value eval_node(const node& n) {
        switch (n.k) {
            case node::kind::literal: return n.lit;
            case node::kind::name: return lookup(n.name);
            case node::kind::getattr: {
                value obj = eval(*n.kids[0]);
                if (obj.is_undefined())
                    error(n, fmt::format("'{}' is undefined (reading its attribute '{}')", obj.s, n.name));
                value r = get_attr(obj, n.name);
                if (r.is_undefined()) r.s = n.name;
                return r;
            }
            case node::kind::getitem: {
                value obj = eval(*n.kids[0]);
                value key = eval(*n.kids[1]);
                if (obj.is_undefined()) error(n, fmt::format("'{}' is undefined (reading an item)", obj.s));
                value r = get_item(obj, key);
                if (r.is_undefined()) r.s = to_str(key);
                return r;
            }
            case node::kind::slice: {
                value obj = defined(n, eval(*n.kids[0]));
                auto part = [&](int i) { return n.kids[i] ? eval(*n.kids[i]) : value::none(); };
                return slice(obj, part(1), part(2), part(3));
            }
            case node::kind::call: {
                value fn = eval(*n.kids[0]);
                if (fn.k != value::kind::func)
                    error(n, fmt::format("'{}' is not callable", fn.is_undefined() ? fn.s : kind_name(fn)));
                call_args a(budget);
                eval_args(n, 1, a);
                try {
                    return (*fn.fn)(a);
                } catch (const sluice::error& e) {
                    std::string m = e.what();
                    if (m.rfind("jinja: line", 0) == 0) throw;
                    error(n, m.rfind("jinja: ", 0) == 0 ? m.substr(7) : m);
                }
            }
            case node::kind::filter: {
                value in = eval(*n.kids[0]);
                call_args a(budget);
                eval_args(n, 1, a);
                try {
                    return apply_filter(n.name, in, a);
                } catch (const sluice::error& e) {
                    std::string m = e.what();
                    if (m.rfind("jinja: line", 0) == 0) throw;
                    error(n, m.rfind("jinja: ", 0) == 0 ? m.substr(7) : m);
                }
            }
            case node::kind::test: {
                value in = eval(*n.kids[0]);
                call_args a(budget);
                eval_args(n, 1, a);
                bool r;
                try {
                    r = apply_test(n.name, in, a);
                } catch (const sluice::error& e) {
                    error(n, std::string(e.what()).substr(7));
                }
                return value::boolean(n.negate ? !r : r);
            }
            case node::kind::unary: {
                value v = eval(*n.kids[0]);
                if (n.name == "not") return value::boolean(!truthy(v));
                defined(n, v);
                if (!v.is_number()) error(n, fmt::format("bad operand type for unary {}: '{}'", n.name, kind_name(v)));
                if (n.name == "+") return v;
                if (v.k == value::kind::floating) return value::floating(-v.f);
                int64_t x = v.k == value::kind::boolean ? int64_t(v.b) : v.i;
                if (x == INT64_MIN) error(n, "integer overflow in unary -");
                return value::integer(-x);
            }
            case node::kind::binary: {
                const std::string& op = n.name;
                if (op == "and") {
                    value a = eval(*n.kids[0]);
                    return truthy(a) ? eval(*n.kids[1]) : a;
                }
                if (op == "or") {
                    value a = eval(*n.kids[0]);
                    return truthy(a) ? a : eval(*n.kids[1]);
                }
                if (op == "compare") {   // a chain: each operator between neighbours, short-circuited
                    value left = eval(*n.kids[0]);
                    for (size_t i = 0; i < n.names.size(); ++i) {
                        value right = eval(*n.kids[i + 1]);
                        if (!truthy(compare(n, n.names[i], left, right))) return value::boolean(false);
                        left = std::move(right);
                    }
                    return value::boolean(true);
                }
                value a = eval(*n.kids[0]), b = eval(*n.kids[1]);
                if (op == "~") {
                    std::string s = to_str(a);
                    const std::string t = to_str(b);
                    check_text(n, s.size() + t.size());
                    return value::str(s += t);
                }
                if (op == "==" || op == "!=" || op == "in" || op == "not in" || op == "<" || op == ">" || op == "<=" ||
                    op == ">=")
                    return compare(n, op, a, b);
                return arith(n, op, a, b);
            }
            case node::kind::list:
            case node::kind::tuple: {
                list_t l;
                for (const auto& k : n.kids) l.push_back(eval(*k));
                return n.k == node::kind::tuple ? value::tuple(std::move(l)) : value::list(std::move(l));
            }
            case node::kind::dict: {
                dict_t d;
                for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
                    value k = eval(*n.kids[i]);
                    if (!k.is_string()) error(n, "dict literal keys must be strings");
                    value v = eval(*n.kids[i + 1]);
                    bool replaced = false;
                    for (auto& [name, x] : d)
                        if (name == k.s) { x = v; replaced = true; }
                    if (!replaced) d.emplace_back(k.s, v);
                }
                return value::dict(std::move(d));
            }
            case node::kind::cond: {
                if (truthy(eval(*n.kids[1]))) return eval(*n.kids[0]);
                return n.kids[2] ? eval(*n.kids[2]) : value::undef();
            }
            default: error(n, "statement used as an expression");
        }
    }

    void assign(const node& n, const std::vector<std::string>& targets, const value& v) {
        if (targets.size() == 1) {
            frames.back()[targets[0]] = v;
            return;
        }
        list_t items = iterate(v);
        if (items.size() != targets.size())
            error(n, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
        for (size_t i = 0; i < targets.size(); i++) frames.back()[targets[i]] = items[i];
    }

    void exec_block(const node& blk, std::string& out) {
        for (const auto& s : blk.kids) {
            exec(*s, out);
            if (flow != ctl::none) return;
        }
    }

    void exec(const node& n, std::string& out) {
        switch (n.k) {
            case node::kind::block: exec_block(n, out); return;
            case node::kind::text: out += n.name; check_text(n, out.size()); return;
            case node::kind::output: out += to_str(eval(*n.kids[0])); check_text(n, out.size()); return;
            case node::kind::if_: {
                size_t i = 0;
                for (; i + 1 < n.kids.size(); i += 2) {
                    if (truthy(eval(*n.kids[i]))) {
                        exec_block(*n.kids[i + 1], out);
                        return;
                    }
                }
                if (i < n.kids.size()) exec_block(*n.kids[i], out);
                return;
            }
            case node::kind::for_: exec_for(n, out); return;
            case node::kind::set: {
                value v = eval(*n.kids[0]);
                if (!n.name.empty()) {  // ns.attr = v
                    value ns = lookup(n.names[0]);
                    if (!ns.is_namespace)
                        error(n, fmt::format("cannot assign attribute on non-namespace object '{}'", n.names[0]));
                    assigned.insert(ns.d);
                    for (auto& [k, x] : *ns.d)
                        if (k == n.name) { x = v; return; }
                    ns.d->emplace_back(n.name, v);
                    return;
                }
                assign(n, n.names, v);
                return;
            }
            case node::kind::set_block: {
                std::string s;
                exec_block(*n.kids[0], s);
                frames.back()[n.names[0]] = value::str(s);
                return;
            }
            case node::kind::macro: define_macro(n); return;
            case node::kind::break_: flow = ctl::brk; return;
            case node::kind::continue_: flow = ctl::cont; return;
            default: out += to_str(eval(n)); check_text(n, out.size()); return;
        }
    }

    void exec_for(const node& n, std::string& out) {
        value seq = eval(*n.kids[0]);
        if (!seq.is_undefined() && seq.k != value::kind::list && seq.k != value::kind::dict && !seq.is_string())
            error(n, fmt::format("'{}' object is not iterable", kind_name(seq)));
        list_t items = iterate(seq);
        const node* cond = n.kids[2].get();
        if (cond) {  // `for x in xs if c`: loop.* counts only the items that pass
            list_t kept;
            for (const auto& it : items) {
                frames.emplace_back();
                assign(n, n.names, it);
                bool keep = truthy(eval(*cond));
                frames.pop_back();
                if (keep) kept.push_back(it);
            }
            items = std::move(kept);
        }
        size_t len = items.size();
        for (size_t i = 0; i < len; i++) {
            step(n);
            frames.emplace_back();
            dict_t loop = {
                {"index", value::integer(int64_t(i + 1))}, {"index0", value::integer(int64_t(i))},
                {"revindex", value::integer(int64_t(len - i))}, {"revindex0", value::integer(int64_t(len - i - 1))},
                {"first", value::boolean(i == 0)}, {"last", value::boolean(i + 1 == len)},
                {"length", value::integer(int64_t(len))}, {"depth", value::integer(1)},
                {"depth0", value::integer(0)}};
            if (i > 0) loop.emplace_back("previtem", items[i - 1]);
            if (i + 1 < len) loop.emplace_back("nextitem", items[i + 1]);
            frames.back()["loop"] = value::dict(std::move(loop));
            assign(n, n.names, items[i]);
            exec_block(*n.kids[1], out);
            frames.pop_back();
            if (flow == ctl::brk) { flow = ctl::none; break; }
            flow = ctl::none;
        }
        if (len == 0 && n.kids[3]) exec_block(*n.kids[3], out);
    }

    void define_macro(const node& n) {
        const node* def = &n;
        renderer* self = this;
        frames.back()[n.name] = value::func([self, def](call_args& a) -> value {
            const node& m = *def;
            // Counted from the call, before the defaults are evaluated: `macro f(x=f())` recursed
            // through its default argument without ever reaching a depth check.
            if (self->call_depth >= 64) fail("jinja: macro '{}': calls nested deeper than 64", m.name);
            self->step(m);   // a macro calling itself twice at each of 60 levels makes 2^60 calls
            struct depth_guard {
                int& d;
                explicit depth_guard(int& x) : d(x) { ++d; }
                ~depth_guard() { --d; }
            } depth{self->call_depth};
            std::map<std::string, value> locals;
            if (a.pos.size() > m.names.size())
                fail("jinja: macro '{}' takes {} arguments, got {}", m.name, m.names.size(), a.pos.size());
            for (size_t i = 0; i < m.names.size(); i++) {
                value v;
                bool have = false;
                if (i < a.pos.size()) { v = a.pos[i]; have = true; }
                for (const auto& [k, x] : a.kw)
                    if (k == m.names[i]) { v = x; have = true; }
                if (!have) v = m.kids[1 + i] ? self->eval(*m.kids[1 + i]) : value::undef(m.names[i]);
                locals[m.names[i]] = v;
            }
            for (const auto& [k, x] : a.kw) {
                bool known = false;
                for (const auto& p : m.names) known |= p == k;
                if (!known) fail("jinja: macro '{}' has no argument '{}'", m.name, k);
            }
            // A macro sees the render variables (frame 0) and its own arguments.
            std::vector<std::map<std::string, value>> saved;
            saved.swap(self->frames);
            self->frames.push_back(saved.front());
            self->frames.push_back(std::move(locals));
            std::string body;
            try {
                self->exec_block(*m.kids[0], body);
            } catch (...) {
                self->frames.swap(saved);
                throw;
            }
            self->frames.swap(saved);
            self->flow = ctl::none;
            return value::str(body);
        });
    }
};

}  // namespace

std::string render(const node& root, const dict_t& vars) {
    renderer r;
    r.frames.emplace_back();
    for (const auto& [k, v] : vars) r.frames.back()[k] = v;
    std::string out;
    r.exec_block(root, out);
    return out;
}

}  // namespace sluice::jinja
