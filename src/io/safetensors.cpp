// safetensors files and Hugging Face directories behind model_file.
// Header: 8-byte little-endian length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data; data_offsets are relative to the first byte after the JSON.
#include "io/safetensors.h"

#include "core/checked.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/hf_convert.h"
#include "io/hf_names.h"
#include "io/mmap.h"
#include "io/side_file.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace sluice {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct st_dtype_row {
    std::string_view name;
    uint32_t elem_bytes;
    std::optional<dtype> type;
};

// The element types this reader accepts; U8/BOOL are parsed but have no GGML type.
constexpr std::array<st_dtype_row, 10> k_st_dtypes{{
    {"F64", 8, dtype::f64}, {"F32", 4, dtype::f32}, {"F16", 2, dtype::f16},
    {"BF16", 2, dtype::bf16}, {"I64", 8, dtype::i64}, {"I32", 4, dtype::i32},
    {"I16", 2, dtype::i16}, {"I8", 1, dtype::i8}, {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},
}};

std::string supported_st_dtypes() {
    std::string s;
    for (const auto& r : k_st_dtypes) s += fmt::format("{}{}", s.empty() ? "" : ", ", r.name);
    return s;
}

// Shapes deeper than this are rejected while parsing (model tensors have at most 4 dims).
constexpr size_t k_max_st_rank = 8;
constexpr size_t k_max_st_depth = 8;

uint64_t read_u64_le(const std::byte* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
    return v;
}

uint64_t json_u64(const json& v, std::string_view where, const std::string& name,
                  std::string_view field) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        fail("{}: tensor '{}': {} must be non-negative integers, got {}", where, name, field,
             v.dump());
    return v.get<uint64_t>();
}

safetensors_tensor parse_entry(const std::string& name, const json& e, uint64_t data_size,
                               uint64_t data_start, std::string_view where) {
    if (!e.is_object())
        fail("{}: tensor '{}': expected an object with dtype, shape, data_offsets, got {}", where,
             name, e.dump());
    safetensors_tensor t;
    t.name = name;
    auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) fail("{}: tensor '{}': missing string 'dtype'", where, name);
    t.dtype_name = dt->get<std::string>();
    const st_dtype_row* row = nullptr;
    for (const auto& r : k_st_dtypes)
        if (r.name == t.dtype_name) row = &r;
    if (!row)
        fail("{}: tensor '{}': unsupported dtype '{}' (supported: {})", where, name, t.dtype_name,
             supported_st_dtypes());
    t.type = row->type;
    t.elem_bytes = row->elem_bytes;

    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array()) fail("{}: tensor '{}': missing array 'shape'", where, name);
    if (sh->size() > k_max_st_rank)
        fail("{}: tensor '{}': shape has {} dimensions, at most {} are supported", where, name,
             sh->size(), k_max_st_rank);
    uint64_t n_elems = 1;
    for (const auto& d : *sh) {
        uint64_t v = json_u64(d, where, name, "shape dimensions");
        if (v > uint64_t(INT64_MAX))
            fail("{}: tensor '{}': shape dimension {} is too large", where, name, v);
        auto p = checked_mul(n_elems, v);
        if (!p) fail("{}: tensor '{}': shape {} overflows 64 bits", where, name, sh->dump());
        n_elems = *p;
        t.shape.push_back(static_cast<int64_t>(v));
    }
    auto bytes = checked_mul(n_elems, t.elem_bytes);
    if (!bytes) fail("{}: tensor '{}': shape {} overflows 64 bits in bytes", where, name, sh->dump());

    auto off = e.find("data_offsets");
    if (off == e.end() || !off->is_array() || off->size() != 2)
        fail("{}: tensor '{}': 'data_offsets' must be [begin, end]", where, name);
    uint64_t begin = json_u64((*off)[0], where, name, "data_offsets");
    uint64_t end = json_u64((*off)[1], where, name, "data_offsets");
    if (begin > end)
        fail("{}: tensor '{}': data_offsets [{}, {}] begin after end", where, name,
             with_commas(begin), with_commas(end));
    if (end > data_size)
        fail("{}: tensor '{}': data [{}, {}) ends past the end of the data ({} bytes)", where, name,
             with_commas(begin), with_commas(end), with_commas(data_size));
    if (end - begin != *bytes)
        fail("{}: tensor '{}': data [{}, {}) holds {} bytes, but {} {} needs {}", where, name,
             with_commas(begin), with_commas(end), with_commas(end - begin), t.dtype_name,
             sh->dump(), with_commas(*bytes));
    t.offset = data_start + begin;
    t.nbytes = *bytes;
    return t;
}

}  // namespace

