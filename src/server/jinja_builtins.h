// jinja builtins: filters, tests, str/dict methods and globals (raise_exception, namespace,
// range, strftime_now), with the semantics of jinja2 3.1 and Python 3.
#pragma once

#include "server/jinja_value.h"

#include <cstddef>
#include <string>

namespace sluice::jinja {

value apply_filter(const std::string& name, const value& in, call_args& args);
bool apply_test(const std::string& name, const value& in, call_args& args);
// obj.name as jinja2 resolves it: a str/dict method bound to obj, else (for dicts) the key,
// else Undefined.
value get_attr(const value& obj, const std::string& name);
// obj[key]: list index (negative from the end), dict key, string character; else Undefined.
value get_item(const value& obj, const value& key);
value slice(const value& obj, const value& start, const value& stop, const value& step);
// The iteration of `for x in v`: list items, dict keys, string characters; Undefined is empty.
list_t iterate(const value& v);
value global(const std::string& name);

}  // namespace sluice::jinja
