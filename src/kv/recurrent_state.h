// The recurrent state of one sequence for hybrid models (Gated DeltaNet layers): per recurrent
// layer a conv state and an SSM state of fixed size, whatever the context length. Owned by the
// sequence's kv_cache, so the state joins the KV rows in the transaction: a verify window is
// rolled back by kv_cache::truncate(n) like the attention rows.
//
// Rollback without recomputation: while a window of T rows runs, the state a row starts from is
// copied into a checkpoint slot before the row updates it, for the last min(T, n_ckpt) rows of
// the window. truncate(n) for any n in [first checkpointed length, length] copies slot n back,
// which is exactly the state after position n-1 (the bits that serial decoding leaves there, E1).
// Lengths before the last window's checkpoints cannot be restored (rewind throws); 0 always can.
// Attention rows alone cannot rebuild this state (kv_cache::set_n_pos refuses a length the state
// does not hold): a prefix-cache checkpoint keeps the live state with the rows (assign()).
//
// Memory: the slots are allocated as windows need them (the largest window so far, at most
// n_ckpt): plain decoding holds one. For Qwen3-Next-80B-A3B (36 DeltaNet layers, 32 value heads
// of 128x128, conv 3 x 8192) the live state and each slot are ~75 MiB, so 16 slots would be
// ~1.2 GiB per sequence. A model that keeps its own copy of the state (the CUDA model) keeps the
// bookkeeping here without slots (begin_window's host_slots) and its own slots in VRAM.
// Cost (an estimate, not measured): a checkpointed row copies every recurrent layer's state, so a
// one-row decode step copies ~75 MiB. Keeping the rows' DeltaNet inputs and replaying them on
// rollback would be cheaper; left for later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

struct recurrent_shape {
    int n_layer = 0;            // recurrent layers (0: no recurrent state)
    int64_t conv_floats = 0;    // per layer: [d_conv-1, conv_channels]
    int64_t ssm_floats = 0;     // per layer: [n_v_heads, head_k_dim, head_v_dim]
    int n_ckpt = 0;             // rows of a window that can be rolled back (>= 1)
};

class recurrent_state {
public:
    recurrent_state() = default;
    explicit recurrent_state(const recurrent_shape& s);

    const recurrent_shape& shape() const { return shape_; }
    bool empty() const { return shape_.n_layer == 0; }
    int32_t length() const { return len_; }   // positions folded into the live state

    // Live state of recurrent layer l (0..n_layer-1).
    float* conv(int l) { return live_.data() + static_cast<std::size_t>(l) * layer_floats(); }
    float* ssm(int l) { return conv(l) + shape_.conv_floats; }

    // True when rewind(n) can restore the state after position n-1.
    bool can_rewind(int32_t n) const { return n == len_ || n == 0 || (n >= lo_ && n < len_ && n - lo_ < n_valid_); }
    // Restores the state of length n (throws when !can_rewind(n)).
    void rewind(int32_t n);
    void reset();   // zero state, length 0

    // The live state [n_layer, conv_floats + ssm_floats] (what a prefix-cache checkpoint keeps).
    const std::vector<float>& live() const { return live_; }
    // Sets the live state to `state` (from live() of a state of this shape) of length n, and
    // forgets the window checkpoints (only n itself can then be rewound to, and 0). Throws when
    // the size differs.
    void assign(const std::vector<float>& state, int32_t n);

    // A window of `rows` rows starting at length pos0 (== length() after rewind): sets which of
    // its rows get checkpoints. Call once per forward, before the layers. host_slots: the window
    // writes this object's slots (checkpoint(); they grow to the window's checkpointed rows here);
    // false for a model that keeps the state elsewhere: the bookkeeping alone, and a rewind into
    // this window then leaves live() as it is (the model restores its own copy).
    void begin_window(int32_t pos0, int32_t rows, bool host_slots = true);
    // Before row pos0+i of layer l updates the state: keeps it when that row is checkpointed.
    void checkpoint(int l, int32_t pos) {
        if (pos < lo_) return;
        float* dst = slot(pos - lo_) + static_cast<std::size_t>(l) * layer_floats();
        const float* src = conv(l);
        for (int64_t i = 0; i < layer_floats(); ++i) dst[i] = src[i];
    }
    // After the window's last layer: the live state now has length pos0 + rows.
    void end_window(int32_t n);

private:
    int64_t layer_floats() const { return shape_.conv_floats + shape_.ssm_floats; }
    float* slot(int32_t j) { return ckpt_.data() + static_cast<std::size_t>(j) * shape_.n_layer * layer_floats(); }
    std::size_t slot_floats() const { return static_cast<std::size_t>(shape_.n_layer) * static_cast<std::size_t>(layer_floats()); }

    recurrent_shape shape_;
    int32_t len_ = 0;
    int32_t lo_ = 0;        // slot j holds the state of length lo_ + j
    int32_t n_valid_ = 0;   // slots 0..n_valid_-1 hold a state (lengths lo_..lo_+n_valid_-1 < len_)
    bool host_slots_ = true;    // the last window wrote ckpt_ (else only the bookkeeping is kept)
    std::vector<float> live_;   // [n_layer, conv_floats + ssm_floats]
    std::vector<float> ckpt_;   // [slots, n_layer, conv_floats + ssm_floats], slots <= n_ckpt as windows need
};

}  // namespace sluice
