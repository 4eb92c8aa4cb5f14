// The blob arena (issue 10): every routed (layer, expert) repacked as one contiguous blob, so a
// cache miss is one copy over PCIe instead of three:
//   blob = [gate rows | pad | up rows | pad | down rows | pad], each part in its file format
//   (the bytes of the expert's slice of blk.L.ffn_{gate,up,down}_exps), each start 64-byte
//   aligned; a layer's blobs are back to back with one stride; layers start on page boundaries.
// The arena is one page-aligned region (so a CUDA build can cudaHostRegister it whole).
//
// Made once at load, or read from "<model>.experts.bin" beside the model. That file is a header of
// whole pages followed by the region. The header (magic, version, model identity, n_layer, n_expert,
// and each layer's formats, offsets and sizes) must equal, byte for byte, the header computed from
// the model being loaded, and the file's size must be exactly header + region: a stale (another
// model, another layout) or truncated cache is rebuilt, never trusted. It is written through a
// temporary file renamed into place, so a crash mid-write leaves no torn cache.
//
// bank(layer) gives the CPU expert pool a view that computes from the arena: the same bytes
// through the same kernels, so bit-identical to computing from the GGUF tensors.
#pragma once

#include "core/dtype.h"
#include "io/mmap.h"
#include "moe/expert_pool.h"
#include "placement/model_identity.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace sluice {
class model_file;
}

namespace sluice::placement {

class progress;

struct blob_layout {
    bool present = false;            // the layer has routed experts
    dtype gate_type = dtype::f32, up_type = dtype::f32, down_type = dtype::f32;
    uint64_t layer_offset = 0;       // from the region's start, page-aligned
    uint64_t blob_stride = 0;        // bytes from one expert's blob to the next (64-aligned)
    uint64_t gate_offset = 0, up_offset = 0, down_offset = 0;   // within a blob, 64-aligned
    uint64_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;      // one expert's slice of each
    uint64_t blob_bytes() const { return blob_stride; }         // what one copy moves
};

struct arena_options {
    bool use_cache_file = true;          // read / write "<model>.experts.bin"
    std::filesystem::path cache_path;    // empty: beside the model
};

class expert_arena {
public:
    // Repacks (or reads the cache of) the routed experts of `f`, a model of n_layer layers with
    // n_expert experts (blk.L.ffn_{gate,up,down}_exps.weight where present). `f` must outlive the
    // arena (its banks point at f's tensor views for shapes and formats).
    static std::unique_ptr<expert_arena> open(const std::filesystem::path& model_path, const model_file& f,
                                              int n_layer, int n_expert, const arena_options& o = {},
                                              progress* prog = nullptr);
    ~expert_arena();
    expert_arena(const expert_arena&) = delete;
    expert_arena& operator=(const expert_arena&) = delete;

    int n_layer() const { return static_cast<int>(layout_.size()); }
    int n_expert() const { return n_expert_; }
    const blob_layout& layout(int layer) const { return layout_[static_cast<size_t>(layer)]; }
    const std::byte* blob(int layer, int expert) const {
        const blob_layout& l = layout(layer);
        return region_ + l.layer_offset + static_cast<uint64_t>(expert) * l.blob_stride;
    }
    // The CPU expert pool's bank for `layer`, computing from the arena (gate/up/down null for a
    // layer without routed experts).
    moe::expert_bank bank(int layer) const;

    const std::byte* region() const { return region_; }   // page-aligned
    uint64_t region_bytes() const { return region_bytes_; }
    bool from_cache() const { return from_cache_; }          // read from the cache file
    const std::filesystem::path& cache_path() const { return cache_path_; }
    // Why the cache was not used or not written ("" when it was read, or written, fine).
    const std::string& note() const { return note_; }

    // The cache file's header: 32 bytes + 80 a layer, rounded up to whole pages (the region after
    // it stays page-aligned in the file's mapping).
    static uint64_t header_bytes(int n_layer);

private:
    expert_arena() = default;

    int n_expert_ = 0;
    std::vector<blob_layout> layout_;
    std::vector<const tensor_view*> gate_, up_, down_;   // [n_layer] the model's tensors (or null)
    std::byte* owned_ = nullptr;     // anonymous mapping when repacked here
    mapped_file cache_;              // the cache file's mapping when read from it
    const std::byte* region_ = nullptr;
    uint64_t region_bytes_ = 0;
    bool from_cache_ = false;
    std::filesystem::path cache_path_;
    std::string note_;
};

}  // namespace sluice::placement
