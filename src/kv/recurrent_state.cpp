#include "kv/recurrent_state.h"

#include "core/checked.h"
#include "core/error.h"

#include <algorithm>

namespace sluice {

recurrent_state::recurrent_state(const recurrent_shape& s) : shape_(s) {
    if (s.n_layer < 0 || s.conv_floats < 0 || s.ssm_floats < 0 || (s.n_layer > 0 && s.n_ckpt < 1))
        fail("recurrent_state: shape: expected n_layer >= 0, sizes >= 0, n_ckpt >= 1, got {}/{}/{}/{}",
             s.n_layer, s.conv_floats, s.ssm_floats, s.n_ckpt);
    if (s.n_layer == 0) return;
    auto live = checked_mul(static_cast<uint64_t>(s.n_layer), static_cast<uint64_t>(s.conv_floats + s.ssm_floats));
    auto all = live ? checked_mul(*live, static_cast<uint64_t>(s.n_ckpt)) : std::nullopt;
    if (!all || *all > (uint64_t{1} << 36))
        fail("recurrent_state: {} layers x {} floats x {} checkpoints is too large", s.n_layer,
             s.conv_floats + s.ssm_floats, s.n_ckpt);
    live_.assign(*live, 0.0f);   // the checkpoint slots come with the first window (begin_window)
}

void recurrent_state::reset() {
    std::fill(live_.begin(), live_.end(), 0.0f);
    len_ = lo_ = n_valid_ = 0;
}

void recurrent_state::rewind(int32_t n) {
    if (n == len_) return;
    if (n == 0) return reset();
    if (!can_rewind(n))
        fail("recurrent_state: rollback to {} positions: only {}..{} are kept (the last window's rows)", n, lo_,
             len_);
    if (host_slots_) {
        const float* src = slot(n - lo_);
        std::copy(src, src + live_.size(), live_.begin());
    }
    len_ = n;
    n_valid_ = n - lo_;   // slots past n describe a future that no longer exists
}

void recurrent_state::begin_window(int32_t pos0, int32_t rows, bool host_slots) {
    if (empty()) return;
    if (pos0 != len_) fail("recurrent_state: window at {}: the state holds {} positions", pos0, len_);
    // The checkpoints describe this window's last `kept` rows only: an earlier window's are
    // dropped (a verify window never rolls back past its own first row).
    const int32_t kept = std::min(rows, shape_.n_ckpt);
    host_slots_ = host_slots;
    if (host_slots && ckpt_.size() < static_cast<std::size_t>(kept) * slot_floats())
        ckpt_.resize(static_cast<std::size_t>(kept) * slot_floats());   // a larger window than any before
    lo_ = pos0 + rows - kept;
    n_valid_ = kept;
}

void recurrent_state::assign(const std::vector<float>& state, int32_t n) {
    if (state.size() != live_.size())
        fail("recurrent_state: a state of {} floats for one of {}", state.size(), live_.size());
    if (n < 0) fail("recurrent_state: length {}: expected >= 0", n);
    std::copy(state.begin(), state.end(), live_.begin());
    len_ = lo_ = n;
    n_valid_ = 0;
}

void recurrent_state::end_window(int32_t n) {
    if (empty()) return;
    len_ = n;
}

}  // namespace sluice
