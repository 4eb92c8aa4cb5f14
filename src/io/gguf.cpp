// GGUF reader. Layout (little-endian, versions 2 and 3 are identical on little-endian hosts):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 type, value),
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
//   padding to general.alignment (default 32), then the data section; tensor offsets are
//   relative to the data section and aligned.
// Strings are u64 length + bytes (no terminator). Every count, length, offset and size read
// here is checked against what remains of the file before it is used.
#include "io/gguf.h"

#include "core/checked.h"
#include "core/error.h"
#include "io/mmap.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <regex>
#include <unordered_set>

namespace sluice {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint64_t k_default_alignment = 32;
constexpr uint64_t k_int64_max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Smallest encodings, used to reject counts the rest of the file cannot possibly hold before
// anything is allocated for them.
constexpr uint64_t k_min_kv_bytes = 8 + 4 + 1;           // empty key, type, u8 value
constexpr uint64_t k_min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;  // 1 dim

// Bytes of one value of a fixed-size type; 0 for string and array.
uint64_t fixed_size(meta_type t) {
    switch (t) {
        case meta_type::u8: case meta_type::i8: case meta_type::boolean: return 1;
        case meta_type::u16: case meta_type::i16: return 2;
        case meta_type::u32: case meta_type::i32: case meta_type::f32: return 4;
        case meta_type::u64: case meta_type::i64: case meta_type::f64: return 8;
        default: return 0;
    }
}

// Smallest encoding of one array element of type t (a string's length, an array's header).
uint64_t min_elem_size(meta_type t) {
    if (t == meta_type::string) return 8;
    if (t == meta_type::array) return 4 + 8;
    return fixed_size(t);
}

// A bounds-checked cursor over the file image. Every read names what it reads so a short file
// says which field ran out.
class reader {
public:
    reader(std::span<const std::byte> bytes, const std::string& label) : bytes_(bytes), label_(label) {}

    uint64_t pos() const { return pos_; }
    uint64_t size() const { return bytes_.size(); }
    uint64_t remaining() const { return bytes_.size() - pos_; }
    const std::string& label() const { return label_; }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail("gguf: {}: {} needs {} bytes at offset {}, but the file ends at {} bytes", label_, what,
                 with_commas(n), with_commas(pos_), with_commas(bytes_.size()));
    }

    template <class T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view what) {
        const uint64_t n = read<uint64_t>(what);
        if (n > remaining())
            fail("gguf: {}: {}: string length {} at offset {} is larger than the rest of the file ({} bytes)",
                 label_, what, with_commas(n), with_commas(pos_ - 8), with_commas(remaining()));
        std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(n));
        pos_ += n;
        return s;
    }

private:
    std::span<const std::byte> bytes_;
    const std::string& label_;
    uint64_t pos_ = 0;
};

meta_type read_type(reader& r, std::string_view what) {
    const uint32_t t = r.read<uint32_t>(what);
    if (t > static_cast<uint32_t>(meta_type::f64))
        fail("gguf: {}: {}: unknown value type {} (expected 0..12)", r.label(), what, t);
    return static_cast<meta_type>(t);
}

// Reads one scalar of integer/bool type t as int64 (u64 above INT64_MAX rejected).
int64_t read_int(reader& r, meta_type t, std::string_view what) {
    switch (t) {
        case meta_type::u8: return r.read<uint8_t>(what);
        case meta_type::i8: return r.read<int8_t>(what);
        case meta_type::u16: return r.read<uint16_t>(what);
        case meta_type::i16: return r.read<int16_t>(what);
        case meta_type::u32: return r.read<uint32_t>(what);
        case meta_type::i32: return r.read<int32_t>(what);
        case meta_type::i64: return r.read<int64_t>(what);
        case meta_type::u64: {
            const uint64_t v = r.read<uint64_t>(what);
            if (v > k_int64_max)
                fail("gguf: {}: {}: u64 value {} is larger than INT64_MAX", r.label(), what, v);
            return static_cast<int64_t>(v);
        }
        case meta_type::boolean: {
            const uint8_t b = r.read<uint8_t>(what);
            if (b > 1) fail("gguf: {}: {}: bool byte is {} (expected 0 or 1)", r.label(), what, b);
            return b;
        }
        default: break;
    }
    fail("gguf: {}: {}: {} is not an integer type", r.label(), what, name(t));
}

