#include "placement/expert_arena.h"

#include "core/checked.h"
#include "core/error.h"
#include "io/model_file.h"
#include "placement/progress.h"

#include <fmt/core.h>

#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace sluice::placement {

namespace {

constexpr char k_magic[8] = {'S', 'L', 'U', 'A', 'R', 'E', 'N', 'A'};
constexpr uint32_t k_version = 1;
constexpr uint64_t k_align = 64;     // blob parts: a cache line, and more than any kernel needs
constexpr uint64_t k_page = 4096;    // layers and the region: pinnable pages

uint64_t align_up(uint64_t v, uint64_t a) {
    const auto r = checked_align_up(v, a);
    if (!r) fail("expert arena: size {} overflows when aligned to {}", v, a);
    return *r;
}
uint64_t mul(uint64_t a, uint64_t b) {
    const auto r = checked_mul(a, b);
    if (!r) fail("expert arena: {} x {} bytes overflows", a, b);
    return *r;
}

std::string layer_name(int il, const char* what) { return fmt::format("blk.{}.ffn_{}_exps.weight", il, what); }

// The header the model implies: compared byte for byte with a cache file's.
std::vector<std::byte> make_header(const model_identity& id, int n_expert, const std::vector<blob_layout>& layout,
                                   uint64_t region_bytes) {
    std::vector<std::byte> h(expert_arena::header_bytes(static_cast<int>(layout.size())), std::byte{0});
    size_t at = 0;
    const auto put = [&](const void* p, size_t n) {
        if (at + n > h.size()) fail("expert arena: {} layers do not fit the {}-byte cache header", layout.size(), h.size());
        std::memcpy(h.data() + at, p, n);
        at += n;
    };
    const auto u32 = [&](uint32_t v) { put(&v, 4); };
    const auto u64 = [&](uint64_t v) { put(&v, 8); };
    put(k_magic, 8);
    u32(k_version);
    u32(static_cast<uint32_t>(layout.size()));
    u32(static_cast<uint32_t>(n_expert));
    u32(0);
    u64(id.file_bytes);
    u64(id.table_hash);
    u64(region_bytes);
    for (const blob_layout& l : layout) {
        u32(l.present ? 1 : 0);
        u32(static_cast<uint32_t>(l.gate_type));
        u32(static_cast<uint32_t>(l.up_type));
        u32(static_cast<uint32_t>(l.down_type));
        for (uint64_t v : {l.layer_offset, l.blob_stride, l.gate_offset, l.up_offset, l.down_offset, l.gate_bytes,
                           l.up_bytes, l.down_bytes})
            u64(v);
    }
    return h;
}

}  // namespace

