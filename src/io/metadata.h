// Model metadata as GGUF defines it: typed key/value pairs, arrays (nested included). Hugging
// Face config.json values are translated into the same keys llama.cpp's converter writes
// (e.g. "qwen3moe.expert_count"), so model code reads one vocabulary of keys.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice {

// GGUF value type ids (gguf_type in ggml).
enum class meta_type : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view name(meta_type t);

struct meta_value;
// Arrays keep their element type; strings and nested arrays are held as meta_values, numbers
// in the widest form of their kind (the element type says which one was stored).
struct meta_array {
    meta_type elem = meta_type::u8;
    std::vector<int64_t> ints;       // u8..i64 (u64 values above INT64_MAX are rejected at load), bool
    std::vector<double> floats;      // f32, f64
    std::vector<std::string> strings;
    std::vector<meta_value> arrays;  // nested arrays
    size_t size() const;
};

struct meta_value {
    meta_type type = meta_type::u8;
    std::variant<int64_t, double, bool, std::string, std::shared_ptr<meta_array>> v;

    std::optional<int64_t> as_int() const;       // any integer type
    std::optional<double> as_float() const;      // f32/f64, or an integer
    std::optional<bool> as_bool() const;
    const std::string* as_string() const;
    const meta_array* as_array() const;
};

class metadata {
public:
    // Inserting a key that exists is an error in files (duplicate keys are rejected by the
    // readers); set() replaces.
    void set(std::string key, meta_value v);
    bool contains(std::string_view key) const;
    const meta_value* find(std::string_view key) const;
    const std::map<std::string, meta_value, std::less<>>& all() const { return kv_; }

    // Typed lookups. The get_* forms return nullopt when the key is absent and throw
    // sluice::error when it is present with the wrong type; require_* also throw when absent.
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    const meta_array* get_array(std::string_view key) const;
    int64_t require_int(std::string_view key) const;
    double require_float(std::string_view key) const;
    std::string require_string(std::string_view key) const;
    const meta_array& require_array(std::string_view key) const;

private:
    std::map<std::string, meta_value, std::less<>> kv_;
};

}  // namespace sluice