namespace {

// nlohmann's DOM parser, with the header's top-level keys checked for duplicates as they come:
// nlohmann keeps the last of duplicate keys silently, and a file naming one tensor twice is
// ambiguous. Not json::parse with a callback: its parser rescans the enclosing object at the end
// of every nested one, quadratic in the tensors (24,597 took 7.7 s, 64,000 took 83 s).
struct header_sax : nlohmann::detail::json_sax_dom_parser<json> {
    explicit header_sax(json& j) : json_sax_dom_parser(j, /*allow_exceptions=*/true) {}
    bool start_object(std::size_t n) {
        ++depth;
        return json_sax_dom_parser::start_object(n);
    }
    bool end_object() {
        --depth;
        return json_sax_dom_parser::end_object();
    }
    bool key(std::string& k) {
        if (depth == 1 && duplicate.empty() && !seen.insert(k).second) duplicate = k;
        return json_sax_dom_parser::key(k);
    }
    int depth = 0;
    std::set<std::string> seen;
    std::string duplicate;  // the first name seen twice
};

}  // namespace

safetensors_header parse_safetensors(std::span<const std::byte> file, std::string_view where) {
    if (file.size() < 8)
        fail("{}: {} bytes, shorter than the 8-byte header length", where, file.size());
    const uint64_t n = read_u64_le(file.data());
    const uint64_t rest = file.size() - 8;
    if (n > rest)
        fail("{}: header length {} runs past the end of the file ({} bytes after the length)",
             where, with_commas(n), with_commas(rest));
    const char* text = reinterpret_cast<const char*>(file.data() + 8);

    // A header is at most 3 deep ({name: {shape: [..]}}); deeper nesting is refused before
    // nlohmann::json recurses into it.
    if (json_nesting_depth({text, static_cast<size_t>(n)}) > k_max_st_depth)
        fail("{}: header JSON nested deeper than {} levels", where, k_max_st_depth);
    json j;
    header_sax sax(j);
    try {
        json::sax_parse(text, text + n, &sax);
    } catch (const json::exception& e) {
        fail("{}: header is not valid JSON: {}", where, e.what());
    }
    if (!j.is_object()) fail("{}: header must be a JSON object, got {}", where, j.type_name());
    if (!sax.duplicate.empty()) fail("{}: header names '{}' twice", where, sax.duplicate);

    safetensors_header h;
    h.data_start = 8 + n;
    const uint64_t data_size = rest - n;
    for (const auto& [key, value] : j.items()) {
        if (key == "__metadata__") {
            if (!value.is_object()) fail("{}: '__metadata__' must be an object", where);
            for (const auto& [mk, mv] : value.items()) {
                if (!mv.is_string())
                    fail("{}: '__metadata__': '{}' must be a string, got {}", where, mk, mv.dump());
                h.metadata[mk] = mv.get<std::string>();
            }
            continue;
        }
        h.tensors.push_back(parse_entry(key, value, data_size, h.data_start, where));
    }
    std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
    });
    // Sorted by start, two ranges overlap exactly when one starts before the previous ends.
    // Empty tensors own no bytes and overlap nothing.
    const safetensors_tensor* prev = nullptr;
    for (const auto& t : h.tensors) {
        if (t.nbytes == 0) continue;
        if (prev && t.offset < prev->offset + prev->nbytes)
            fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", where, prev->name,
                 with_commas(prev->offset - h.data_start),
                 with_commas(prev->offset - h.data_start + prev->nbytes), t.name,
                 with_commas(t.offset - h.data_start),
                 with_commas(t.offset - h.data_start + t.nbytes));
        prev = &t;
    }
    return h;
}

