// Which routed experts live in VRAM (issue 10, "adaptive cache"): a byte budget of slots, filled
// at start with the experts the routing profile ranks highest, then adapted step by step.
//
// Rules, each one unit-tested (tests/unit/test_placement_cache.cpp):
//   - initial set: (layer, expert) pairs by profile count, descending, ties by (layer, expert)
//     ascending; each taken when its blob fits what is left of the budget. Without a profile,
//     (layer, expert) order (whole layers), or with `spread` expert 0 of every layer, then
//     expert 1, ... (an even share of each layer, for swaps to improve on);
//   - scores are decayed frequency counts: after every step, score = score * 2^(-1/half_life) +
//     lookups this step; the profile seeds them (its share of a layer's lookups times the decayed
//     mass k_used lookups a step would build up), so the first steps do not undo the profile;
//   - hysteresis: a candidate replaces the weakest landed resident only when its score exceeds
//     margin * weakest + min_gain;
//   - at most max_swaps_per_step swaps (and new slots, when the budget has room) per step;
//   - same_layer: a candidate replaces only the weakest landed resident of its own layer, and
//     no slot is made after the initial set (a device whose slots are per-layer arrays of one
//     blob size: models/cuda_expert_lanes.h); the step's swaps go to the layers whose candidates
//     rank highest among those that pass the hysteresis test;
//   - slot state machine: a swap takes the evicted expert out of the GPU plan at once (on_gpu is
//     false from the end_step that evicts it), and the new expert's slot is `copying` until
//     copy_landed(slot): only then is the expert planned on the GPU. A copying slot is never
//     evicted.
// Deterministic: the same constructor inputs and the same sequence of observe / end_step /
// copy_landed calls give the same swaps. end_step, observe and copy_landed allocate nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::placement {

struct expert_key {
    int32_t layer = -1, expert = -1;   // -1: none
    bool operator==(const expert_key&) const = default;
};

struct cache_options {
    uint64_t budget_bytes = 0;       // VRAM for routed experts' blobs
    double half_life_steps = 32.0;   // a lookup's weight halves after this many steps (> 0)
    double margin = 1.25;            // hysteresis: candidate > margin * weakest + min_gain (>= 1)
    double min_gain = 1.0;           // ... in lookups (>= 0)
    int max_swaps_per_step = 2;      // >= 0
    bool adaptive = true;            // false: the initial set stays
    int k_used = 8;                  // experts per token, for the profile's seed weight (>= 1)
    bool same_layer = false;         // swaps stay inside a layer; no new slots after the initial set
    bool spread = false;             // no profile: an even share of each layer, not whole layers
};

enum class slot_state : uint8_t { copying, resident };

struct cache_swap {
    int32_t slot = -1;
    expert_key evicted;   // {-1, -1} when the slot is new (free budget)
    expert_key loaded;    // its copy must be issued; copy_landed(slot) when it is done
    uint64_t bytes = 0;   // the loaded blob's size
};

class expert_cache {
public:
    // blob_bytes: [n_layer] bytes of one expert's blob in each layer (0: no routed experts there).
    // profile:    [n_layer * n_expert] calibration lookups, layer-major, or empty (no profile:
    //             the initial set is by (layer, expert) order). Throws on a size mismatch.
    expert_cache(int n_layer, int n_expert, std::vector<uint64_t> blob_bytes, std::span<const uint64_t> profile,
                 const cache_options& o);

    int n_layer() const { return n_layer_; }
    int n_expert() const { return n_expert_; }
    int n_slots() const { return static_cast<int>(slots_.size()); }
    slot_state state(int slot) const { return slots_[static_cast<size_t>(slot)].state; }
    expert_key slot_key(int slot) const { return slots_[static_cast<size_t>(slot)].key; }
    uint64_t slot_bytes(int slot) const { return slots_[static_cast<size_t>(slot)].bytes; }
    int slot_of(int layer, int expert) const { return slot_of_[index(layer, expert)]; }
    // Resident and landed: the plan may send this expert to the GPU lane.
    bool on_gpu(int layer, int expert) const {
        const int s = slot_of(layer, expert);
        return s >= 0 && slots_[static_cast<size_t>(s)].state == slot_state::resident;
    }
    double score(int layer, int expert) const { return score_[index(layer, expert)]; }
    uint64_t used_bytes() const { return used_; }
    uint64_t budget_bytes() const { return o_.budget_bytes; }
    uint64_t blob_bytes(int layer) const { return blob_[static_cast<size_t>(layer)]; }
    int64_t steps() const { return steps_; }

    // Counts this step's lookups of one layer (ids in [0, n_expert); others are ignored).
    void observe(int layer, std::span<const int32_t> ids);
    // Ends a step: decays the scores, adds this step's lookups, then makes at most
    // max_swaps_per_step swaps (none when allow_swaps is false: the caller's last swaps are
    // still copying). The span is valid until the next end_step.
    std::span<const cache_swap> end_step(bool allow_swaps = true);
    // The copy into `slot` has landed: the slot becomes resident. False (nothing changes) when the
    // slot is not copying.
    bool copy_landed(int slot);

private:
    struct slot {
        expert_key key;
        uint64_t bytes = 0;   // capacity, fixed when the slot is made
        slot_state state = slot_state::copying;
    };
    size_t index(int layer, int expert) const {
        return static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(expert);
    }
    // a ranks before b: higher score, then lower (layer, expert).
    bool ranks_before(size_t a, size_t b) const { return score_[a] > score_[b] || (score_[a] == score_[b] && a < b); }
    int add_slot(size_t key_index);
    // Layer l's best pair not in a slot and weakest landed slot (layer_best_, layer_weakest_).
    void scan_layer(size_t l);
    // One swap of the same_layer rule, from the layers' scans (the swapped layer is scanned
    // again): false when no layer has a candidate that passes.
    bool swap_in_layer();
    // Evicts slot s's expert (out of the plan now) and puts expert `best` there (copying).
    void replace(int s, size_t best);

    int n_layer_ = 0, n_expert_ = 0;
    cache_options o_;
    double decay_ = 1.0;
    std::vector<uint64_t> blob_;       // [n_layer]
    std::vector<double> score_;        // [n_layer * n_expert] decayed lookups
    std::vector<uint32_t> step_count_; // [n_layer * n_expert] this step's lookups
    std::vector<int32_t> slot_of_;     // [n_layer * n_expert] slot or -1
    std::vector<slot> slots_;          // reserved for every pair: never reallocates
    std::vector<cache_swap> swaps_;    // reserved to max_swaps_per_step
    // same_layer's per-layer search (sized at construction: end_step allocates nothing).
    std::vector<size_t> layer_best_;   // [n_layer] best pair not in a slot, or N
    std::vector<int> layer_weakest_;   // [n_layer] weakest landed slot, or -1
    uint64_t used_ = 0;
    int64_t steps_ = 0;
};

}  // namespace sluice::placement