std::unique_ptr<expert_arena> expert_arena::open(const std::filesystem::path& model_path, const model_file& f,
                                                 int n_layer, int n_expert, const arena_options& o, progress* prog) {
    if (n_layer < 1 || n_expert < 1) fail("expert arena: expected >= 1 layers and experts, got {} and {}", n_layer, n_expert);
    std::unique_ptr<expert_arena> a(new expert_arena());
    a->n_expert_ = n_expert;
    a->layout_.resize(static_cast<size_t>(n_layer));
    a->gate_.assign(static_cast<size_t>(n_layer), nullptr);
    a->up_.assign(static_cast<size_t>(n_layer), nullptr);
    a->down_.assign(static_cast<size_t>(n_layer), nullptr);

    // ---- layout: per layer, the three slices of one expert, 64-aligned, layers page-aligned ----
    uint64_t at = 0;
    for (int il = 0; il < n_layer; ++il) {
        const tensor_view* g = f.find(layer_name(il, "gate"));
        const tensor_view* u = f.find(layer_name(il, "up"));
        const tensor_view* d = f.find(layer_name(il, "down"));
        if (!g && !u && !d) continue;
        if (!g || !u || !d) fail("expert arena: layer {}: expected gate, up and down expert tensors, some are missing", il);
        for (const tensor_view* t : {g, u, d})
            if (t->n_dims != 3 || t->ne[2] != n_expert || t->nbytes % static_cast<uint64_t>(n_expert) != 0)
                fail("expert arena: {}: shape {}: expected 3 dimensions with {} experts outermost", t->name,
                     t->shape_string(), n_expert);
        blob_layout& l = a->layout_[static_cast<size_t>(il)];
        l.present = true;
        l.gate_type = g->type;
        l.up_type = u->type;
        l.down_type = d->type;
        l.gate_bytes = g->nbytes / static_cast<uint64_t>(n_expert);
        l.up_bytes = u->nbytes / static_cast<uint64_t>(n_expert);
        l.down_bytes = d->nbytes / static_cast<uint64_t>(n_expert);
        l.gate_offset = 0;
        l.up_offset = align_up(l.gate_bytes, k_align);
        l.down_offset = align_up(l.up_offset + l.up_bytes, k_align);
        l.blob_stride = align_up(l.down_offset + l.down_bytes, k_align);
        l.layer_offset = at;
        at = align_up(at + mul(l.blob_stride, static_cast<uint64_t>(n_expert)), k_page);
        a->gate_[static_cast<size_t>(il)] = g;
        a->up_[static_cast<size_t>(il)] = u;
        a->down_[static_cast<size_t>(il)] = d;
    }
    if (at == 0) fail("expert arena: {}: the model has no routed expert tensors", model_path.string());
    a->region_bytes_ = at;
    const model_identity id = identify_model(model_path, f);
    const std::vector<std::byte> header = make_header(id, n_expert, a->layout_, at);
    const uint64_t hb = header.size();

    // ---- the cache file: used only when its header is the expected one and its size exact ----
    a->cache_path_ = o.cache_path.empty() ? sibling_path(model_path, "experts.bin") : o.cache_path;
    if (o.use_cache_file) {
        std::error_code ec;
        const uint64_t size = std::filesystem::exists(a->cache_path_, ec) ? std::filesystem::file_size(a->cache_path_, ec) : 0;
        if (size > 0 && !ec) {
            if (size != hb + at) {
                a->note_ = fmt::format("{}: {} bytes, expected {}: rebuilt", a->cache_path_.string(), size, hb + at);
            } else {
                mapped_file m(a->cache_path_);
                if (std::memcmp(m.bytes().data(), header.data(), header.size()) != 0) {
                    a->note_ = fmt::format("{}: made for another model or layout: rebuilt", a->cache_path_.string());
                } else {
                    a->cache_ = std::move(m);
                    a->region_ = a->cache_.bytes().data() + hb;   // page-aligned: the mapping is
                    a->from_cache_ = true;
                    return a;
                }
            }
        }
    }

    // ---- repack: one anonymous page-aligned region, each expert's three slices copied in ----
    void* p = ::mmap(nullptr, at, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("expert arena: cannot allocate {} bytes for the repacked experts", at);
    a->owned_ = static_cast<std::byte*>(p);
    a->region_ = a->owned_;
    if (prog) prog->begin("repacking experts", at);
    for (int il = 0; il < n_layer; ++il) {
        const blob_layout& l = a->layout_[static_cast<size_t>(il)];
        if (!l.present) continue;
        for (int e = 0; e < n_expert; ++e) {
            std::byte* b = a->owned_ + l.layer_offset + static_cast<uint64_t>(e) * l.blob_stride;
            const uint64_t ue = static_cast<uint64_t>(e);
            std::memcpy(b + l.gate_offset, a->gate_[static_cast<size_t>(il)]->data + ue * l.gate_bytes, l.gate_bytes);
            std::memcpy(b + l.up_offset, a->up_[static_cast<size_t>(il)]->data + ue * l.up_bytes, l.up_bytes);
            std::memcpy(b + l.down_offset, a->down_[static_cast<size_t>(il)]->data + ue * l.down_bytes, l.down_bytes);
        }
        // The layer's span up to the next page boundary, so the phase ends at region_bytes.
        if (prog) prog->advance(align_up(l.blob_stride * static_cast<uint64_t>(n_expert), k_page));
    }
    if (prog) prog->finish();
    if (o.use_cache_file) {
        // Header and region in one file, written whole then renamed: a failure here (a read-only
        // folder, a full disk) costs only the next start's repacking.
        try {
            write_file_atomically(a->cache_path_, {std::span<const std::byte>(header), std::span<const std::byte>(a->owned_, at)});
        } catch (const std::exception& e) {
            a->note_ = fmt::format("expert cache not written: {}", e.what());
        }
    }
    return a;
}

uint64_t expert_arena::header_bytes(int n_layer) {
    return align_up(32 + 80 * static_cast<uint64_t>(n_layer), k_page);
}

expert_arena::~expert_arena() {
    if (owned_) ::munmap(owned_, region_bytes_);
}

moe::expert_bank expert_arena::bank(int layer) const {
    moe::expert_bank b;
    const blob_layout& l = layout(layer);
    if (!l.present) return b;
    b.gate = gate_[static_cast<size_t>(layer)];
    b.up = up_[static_cast<size_t>(layer)];
    b.down = down_[static_cast<size_t>(layer)];
    b.blobs = region_ + l.layer_offset;
    b.blob_stride = l.blob_stride;
    b.gate_offset = l.gate_offset;
    b.up_offset = l.up_offset;
    b.down_offset = l.down_offset;
    return b;
}

}  // namespace sluice::placement