namespace {

struct shard {
    mapped_file map;
    safetensors_header header;
    std::string where;  // the file's path, for errors
};

// A tensor of some shard with where its bytes are.
struct located {
    const safetensors_tensor* t = nullptr;
    const std::byte* data = nullptr;
    const shard* from = nullptr;
};

class hf_model final : public model_file {
public:
    const metadata& meta() const override { return meta_; }
    std::span<const tensor_view> tensors() const override { return views_; }
    std::string_view format() const override { return "safetensors"; }

    metadata meta_;
    std::vector<tensor_view> views_;
    std::vector<std::unique_ptr<shard>> shards_;           // the mappings views point into
    std::vector<std::unique_ptr<std::byte[]>> owned_;      // stacked, split and permuted tensors
};

// Sort key that puts tensors in the order the converter writes them: token_embd, blocks in
// order, then the output tensors. Stable sort keeps first-seen order within a block.
int64_t order_key(const std::string& gguf) {
    if (gguf.starts_with("token_embd")) return -1;
    if (gguf.starts_with("blk.")) return std::strtoll(gguf.c_str() + 4, nullptr, 10);
    return std::numeric_limits<int64_t>::max();
}

// Per-expert matrices of one stacked GGUF tensor, by expert index.
struct expert_group {
    std::vector<located> parts;
};

class builder {
public:
    builder(hf_model& m, const hf_config& cfg)
        : m_(m), cfg_(cfg),
          rules_{.permute_qk = cfg.permute_qk, .hybrid = cfg.hybrid, .v_heads_tiled = cfg.v_heads_tiled,
                 .n_layer = cfg.n_layer, .v_head_dim = cfg.linear_v_dim} {}

    void add_hf_tensor(const located& x) {
        const auto& t = *x.t;
        auto target = map_hf_name(t.name, rules_);
        if (!target)
            fail("safetensors: {}: tensor '{}' has no GGUF name for architecture '{}'",
                 x.from->where, t.name, cfg_.arch);
        if (target->kind == hf_kind::skip) return;
        if (target->layer >= cfg_.n_layer + cfg_.n_mtp)
            fail("safetensors: {}: tensor '{}': block {} but config.json has num_hidden_layers {}{}",
                 x.from->where, t.name, target->layer, cfg_.n_layer,
                 cfg_.n_mtp ? fmt::format(" and {} MTP layers", cfg_.n_mtp) : std::string());
        switch (target->kind) {
            case hf_kind::plain:
                if (target->op != hf_float_op::none || target->reorder != hf_reorder::none || target->squeeze)
                    add_converted(*target, x, cfg_, alloc(x.t->nbytes));
                else if (target->permute == rope_permute::none) add_direct(target->gguf, x);
                else add_permuted(target->gguf, x, target->permute);
                break;
            case hf_kind::expert: add_expert(*target, x); break;
            case hf_kind::fused_gate_up: add_fused_gate_up(*target, x); break;
            case hf_kind::qkvz_split: add_qkvz(*target, x); break;
            case hf_kind::skip: break;
        }
    }

    void finish() {
        for (auto& [gguf, g] : groups_) stack_experts(gguf, g);
        std::stable_sort(m_.views_.begin(), m_.views_.end(), [](const auto& a, const auto& b) {
            return order_key(a.name) < order_key(b.name);
        });
    }

private:
    // A view with the GGUF shape of an HF tensor ([out, in] becomes ne {in, out}).
    tensor_view view_of(const std::string& gguf, const located& x) const {
        const auto& t = *x.t;
        if (!t.type)
            fail("safetensors: {}: tensor '{}': dtype {} has no GGML type (weights must be F32, "
                 "F16, BF16, F64 or I8..I64)", x.from->where, t.name, t.dtype_name);
        if (t.shape.size() > size_t(k_max_dims))
            fail("safetensors: {}: tensor '{}': {} dimensions, at most {} are supported",
                 x.from->where, t.name, t.shape.size(), k_max_dims);
        tensor_view v;
        v.name = gguf;
        v.type = *t.type;
        v.n_dims = std::max<int>(1, static_cast<int>(t.shape.size()));
        for (size_t i = 0; i < t.shape.size(); ++i) {
            if (t.shape[i] == 0)
                fail("safetensors: {}: tensor '{}': shape has a zero dimension", x.from->where,
                     t.name);
            v.ne[i] = t.shape[t.shape.size() - 1 - i];
        }
        v.data = x.data;
        v.nbytes = t.nbytes;
        return v;
    }

