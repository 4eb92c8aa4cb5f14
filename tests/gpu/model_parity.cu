// gpu_model_logits_equal_cpu_model_logits: every golden fixture GGUF (tests/golden/fixtures/*/
// model-*.gguf and converted-*.gguf: random llama, qwen3, qwen3moe, qwen2moe, qwen3next and
// qwen35moe models made by transformers and
// written as llama.cpp writes them) loaded by load_model (CPU) and load_model_cuda (GPU):
//   - a 12-token prompt as one window, then 16 greedy steps (the CPU's pick fed to both):
//     every logit compared bit for bit, greedy picks compared;
//   - E1 on the GPU: the prompt fed one token at a time gives the window's last-row logits;
//   - a 4-row window rolled back to 2 rows, then 3 rows from there, compared likewise;
//   - a conversation resumed through the prefix cache (sync_kv_to_host, store, restore,
//     load_kv_from_host): its next rows equal the CPU's;
//   - a decode step of three sequences in one forward_batch (one row a segment) equals each
//     row decoded alone (added in session 27, after the last H200 run).
// The hybrid fixtures (qwen3next, qwen35moe) exercise the DeltaNet kernels and the device
// recurrent state's checkpoints.
// Exit 0 when every fixture is bit-identical, 1 otherwise, 77 (skipped) without a GPU.
// Usage: model_parity [PATH...]: fixture folders (<dir>/*/model-*.gguf, and the hybrids'
// <dir>/*/converted-*.gguf) or .gguf files
// (default: tests/golden/fixtures beside this file).
#include <cstdio>

#if __cplusplus >= 202002L   // models/model.h needs C++20 (std::span); CMake builds CUDA as C++17

#include "models/cuda_model.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "models/model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace sluice;
namespace fs = std::filesystem;

namespace {

int argmax(const float* x, int n) {
    int b = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[b]) b = i;
    return b;
}

struct cmp {
    size_t diff = 0, total = 0;
    double max_abs = 0.0;
    void add(const float* a, const float* b, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            ++total;
            if (std::memcmp(&a[i], &b[i], 4) != 0) {
                ++diff;
                max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
            }
        }
    }
};