double read_float(reader& r, meta_type t, std::string_view what) {
    if (t == meta_type::f32) return r.read<float>(what);
    return r.read<double>(what);
}

meta_value read_value(reader& r, meta_type t, const std::string& what, int depth);

std::shared_ptr<meta_array> read_array(reader& r, const std::string& what, int depth) {
    if (depth > k_gguf_max_array_depth)
        fail("gguf: {}: {}: arrays nested deeper than {} levels", r.label(), what, k_gguf_max_array_depth);
    auto a = std::make_shared<meta_array>();
    a->elem = read_type(r, what);
    const uint64_t n = r.read<uint64_t>(what);
    // Every element takes at least min_elem_size bytes: a count the file cannot hold is
    // rejected before anything is reserved for it.
    const auto min_bytes = checked_mul(n, min_elem_size(a->elem));
    if (!min_bytes || *min_bytes > r.remaining())
        fail("gguf: {}: {}: array of {} {} elements is larger than the rest of the file ({} bytes)", r.label(),
             what, with_commas(n), name(a->elem), with_commas(r.remaining()));
    switch (a->elem) {
        case meta_type::f32:
        case meta_type::f64:
            a->floats.reserve(n);
            for (uint64_t i = 0; i < n; ++i) a->floats.push_back(read_float(r, a->elem, what));
            break;
        case meta_type::string:
            a->strings.reserve(n);
            for (uint64_t i = 0; i < n; ++i) a->strings.push_back(r.read_string(what));
            break;
        case meta_type::array:
            a->arrays.reserve(n);
            for (uint64_t i = 0; i < n; ++i) a->arrays.push_back(read_value(r, meta_type::array, what, depth + 1));
            break;
        default:
            a->ints.reserve(n);
            for (uint64_t i = 0; i < n; ++i) a->ints.push_back(read_int(r, a->elem, what));
            break;
    }
    return a;
}

// `depth` counts the arrays around this value (a top-level array is depth 1).
meta_value read_value(reader& r, meta_type t, const std::string& what, int depth) {
    meta_value v;
    v.type = t;
    switch (t) {
        case meta_type::f32:
        case meta_type::f64: v.v = read_float(r, t, what); break;
        case meta_type::boolean: v.v = read_int(r, t, what) != 0; break;
        case meta_type::string: v.v = r.read_string(what); break;
        case meta_type::array: v.v = read_array(r, what, depth); break;
        default: v.v = read_int(r, t, what); break;
    }
    return v;
}

struct tensor_info {
    tensor_view view;
    uint64_t offset = 0;  // relative to the data section
    uint64_t begin = 0;   // absolute file offset
};

struct parsed_gguf {
    uint32_t version = 0;
    uint64_t alignment = k_default_alignment;
    metadata meta;
    std::vector<tensor_view> tensors;
};

void read_header(reader& r, uint32_t& version) {
    if (r.size() < 4)
        fail("gguf: {}: file is {} bytes, too short for the GGUF magic", r.label(), r.size());
    const auto m = r.read<std::array<char, 4>>("magic");
    if (std::memcmp(m.data(), "GGUF", 4) != 0)
        fail("gguf: {}: not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')", r.label(),
             static_cast<uint8_t>(m[0]), static_cast<uint8_t>(m[1]), static_cast<uint8_t>(m[2]),
             static_cast<uint8_t>(m[3]));
    version = r.read<uint32_t>("version");
    if (version == 1)
        fail("gguf: {}: GGUF version 1 is not supported (expected version 2 or 3; re-convert the model)",
             r.label());
    if (version != 2 && version != 3) {
        const uint32_t swapped = __builtin_bswap32(version);
        if (swapped == 2 || swapped == 3)
            fail("gguf: {}: big-endian GGUF (version {}) is not supported", r.label(), swapped);
        fail("gguf: {}: unsupported GGUF version {} (expected 2 or 3)", r.label(), version);
    }
}

uint64_t read_alignment(const metadata& meta, const std::string& label) {
    const meta_value* v = meta.find("general.alignment");
    if (!v) return k_default_alignment;
    if (v->type != meta_type::u32)
        fail("gguf: {}: general.alignment has type {} (expected u32)", label, name(v->type));
    const auto a = static_cast<uint64_t>(*v->as_int());
    if (a == 0 || !std::has_single_bit(a))
        fail("gguf: {}: general.alignment is {} (expected a power of two)", label, a);
    return a;
}