    void push(tensor_view v, const located& x) {
        if (!names_.insert(v.name).second)
            fail("safetensors: {}: tensor '{}' maps to '{}', which another tensor already gave",
                 x.from->where, x.t->name, v.name);
        m_.views_.push_back(std::move(v));
    }

    std::byte* alloc(uint64_t n) {
        // Uninitialised on purpose: every byte is written by the copy that follows.
        m_.owned_.emplace_back(new std::byte[std::max<uint64_t>(n, 1)]);
        return m_.owned_.back().get();
    }

    void add_direct(const std::string& gguf, const located& x) { push(view_of(gguf, x), x); }

    // LlamaModel.permute in convert_hf_to_gguf.py: rows viewed as [n_h, 2, hd/2] are
    // transposed to [n_h, hd/2, 2], so row h*hd + 2*i + j comes from row h*hd + j*hd/2 + i.
    void add_permuted(const std::string& gguf, const located& x, rope_permute p) {
        tensor_view v = view_of(gguf, x);
        const int64_t n_h = p == rope_permute::q ? cfg_.n_head : cfg_.n_head_kv;
        const int64_t rows = x.t->shape.empty() ? 1 : x.t->shape[0];
        if (rows % n_h != 0 || (rows / n_h) % 2 != 0)
            fail("safetensors: {}: tensor '{}': {} rows do not split into {} heads of an even size",
                 x.from->where, x.t->name, rows, n_h);
        const int64_t hd = rows / n_h, half = hd / 2;
        const uint64_t row_bytes = x.t->nbytes / static_cast<uint64_t>(rows);
        std::byte* dst = alloc(x.t->nbytes);
        for (int64_t h = 0; h < n_h; ++h)
            for (int64_t i = 0; i < half; ++i)
                for (int64_t j = 0; j < 2; ++j)
                    std::memcpy(dst + uint64_t(h * hd + 2 * i + j) * row_bytes,
                                x.data + uint64_t(h * hd + j * half + i) * row_bytes, row_bytes);
        v.data = dst;
        push(std::move(v), x);
    }

    void add_expert(const hf_target& target, const located& x) {
        if (cfg_.n_expert == 0)
            fail("safetensors: {}: tensor '{}' is an expert but config.json has no num_experts",
                 x.from->where, x.t->name);
        if (target.expert >= cfg_.n_expert)
            fail("safetensors: {}: tensor '{}': expert {} but config.json has num_experts {}",
                 x.from->where, x.t->name, target.expert, cfg_.n_expert);
        auto& g = groups_[target.gguf];
        if (g.parts.empty()) g.parts.resize(static_cast<size_t>(cfg_.n_expert));
        g.parts[static_cast<size_t>(target.expert)] = x;
    }