int run_fixture(const fs::path& path, thread_pool& pool) {
    auto mf = model_file::open(path);
    load_options o;
    o.n_ctx = 64;
    auto cpu = load_model(*mf, o);
    auto gpu = load_model_cuda(*mf, o, 0);
    const model_hparams& hp = cpu->hparams();
    const int V = hp.n_vocab;
    forward_scratch sc = cpu->make_scratch(16, pool), sg = gpu->make_scratch(16, pool);
    kv_cache kc(cpu->kv_shape_for(64)), kg(gpu->kv_shape_for(64)), kg1(gpu->kv_shape_for(64));
    std::vector<token_id> prompt(12);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<token_id>((i * 7919 + 13) % static_cast<size_t>(V));
    std::vector<float> lc(prompt.size() * static_cast<size_t>(V)), lg(lc.size());
    cpu->forward(prompt, 0, kc, sc, lc.data());
    gpu->forward(prompt, 0, kg, sg, lg.data());
    cmp c;
    c.add(lc.data(), lg.data(), lc.size());
    // E1 on the GPU: one token at a time into another cache.
    std::vector<float> l1(static_cast<size_t>(V));
    for (size_t i = 0; i < prompt.size(); ++i)
        gpu->forward(std::span<const token_id>(&prompt[i], 1), static_cast<int32_t>(i), kg1, sg, l1.data());
    const bool e1 = std::memcmp(l1.data(), lg.data() + (prompt.size() - 1) * V, static_cast<size_t>(V) * 4) == 0;
    // Greedy decode, teacher-forced by the CPU's pick.
    int picks_equal = 0, steps = 16;
    token_id next = argmax(lc.data() + (prompt.size() - 1) * V, V);
    picks_equal += next == argmax(lg.data() + (prompt.size() - 1) * V, V);
    std::vector<float> sc1(static_cast<size_t>(V)), sg1(sc1.size());
    for (int s = 0; s < steps; ++s) {
        const int32_t pos = static_cast<int32_t>(prompt.size()) + s;
        cpu->forward(std::span<const token_id>(&next, 1), pos, kc, sc, sc1.data());
        gpu->forward(std::span<const token_id>(&next, 1), pos, kg, sg, sg1.data());
        c.add(sc1.data(), sg1.data(), sc1.size());
        const token_id a = argmax(sc1.data(), V), b = argmax(sg1.data(), V);
        picks_equal += a == b;
        next = a;
    }
    // A verify window rolled back: 4 rows, 2 kept (kv_cache::truncate; a hybrid model's recurrent
    // state comes back from the window's checkpoints), then 3 rows from there.
    {
        const int32_t pos = static_cast<int32_t>(prompt.size()) + steps;
        std::vector<token_id> w1(4), w2(3);
        for (size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<token_id>((next + 1 + i * 31) % static_cast<size_t>(V));
        for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<token_id>((next + 7 + i * 17) % static_cast<size_t>(V));
        std::vector<float> wc(w1.size() * static_cast<size_t>(V)), wg(wc.size());
        cpu->forward(w1, pos, kc, sc, wc.data());
        gpu->forward(w1, pos, kg, sg, wg.data());
        c.add(wc.data(), wg.data(), wc.size());
        kc.truncate(pos + 2);
        kg.truncate(pos + 2);
        cpu->forward(w2, pos + 2, kc, sc, wc.data());
        gpu->forward(w2, pos + 2, kg, sg, wg.data());
        c.add(wc.data(), wg.data(), w2.size() * static_cast<size_t>(V));
    }
    // A resumed conversation through the prefix cache (E5): the GPU's prompt rows (and recurrent
    // state) copied to the host (sync_kv_to_host), kept, restored into a new cache and taken
    // back (load_kv_from_host); two more rows there equal the CPU's rows after the same prompt.
    bool resumed = false;
    {
        kv_cache kp(gpu->kv_shape_for(64)), kr(gpu->kv_shape_for(64)), kc2(cpu->kv_shape_for(64));
        std::vector<float> lp(prompt.size() * static_cast<size_t>(V));
        gpu->forward(prompt, 0, kp, sg, lp.data());
        gpu->sync_kv_to_host(kp);
        prefix_cache pc(size_t{1} << 30);
        pc.store(prompt, kp);
        std::vector<token_id> turn = prompt;
        turn.push_back(static_cast<token_id>((next + 3) % V));
        turn.push_back(static_cast<token_id>((next + 11) % V));
        const int32_t got = pc.restore(turn, static_cast<int32_t>(turn.size()) - 1, kr);
        gpu->load_kv_from_host(kr);
        const std::span<const token_id> rest(turn.data() + prompt.size(), 2);
        std::vector<float> rc(2 * static_cast<size_t>(V)), rg(rc.size());
        cpu->forward(prompt, 0, kc2, sc, lp.data());
        cpu->forward(rest, static_cast<int32_t>(prompt.size()), kc2, sc, rc.data());
        gpu->forward(rest, static_cast<int32_t>(prompt.size()), kr, sg, rg.data());
        cmp r;
        r.add(rc.data(), rg.data(), rc.size());
        resumed = got == static_cast<int32_t>(prompt.size()) && r.diff == 0;
        c.add(rc.data(), rg.data(), rc.size());
    }
    // A decode step of three sequences batched (forward_batch, one row a segment: each segment's
    // attention launches alone, and where the split kernel writes the output rows' int8 blocks
    // for wo it writes each segment's at its own row): every row's logits are the bits of the same
    // row decoded alone (E1 across sequences).
    bool batch_e1 = false;
    {
        const size_t lens[3] = {12, 9, 5};
        std::vector<std::unique_ptr<kv_cache>> alone_kv, batch_kv;
        std::vector<float> prefill(prompt.size() * static_cast<size_t>(V));
        std::vector<float> alone(3 * static_cast<size_t>(V)), batched(alone.size());
        token_id nexts[3];
        batch_segment segs[3];
        for (int i = 0; i < 3; ++i) {
            alone_kv.push_back(std::make_unique<kv_cache>(gpu->kv_shape_for(64)));
            batch_kv.push_back(std::make_unique<kv_cache>(gpu->kv_shape_for(64)));
            const std::span<const token_id> p(prompt.data(), lens[i]);
            gpu->forward(p, 0, *alone_kv[i], sg, prefill.data());
            gpu->forward(p, 0, *batch_kv[i], sg, prefill.data());
            nexts[i] = static_cast<token_id>((static_cast<size_t>(next) + 5 + 13 * static_cast<size_t>(i)) % static_cast<size_t>(V));
            gpu->forward(std::span<const token_id>(&nexts[i], 1), static_cast<int32_t>(lens[i]), *alone_kv[i], sg,
                         alone.data() + static_cast<size_t>(i) * V);
            segs[i].tokens = std::span<const token_id>(&nexts[i], 1);
            segs[i].pos0 = static_cast<int32_t>(lens[i]);
            segs[i].kv = batch_kv[i].get();
            segs[i].n_logits = 1;
        }
        gpu->forward_batch(segs, sg, batched.data());
        batch_e1 = std::memcmp(alone.data(), batched.data(), alone.size() * 4) == 0;
    }
    const bool ok = c.diff == 0 && e1 && resumed && batch_e1;
    std::printf("%s %-40s %-9s logits %zu/%zu bit-identical (max |diff| %.3g), greedy picks %d/%d equal, GPU E1 %s, "
                "prefix-cache resume %s, batch of 3 sequences %s\n",
                ok ? "PASS" : "FAIL", (path.parent_path().filename() / path.filename()).string().c_str(), hp.arch.c_str(),
                c.total - c.diff, c.total, c.max_abs, picks_equal, steps + 1, e1 ? "holds" : "BROKEN",
                resumed ? "exact" : "BROKEN", batch_e1 ? "as alone" : "BROKEN");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    std::vector<fs::path> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    if (args.empty()) args.push_back(fs::path(__FILE__).parent_path().parent_path() / "golden" / "fixtures");
    std::vector<fs::path> files;
    for (const fs::path& a : args) {
        if (fs::is_regular_file(a)) {
            files.push_back(a);
            continue;
        }
        std::vector<fs::path> found;
        if (fs::is_directory(a))
            for (const auto& d : fs::directory_iterator(a))
                if (d.is_directory())
                    for (const auto& e : fs::directory_iterator(d.path()))
                        if (const std::string fn = e.path().filename().string();
                            e.path().extension() == ".gguf" && (fn.rfind("model-", 0) == 0 || fn.rfind("converted-", 0) == 0))
                            found.push_back(e.path());
        if (found.empty()) {
            std::printf("FAIL: no model-*.gguf fixtures under %s\n", a.string().c_str());
            return 1;
        }
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    thread_pool pool(4);
    int failures = 0, skipped = 0;
    for (const auto& f : files) {
        try {
            // Architectures without a CUDA forward are listed, not compared.
            if (const std::string arch = model_file::open(f)->architecture(); !cuda_model_supports(arch)) {
                std::printf("SKIP %-40s %-9s no CUDA forward for this architecture yet\n",
                            (f.parent_path().filename() / f.filename()).string().c_str(), arch.c_str());
                ++skipped;
                continue;
            }
            failures += run_fixture(f, pool);
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", f.string().c_str(), e.what());
            ++failures;
        }
    }
    std::printf("%s: %d of %zu fixtures differ (%d skipped: architecture without a CUDA forward)\n",
                failures ? "FAIL" : "PASS", failures, files.size() - static_cast<size_t>(skipped), skipped);
    return failures ? 1 : 0;
}

#else

int main() {
    std::printf("SKIP: built as C++17 (CMake's CUDA dialect); bench/gpu/build.sh builds this test as C++20\n");
    return 77;
}

#endif
