#include "placement/routing_profile.h"

#include "core/checked.h"
#include "core/error.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace sluice::placement {

namespace {

constexpr char k_magic[8] = {'S', 'L', 'U', 'P', 'R', 'O', 'F', '\0'};
constexpr size_t k_header = 48;
constexpr uint32_t k_max_dim = 65536;

void put32(std::vector<std::byte>& b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put64(std::vector<std::byte>& b, uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
}
uint32_t get32(const std::byte* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}
uint64_t get64(const std::byte* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

}  // namespace

std::vector<std::byte> serialize_profile(const routing_profile& p) {
    if (p.counts.size() != static_cast<size_t>(p.n_layer) * p.n_expert)
        fail("profile: {} counts for {} layers x {} experts", p.counts.size(), p.n_layer, p.n_expert);
    std::vector<std::byte> b;
    b.reserve(k_header + 8 * p.counts.size() + 8);
    for (char c : k_magic) b.push_back(static_cast<std::byte>(c));
    put32(b, k_profile_version);
    put32(b, p.n_layer);
    put32(b, p.n_expert);
    put32(b, p.k_used);
    put64(b, p.model.file_bytes);
    put64(b, p.model.table_hash);
    put64(b, p.n_tokens);
    for (uint64_t c : p.counts) put64(b, c);
    put64(b, fnv1a64(b.data(), b.size()));
    return b;
}

routing_profile parse_profile(std::span<const std::byte> bytes, std::string_view where) {
    if (bytes.size() < k_header + 8)
        fail("{}: {} bytes: expected a routing profile of at least {} bytes (header and checksum)", where, bytes.size(),
             k_header + 8);
    if (std::memcmp(bytes.data(), k_magic, sizeof k_magic) != 0)
        fail("{}: not a sluice routing profile (bad magic)", where);
    const uint32_t version = get32(bytes.data() + 8);
    if (version != k_profile_version) fail("{}: version {}: expected {}", where, version, k_profile_version);
    routing_profile p;
    p.n_layer = get32(bytes.data() + 12);
    p.n_expert = get32(bytes.data() + 16);
    p.k_used = get32(bytes.data() + 20);
    if (p.n_layer < 1 || p.n_layer > k_max_dim) fail("{}: n_layer {}: expected 1..{}", where, p.n_layer, k_max_dim);
    if (p.n_expert < 1 || p.n_expert > k_max_dim) fail("{}: n_expert {}: expected 1..{}", where, p.n_expert, k_max_dim);
    if (p.k_used < 1 || p.k_used > p.n_expert) fail("{}: k_used {}: expected 1..{}", where, p.k_used, p.n_expert);
    p.model.file_bytes = get64(bytes.data() + 24);
    p.model.table_hash = get64(bytes.data() + 32);
    p.n_tokens = get64(bytes.data() + 40);
    const uint64_t n = static_cast<uint64_t>(p.n_layer) * p.n_expert;   // <= 2^32: no overflow
    const auto body = checked_mul(n, 8);
    const auto total = body ? checked_add(k_header + 8, *body) : std::nullopt;
    if (!total || *total != bytes.size())
        fail("{}: {} bytes: expected {} for {} layers x {} experts", where, bytes.size(), total.value_or(0), p.n_layer,
             p.n_expert);
    const uint64_t sum = get64(bytes.data() + bytes.size() - 8);
    if (sum != fnv1a64(bytes.data(), bytes.size() - 8)) fail("{}: checksum mismatch: the file is damaged", where);
    const auto per_layer = checked_mul(p.n_tokens, p.k_used);
    if (!per_layer) fail("{}: n_tokens {} x k_used {} overflows", where, p.n_tokens, p.k_used);
    p.counts.resize(static_cast<size_t>(n));
    for (uint32_t l = 0; l < p.n_layer; ++l) {
        uint64_t layer_sum = 0;
        for (uint32_t e = 0; e < p.n_expert; ++e) {
            const uint64_t c = get64(bytes.data() + k_header + 8 * (static_cast<size_t>(l) * p.n_expert + e));
            // Each count is at most n_tokens (an expert is picked once per token), so the sum of
            // a layer's counts cannot overflow before the check below.
            if (c > p.n_tokens) fail("{}: layer {} expert {}: count {} exceeds the {} calibration tokens", where, l, e, c, p.n_tokens);
            layer_sum += c;
            p.counts[static_cast<size_t>(l) * p.n_expert + e] = c;
        }
        if (layer_sum != 0 && layer_sum != *per_layer)
            fail("{}: layer {}: counts sum to {}, expected 0 or n_tokens x k_used = {}", where, l, layer_sum, *per_layer);
    }
    return p;
}

void write_profile(const std::filesystem::path& path, const routing_profile& p) {
    const std::vector<std::byte> b = serialize_profile(p);
    write_file_atomically(path, {std::span<const std::byte>(b)});
}

routing_profile read_profile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("profile: {}: cannot open the file", path.string());
    // A profile of 65536 x 65536 counts would be 32 GiB; a real one is KiB. Read at most what the
    // largest header-consistent file could be, checked by parse_profile.
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse_profile(std::as_bytes(std::span<const char>(raw)), "profile: " + path.string());
}

std::filesystem::path default_profile_path(const std::filesystem::path& model_path) {
    return sibling_path(model_path, "profile.bin");
}

std::optional<routing_profile> load_profile_for(const std::filesystem::path& model_path, const model_identity& id,
                                                const std::filesystem::path& profile_path) {
    const std::filesystem::path path = profile_path.empty() ? default_profile_path(model_path) : profile_path;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    routing_profile p = read_profile(path);
    if (!(p.model == id))
        fail("profile: {}: made for another model (size {} bytes, table hash {:016x}; this one: {} bytes, {:016x}): "
             "run `sluice profile {} --text FILE` to make a new one",
             path.string(), p.model.file_bytes, p.model.table_hash, id.file_bytes, id.table_hash, model_path.string());
    return p;
}

}  // namespace sluice::placement