    // llama.cpp stacks experts as [n_expert, rows, cols] (torch.stack over the expert index):
    // ne {cols, rows, n_expert}, each expert's matrix contiguous.
    void stack_experts(const std::string& gguf, const expert_group& g) {
        const located* first = nullptr;
        for (size_t e = 0; e < g.parts.size(); ++e) {
            const located& p = g.parts[e];
            if (!p.t) fail("safetensors: '{}': expert {} of {} is missing", gguf, e, g.parts.size());
            if (!first) {
                first = &p;
                if (p.t->shape.size() != 2)
                    fail("safetensors: {}: tensor '{}': expected a 2-D expert matrix, got {} dims",
                         p.from->where, p.t->name, p.t->shape.size());
                continue;
            }
            if (p.t->shape != first->t->shape || p.t->dtype_name != first->t->dtype_name)
                fail("safetensors: {}: tensor '{}': {} {} differs from expert 0's {} {}",
                     p.from->where, p.t->name, p.t->dtype_name, fmt::join(p.t->shape, "x"),
                     first->t->dtype_name, fmt::join(first->t->shape, "x"));
        }
        tensor_view v = view_of(gguf, *first);
        v.n_dims = 3;
        v.ne[2] = static_cast<int64_t>(g.parts.size());
        const uint64_t each = first->t->nbytes;
        auto total = checked_mul(each, g.parts.size());
        if (!total) fail("safetensors: '{}': stacked size overflows", gguf);
        std::byte* dst = alloc(*total);
        for (size_t e = 0; e < g.parts.size(); ++e) std::memcpy(dst + e * each, g.parts[e].data, each);
        v.data = dst;
        v.nbytes = *total;
        push(std::move(v), *first);
    }

    // transformers 5 fused experts: gate_up_proj [n_expert, 2*n_ff, n_embd], and its forward
    // takes .chunk(2) of each expert's output, so rows [0, n_ff) are gate and [n_ff, 2*n_ff) up.
    void add_fused_gate_up(const hf_target& target, const located& x) {
        const auto& s = x.t->shape;
        if (s.size() != 3 || s[1] % 2 != 0)
            fail("safetensors: {}: tensor '{}': expected [n_expert, 2*n_ff, n_embd], got [{}]",
                 x.from->where, x.t->name, fmt::join(s, ", "));
        if (cfg_.n_expert != 0 && s[0] != cfg_.n_expert)
            fail("safetensors: {}: tensor '{}': {} experts but config.json has num_experts {}",
                 x.from->where, x.t->name, s[0], cfg_.n_expert);
        tensor_view gate = view_of(target.gguf, x);
        const int64_t n_exp = s[0], n_ff = s[1] / 2;
        gate.ne = {s[2], n_ff, n_exp, 1};
        gate.nbytes = x.t->nbytes / 2;
        tensor_view up = gate;
        up.name = target.gguf_up;
        const uint64_t half = gate.nbytes / static_cast<uint64_t>(n_exp);  // one expert's gate
        std::byte* g = alloc(gate.nbytes);
        std::byte* u = alloc(up.nbytes);
        for (int64_t e = 0; e < n_exp; ++e) {
            const std::byte* src = x.data + uint64_t(e) * 2 * half;
            std::memcpy(g + uint64_t(e) * half, src, half);
            std::memcpy(u + uint64_t(e) * half, src + half, half);
        }
        gate.data = g;
        up.data = u;
        push(std::move(gate), x);
        push(std::move(up), x);
    }

    // A hybrid tensor the converter reshapes (hf_target: squeeze, V-head reorder, -exp or +1),
    // written into dst (x's size) and pushed.
    void add_converted(const hf_target& target, const located& x, const hf_config& c, std::byte* dst) {
        tensor_view v = view_of(target.gguf, x);
        const auto& sh = x.t->shape;
        if (target.squeeze) {   // conv1d [channels, 1, kernel] -> ne {kernel, channels}
            if (sh.size() != 3 || sh[1] != 1)
                fail("safetensors: {}: tensor '{}': expected [channels, 1, kernel], got [{}]", x.from->where,
                     x.t->name, fmt::join(sh, ", "));
            v.n_dims = 2;
            v.ne = {sh[2], sh[0], 1, 1};
        }
        convert_hybrid_tensor(target, c, *x.t, x.data, dst, x.from->where);
        v.data = dst;
        push(std::move(v), x);
    }

