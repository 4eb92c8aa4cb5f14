// `sluice bench` (include/sluice/bench.h): prefill, decode at depth, the verify-window cost curve
// and oracle-tape speculative decoding, each with its roofline ceiling. It drives a session
// (runtime/generate.h) and the speculative decoder (spec/verifier.h) directly, so what it times
// is the engine's own loop, with nothing of the tokenizer or the text stream around it.
#include "sluice/bench.h"

#include "core/cpu_count.h"
#include "core/error.h"
#include "io/model_file.h"
#include "models/model.h"
#include "placement/progress.h"
#include "runtime/generate.h"
#include "runtime/loaded_model.h"
#include "runtime/numa_setup.h"
#include "runtime/roofline.h"
#include "runtime/sampler.h"
#include "sluice/inspect.h"
#include "models/hybrid_mtp.h"
#include "runtime/bench_oracle.h"
#include "spec/session_target.h"
#include "spec/verifier.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

// The CUDA model (src/models/cuda_model.h) when this build has it.
#if defined(SLUICE_HAVE_CUDA) && __has_include("models/cuda_model.h")
#include "models/cuda_model.h"
#define SLUICE_BENCH_GPU 1
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

namespace sluice {

namespace {

using bench_oracle::mtp_paced_oracle;
using bench_oracle::oracle_drafter;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void validate(const bench_options& o) {
    auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
    if (o.n_threads < 0) fail("bench: -t/--threads: expected >= 0, got {}", o.n_threads);
    for (int p : o.n_prompt)
        if (!in(p, 1, 1 << 20)) fail("bench: -p/--n-prompt: expected 1..1048576 tokens, got {}", p);
    if (!in(o.n_gen, 0, 1 << 20)) fail("bench: -n/--n-gen: expected 0..1048576, got {}", o.n_gen);
    for (int d : o.depths)
        if (!in(d, 0, 1 << 22)) fail("bench: --ctx: expected depths 0..4194304, got {}", d);
    if (!in(o.repetitions, 1, 1000)) fail("bench: -r/--repetitions: expected 1..1000, got {}", o.repetitions);
    if (!in(o.spec_reps, 1, 1000)) fail("bench: --spec-reps: expected 1..1000, got {}", o.spec_reps);
    if (!in(o.chunk, 0, 4096)) fail("bench: --chunk: expected 1..4096 rows (0: the backend's default), got {}", o.chunk);
    // Every backend's default is at least 512 rows (default_prefill_rows).
    const int chunk = o.chunk > 0 ? o.chunk : k_cpu_prefill_rows;
    for (int t : o.windows)
        if (!in(t, 1, 16) || t > chunk)
            fail("bench: --windows: expected 1..16 rows and at most --chunk ({}), got {}", chunk, t);
    for (int t : o.spec_windows)
        if (!in(t, 1, 16) || t > chunk)
            fail("bench: --spec-windows: expected 1..16 rows and at most --chunk ({}), got {}", chunk, t);
    if (o.spec_policy != 0 && (!in(o.spec_policy, 2, 16) || o.spec_policy > chunk))
        fail("bench: --spec-policy: expected 2..16 rows and at most --chunk ({}) (0: none), got {}", chunk, o.spec_policy);
    if (o.gpu < -1) fail("bench: --gpu: expected a device index >= 0, got {}", o.gpu);
    // The same bound as the depths: window_depth + spec_n sizes the context (an int).
    if (!in(o.window_depth, -1, 1 << 22))
        fail("bench: --window-depth: expected 0..4194304 (or -1: the first depth), got {}", o.window_depth);
    if (!(o.accept >= 0.0 && o.accept <= 1.0)) fail("bench: --accept: expected 0..1, got {}", o.accept);
    if (!in(o.spec_n, 0, 1 << 22)) fail("bench: --spec-n: expected 0..4194304, got {}", o.spec_n);
    if (!(o.bandwidth_gb_s >= 0.0) || !std::isfinite(o.bandwidth_gb_s))
        fail("bench: --bandwidth: expected GB/s >= 0, got {}", o.bandwidth_gb_s);
}

// Mean and sample standard deviation of the seconds, and of tokens/s per repetition (llama-bench
// reports the mean of per-repetition speeds, not tokens over total time).
void finish(bench_result& r, double tokens) {
    const size_t n = r.seconds.size();
    r.reps = int(n);
    if (n == 0) return;
    std::vector<double> ts(n);
    for (size_t i = 0; i < n; ++i) ts[i] = r.seconds[i] > 0 ? tokens / r.seconds[i] : 0.0;
    auto mean_sd = [n](const std::vector<double>& v, double& mean, double& sd) {
        mean = std::accumulate(v.begin(), v.end(), 0.0) / double(n);
        double ss = 0.0;
        for (double x : v) ss += (x - mean) * (x - mean);
        sd = n > 1 ? std::sqrt(ss / double(n - 1)) : 0.0;
    };
    mean_sd(r.seconds, r.mean_s, r.stddev_s);
    mean_sd(ts, r.tok_s, r.stddev_tok_s);
}

// The ceiling is the smaller of the memory bound (bandwidth / bytes) and the compute bound
// (peak / operations), of those that are known.
void set_ceiling(bench_result& r, double bandwidth_gb_s, double bytes_per_token, double peak_ops_s,
                 double ops_per_token) {
    r.bytes_per_token = bytes_per_token;
    r.ops_per_token = ops_per_token;
    const roofline_bound b =
        bind_ceiling(ceiling_tok_s(bandwidth_gb_s, bytes_per_token), compute_ceiling_tok_s(peak_ops_s, ops_per_token));
    r.memory_ceiling_tok_s = b.memory_tok_s;
    r.compute_ceiling_tok_s = b.compute_tok_s;
    r.ceiling_tok_s = b.ceiling_tok_s;
    r.ceiling_bound = b.binds;
    r.ceiling_fraction = r.ceiling_tok_s > 0 ? r.tok_s / r.ceiling_tok_s : 0.0;
}

// Multiply-adds of one row from the tensor shapes: every 2-D (or wider) weight of the dense
// groups, n_expert_used / n_expert of the routed expert tensors, and the embedding matrix again
// when it is also the output projection (tied).
void fill_compute_model(const inspect_report& ir, const model_hparams& hp, compute_model& cm, double& routed) {
    routed = 0.0;
    for (const auto& t : ir.tensors) {
        if (t.shape.size() < 2) continue;   // norms, biases, gates of one value per row
        double elems = 1.0;
        for (int64_t d : t.shape) elems *= double(d);
        if (t.group == "embeddings") {
            if (ir.output_tied) cm.weight_macs_per_row += elems;
        } else if (t.group == "routed experts") {
            if (ir.expert_count > 0) routed += elems * double(ir.expert_used_count) / double(ir.expert_count);
        } else {
            cm.weight_macs_per_row += elems;
        }
    }
    cm.weight_macs_per_row += routed;
    cm.attn_macs_per_position = double(hp.n_layer) * 2.0 * double(hp.n_head) * double(hp.head_dim);
}

std::string human_bytes(double b) {
    if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
    if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
    if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
    return fmt::format("{:.0f} B", b);
}

}  // namespace

bool bench_gpu_built() {
#ifdef SLUICE_BENCH_GPU
    return true;
#else
    return false;
#endif
}

bench_report run_bench(const bench_options& o, const std::function<void(std::string_view)>& progress) {
    validate(o);
    auto say = [&](const std::string& s) {
        if (progress) progress(s);
    };
    std::vector<int> depths = o.depths;
    std::sort(depths.begin(), depths.end());
    depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
    const std::vector<int>& windows = o.windows;
    const int window_depth = o.window_depth >= 0 ? o.window_depth : depths.empty() ? 0 : depths.front();
    const int spec_n = o.spec_n > 0 ? o.spec_n : o.n_gen;
    const bool any_windows = !windows.empty() || ((!o.spec_windows.empty() || o.spec_policy != 0) && spec_n > 0);

    // Positions the cache must hold: the deepest prompt plus what is decoded after it.
    int longest = 1;
    for (int p : o.n_prompt) longest = std::max(longest, p);
    for (int d : depths) longest = std::max(longest, d + o.n_gen);
    if (any_windows) longest = std::max(longest, window_depth + std::max(spec_n, 16) + 16);
    const int n_ctx = longest + 1;

    bench_report rep;
    const inspect_report ir = inspect_model(o.model_path);
    // The load's long steps (a --no-mmap read, a GPU's uploads) on stderr unless quiet (a bar on
    // a terminal).
    placement::progress prog(stderr, progress ? placement::progress_style::automatic : placement::progress_style::silent);
    const read_progress reading = reading_progress(prog);
    auto file = model_file::open(o.model_path, o.mmap ? file_access::map : file_access::read, &reading);
    std::unique_ptr<model> net;
    if (o.gpu >= 0) {
#ifdef SLUICE_BENCH_GPU
        // Routed experts under the budget (all in VRAM without one), ranked by the profile beside
        // the model when there is one.
        net = load_model_on(o.model_path, *file, n_ctx,
                            {.gpu = o.gpu, .vram_budget = o.vram_budget, .prefill_stream_rows = o.prefill_stream_rows,
                             .adaptive_cache = o.adaptive_cache},
                            &prog);
#else
        fail("bench: --gpu {}: this build has no CUDA backend (configure with -DSLUICE_CUDA=ON and nvcc)", o.gpu);
#endif
    } else {
        net = load_model(*file, load_options{n_ctx});
    }
    const model_hparams& hp = net->hparams();
    const kv_shape ks = net->kv_shape_for(1);
    // Rows per prefill forward: --chunk, or what `sluice run` uses for this model on this backend.
    const int chunk = o.chunk > 0 ? o.chunk : default_prefill_rows(*net, o.gpu);

    rep.model_path = o.model_path.string();
    rep.model = fmt::format("{}: {} layers, {} wide, {} heads ({} KV) of {}, {} vocab", hp.arch, hp.n_layer, hp.n_embd,
                            hp.n_head, hp.n_kv_head, hp.head_dim, hp.n_vocab);
    if (hp.n_expert > 0) rep.model += fmt::format(", {} experts ({} used) of {}", hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
    rep.machine = machine_description();
    rep.backend = o.gpu >= 0 ? fmt::format("cuda:{}", o.gpu) : "cpu";
    rep.threads = o.n_threads > 0 ? o.n_threads : usable_cpus();
    rep.chunk = chunk;
    rep.warmup = o.warmup;
    rep.file_bytes = ir.total_bytes;

    traffic_model tm;
    for (const auto& g : ir.groups) {
        rep.groups.push_back({g.name, g.bytes, g.bytes_per_token});
        if (g.name == "embeddings") tm.embd_row_bytes = g.bytes_per_token;
        else if (g.name == "routed experts") tm.routed_bytes_total = g.bytes;
        else tm.shared_bytes += g.bytes_per_token;
    }
    tm.n_expert = ir.expert_count;
    tm.n_expert_used = ir.expert_used_count;
    tm.kv_bytes_per_position = uint64_t(ks.n_layer) * 2 * uint64_t(ks.n_kv_head) * uint64_t(ks.head_dim) * sizeof(float);
    rep.bytes_per_token = ir.bytes_per_token;
    rep.kv_bytes_per_position = tm.kv_bytes_per_position;
    rep.shared_bytes = tm.shared_bytes;
    rep.embd_row_bytes = tm.embd_row_bytes;
    rep.routed_bytes_total = tm.routed_bytes_total;
    rep.n_expert = tm.n_expert;
    rep.n_expert_used = tm.n_expert_used;

    // NUMA: the threads over the nodes and the routed experts on their nodes, before any test.
    const numa_setup numa = setup_numa(o.numa, rep.threads, *file);
    rep.numa_nodes = numa.plan.n_nodes();
    rep.threads_per_node = numa.plan.threads_per_node;
    rep.numa_simulated = numa.plan.simulated && rep.numa_nodes > 1;
    rep.numa = numa.describe();
    say("numa: " + rep.numa);

    session_options so;
    so.n_ctx = n_ctx;
    so.n_threads = rep.threads;
    so.prefill_chunk = chunk;
    so.pool.numa = numa.topology;
    session s(*net, so);
    session_target target(s, chunk);
    const int32_t n_vocab = hp.n_vocab;

    // Bandwidth, measured with the threads the model runs on.
    if (o.probe_bandwidth) {
        const gpu_probe g = measure_gpu();
        rep.gpu_present = g.present;
        rep.gpu_note = g.note;
        rep.pcie_h2d_gb_s = g.pcie_h2d_gb_s;
        rep.hbm_read_gb_s = g.hbm_read_gb_s;
        rep.gpu_peak_ops_s = g.peak_int8_ops_s;
    } else {
        rep.gpu_note = "not probed";
    }
    if (o.bandwidth_gb_s > 0) {
        rep.bandwidth_gb_s = o.bandwidth_gb_s;
        rep.bandwidth_source = "given (--bandwidth)";
    }
    if (o.gpu >= 0 && rep.bandwidth_gb_s == 0 && rep.hbm_read_gb_s > 0) {
        rep.bandwidth_gb_s = rep.hbm_read_gb_s;  // the weights are read from VRAM
        rep.bandwidth_source = "gpu hbm probe";
    }
    if (o.probe_bandwidth) {
        const ram_probe rp = measure_ram_read(s.pool(), o.probe_bytes);
        rep.ram_read_gb_s = rp.read_gb_s;
        rep.ram_probe_bytes = rp.buffer_bytes;
        if (rep.bandwidth_gb_s == 0) {
            rep.bandwidth_gb_s = rp.read_gb_s;
            rep.bandwidth_source = "ram probe";
        }
        say(fmt::format("bandwidth: RAM read {:.1f} GB/s ({} threads, {} probe); GPU: {}", rp.read_gb_s, rp.threads,
                        human_bytes(double(rp.buffer_bytes)), rep.gpu_note));
    }
    if (rep.bandwidth_gb_s == 0) rep.bandwidth_source = "none (no probe): no ceilings";
    rep.ceiling_tok_s = ceiling_tok_s(rep.bandwidth_gb_s, double(rep.bytes_per_token));

    // Compute peak: the device that computes the weights (the GPU's tensor cores with --gpu,
    // else the CPU's int8 dot kernel, timed with the model's threads).
    compute_model cm;
    fill_compute_model(ir, hp, cm, rep.routed_macs_per_row);
    rep.weight_macs_per_row = cm.weight_macs_per_row;
    rep.attn_macs_per_position = cm.attn_macs_per_position;
    if (o.probe_bandwidth) {
        const cpu_peak_probe cp = measure_cpu_int8_peak(s.pool());
        rep.cpu_peak_ops_s = cp.int8_ops_s;
        rep.cpu_peak_isa = cp.isa;
        say(fmt::format("compute: CPU int8 dot kernel ({}, {} threads) {:.1f} Gop/s", cp.isa, cp.threads,
                        cp.int8_ops_s / 1e9));
    }
    if (o.gpu >= 0) {
        rep.peak_ops_s = rep.gpu_peak_ops_s;
        rep.peak_source = rep.gpu_peak_ops_s > 0 ? "gpu int8 tensor cores (device attributes x table)"
                                                 : "none: no GPU peak for this device";
    } else if (rep.cpu_peak_ops_s > 0) {
        rep.peak_ops_s = rep.cpu_peak_ops_s;
        rep.peak_source = fmt::format("cpu int8 dot kernel ({}), measured", rep.cpu_peak_isa);
    } else {
        rep.peak_source = "none (no probe): no compute bounds";
    }
    rep.compute_ceiling_tok_s = compute_ceiling_tok_s(rep.peak_ops_s, decode_ops_per_token(cm, 0, 1));

    // One token stream for every test: prompts of different lengths are prefixes of each other,
    // so a deeper cache fill continues a shallower one.
    std::vector<int32_t> tokens(size_t(longest) + 32);
    {
        std::mt19937_64 rng(o.seed);
        for (auto& t : tokens) t = int32_t(rng() % uint64_t(n_vocab));
    }
    auto span_of = [&](size_t b, size_t n) { return std::span<const int32_t>(tokens.data() + b, n); };
    // Back to the first n tokens: a truncation, or where the cache cannot roll back that far (a
    // hybrid model's recurrent state keeps only the last window's rows) a new prefill of them.
    // Never inside a timed region.
    auto back_to = [&](int n) {
        if (s.can_truncate(n)) return s.truncate(n);
        s.truncate(0);
        if (n > 0) s.prefill(span_of(0, size_t(n)));
    };
    // Fills the cache with tokens [0, n) (reusing what it already holds) and nothing more.
    auto fill_to = [&](int n) {
        if (s.n_pos() > n) back_to(n);
        if (s.n_pos() < n) s.prefill(span_of(size_t(s.n_pos()), size_t(n - s.n_pos())));
    };

    // Warm-up: one chunk touches the embeddings, every dense weight and most experts (mapped
    // pages come in from the page cache on first touch).
    s.prefill(span_of(0, size_t(std::min(chunk, longest))));
    s.truncate(0);

    // Prefill from an empty cache.
    for (int p : o.n_prompt) {
        bench_result r;
        r.test = fmt::format("pp{}", p);
        r.kind = "prefill";
        r.n_prompt = p;
        r.rows = std::min(chunk, p);
        for (int i = 0; i < o.repetitions; ++i) {
            s.truncate(0);
            const auto t0 = clock_type::now();
            s.prefill(span_of(0, size_t(p)));
            r.seconds.push_back(seconds_since(t0));
        }
        finish(r, p);
        set_ceiling(r, rep.bandwidth_gb_s, prefill_bytes_per_token(tm, p, chunk), rep.peak_ops_s,
                    prefill_ops_per_token(cm, p));
        say(fmt::format("{}: {:.2f} tok/s", r.test, r.tok_s));
        rep.results.push_back(std::move(r));
    }

    keyed_sampler greedy(n_vocab, sampling_params::greedy());
    // The placement's counters around a test (decode, spec): its own hit rate and swaps, where
    // the run's totals mix the prefills' and every depth's lookups.
    struct cache_counts {
        uint64_t hits = 0, experts = 0, swaps = 0;
        bool split = false;
    };
    auto counts_now = [&]() {
        cache_counts c;
#ifdef SLUICE_BENCH_GPU
        if (o.gpu >= 0)
            if (const auto m = cuda_placement_metrics(*net)) c = {m->hits, m->experts, m->swaps, true};
#endif
        return c;
    };
    auto set_cache_figures = [](bench_result& r, const cache_counts& before, const cache_counts& after) {
        if (!after.split || after.experts <= before.experts) return;
        r.hit_rate = double(after.hits - before.hits) / double(after.experts - before.experts);
        r.swaps = int64_t(after.swaps - before.swaps);
    };
    // Serial greedy decoding of n tokens after a prompt of `len` tokens (the cache holds len - 1).
    auto decode_serial = [&](int len, int n, drafter* d, int window, depth_policy* policy = nullptr) {
        speculative_decoder dec(target, greedy, d, policy);
        decode_options opt;
        opt.max_tokens = n;
        opt.max_window = window;
        opt.prefill_chunk = chunk;
        opt.calibrate_policy = false;
        return dec.generate(span_of(0, size_t(len)), opt);
    };

    // Decode after prompts of each depth, deepest first: one fill to the deepest (continuing what
    // the prefill tests left), then each shallower depth is a truncation, which costs nothing.
    // Reported shallowest first.
    const size_t first_decode = rep.results.size();
    if (o.n_gen > 0)
        for (auto it = depths.rbegin(); it != depths.rend(); ++it) {
            const int d = *it;
            const int len = std::max(d, 1);
            bench_result r;
            r.test = fmt::format("tg{}@d{}", o.n_gen, d);
            r.kind = "decode";
            r.n_gen = o.n_gen;
            r.depth = d;
            r.rows = 1;
            fill_to(len - 1);
            // One untimed token first, as llama-bench warms up before its timed runs: the first
            // step at a depth captures the decode step's graphs (a split model's: three segments a
            // split layer) and touches its buffers, which the first repetition would otherwise pay.
            if (o.warmup) {
                decode_serial(len, 1, nullptr, 1);
                back_to(len - 1);
            }
            const cache_counts before = counts_now();
            for (int i = 0; i < o.repetitions; ++i) {
                const auto t0 = clock_type::now();
                decode_result res = decode_serial(len, o.n_gen, nullptr, 1);
                r.seconds.push_back(seconds_since(t0));
                if (int(res.tokens.size()) != o.n_gen)
                    fail("bench: {}: decoded {} tokens, expected {}", r.test, res.tokens.size(), o.n_gen);
                back_to(len - 1);
            }
            set_cache_figures(r, before, counts_now());
            finish(r, o.n_gen);
            set_ceiling(r, rep.bandwidth_gb_s, decode_bytes_per_token(tm, len - 1, o.n_gen), rep.peak_ops_s,
                        decode_ops_per_token(cm, len - 1, o.n_gen));
            say(fmt::format("{}: {:.2f} tok/s{}", r.test, r.tok_s,
                            r.hit_rate >= 0 ? fmt::format(" (hit rate {:.3f}, {} swaps)", r.hit_rate, r.swaps) : ""));
            rep.results.insert(rep.results.begin() + std::ptrdiff_t(first_decode), std::move(r));
        }

    // The verify-window cost curve: one forward of T rows after window_depth cached positions,
    // rolled back each time.
    const int wlen = std::max(window_depth, 1);
    if (!windows.empty()) {
        fill_to(wlen);
        std::vector<float> logits(size_t(16) * size_t(n_vocab));  // [T, n_vocab]
        for (int t : windows) {
            bench_result r;
            r.test = fmt::format("win {}@d{}", t, window_depth);
            r.kind = "window";
            r.depth = wlen;
            r.rows = t;
            auto window = span_of(size_t(wlen), size_t(t));
            for (int i = 0; i <= o.repetitions; ++i) {  // the first run warms caches: not counted
                const auto t0 = clock_type::now();
                target.forward(window, logits.data());
                const double secs = seconds_since(t0);
                target.commit(0);
                if (i > 0) r.seconds.push_back(secs);
            }
            finish(r, t);  // rows per second
            set_ceiling(r, rep.bandwidth_gb_s, forward_bytes(tm, t, wlen) / t, rep.peak_ops_s,
                        forward_ops(cm, t, wlen) / t);
            say(fmt::format("{}: {:.2f} ms ({:.2f} rows/s)", r.test, r.mean_s * 1e3, r.tok_s));
            rep.results.push_back(std::move(r));
        }
    }

    // Oracle-tape speculative decoding at window_depth: the tape is serial greedy decoding's
    // output, and every run must reproduce it (drafted = serial). Each window size, then
    // (--spec-policy) windows the depth policy sizes.
    struct spec_run {
        int rows;     // T, or the policy's largest window
        bool policy;  // the depth policy picks each window's drafts
    };
    std::vector<spec_run> spec_runs;
    for (int t : o.spec_windows) spec_runs.push_back({t, false});
    if (o.spec_policy != 0) spec_runs.push_back({o.spec_policy, true});
    if (!spec_runs.empty() && spec_n > 0) {
        fill_to(wlen - 1);
        const decode_result tape = decode_serial(wlen, spec_n, nullptr, 1);
        back_to(wlen - 1);
        // The policy's window costs, measured once before the first policy run (untimed, nothing
        // committed; after the fixed windows' runs, whose expert cache it would otherwise move) as
        // an engine measures them at start. Each run starts from a copy sized to its window, so
        // every repetition starts alike.
        std::optional<depth_policy> calibrated;
        auto policy_for = [&](int rows) {
            if (!calibrated) {
                depth_policy_params pp;
                pp.max_rows = o.spec_policy;
                calibrated.emplace(pp);
                std::vector<float> scratch(size_t(o.spec_policy) * size_t(n_vocab));   // [rows, n_vocab]
                calibrated->calibrate(target, scratch, span_of(0, size_t(wlen)).back(), 5, n_ctx - target.n_past());
            }
            depth_policy_params pp;
            pp.max_rows = rows;
            depth_policy policy(pp);
            policy.adopt_costs(*calibrated);
            return policy;
        };
        // Each run with the oracle's drafts, then (models that carry an MTP head) again with the
        // head paying for its drafts.
        std::unique_ptr<mtp_head> head;
        if (has_mtp_head(*net)) head = make_mtp_head(*net, s.pool(), n_ctx, chunk, nullptr);
        // One timed run of windows of t rows; the caller goes back to wlen - 1 positions.
        auto oracle_run = [&](int t, uint64_t seed, depth_policy* policy) {
            oracle_drafter od(tape.tokens, size_t(wlen), o.accept, n_vocab, seed);
            return decode_serial(wlen, spec_n, t > 1 ? &od : nullptr, t, policy);
        };
        auto mtp_paced_run = [&](int t, uint64_t seed, depth_policy* policy, double& secs) {
            // The head sees every prompt row: the prompt again, through the drafter (untimed).
            s.truncate(0);
            mtp_drafter_params mp;
            mp.max_draft = t - 1;
            mtp_drafter md(s, *head, sampling_params::greedy(), mp);
            md.prefill(span_of(0, size_t(wlen - 1)));
            oracle_drafter od(tape.tokens, size_t(wlen), o.accept, n_vocab, seed);
            mtp_paced_oracle pd(md, od);
            speculative_decoder dec(md.target(), greedy, &pd, policy);
            decode_options opt;
            opt.max_tokens = spec_n;
            opt.max_window = t;
            opt.prefill_chunk = chunk;
            opt.calibrate_policy = false;
            const auto t0 = clock_type::now();
            decode_result res = dec.generate(span_of(0, size_t(wlen)), opt);
            secs = seconds_since(t0);
            return res;
        };
        for (const bool paced : {false, true}) {
            if (paced && !head) break;
            for (const spec_run& run : spec_runs) {
                // The policy's windows with the MTP head: 4 drafts at most, as `sluice run --spec
                // mtp` caps them (k_mtp_max_drafts).
                const int t = paced && run.policy ? std::min(run.rows, k_mtp_max_drafts + 1) : run.rows;
                if (paced && t < 2) continue;
                bench_result r;
                r.test = fmt::format("{} {}{}@d{}", paced ? "spec+mtp" : "spec", run.policy ? "policy " : "", t, window_depth);
                r.kind = "spec";
                r.n_gen = spec_n;
                r.depth = window_depth;
                r.rows = t;
                r.accept = o.accept;
                int64_t steps = 0, emitted = 0, proposed = 0, kept = 0;
                std::array<int64_t, 17> windows_of{};   // [rows] windows of that many rows, all repetitions
                // Paced runs also prefill the prompt again (untimed): their lookups are not the test's.
                const cache_counts before = counts_now();
                for (int i = 0; i < o.spec_reps; ++i) {
                    const uint64_t seed = o.seed * 1000003u + uint64_t(t) * 1009u + uint64_t(i) + (run.policy ? 7919u : 0u);
                    std::optional<depth_policy> policy;
                    if (run.policy) policy = policy_for(t);
                    depth_policy* pol = policy ? &*policy : nullptr;
                    double secs = 0;
                    const auto t0 = clock_type::now();
                    decode_result res = paced ? mtp_paced_run(t, seed, pol, secs) : oracle_run(t, seed, pol);
                    r.seconds.push_back(paced ? secs : seconds_since(t0));
                    if (pol) {
                        r.policy_costs_calibrated_ms.resize(size_t(t));
                        r.policy_costs_end_ms.resize(size_t(t));
                        for (int rows = 1; rows <= t; ++rows) {
                            r.policy_costs_calibrated_ms[size_t(rows - 1)] = 1e3 * calibrated->cost(rows);
                            r.policy_costs_end_ms[size_t(rows - 1)] = 1e3 * pol->cost(rows);
                        }
                        r.policy_draft_cost_ms = 1e3 * pol->draft_cost();
                    }
                    back_to(wlen - 1);
                    r.same_tokens = r.same_tokens && res.token_sha == tape.token_sha;
                    steps += res.stats.steps;
                    emitted += res.stats.tokens;
                    proposed += res.stats.drafts_proposed;
                    kept += res.stats.drafts_accepted;
                    for (size_t k = 1; k <= 16; ++k) windows_of[k] += res.stats.windows_of_rows[k];
                }
                if (!paced) set_cache_figures(r, before, counts_now());
                finish(r, spec_n);
                r.reps = o.spec_reps;
                r.tokens_per_step = steps > 0 ? double(emitted) / double(steps) : 0.0;
                r.acceptance = proposed > 0 ? double(kept) / double(proposed) : 0.0;
                r.expected_tokens_per_step = run.policy ? 0.0 : expected_window_tokens(t > 1 ? o.accept : 0.0, t);
                // Each window of k rows reads forward_bytes(k, ~mid-run depth); the run's windows
                // yield `emitted` tokens.
                double all_bytes = 0.0, all_ops = 0.0, all_rows = 0.0;
                for (size_t k = 1; k <= 16; ++k) {
                    if (windows_of[k] == 0) continue;
                    all_bytes += double(windows_of[k]) * forward_bytes(tm, int(k), wlen - 1 + spec_n / 2);
                    all_ops += double(windows_of[k]) * forward_ops(cm, int(k), wlen - 1 + spec_n / 2);
                    all_rows += double(windows_of[k]) * double(k);
                }
                r.rows_mean = steps > 0 ? all_rows / double(steps) : 0.0;
                set_ceiling(r, rep.bandwidth_gb_s, emitted > 0 ? all_bytes / double(emitted) : 0.0, rep.peak_ops_s,
                            emitted > 0 ? all_ops / double(emitted) : 0.0);
                say(fmt::format("{}: {:.2f} tok/s, {:.2f} tokens per window of {:.2f} rows{}{}", r.test, r.tok_s,
                                r.tokens_per_step, r.rows_mean, paced ? " (the MTP head drafting)" : "",
                                r.same_tokens ? "" : ", TOKENS DIFFER FROM SERIAL"));
                if (!r.policy_costs_end_ms.empty())
                    say(fmt::format("{}: the policy priced windows of 1..{} rows at {:.3f} ms (calibrated), {:.3f} ms "
                                    "(at the run's end), a draft at {:.3f} ms", r.test, t,
                                    fmt::join(r.policy_costs_calibrated_ms, " "), fmt::join(r.policy_costs_end_ms, " "),
                                    r.policy_draft_cost_ms));
                rep.results.push_back(std::move(r));
            }
        }
    }

    rep.placement_note = fmt::format(
        "expert placement (VRAM cache, PCIe share, CPU lane) is not active in this run: every routed expert ran on "
        "the {}, so there is no hit rate or per-lane time to report (a split needs --gpu N and a --vram-budget below "
        "the routed experts' size)", o.gpu >= 0 ? "GPU (the whole model in VRAM)" : "CPU");
#ifdef SLUICE_BENCH_GPU
    if (o.gpu >= 0)
        if (const auto m = cuda_placement_metrics(*net)) {
            const cuda_placement_info pi = cuda_placement_of(*net);
            const nlohmann::json pj{{"vram_budget_bytes", o.vram_budget},
                                    {"resident_experts", pi.resident},
                                    {"total_experts", pi.total},
                                    {"resident_bytes", pi.resident_bytes},
                                    {"total_bytes", pi.total_bytes},
                                    {"lanes", pi.pcie_lane ? "gpu (VRAM cache) + pcie (staging slots) + cpu" : "gpu (VRAM cache) + cpu"},
                                    {"adaptive_cache", pi.adaptive_cache},
                                    {"adaptive_note", pi.adaptive_note},
                                    {"whole_layers", pi.whole_layers},
                                    {"pcie_lane", pi.pcie_lane},
                                    {"pcie_note", pi.pcie_note},
                                    {"staging_slots", pi.staging_slots},
                                    {"staging_bytes", pi.staging_bytes},
                                    {"pcie_gb_s_calibrated", pi.pcie_gb_s},
                                    {"cpu_expert_gb_s_calibrated", pi.cpu_gb_s},
                                    {"prefill_stream", pi.prefill_stream},
                                    {"prefill_stream_bytes", pi.stream_bytes},
                                    {"prefill_stream_rows", pi.stream_rows},
                                    {"prefill_stream_note", pi.stream_note},
                                    {"metrics", m->to_json()}};
            rep.placement_json = pj.dump();
            rep.placement_note = fmt::format(
                "routed experts split: {} of {} (layer, expert) pairs in VRAM ({:.2f} of {:.2f} GB; {} whole layers, run "
                "without a host round trip), the rest copied over PCIe or computed by the CPU lane ({}); over the whole "
                "run, in the split layers: hit rate {:.3f} ({} hits, {} PCIe, {} CPU "
                "misses; PCIe share {:.3f}, {:.2f} GB copied), GPU lane {:.3f} s, PCIe {:.3f} s (predicted {:.3f}), CPU lane "
                "{:.3f} s measured; host: {:.3f} s waiting for routing, {:.3f} s launching before the CPU lane, "
                "{:.3f} s between split layers (the GPU's time there {:.3f} s); {}; {}; ceilings below assume the whole model in VRAM",
                pi.resident, pi.total, double(pi.resident_bytes) / 1e9, double(pi.total_bytes) / 1e9, pi.whole_layers,
                pi.pcie_lane ? fmt::format("PCIe lane: {} staging slots, {:.1f} GB/s calibrated; CPU {:.1f} GB/s",
                                           pi.staging_slots, pi.pcie_gb_s, pi.cpu_gb_s)
                             : "no PCIe lane: " + pi.pcie_note,
                m->hit_rate(), m->hits, m->pcie, m->cpu, m->pcie_share(), double(m->pcie_bytes) / 1e9,
                m->gpu_lane.measured, m->pcie_lane.measured, m->pcie_lane.predicted, m->cpu_lane.measured,
                m->host.routing_wait, m->host.launch, m->host.between, m->gpu_between,
                pi.prefill_stream
                    ? fmt::format("prefill streaming for windows of {} ({:.2f} GB of layer buffers): {} layer "
                                  "forwards streamed, {:.2f} GB in {:.3f} s (predicted {:.3f})",
                                  pi.stream_rows >= placement::k_never_streams ? std::string("no size (the cost model never streams here)")
                                                                        : fmt::format(">= {} rows", pi.stream_rows),
                                  double(pi.stream_bytes) / 1e9, m->streamed_layers, double(m->streamed_bytes) / 1e9,
                                  m->stream_lane.measured, m->stream_lane.predicted)
                    : "no prefill streaming: " + pi.stream_note,
                pi.adaptive_cache ? fmt::format("adaptive cache: {} swaps, {:.2f} GB copied", m->swaps, double(m->swap_bytes) / 1e9)
                                  : "no adaptive cache: " + pi.adaptive_note);
        }
#endif
    rep.notes.push_back(fmt::format(
        "ceilings: {} GB/s ({}) / bytes per token; traffic model: each weight byte once per forward, routed experts "
        "by expected distinct experts under uniform routing, K/V f32 of every cached position",
        fmt::format("{:.1f}", rep.bandwidth_gb_s), rep.bandwidth_source));
    rep.notes.push_back(fmt::format(
        "ceiling = min(memory bound, compute bound); compute bound: {} ops/s ({}) / 2 x multiply-adds per token "
        "({:.3g} per row through the weights, {:.3g} per attended position)",
        fmt::format("{:.3g}", rep.peak_ops_s), rep.peak_source, rep.weight_macs_per_row, rep.attn_macs_per_position));
    if (std::find(depths.begin(), depths.end(), 32768) == depths.end())
        rep.notes.push_back("decode depths run: the --ctx list (default 512,4096); add 32768 with --ctx when the "
                            "prefill time it costs is affordable");
    return rep;
}

std::string format_bench_text(const bench_report& r) {
    std::string s;
    s += fmt::format("model:     {} ({})\n           {}\n", r.model_path, human_bytes(double(r.file_bytes)), r.model);
    s += fmt::format("machine:   {}; {} threads; backend {}; prefill chunk {} rows\n", r.machine, r.threads, r.backend,
                     r.chunk);
    s += fmt::format("numa:      {}\n", r.numa);
    if (r.ram_probe_bytes > 0)
        s += fmt::format("bandwidth: RAM read {:.1f} GB/s ({} probe, {} threads)\n", r.ram_read_gb_s,
                         human_bytes(double(r.ram_probe_bytes)), r.threads);
    if (r.gpu_present)
        s += fmt::format("           GPU {}: PCIe host-to-device {:.1f} GB/s, HBM {:.0f} GB/s\n", r.gpu_note,
                         r.pcie_h2d_gb_s, r.hbm_read_gb_s);
    else
        s += fmt::format("           GPU: {}\n", r.gpu_note);
    std::string groups;
    for (const auto& g : r.groups)
        if (g.bytes_per_token > 0) groups += fmt::format("{}{} {}", groups.empty() ? "" : ", ", g.name, human_bytes(double(g.bytes_per_token)));
    s += fmt::format("roofline:  {} per decoded token ({}), K/V {} per cached position\n",
                     human_bytes(double(r.bytes_per_token)), groups, human_bytes(double(r.kv_bytes_per_position)));
    if (r.bandwidth_gb_s > 0)
        s += fmt::format("           ceiling {:.1f} tok/s at {:.1f} GB/s ({})\n", r.ceiling_tok_s, r.bandwidth_gb_s,
                         r.bandwidth_source);
    else
        s += fmt::format("           {}\n", r.bandwidth_source);
    s += fmt::format("compute:   {:.3g} multiply-adds per row through the weights, {:.3g} per attended position\n",
                     r.weight_macs_per_row, r.attn_macs_per_position);
    if (r.peak_ops_s > 0)
        s += fmt::format("           peak {:.1f} Gop/s ({}); decode ceiling {:.1f} tok/s\n", r.peak_ops_s / 1e9,
                         r.peak_source, r.compute_ceiling_tok_s);
    else
        s += fmt::format("           {}\n", r.peak_source);
    s += "\n";
    s += fmt::format("{:<22} {:>18} {:>10} {:>11} {:>9} {:>8} {:>11} {:>11}  {}\n", "test", "tok/s", "ms", "ceiling",
                     "of ceil", "bound", "memory", "compute", "");
    for (const auto& x : r.results) {
        std::string extra;
        if (x.kind == "window") extra = "rows/s; ms per forward";
        if (x.kind == "spec")
            extra = fmt::format("accept {:.2f}: {:.2f} tokens/window of {:.2f} rows (expected {}), acceptance {:.3f}, {}",
                                x.accept, x.tokens_per_step, x.rows_mean,
                                x.expected_tokens_per_step > 0 ? fmt::format("{:.2f}", x.expected_tokens_per_step) : "-",
                                x.acceptance,
                                x.same_tokens ? "tokens = serial" : "TOKENS DIFFER FROM SERIAL");
        const std::string ceil = x.ceiling_tok_s > 0 ? fmt::format("{:.1f}", x.ceiling_tok_s) : "-";
        const std::string frac = x.ceiling_tok_s > 0 ? fmt::format("{:.1f}%", 100.0 * x.ceiling_fraction) : "-";
        auto bound = [](double v) { return v > 0 ? fmt::format("{:.1f}", v) : std::string("-"); };
        s += fmt::format("{:<22} {:>9.2f} ± {:<6.2f} {:>10.2f} {:>11} {:>9} {:>8} {:>11} {:>11}  {}\n", x.test, x.tok_s,
                         x.stddev_tok_s, x.mean_s * 1e3, ceil, frac, x.ceiling_bound,
                         bound(x.memory_ceiling_tok_s), bound(x.compute_ceiling_tok_s), extra);
    }
    s += fmt::format("\nplacement: {}\n", r.placement_note);
    for (const auto& n : r.notes) s += fmt::format("note: {}\n", n);
    return s;
}

}  // namespace sluice
