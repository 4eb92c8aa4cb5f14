// gpu_model_logits_equal_cpu_model_logits: every golden fixture GGUF (tests/golden/fixtures/*/
// model-*.gguf: random llama, qwen3, qwen3moe and qwen2moe models made by transformers and
// written as llama.cpp writes them) loaded by load_model (CPU) and load_model_cuda (GPU):
//   - a 12-token prompt as one window, then 16 greedy steps (the CPU's pick fed to both):
//     every logit compared bit for bit, greedy picks compared;
//   - E1 on the GPU: the prompt fed one token at a time gives the window's last-row logits.
// Exit 0 when every fixture is bit-identical, 1 otherwise, 77 (skipped) without a GPU.
// Usage: model_parity [PATH...]: fixture folders (<dir>/*/model-*.gguf) or .gguf files
// (default: tests/golden/fixtures beside this file).
#include <cstdio>

#if __cplusplus >= 202002L   // models/model.h needs C++20 (std::span); CMake builds CUDA as C++17

#include "models/cuda_model.h"

#include "core/thread_pool.h"
#include "io/model_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
    const bool ok = c.diff == 0 && e1;
    std::printf("%s %-40s %-9s logits %zu/%zu bit-identical (max |diff| %.3g), greedy picks %d/%d equal, GPU E1 %s\n",
                ok ? "PASS" : "FAIL", (path.parent_path().filename() / path.filename()).string().c_str(), hp.arch.c_str(),
                c.total - c.diff, c.total, c.max_abs, picks_equal, steps + 1, e1 ? "holds" : "BROKEN");
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
                        if (e.path().extension() == ".gguf" && e.path().filename().string().rfind("model-", 0) == 0)
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
            // Architectures without a CUDA forward yet (the hybrid DeltaNet models) are listed,
            // not compared.
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