    // qwen3next's in_proj_qkvz [n_k_heads x (q, k, v, z), n_embd] -> attn_qkv (every head's q,
    // then k, then v) and attn_gate (every z), as Qwen3NextModel.modify_tensors orders them.
    void add_qkvz(const hf_target& target, const located& x) {
        const auto& sh = x.t->shape;
        const int64_t nk = cfg_.linear_k_heads, hk = cfg_.linear_k_dim;
        const int64_t vz = cfg_.linear_v_heads / nk * cfg_.linear_v_dim;   // v (and z) rows per key head
        const int64_t group = 2 * hk + 2 * vz;
        if (sh.size() != 2 || sh[0] != nk * group)
            fail("safetensors: {}: tensor '{}': expected [{}, n_embd] ({} key heads of q {}, k {}, v {}, z {}), got [{}]",
                 x.from->where, x.t->name, nk * group, nk, hk, hk, vz, vz, fmt::join(sh, ", "));
        const uint64_t rb = x.t->nbytes / static_cast<uint64_t>(sh[0]);
        tensor_view qkv = view_of(target.gguf, x);
        qkv.ne[1] = nk * (2 * hk + vz);
        qkv.nbytes = rb * static_cast<uint64_t>(qkv.ne[1]);
        tensor_view z = view_of(target.gguf_up, x);
        z.ne[1] = nk * vz;
        z.nbytes = rb * static_cast<uint64_t>(z.ne[1]);
        std::byte* dq = alloc(qkv.nbytes);
        std::byte* dz = alloc(z.nbytes);
        auto rows = [&](std::byte*& out, int64_t g, int64_t first, int64_t n) {
            std::memcpy(out, x.data + uint64_t(g * group + first) * rb, uint64_t(n) * rb);
            out += uint64_t(n) * rb;
        };
        std::byte* o = dq;
        for (int64_t g = 0; g < nk; ++g) rows(o, g, 0, hk);            // q of every key head
        for (int64_t g = 0; g < nk; ++g) rows(o, g, hk, hk);           // k
        for (int64_t g = 0; g < nk; ++g) rows(o, g, 2 * hk, vz);       // v
        std::byte* oz = dz;
        for (int64_t g = 0; g < nk; ++g) rows(oz, g, 2 * hk + vz, vz);  // z
        qkv.data = dq;
        z.data = dz;
        push(std::move(qkv), x);
        push(std::move(z), x);
    }

    hf_model& m_;
    const hf_config& cfg_;
    hf_name_rules rules_;
    std::set<std::string> names_;
    std::map<std::string, expert_group> groups_;
};

// i of "mtp.layers.<i>." or "model.mtp.layers.<i>.", else -1.
int64_t mtp_layer_of(std::string_view name) {
    for (std::string_view p : {"mtp.layers.", "model.mtp.layers."}) {
        if (!name.starts_with(p)) continue;
        name.remove_prefix(p.size());
        int64_t i = 0;
        size_t n = 0;
        while (n < name.size() && n < 6 && name[n] >= '0' && name[n] <= '9') i = i * 10 + (name[n++] - '0');
        return n > 0 && n < name.size() && name[n] == '.' ? i : -1;
    }
    return -1;
}

// A shard name from an index must be a plain file name inside the directory.
void check_shard_name(const std::string& s, const std::string& where) {
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
        s.find('\\') != std::string::npos || s.find('\0') != std::string::npos)
        fail("safetensors: {}: shard name '{}' is not a file name in the directory", where, s);
}

}  // namespace