tensor_info read_tensor_info(reader& r, uint64_t index, uint64_t alignment) {
    tensor_info ti;
    tensor_view& t = ti.view;
    t.name = r.read_string(fmt::format("tensor {} name", index));
    if (t.name.empty()) fail("gguf: {}: tensor {} has an empty name", r.label(), index);
    const std::string what = fmt::format("tensor '{}'", t.name);
    const uint32_t n_dims = r.read<uint32_t>(what);
    if (n_dims < 1 || n_dims > static_cast<uint32_t>(k_max_dims))
        fail("gguf: {}: {}: n_dims is {} (expected 1..{})", r.label(), what, n_dims, k_max_dims);
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t ne = r.read<uint64_t>(what);
        // Zero-sized tensors carry nothing a model could use; a dimension above INT64_MAX is
        // a negative int64 in GGML and cannot be indexed.
        if (ne == 0) fail("gguf: {}: {}: dimension {} is 0 (expected >= 1)", r.label(), what, d);
        if (ne > k_int64_max)
            fail("gguf: {}: {}: dimension {} is {} (negative as int64)", r.label(), what, d, ne);
        const auto p = checked_mul(n_elems, ne);
        if (!p || *p > k_int64_max)
            fail("gguf: {}: {}: element count overflows int64 (shape product at dimension {})", r.label(), what, d);
        n_elems = *p;
        t.ne[d] = static_cast<int64_t>(ne);
    }
    const uint32_t type_id = r.read<uint32_t>(what);
    const auto di = find_dtype(type_id);
    if (!di)
        fail("gguf: {}: {}: unknown tensor type {} ({} as int32)", r.label(), what, type_id,
             static_cast<int32_t>(type_id));
    t.type = di->type;
    if (static_cast<uint64_t>(t.ne[0]) % di->block_elems != 0)
        fail("gguf: {}: {}: row of {} elements is not a whole number of {} blocks ({} elements)", r.label(), what,
             t.ne[0], di->name, di->block_elems);
    const auto nbytes = bytes_for(t.type, n_elems);
    if (!nbytes) fail("gguf: {}: {}: byte size of {} {} elements overflows", r.label(), what, n_elems, di->name);
    t.nbytes = *nbytes;
    ti.offset = r.read<uint64_t>(what);
    if (ti.offset % alignment != 0)
        fail("gguf: {}: {}: data offset {} is not a multiple of the alignment {}", r.label(), what,
             with_commas(ti.offset), alignment);
    return ti;
}

