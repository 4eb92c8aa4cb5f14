// `sluice inspect`: metadata, tensors, bytes by group and the bytes one decoded token reads.
#include "sluice/inspect.h"

#include "io/inspect.h"

#include "core/error.h"
#include "io/model_file.h"

#include <fmt/format.h>

#include <array>

namespace sluice {

namespace {

constexpr std::array<std::string_view, 5> k_groups{"embeddings", "attention/dense", "routed experts",
                                                   "shared experts", "output"};
constexpr size_t k_json_array_limit = 64;  // longer arrays are elided from JSON unless asked

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string escape_text(std::string_view s, size_t max_chars) {
    std::string out;
    size_t n = 0;
    for (char c : s) {
        if (n == max_chars) {
            out += "...";
            break;
        }
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else out.push_back(c);
        ++n;
    }
    return out;
}

// f32 values were widened to double at load; print the float they were (shortest form).
std::string float_text(double v, meta_type t) {
    if (t == meta_type::f32) return fmt::format("{}", static_cast<float>(v));
    return fmt::format("{}", v);
}

std::string plural_type(const meta_array& a) {
    switch (a.elem) {
        case meta_type::string: return "strings";
        case meta_type::array: return "arrays";
        case meta_type::boolean: return "bools";
        default: return std::string(name(a.elem));
    }
}

meta_value element(const meta_array& a, size_t i) {
    meta_value v;
    v.type = a.elem;
    switch (a.elem) {
        case meta_type::f32:
        case meta_type::f64: v.v = a.floats[i]; break;
        case meta_type::string: v.v = a.strings[i]; break;
        case meta_type::array: return a.arrays[i];
        case meta_type::boolean: v.v = a.ints[i] != 0; break;
        default: v.v = a.ints[i]; break;
    }
    return v;
}

inspect_report::key make_key(const std::string& key, const meta_value& v, const inspect_options& opt) {
    inspect_report::key k;
    k.name = key;
    k.type = std::string(name(v.type));
    k.text = meta_value_text(v);
    if (const meta_array* a = v.as_array()) {
        k.array_length = a->size();
        k.array_elem = std::string(name(a->elem));
        if (!opt.full_arrays && a->size() > k_json_array_limit) {
            k.json = "null";
            return k;
        }
    }
    k.json = meta_value_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return k;
}

}  // namespace

std::string_view tensor_group(std::string_view n) {
    if (n == "token_embd.weight" || n == "position_embd.weight" || n == "token_types.weight") return k_groups[0];
    if (contains(n, "_exps")) return k_groups[2];
    if (contains(n, "_shexp")) return k_groups[3];
    if (n == "output.weight" || n == "output.bias") return k_groups[4];
    return k_groups[1];
}

std::string meta_value_text(const meta_value& v, size_t max_elems, size_t max_chars) {
    switch (v.type) {
        case meta_type::string: return escape_text(*v.as_string(), max_chars);
        case meta_type::boolean: return *v.as_bool() ? "true" : "false";
        case meta_type::f32:
        case meta_type::f64: return float_text(*v.as_float(), v.type);
        case meta_type::array: {
            const meta_array& a = *v.as_array();
            if (a.size() > max_elems) return fmt::format("[{} {}]", a.size(), plural_type(a));
            std::string out = "[";
            for (size_t i = 0; i < a.size(); ++i) {
                const meta_value e = element(a, i);
                std::string t = meta_value_text(e, max_elems, 40);
                if (e.type == meta_type::string) t = "\"" + t + "\"";
                out += (i ? ", " : "") + t;
            }
            return out + "]";
        }
        default: return fmt::format("{}", *v.as_int());
    }
}

nlohmann::json meta_value_json(const meta_value& v) {
    switch (v.type) {
        case meta_type::string: return *v.as_string();
        case meta_type::boolean: return *v.as_bool();
        case meta_type::f32:
        case meta_type::f64: return *v.as_float();
        case meta_type::array: {
            const meta_array& a = *v.as_array();
            nlohmann::json out = nlohmann::json::array();
            switch (a.elem) {
                case meta_type::f32:
                case meta_type::f64: for (double x : a.floats) out.push_back(x); break;
                case meta_type::string: for (const auto& s : a.strings) out.push_back(s); break;
                case meta_type::array: for (const auto& e : a.arrays) out.push_back(meta_value_json(e)); break;
                case meta_type::boolean: for (int64_t x : a.ints) out.push_back(x != 0); break;
                default: for (int64_t x : a.ints) out.push_back(x); break;
            }
            return out;
        }
        default: return *v.as_int();
    }
}

inspect_report inspect_model(const std::filesystem::path& path, const inspect_options& opt) {
    auto m = model_file::open(path);
    const metadata& md = m->meta();
    inspect_report r;
    r.path = path.string();
    r.format = std::string(m->format());
    r.architecture = md.get_string("general.architecture").value_or("");
    r.name = md.get_string("general.name").value_or("");
    const std::string prefix = r.architecture + ".";
    for (const auto& [key, v] : md.all()) {
        r.keys.push_back(make_key(key, v, opt));
        if (!r.architecture.empty() && key.rfind(prefix, 0) == 0) r.hyperparameters.push_back(r.keys.back());
    }
    if (!r.architecture.empty()) {
        r.expert_count = md.get_int(prefix + "expert_count").value_or(0);
        r.expert_used_count = md.get_int(prefix + "expert_used_count").value_or(0);
        if (r.expert_count < 0 || r.expert_used_count < 0 || r.expert_used_count > r.expert_count)
            fail("inspect: {}: expert_used_count {} / expert_count {} (expected 0 <= used <= count)", r.path,
                 r.expert_used_count, r.expert_count);
    }

    for (auto g : k_groups) r.groups.push_back({std::string(g), 0, 0, 0});
    auto group_of = [&](std::string_view g) -> inspect_report::group& {
        for (auto& x : r.groups)
            if (x.name == g) return x;
        return r.groups[1];
    };
    const tensor_view* embd = nullptr;
    bool has_output = false;
    for (const auto& t : m->tensors()) {
        inspect_report::tensor e;
        e.name = t.name;
        e.type = std::string(name(t.type));
        e.shape.assign(t.ne.begin(), t.ne.begin() + t.n_dims);
        e.bytes = t.nbytes;
        e.group = std::string(tensor_group(t.name));
        auto& g = group_of(e.group);
        g.tensors += 1;
        g.bytes += t.nbytes;
        if (e.group == k_groups[0]) {
            g.bytes_per_token += t.row_bytes();  // one row: the token's own embedding
        } else if (e.group == k_groups[2] && r.expert_count > 0) {
            // Each expert is an equal slice of the tensor; a token reads expert_used_count of them.
            const auto share = static_cast<unsigned __int128>(t.nbytes) * static_cast<uint64_t>(r.expert_used_count) /
                               static_cast<uint64_t>(r.expert_count);
            g.bytes_per_token += static_cast<uint64_t>(share);
        } else {
            g.bytes_per_token += t.nbytes;
        }
        if (t.name == "token_embd.weight") embd = &t;
        if (t.name == "output.weight") has_output = true;
        r.total_bytes += t.nbytes;
        r.tensors.push_back(std::move(e));
    }
    // Tied output: the logits read the whole embedding matrix again.
    if (!has_output && embd != nullptr) {
        r.output_tied = true;
        group_of(k_groups[4]).bytes_per_token += embd->nbytes;
    }
    for (const auto& g : r.groups) r.bytes_per_token += g.bytes_per_token;
    return r;
}

std::string format_text(const inspect_report& r) {
    std::string out;
    auto line = [&out](std::string s) { out += s + "\n"; };
    line(fmt::format("model         {}", r.path));
    line(fmt::format("format        {}", r.format));
    line(fmt::format("architecture  {}", r.architecture));
    line(fmt::format("name          {}", r.name));
    if (r.expert_count > 0) line(fmt::format("experts       {} used of {}", r.expert_used_count, r.expert_count));
    line("");
    line("hyperparameters");
    for (const auto& k : r.hyperparameters) line(fmt::format("  {:<44} {}", k.name, k.text));
    line("");
    line(fmt::format("metadata ({} keys)", r.keys.size()));
    for (const auto& k : r.keys) line(fmt::format("  {:<44} {:<7} {}", k.name, k.type, k.text));
    line("");
    line(fmt::format("tensors ({})", r.tensors.size()));
    for (const auto& t : r.tensors) {
        std::string shape = "[";
        for (size_t i = 0; i < t.shape.size(); ++i) shape += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
        shape += "]";
        line(fmt::format("  {:<44} {:<8} {:<24} {:>16}", t.name, t.type, shape, with_commas(t.bytes)));
    }
    line("");
    line("bytes by group");
    line(fmt::format("  {:<18} {:>8} {:>20} {:>20}", "group", "tensors", "bytes", "per token"));
    for (const auto& g : r.groups) {
        std::string note;
        if (g.name == "output" && r.output_tied) note = "  (tied: token_embd.weight read again)";
        if (g.name == "routed experts" && r.expert_count > 0)
            note = fmt::format("  ({}/{} of the bytes)", r.expert_used_count, r.expert_count);
        line(fmt::format("  {:<18} {:>8} {:>20} {:>20}{}", g.name, g.tensors, with_commas(g.bytes),
                         with_commas(g.bytes_per_token), note));
    }
    line(fmt::format("  {:<18} {:>8} {:>20} {:>20}", "total", r.tensors.size(), with_commas(r.total_bytes),
                     with_commas(r.bytes_per_token)));
    return out;
}

std::string format_json(const inspect_report& r) {
    using nlohmann::json;
    json j;
    j["path"] = r.path;
    j["format"] = r.format;
    j["architecture"] = r.architecture;
    j["name"] = r.name;
    j["expert_count"] = r.expert_count;
    j["expert_used_count"] = r.expert_used_count;
    j["output_tied"] = r.output_tied;
    j["total_bytes"] = r.total_bytes;
    j["bytes_per_token"] = r.bytes_per_token;
    json meta = json::object();
    for (const auto& k : r.keys) {
        json e{{"type", k.type}, {"value", json::parse(k.json)}};
        if (k.type == "array") {
            e["length"] = k.array_length;
            e["elem"] = k.array_elem;
        }
        meta[k.name] = std::move(e);
    }
    j["metadata"] = std::move(meta);
    json ts = json::array();
    for (const auto& t : r.tensors)
        ts.push_back({{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"bytes", t.bytes}, {"group", t.group}});
    j["tensors"] = std::move(ts);
    json gs = json::array();
    for (const auto& g : r.groups)
        gs.push_back({{"name", g.name}, {"tensors", g.tensors}, {"bytes", g.bytes}, {"bytes_per_token", g.bytes_per_token}});
    j["groups"] = std::move(gs);
    return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace sluice
