// The routing profile (issue 10): how often each (layer, expert) was chosen by the router over a
// calibration text, run through the normal CPU forward. It ranks the experts for the VRAM
// cache's initial set, and is saved beside the model as "<model>.profile.bin" and reused while
// the model's identity matches.
//
// File format, version 1, little-endian, every field validated by parse_profile:
//   0  char[8]  magic "SLUPROF\0"
//   8  u32      version (1)
//  12  u32      n_layer      1..65536
//  16  u32      n_expert     1..65536
//  20  u32      k_used       1..n_expert (experts the router picks per token)
//  24  u64      model file bytes   } model_identity
//  32  u64      model table hash   }
//  40  u64      n_tokens     calibration tokens (each layer's counts sum to 0 or n_tokens * k_used)
//  48  u64[n_layer * n_expert] counts, layer-major
//  ..  u64      FNV-1a 64 of every byte before it
#pragma once

#include "placement/model_identity.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
class model;
class tokenizer;
struct forward_scratch;
}  // namespace sluice

namespace sluice::placement {

class progress;

struct routing_profile {
    model_identity model;
    uint32_t n_layer = 0, n_expert = 0, k_used = 0;
    uint64_t n_tokens = 0;
    std::vector<uint64_t> counts;   // [n_layer * n_expert]

    uint64_t count(int layer, int expert) const {
        return counts[static_cast<size_t>(layer) * n_expert + static_cast<size_t>(expert)];
    }
};

inline constexpr uint32_t k_profile_version = 1;

std::vector<std::byte> serialize_profile(const routing_profile& p);
// Throws "<where>: ..." naming the field, the value and what was expected.
routing_profile parse_profile(std::span<const std::byte> bytes, std::string_view where);

void write_profile(const std::filesystem::path& path, const routing_profile& p);
routing_profile read_profile(const std::filesystem::path& path);

// The model's profile beside it: nullopt when there is none; throws when the file is malformed or
// belongs to another model (with the command that rebuilds it).
std::optional<routing_profile> load_profile_for(const std::filesystem::path& model_path, const model_identity& id,
                                                const std::filesystem::path& profile_path = {});
std::filesystem::path default_profile_path(const std::filesystem::path& model_path);

// Counts routed ids through forward_scratch::on_route (models/model.h). Allocation-free.
class routing_recorder {
public:
    routing_recorder(int n_layer, int n_expert);
    // Installs itself on the scratch (the scratch must not outlive the recorder).
    void attach(forward_scratch& s);
    static void observe(void* ctx, int layer, const int32_t* ids, int64_t n_ids);
    const std::vector<uint64_t>& counts() const { return counts_; }

private:
    int n_layer_, n_expert_;
    std::vector<uint64_t> counts_;   // [n_layer * n_expert]
};

struct calibration_options {
    int n_threads = 0;     // 0: every hardware thread
    int n_ctx = 512;       // positions per pass; a longer text runs in several passes
    int max_tokens = 0;    // 0: the whole text
};

// Runs the text's tokens through `net` (the normal CPU forward) and counts the router's choices.
routing_profile calibrate_profile(model& net, const model_identity& id, const tokenizer& tok,
                                  std::string_view text, const calibration_options& o, progress* prog);

}  // namespace sluice::placement