parsed_gguf parse_gguf(std::span<const std::byte> bytes, const std::string& label) {
    reader r(bytes, label);
    parsed_gguf out;
    read_header(r, out.version);
    const uint64_t n_tensors = r.read<uint64_t>("tensor count");
    const uint64_t n_kv = r.read<uint64_t>("metadata count");
    {
        const auto kv_min = checked_mul(n_kv, k_min_kv_bytes);
        if (!kv_min || *kv_min > r.remaining())
            fail("gguf: {}: metadata count {} is larger than the file can hold ({} bytes)", label,
                 with_commas(n_kv), with_commas(r.size()));
    }

    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = r.read_string(fmt::format("metadata key {}", i));
        if (key.empty()) fail("gguf: {}: metadata key {} is empty", label, i);
        const std::string what = fmt::format("key '{}'", key);
        const meta_type t = read_type(r, what);
        meta_value v = read_value(r, t, what, 1);
        if (out.meta.contains(key)) fail("gguf: {}: duplicate key '{}'", label, key);
        out.meta.set(std::move(key), std::move(v));
    }
    out.alignment = read_alignment(out.meta, label);
    {
        const auto ti_min = checked_mul(n_tensors, k_min_tensor_info_bytes);
        if (!ti_min || *ti_min > r.remaining())
            fail("gguf: {}: tensor count {} is larger than the file can hold ({} bytes)", label,
                 with_commas(n_tensors), with_commas(r.size()));
    }

    std::vector<tensor_info> infos;
    infos.reserve(n_tensors);
    std::unordered_set<std::string_view> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        infos.push_back(read_tensor_info(r, i, out.alignment));
    }
    for (const auto& ti : infos)
        if (!names.insert(ti.view.name).second)
            fail("gguf: {}: duplicate tensor name '{}'", label, ti.view.name);

    // The data section starts at the next multiple of the alignment after the tensor table.
    const auto data_start = checked_align_up(r.pos(), out.alignment);
    if (!data_start || (n_tensors > 0 && *data_start > r.size()))
        fail("gguf: {}: data section [offset {}] starts past the end of the file ({} bytes)", label,
             with_commas(data_start.value_or(r.pos())), with_commas(r.size()));
    for (auto& ti : infos) {
        const auto begin = checked_add(*data_start, ti.offset);
        const auto end = begin ? checked_add(*begin, ti.view.nbytes) : std::nullopt;
        if (!end || *end > r.size())
            fail("gguf: {}: tensor '{}': data [offset {}, {} bytes] ends past the end of the file ({} bytes)",
                 label, ti.view.name, with_commas(begin.value_or(ti.offset)), with_commas(ti.view.nbytes),
                 with_commas(r.size()));
        ti.begin = *begin;
        ti.view.data = bytes.data() + *begin;
    }

    // Tensors must not share bytes: a writer bug (or a crafted file) that aliases two weights
    // would otherwise load silently.
    std::vector<const tensor_info*> by_offset;
    by_offset.reserve(infos.size());
    for (const auto& ti : infos) by_offset.push_back(&ti);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const tensor_info* a, const tensor_info* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const tensor_info& a = *by_offset[i - 1];
        const tensor_info& b = *by_offset[i];
        if (a.begin + a.view.nbytes > b.begin)
            fail("gguf: {}: tensors '{}' [offset {}, {} bytes] and '{}' [offset {}] overlap", label, a.view.name,
                 with_commas(a.begin), with_commas(a.view.nbytes), b.view.name, with_commas(b.begin));
    }

    out.tensors.reserve(infos.size());
    for (auto& ti : infos) out.tensors.push_back(std::move(ti.view));
    return out;
}

class gguf_model final : public model_file {
public:
    gguf_model(std::vector<mapped_file> maps, metadata meta, std::vector<tensor_view> tensors)
        : maps_(std::move(maps)), meta_(std::move(meta)), tensors_(std::move(tensors)) {}

    const metadata& meta() const override { return meta_; }
    std::span<const tensor_view> tensors() const override { return tensors_; }
    std::string_view format() const override { return "gguf"; }

private:
    std::vector<mapped_file> maps_;  // one per part; tensor views point into them
    metadata meta_;
    std::vector<tensor_view> tensors_;
};

// split.count / split.no as llama.cpp's gguf-split writes them (u16), validated.
struct split_keys {
    int64_t count = 1;
    int64_t no = 0;
    std::optional<int64_t> tensors_count;
};

split_keys read_split_keys(const metadata& meta, const std::string& label) {
    split_keys s;
    auto get = [&](std::string_view key) -> std::optional<int64_t> {
        const meta_value* v = meta.find(key);
        if (!v) return std::nullopt;
        auto i = v->as_int();
        if (!i) fail("gguf: {}: {} has type {} (expected an integer)", label, key, name(v->type));
        return i;
    };
    const auto count = get("split.count");
    const auto no = get("split.no");
    s.tensors_count = get("split.tensors.count");
    if (count) {
        if (*count < 1 || *count > 99999)
            fail("gguf: {}: split.count is {} (expected 1..99999)", label, *count);
        s.count = *count;
    }
    if (no) {
        if (*no < 0 || *no >= s.count)
            fail("gguf: {}: split.no is {} (expected 0..{} for split.count {})", label, *no, s.count - 1, s.count);
        s.no = *no;
    }
    if (s.tensors_count && *s.tensors_count < 0)
        fail("gguf: {}: split.tensors.count is {} (expected >= 0)", label, *s.tensors_count);
    return s;
}

}  // namespace

