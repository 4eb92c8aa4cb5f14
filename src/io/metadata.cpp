#include "io/metadata.h"

#include "core/error.h"

namespace sluice {

std::string_view name(meta_type t) {
    switch (t) {
        case meta_type::u8: return "u8";
        case meta_type::i8: return "i8";
        case meta_type::u16: return "u16";
        case meta_type::i16: return "i16";
        case meta_type::u32: return "u32";
        case meta_type::i32: return "i32";
        case meta_type::f32: return "f32";
        case meta_type::boolean: return "bool";
        case meta_type::string: return "string";
        case meta_type::array: return "array";
        case meta_type::u64: return "u64";
        case meta_type::i64: return "i64";
        case meta_type::f64: return "f64";
    }
    return "unknown";
}

size_t meta_array::size() const {
    switch (elem) {
        case meta_type::f32:
        case meta_type::f64: return floats.size();
        case meta_type::string: return strings.size();
        case meta_type::array: return arrays.size();
        default: return ints.size();
    }
}

namespace {

bool is_int_type(meta_type t) {
    switch (t) {
        case meta_type::u8: case meta_type::i8: case meta_type::u16: case meta_type::i16:
        case meta_type::u32: case meta_type::i32: case meta_type::u64: case meta_type::i64:
            return true;
        default:
            return false;
    }
}

}  // namespace

std::optional<int64_t> meta_value::as_int() const {
    if (!is_int_type(type)) return std::nullopt;
    if (const auto* p = std::get_if<int64_t>(&v)) return *p;
    return std::nullopt;
}

std::optional<double> meta_value::as_float() const {
    if (type == meta_type::f32 || type == meta_type::f64) {
        if (const auto* p = std::get_if<double>(&v)) return *p;
        return std::nullopt;
    }
    if (auto i = as_int()) return static_cast<double>(*i);
    return std::nullopt;
}

std::optional<bool> meta_value::as_bool() const {
    if (type != meta_type::boolean) return std::nullopt;
    if (const auto* p = std::get_if<bool>(&v)) return *p;
    return std::nullopt;
}

const std::string* meta_value::as_string() const {
    if (type != meta_type::string) return nullptr;
    return std::get_if<std::string>(&v);
}

const meta_array* meta_value::as_array() const {
    if (type != meta_type::array) return nullptr;
    const auto* p = std::get_if<std::shared_ptr<meta_array>>(&v);
    return p ? p->get() : nullptr;
}

void metadata::set(std::string key, meta_value v) { kv_.insert_or_assign(std::move(key), std::move(v)); }

bool metadata::contains(std::string_view key) const { return kv_.find(key) != kv_.end(); }

const meta_value* metadata::find(std::string_view key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

std::optional<int64_t> metadata::get_int(std::string_view key) const {
    const meta_value* v = find(key);
    if (!v) return std::nullopt;
    auto r = v->as_int();
    if (!r) fail("metadata: key '{}': expected an integer, got {}", key, name(v->type));
    return r;
}

std::optional<double> metadata::get_float(std::string_view key) const {
    const meta_value* v = find(key);
    if (!v) return std::nullopt;
    auto r = v->as_float();
    if (!r) fail("metadata: key '{}': expected a number, got {}", key, name(v->type));
    return r;
}

std::optional<bool> metadata::get_bool(std::string_view key) const {
    const meta_value* v = find(key);
    if (!v) return std::nullopt;
    auto r = v->as_bool();
    if (!r) fail("metadata: key '{}': expected a bool, got {}", key, name(v->type));
    return r;
}

std::optional<std::string> metadata::get_string(std::string_view key) const {
    const meta_value* v = find(key);
    if (!v) return std::nullopt;
    const std::string* s = v->as_string();
    if (!s) fail("metadata: key '{}': expected a string, got {}", key, name(v->type));
    return *s;
}

const meta_array* metadata::get_array(std::string_view key) const {
    const meta_value* v = find(key);
    if (!v) return nullptr;
    const meta_array* a = v->as_array();
    if (!a) fail("metadata: key '{}': expected an array, got {}", key, name(v->type));
    return a;
}

int64_t metadata::require_int(std::string_view key) const {
    auto r = get_int(key);
    if (!r) fail("metadata: missing key '{}' (an integer)", key);
    return *r;
}

double metadata::require_float(std::string_view key) const {
    auto r = get_float(key);
    if (!r) fail("metadata: missing key '{}' (a number)", key);
    return *r;
}

std::string metadata::require_string(std::string_view key) const {
    auto r = get_string(key);
    if (!r) fail("metadata: missing key '{}' (a string)", key);
    return *r;
}

const meta_array& metadata::require_array(std::string_view key) const {
    const meta_array* a = get_array(key);
    if (!a) fail("metadata: missing key '{}' (an array)", key);
    return *a;
}

}  // namespace sluice