std::unique_ptr<model_file> open_hf_directory(const fs::path& dir_in, file_access access, const read_progress* progress) {
    fs::path dir = dir_in.lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    const fs::path config_path = dir / "config.json";
    if (!fs::is_regular_file(config_path))
        fail("safetensors: '{}' has no config.json", dir.string());
    std::string model_name = fs::absolute(dir).lexically_normal().filename().string();
    hf_config cfg = parse_hf_config(read_side_file(config_path, "safetensors"), config_path.string(), model_name);

    auto m = std::make_unique<hf_model>();
    // weight_map of the index (empty for a single file): tensor name -> shard file name.
    std::map<std::string, std::string> weight_map;
    std::vector<std::string> shard_names;
    const fs::path index_path = dir / "model.safetensors.index.json";
    if (fs::is_regular_file(index_path)) {
        const std::string where = index_path.string();
        const std::string text = read_side_file(index_path, "safetensors");
        if (json_nesting_depth(text) > k_max_json_depth)
            fail("safetensors: {}: JSON nested deeper than {} levels", where, k_max_json_depth);
        json idx;
        try {
            idx = json::parse(text);
        } catch (const json::exception& e) {
            fail("safetensors: {}: not valid JSON: {}", where, e.what());
        }
        auto wm = idx.is_object() ? idx.find("weight_map") : idx.end();
        if (wm == idx.end() || !wm->is_object() || wm->empty())
            fail("safetensors: {}: expected a non-empty object 'weight_map'", where);
        std::set<std::string> unique;
        for (const auto& [name, file] : wm->items()) {
            if (!file.is_string())
                fail("safetensors: {}: weight_map['{}'] must be a file name, got {}", where, name,
                     file.dump());
            auto f = file.get<std::string>();
            check_shard_name(f, where);
            if (!fs::is_regular_file(dir / f))
                fail("safetensors: {}: tensor '{}' is in shard '{}', which does not exist", where,
                     name, f);
            weight_map[name] = f;
            unique.insert(f);
        }
        shard_names.assign(unique.begin(), unique.end());
    } else if (fs::is_regular_file(dir / "model.safetensors")) {
        shard_names.push_back("model.safetensors");
    } else {
        fail("safetensors: '{}' has neither model.safetensors nor model.safetensors.index.json",
             dir.string());
    }

    std::map<std::string, located, std::less<>> by_name;
    std::vector<located> in_order;
    for (const auto& s : shard_names) {
        auto sh = std::make_unique<shard>();
        sh->where = (dir / s).string();
        sh->map = mapped_file(dir / s, access, progress);
        sh->header = parse_safetensors(sh->map.bytes(), sh->where);
        for (const auto& t : sh->header.tensors) {
            located x{&t, sh->map.bytes().data() + t.offset, sh.get()};
            auto [it, fresh] = by_name.emplace(t.name, x);
            if (!fresh)
                fail("safetensors: tensor '{}' is in both {} and {}", t.name, it->second.from->where,
                     sh->where);
            in_order.push_back(x);
        }
        m->shards_.push_back(std::move(sh));
    }
    for (const auto& [name, file] : weight_map) {
        auto it = by_name.find(name);
        if (it == by_name.end() || fs::path(it->second.from->where).filename() != file)
            fail("safetensors: {}: weight_map puts '{}' in '{}', which does not contain it",
                 index_path.string(), name, file);
    }

    if (cfg.hybrid) {
        // MTP blocks: config.json's mtp_num_hidden_layers, or (Qwen3-Next, whose config has
        // none) one more than the highest mtp.layers.<i> stored, as the converter counts them.
        int64_t n_mtp = cfg.n_mtp;
        if (n_mtp == 0)
            for (const auto& x : in_order) n_mtp = std::max(n_mtp, mtp_layer_of(x.t->name) + 1);
        finish_hybrid_config(cfg, n_mtp);
    }
    m->meta_ = std::move(cfg.meta);
    builder b(*m, cfg);
    for (const auto& x : in_order) b.add_hf_tensor(x);
    if (cfg.llama3) {
        // rope_freqs.weight [head_dim / 2] f32: the converter's extra tensor for llama3 rope.
        const std::vector<float> f = llama3_rope_factors(*cfg.llama3, cfg.head_dim);
        const uint64_t nbytes = f.size() * sizeof(float);
        m->owned_.emplace_back(new std::byte[std::max<uint64_t>(nbytes, 1)]);
        std::memcpy(m->owned_.back().get(), f.data(), nbytes);
        tensor_view v;
        v.name = "rope_freqs.weight";
        v.type = dtype::f32;
        v.n_dims = 1;
        v.ne[0] = static_cast<int64_t>(f.size());
        v.data = m->owned_.back().get();
        v.nbytes = nbytes;
        m->views_.push_back(std::move(v));
    }
    b.finish();
    return m;
}

}  // namespace sluice
