// The CUDA model's copies of the KV caches (and hybrid models' recurrent states) in VRAM: made
// on a cache's first forward, keyed by its address, freed when the cache's release hook says it
// is gone; and the copies to and from the cache's host arrays that a prefix-cache checkpoint
// needs (model::sync_kv_to_host, load_kv_from_host).
#include "models/cuda_model.h"

#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"

namespace sluice::cuda_impl {

void cuda_model::free_kv(dkv& d) {
    cudaFree(d.buf);
    if (d.rec) cudaFree(d.rec);
    if (d.rec_ckpt) cudaFree(d.rec_ckpt);
    d = dkv{};
}

void cuda_model::drain_released() {
    std::vector<const kv_cache*> gone;
    {
        std::lock_guard<std::mutex> lock(released_->m);
        gone.swap(released_->caches);
    }
    bool synced = false;
    for (const kv_cache* p : gone) {
        auto it = kvs_.find(p);
        if (it == kvs_.end()) continue;
        if (!synced) {
            ck(cudaStreamSynchronize(stream_), "sync");
            clear_graphs();   // they hold the freed buffers' addresses
            synced = true;
        }
        free_kv(it->second);
        kvs_.erase(it);
    }
}

float* cuda_model::kv_for(kv_cache& kv) {
    drain_released();
    auto it = kvs_.find(&kv);
    const recurrent_shape& rs = kv.shape().rec;
    if (it != kvs_.end() && it->second.n_ctx == kv.shape().n_ctx) return it->second.buf;
    if (it != kvs_.end()) {
        ck(cudaStreamSynchronize(stream_), "sync");
        clear_graphs();
        free_kv(it->second);
        kvs_.erase(it);
    }
    if (spec_.hybrid && (rs.n_layer != hp_.n_rec_layer || rs.conv_floats != hp_.rec_conv_floats ||
                         rs.ssm_floats != hp_.rec_ssm_floats || rs.n_ckpt < 1))
        fail("cuda model: the KV cache's recurrent state ({} layers of {} + {} floats) is not this model's ({} of {} + "
             "{}): make it with kv_shape_for",
             rs.n_layer, rs.conv_floats, rs.ssm_floats, hp_.n_rec_layer, hp_.rec_conv_floats, hp_.rec_ssm_floats);
    dkv d;
    d.n_ctx = kv.shape().n_ctx;
    const size_t floats = static_cast<size_t>(hp_.n_layer) * 2 * static_cast<size_t>(d.n_ctx) * kv.row_floats();
    ck(cudaMalloc(&d.buf, floats * 4), "cudaMalloc (KV cache)");
    if (spec_.hybrid) {
        const size_t live = static_cast<size_t>(rs.n_layer) * static_cast<size_t>(rs.conv_floats + rs.ssm_floats);
        ck(cudaMalloc(&d.rec, live * 4), "cudaMalloc (recurrent state)");   // slots: begin_recurrent_device
        ck(cudaMemset(d.rec, 0, live * 4), "cudaMemset");
    }
    kvs_[&kv] = d;
    // When the cache goes, its device copy goes at the next forward (not from the hook's thread).
    kv.on_release([q = std::weak_ptr<release_queue>(released_), p = &kv] {
        if (auto r = q.lock()) {
            std::lock_guard<std::mutex> lock(r->m);
            r->caches.push_back(p);
        }
    });
    return d.buf;
}

// Per layer il the device cache holds K [n_ctx, row] then V [n_ctx, row] (kv_for); the host's
// kv.k(il), kv.v(il) are [n_ctx, row] each. A hybrid's live state has the host's layout.
void cuda_model::sync_kv_to_host(kv_cache& kv) {
    const auto it = kvs_.find(&kv);
    if (it == kvs_.end()) {
        if (kv.n_pos() > 0) fail("cuda model: sync_kv_to_host: this cache's {} rows were never computed here", kv.n_pos());
        return;
    }
    dkv& d = it->second;
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    // A window rolled back by kv.truncate is rolled back here at the next forward: now, then.
    if (d.rec) rewind_recurrent_device(d, kv.n_pos(), kv.recurrent().live().size());
    const size_t row = static_cast<size_t>(kv.row_floats()), layer = static_cast<size_t>(d.n_ctx) * row;
    const size_t bytes = static_cast<size_t>(kv.n_pos()) * row * 4;
    // On the model's stream (non-blocking: the legacy default stream does not wait for it).
    for (int il = 0; il < hp_.n_layer; ++il) {
        ck(cudaMemcpyAsync(kv.k(il), d.buf + 2 * static_cast<size_t>(il) * layer, bytes, cudaMemcpyDeviceToHost, stream_),
           "K rows");
        ck(cudaMemcpyAsync(kv.v(il), d.buf + (2 * static_cast<size_t>(il) + 1) * layer, bytes, cudaMemcpyDeviceToHost,
                           stream_),
           "V rows");
    }
    if (d.rec) {
        recurrent_state& r = kv.recurrent();
        if (r.length() != kv.n_pos())
            fail("cuda model: sync_kv_to_host: the recurrent state holds {} positions, the cache {}", r.length(),
                 kv.n_pos());
        ck(cudaMemcpyAsync(r.conv(0), d.rec, r.live().size() * 4, cudaMemcpyDeviceToHost, stream_), "recurrent state");
    }
    ck(cudaStreamSynchronize(stream_), "sync_kv_to_host");
}

void cuda_model::load_kv_from_host(kv_cache& kv) {
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    float* buf = kv_for(kv);
    dkv& d = kvs_.at(&kv);
    ck(cudaStreamSynchronize(stream_), "sync");
    const size_t row = static_cast<size_t>(kv.row_floats()), layer = static_cast<size_t>(d.n_ctx) * row;
    const size_t bytes = static_cast<size_t>(kv.n_pos()) * row * 4;
    for (int il = 0; il < hp_.n_layer; ++il) {
        ck(cudaMemcpyAsync(buf + 2 * static_cast<size_t>(il) * layer, kv.k(il), bytes, cudaMemcpyHostToDevice, stream_),
           "K rows");
        ck(cudaMemcpyAsync(buf + (2 * static_cast<size_t>(il) + 1) * layer, kv.v(il), bytes, cudaMemcpyHostToDevice,
                           stream_),
           "V rows");
    }
    if (d.rec) {
        recurrent_state& r = kv.recurrent();
        if (r.length() != kv.n_pos())
            fail("cuda model: load_kv_from_host: the recurrent state holds {} positions, the cache {}", r.length(),
                 kv.n_pos());
        ck(cudaMemcpyAsync(d.rec, r.conv(0), r.live().size() * 4, cudaMemcpyHostToDevice, stream_), "recurrent state");
        d.rec_len = d.rec_lo = kv.n_pos();   // no window checkpoints: only this length (and 0) can be resumed
        d.rec_valid = 0;
    }
    ck(cudaStreamSynchronize(stream_), "load_kv_from_host");   // the host arrays may change after the return
}

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
