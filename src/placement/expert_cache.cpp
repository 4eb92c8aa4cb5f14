#include "placement/expert_cache.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::placement {

expert_cache::expert_cache(int n_layer, int n_expert, std::vector<uint64_t> blob_bytes,
                           std::span<const uint64_t> profile, const cache_options& o)
    : n_layer_(n_layer), n_expert_(n_expert), o_(o), blob_(std::move(blob_bytes)) {
    if (n_layer < 1 || n_expert < 1 || n_layer > (1 << 16) || n_expert > (1 << 16))
        fail("expert cache: expected 1..65536 layers and experts, got {} and {}", n_layer, n_expert);
    if (blob_.size() != static_cast<size_t>(n_layer))
        fail("expert cache: expected {} blob sizes (one per layer), got {}", n_layer, blob_.size());
    const size_t N = static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert);
    if (!profile.empty() && profile.size() != N)
        fail("expert cache: the profile has {} counts, expected {} layers x {} experts = {}", profile.size(), n_layer,
             n_expert, N);
    if (!(o.half_life_steps > 0) || !(o.margin >= 1.0) || !(o.min_gain >= 0) || o.max_swaps_per_step < 0 || o.k_used < 1)
        fail("expert cache: expected half_life > 0, margin >= 1, min_gain >= 0, max_swaps >= 0, k_used >= 1; got {}, "
             "{}, {}, {}, {}", o.half_life_steps, o.margin, o.min_gain, o.max_swaps_per_step, o.k_used);
    decay_ = std::exp2(-1.0 / o.half_life_steps);
    score_.assign(N, 0.0);
    step_count_.assign(N, 0);
    slot_of_.assign(N, -1);
    slots_.reserve(N);
    swaps_.reserve(static_cast<size_t>(o.max_swaps_per_step));
    layer_best_.assign(static_cast<size_t>(n_layer), N);
    layer_weakest_.assign(static_cast<size_t>(n_layer), -1);

    // Seed: a layer that routes k_used lookups a step builds up k_used / (1 - decay) decayed
    // lookups; the profile shares that mass out, so its ranking holds until the data disagree.
    if (!profile.empty()) {
        const double mass = o.k_used / (1.0 - decay_);
        for (int l = 0; l < n_layer; ++l) {
            const uint64_t* c = profile.data() + index(l, 0);
            const double total = static_cast<double>(std::accumulate(c, c + n_expert, uint64_t{0}));
            if (total > 0)
                for (int e = 0; e < n_expert; ++e) score_[index(l, e)] = mass * static_cast<double>(c[e]) / total;
        }
    }

    // Initial set: by profile count (not the seeded score, whose per-layer normalisation would
    // favour flat layers), ties by (layer, expert); each pair that still fits is taken. Spread
    // without a profile: by (expert, layer), so each layer gets the same share.
    std::vector<size_t> order(N);
    std::iota(order.begin(), order.end(), size_t{0});
    const size_t X = static_cast<size_t>(n_expert);
    if (!profile.empty())
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return profile[a] > profile[b]; });
    else if (o.spread)
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return a % X < b % X; });
    for (size_t k : order) {
        const uint64_t b = blob_[k / static_cast<size_t>(n_expert)];
        if (b == 0 || b > o.budget_bytes - used_) continue;
        add_slot(k);
    }
}

int expert_cache::add_slot(size_t k) {
    slot s;
    s.key = {static_cast<int32_t>(k / static_cast<size_t>(n_expert_)), static_cast<int32_t>(k % static_cast<size_t>(n_expert_))};
    s.bytes = blob_[static_cast<size_t>(s.key.layer)];
    s.state = slot_state::copying;
    slots_.push_back(s);   // capacity reserved for every pair: no reallocation
    used_ += s.bytes;
    const int id = static_cast<int>(slots_.size()) - 1;
    slot_of_[k] = id;
    return id;
}

void expert_cache::observe(int layer, std::span<const int32_t> ids) {
    if (layer < 0 || layer >= n_layer_) return;
    for (int32_t e : ids)
        if (e >= 0 && e < n_expert_) ++step_count_[index(layer, e)];
}