std::unique_ptr<model_file> open_gguf_memory(std::span<const std::byte> bytes, const std::string& label) {
    parsed_gguf p = parse_gguf(bytes, label);
    const split_keys s = read_split_keys(p.meta, label);
    if (s.count == 1 && s.tensors_count && static_cast<uint64_t>(*s.tensors_count) != p.tensors.size())
        fail("gguf: {}: split.tensors.count is {} but the file holds {} tensors", label, *s.tensors_count,
             p.tensors.size());
    return std::make_unique<gguf_model>(std::vector<mapped_file>{}, std::move(p.meta), std::move(p.tensors));
}

std::unique_ptr<model_file> open_gguf(const std::filesystem::path& path, file_access access, const read_progress* progress) {
    mapped_file first(path, access, progress);
    const std::string label = path.string();
    parsed_gguf p = parse_gguf(first.bytes(), label);
    const split_keys s = read_split_keys(p.meta, label);
    if (s.count == 1) {
        if (s.tensors_count && static_cast<uint64_t>(*s.tensors_count) != p.tensors.size())
            fail("gguf: {}: split.tensors.count is {} but the file holds {} tensors", label, *s.tensors_count,
                 p.tensors.size());
        std::vector<mapped_file> maps;
        maps.push_back(std::move(first));
        return std::make_unique<gguf_model>(std::move(maps), std::move(p.meta), std::move(p.tensors));
    }

    // A split set: llama.cpp names its parts <prefix>-00001-of-00003.gguf.
    static const std::regex k_split_name(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
    const std::string fname = path.filename().string();
    std::smatch m;
    if (!std::regex_match(fname, m, k_split_name))
        fail("gguf: {}: split.count is {} but the file name does not follow <name>-{:05}-of-{:05}.gguf", label,
             s.count, s.no + 1, s.count);
    const std::string prefix = m[1].str();
    const int64_t name_no = std::stoll(m[2].str());
    const int64_t name_count = std::stoll(m[3].str());
    if (name_count != s.count || name_no != s.no + 1)
        fail("gguf: {}: file name says part {} of {}, but split.no/split.count say part {} of {}", label, name_no,
             name_count, s.no + 1, s.count);

    std::vector<mapped_file> maps;
    std::vector<tensor_view> tensors;
    metadata meta;
    std::unordered_set<std::string> names;
    for (int64_t i = 0; i < s.count; ++i) {
        const auto part_path = path.parent_path() / fmt::format("{}-{:05}-of-{:05}.gguf", prefix, i + 1, s.count);
        mapped_file map;
        parsed_gguf part;
        if (i == s.no) {
            map = std::move(first);
            part = std::move(p);
        } else {
            std::error_code ec;
            if (!std::filesystem::exists(part_path, ec))
                fail("gguf: {}: split part {} of {} is missing ({})", label, i + 1, s.count, part_path.string());
            map = mapped_file(part_path, access, progress);
            part = parse_gguf(map.bytes(), part_path.string());
        }
        const std::string part_label = part_path.string();
        const split_keys ps = read_split_keys(part.meta, part_label);
        if (!part.meta.contains("split.count") || !part.meta.contains("split.no"))
            fail("gguf: {}: split part {} of {} has no split.count/split.no keys", part_label, i + 1, s.count);
        if (ps.count != s.count)
            fail("gguf: {}: split.count is {}, but part {} says {}", part_label, ps.count, s.no + 1, s.count);
        if (ps.no != i) fail("gguf: {}: split.no is {} (expected {})", part_label, ps.no, i);
        if (ps.tensors_count && s.tensors_count && *ps.tensors_count != *s.tensors_count)
            fail("gguf: {}: split.tensors.count is {}, but part {} says {}", part_label, *ps.tensors_count,
                 s.no + 1, *s.tensors_count);
        for (auto& t : part.tensors) {
            if (!names.insert(t.name).second)
                fail("gguf: {}: tensor '{}' appears in more than one split part", part_label, t.name);
            tensors.push_back(std::move(t));
        }
        // Model metadata lives in the first part; later parts carry only the split keys.
        if (i == 0) meta = std::move(part.meta);
        maps.push_back(std::move(map));
    }
    if (s.tensors_count && static_cast<uint64_t>(*s.tensors_count) != tensors.size())
        fail("gguf: {}: split.tensors.count is {} but the {} parts hold {} tensors", label, *s.tensors_count,
             s.count, tensors.size());
    return std::make_unique<gguf_model>(std::move(maps), std::move(meta), std::move(tensors));
}

}  // namespace sluice