std::span<const cache_swap> expert_cache::end_step(bool allow_swaps) {
    swaps_.clear();
    ++steps_;
    for (size_t k = 0; k < score_.size(); ++k) {
        score_[k] = score_[k] * decay_ + static_cast<double>(step_count_[k]);
        step_count_[k] = 0;
    }
    if (!o_.adaptive || !allow_swaps) return swaps_;
    if (o_.same_layer) {
        if (o_.max_swaps_per_step > 0)
            for (size_t l = 0; l < layer_best_.size(); ++l) scan_layer(l);
        for (int n = 0; n < o_.max_swaps_per_step && swap_in_layer(); ++n) {}
        return swaps_;
    }
    const size_t N = score_.size();
    for (int n = 0; n < o_.max_swaps_per_step; ++n) {
        // The best expert not in a slot.
        size_t best = N;
        for (size_t k = 0; k < N; ++k)
            if (slot_of_[k] < 0 && blob_[k / static_cast<size_t>(n_expert_)] > 0 && (best == N || ranks_before(k, best)))
                best = k;
        if (best == N || !(score_[best] > o_.min_gain)) break;
        const uint64_t need = blob_[best / static_cast<size_t>(n_expert_)];
        if (need <= o_.budget_bytes - used_) {   // room left in the budget: a new slot, no eviction
            const int s = add_slot(best);
            swaps_.push_back({s, {}, slots_[static_cast<size_t>(s)].key, need});
            continue;
        }
        // The weakest landed resident whose slot can hold the candidate.
        int weakest = -1;
        for (size_t s = 0; s < slots_.size(); ++s) {
            const slot& sl = slots_[s];
            if (sl.state != slot_state::resident || sl.bytes < need) continue;
            if (weakest < 0 || ranks_before(index(slots_[static_cast<size_t>(weakest)].key.layer,
                                                  slots_[static_cast<size_t>(weakest)].key.expert),
                                            index(sl.key.layer, sl.key.expert)))
                weakest = static_cast<int>(s);
        }
        if (weakest < 0) break;
        const expert_key& w = slots_[static_cast<size_t>(weakest)].key;
        if (!(score_[best] > o_.margin * score_[index(w.layer, w.expert)] + o_.min_gain)) break;
        replace(weakest, best);
    }
    return swaps_;
}

void expert_cache::replace(int s, size_t best) {
    slot& w = slots_[static_cast<size_t>(s)];
    cache_swap sw;
    sw.slot = s;
    sw.evicted = w.key;
    slot_of_[index(w.key.layer, w.key.expert)] = -1;   // out of the GPU plan at once
    w.key = {static_cast<int32_t>(best / static_cast<size_t>(n_expert_)), static_cast<int32_t>(best % static_cast<size_t>(n_expert_))};
    w.state = slot_state::copying;   // in the plan only after copy_landed
    slot_of_[best] = s;
    sw.loaded = w.key;
    sw.bytes = blob_[static_cast<size_t>(w.key.layer)];
    swaps_.push_back(sw);
}

void expert_cache::scan_layer(size_t l) {
    const size_t N = score_.size(), X = static_cast<size_t>(n_expert_);
    size_t best = N;
    int weakest = -1;
    size_t weakest_k = N;
    for (size_t k = l * X; k < (l + 1) * X; ++k) {
        const int s = slot_of_[k];
        if (s < 0) {
            if (blob_[l] > 0 && (best == N || ranks_before(k, best))) best = k;
        } else if (slots_[static_cast<size_t>(s)].state == slot_state::resident &&
                   (weakest < 0 || ranks_before(weakest_k, k))) {
            weakest = s;
            weakest_k = k;
        }
    }
    layer_best_[l] = best;
    layer_weakest_[l] = weakest;
}

bool expert_cache::swap_in_layer() {
    // A swap changes its own layer only (the evicted pair leaves, the loaded one is copying):
    // end_step scans every layer once, then each swap rescans the one it changed, instead of
    // every pair again (8 scans of 6,144 pairs a forward for the 30B shape).
    const size_t N = score_.size();
    // The layer whose candidate ranks highest among those that beat their layer's weakest.
    size_t pick = N;
    int pick_slot = -1;
    for (size_t l = 0; l < layer_best_.size(); ++l) {
        const size_t c = layer_best_[l];
        const int w = layer_weakest_[l];
        if (c == N || w < 0 || !(score_[c] > o_.min_gain)) continue;
        const expert_key& wk = slots_[static_cast<size_t>(w)].key;
        if (!(score_[c] > o_.margin * score_[index(wk.layer, wk.expert)] + o_.min_gain)) continue;
        if (pick == N || ranks_before(c, pick)) pick = c, pick_slot = w;
    }
    if (pick == N) return false;
    replace(pick_slot, pick);
    scan_layer(pick / static_cast<size_t>(n_expert_));
    return true;
}

bool expert_cache::copy_landed(int slot) {
    if (slot < 0 || slot >= n_slots() || slots_[static_cast<size_t>(slot)].state != slot_state::copying) return false;
    slots_[static_cast<size_t>(slot)].state = slot_state::resident;
    return true;
}

}  // namespace sluice::placement
