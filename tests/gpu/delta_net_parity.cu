// cpu_delta_net_bits_equal_gpu_delta_net_bits: the device Gated DeltaNet ops
// (src/kernels/cuda/delta_net.cuh) against their scalar CPU references (kernels/cpu/delta_net.h
// and the gate loop of models/hybrid_blocks.cpp), bit for bit, on random inputs: a window of rows
// run in one launch (conv, then the rule with its gates, then the gated norm) equals the CPU's
// rows one at a time, for the tiny test shape and the real Qwen3-Next / Qwen3.6 shapes, grouped
// and tiled value heads, one beta|alpha projection and two; the checkpoint slots hold the states
// the rows started from; the rule, its gated norm and the output projection's activation blocks
// in one launch (delta_net_rule_norm) give the same; the gated attention's query split and output
// gate against their CPU loops. Exit 0 when everything matches, 1 on a difference, 77 (skipped) without a GPU.
#include "kernels/cuda/delta_net.cuh"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/ops.cuh"

#include "core/thread_pool.h"
#include "kernels/cpu/delta_net.h"
#include "kernels/math.h"
#include "parity_util.cuh"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sluice;

namespace {

using gpu_test::dvec;
using gpu_test::report;
using gpu_test::rnd;

struct dn_case {
    const char* name;
    kernels::delta_net_shape s;
    bool separate;   // ssm_beta + ssm_alpha (qwen35moe) instead of ssm_ba
    int rows;        // the window
    int kept;        // its checkpointed rows (the last ones)
};

int test_delta_net(thread_pool& pool, const dn_case& c) {
    const kernels::delta_net_shape& s = c.s;
    const int64_t C = s.conv_channels(), vd = s.value_dim(), nv = s.n_v_heads, R = c.rows;
    const int64_t ba_w = c.separate ? nv : 2 * nv;
    // Inputs: projections of R rows, weights, and a state that is not zero (a window mid-sequence).
    auto x = rnd(static_cast<size_t>(R * C), 1, 0.8f), z = rnd(static_cast<size_t>(R * vd), 2);
    auto ba = rnd(static_cast<size_t>(R * ba_w), 3), alpha = rnd(static_cast<size_t>(R * nv), 4);
    auto w = rnd(static_cast<size_t>(C * s.d_conv), 5, 0.5f), dt = rnd(static_cast<size_t>(nv), 6, 0.5f);
    auto a_coef = rnd(static_cast<size_t>(nv), 7, 0.3f, -1.0f), nw = rnd(static_cast<size_t>(s.head_v_dim), 8, 0.2f, 1.0f);
    auto conv0 = rnd(static_cast<size_t>(s.conv_state_floats()), 9), ssm0 = rnd(static_cast<size_t>(s.ssm_state_floats()), 10, 0.1f);

    // CPU: row by row, with the gates of hybrid_blocks.cpp and the states before each row.
    std::vector<float> conv = conv0, ssm = ssm0, cout(static_cast<size_t>(R * C)), core(static_cast<size_t>(R * vd));
    std::vector<std::vector<float>> conv_before, ssm_before;
    const int64_t rep = nv / s.n_k_heads;
    for (int64_t r = 0; r < R; ++r) {
        conv_before.push_back(conv);
        ssm_before.push_back(ssm);
        kernels::delta_net_conv_row(s, w.data(), conv.data(), x.data() + r * C, cout.data() + r * C);
        std::vector<float> g(static_cast<size_t>(nv)), beta(static_cast<size_t>(nv));
        for (int64_t h = 0; h < nv; ++h) {
            float bl, al;
            if (!c.separate) {
                const int64_t kh = h / rep, j = h % rep;
                bl = ba[static_cast<size_t>(r * 2 * nv + kh * 2 * rep + j)];
                al = ba[static_cast<size_t>(r * 2 * nv + kh * 2 * rep + rep + j)];
            } else {
                bl = ba[static_cast<size_t>(r * nv + h)];
                al = alpha[static_cast<size_t>(r * nv + h)];
            }
            beta[static_cast<size_t>(h)] = kernels::sigmoid_f32(bl);
            g[static_cast<size_t>(h)] = kernels::softplus_f32(al + dt[static_cast<size_t>(h)]) * a_coef[static_cast<size_t>(h)];
        }
        std::vector<float> qkv(cout.begin() + r * C, cout.begin() + (r + 1) * C);   // normalised in place
        kernels::delta_net_rule_row(pool, s, qkv.data(), g.data(), beta.data(), ssm.data(), core.data() + r * vd);
        kernels::delta_net_gated_norm_row(s, core.data() + r * vd, z.data() + r * vd, nw.data(), core.data() + r * vd);
    }

    // GPU: the window in one launch per op, the last `kept` rows checkpointed.
    dvec dx(x), dz(z), dba(ba), dal(alpha), dw(w), ddt(dt), da(a_coef), dnw(nw), dconv(conv0), dssm(ssm0);
    dvec dcout(static_cast<size_t>(R * C)), dcore(static_cast<size_t>(R * vd));
    const int64_t slot = s.conv_state_floats() + s.ssm_state_floats();   // one layer's state a slot
    dvec dslots(static_cast<size_t>(c.kept * slot));
    const int64_t first = R - c.kept;
    cuda::delta_net_conv(s, dw.p, dconv.p, dx.p, dcout.p, R, cuda::dn_checkpoints{dslots.p, slot, first}, nullptr);
    cuda::dn_gates gates{dba.p, c.separate ? dal.p : nullptr, ddt.p, da.p};
    cuda::delta_net_rule(s, dcout.p, gates, dssm.p, dcore.p, R,
                         cuda::dn_checkpoints{dslots.p + s.conv_state_floats(), slot, first}, nullptr);
    cuda::delta_net_gated_norm(s, dcore.p, dz.p, dnw.p, dcore.p, R, nullptr);

    const std::string tag = std::string(c.name) + " (" + std::to_string(R) + " rows)";
    int f = report("conv out " + tag, cout, dcout.get());
    f += report("conv state " + tag, conv, dconv.get());
    f += report("rule + gated norm " + tag, core, dcore.get());
    f += report("DeltaNet state " + tag, ssm, dssm.get());
    std::vector<float> want;
    for (int64_t r = first; r < R; ++r) {
        want.insert(want.end(), conv_before[static_cast<size_t>(r)].begin(), conv_before[static_cast<size_t>(r)].end());
        want.insert(want.end(), ssm_before[static_cast<size_t>(r)].begin(), ssm_before[static_cast<size_t>(r)].end());
    }
    f += report("checkpoints " + tag, want, dslots.get());

    // The rule with its gated norm in one launch (delta_net_rule_norm), from the same conv output
    // and starting state: the same rows, state and checkpoints, and, for each activation format,
    // the output rows' int8 blocks equal to quantize_act_rows of the two-launch output.
    std::vector<float> want_ssm;
    for (int64_t r = first; r < R; ++r)
        want_ssm.insert(want_ssm.end(), ssm_before[static_cast<size_t>(r)].begin(), ssm_before[static_cast<size_t>(r)].end());
    for (const quant::act_format af : {quant::act_format::q8_256, quant::act_format::q8_32, quant::act_format::f32}) {
        const char* fname = af == quant::act_format::q8_256 ? "q8_256" : af == quant::act_format::q8_32 ? "q8_32" : "no act";
        const std::string t1 = std::string(" one launch, ") + fname + " " + tag;
        dvec dssm1(ssm0), dcore1(static_cast<size_t>(R * vd)), dslots1(static_cast<size_t>(c.kept * s.ssm_state_floats()));
        const size_t act_bytes = af == quant::act_format::f32 ? 0 : static_cast<size_t>(R) * quant::act_row_bytes(af, vd);
        std::byte *dact = nullptr, *dref = nullptr;
        if (act_bytes) {
            CK(cudaMalloc(&dact, act_bytes));
            CK(cudaMalloc(&dref, act_bytes));
            CK(cudaMemset(dact, 0x5a, act_bytes));
        }
        const bool quantised = cuda::delta_net_rule_norm(s, dcout.p, gates, dssm1.p, dz.p, dnw.p, dcore1.p, R,
                                                         cuda::dn_checkpoints{dslots1.p, s.ssm_state_floats(), first}, af,
                                                         dact, nullptr);
        f += report("rule + gated norm" + t1, core, dcore1.get());
        f += report("DeltaNet state" + t1, ssm, dssm1.get());
        f += report("checkpoints" + t1, want_ssm, dslots1.get());
        if (quantised) {
            cuda::quantize_act_rows(af, dcore.p, R, vd, dref, nullptr);
            std::vector<std::byte> got(act_bytes), ref(act_bytes);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), dact, act_bytes, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(ref.data(), dref, act_bytes, cudaMemcpyDeviceToHost));
            const bool same = std::memcmp(got.data(), ref.data(), act_bytes) == 0;
            std::printf("%s %-52s %zu bytes %s\n", same ? "PASS" : "FAIL", ("activation blocks" + t1).c_str(), act_bytes,
                        same ? "identical to quantize_act_rows" : "DIFFER from quantize_act_rows");
            f += same ? 0 : 1;
        } else if (act_bytes && (s.head_k_dim == 64 || s.head_k_dim == 128) && vd % (af == quant::act_format::q8_256 ? 256 : 32) == 0 &&
                   s.head_v_dim % 32 == 0) {
            std::printf("FAIL %-52s the launch did not write them\n", ("activation blocks" + t1).c_str());
            ++f;
        }
        cudaFree(dact);
        cudaFree(dref);
    }
    return f;
}

int test_gated_attention_ops() {
    const int rows = 5, n_head = 16, hd = 256;
    auto qg = rnd(static_cast<size_t>(rows * n_head * 2 * hd), 20), y = rnd(static_cast<size_t>(rows * n_head * hd), 21);
    std::vector<float> q(y.size()), gated(y.size());
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < n_head; ++h)
            for (int d = 0; d < hd; ++d) {
                const size_t i = (static_cast<size_t>(r) * n_head + h) * hd + d;
                const size_t src = (static_cast<size_t>(r) * n_head + h) * 2 * hd;
                q[i] = qg[src + d];
                gated[i] = y[i] * kernels::sigmoid_f32(qg[src + hd + d]);
            }
    dvec dqg(qg), dq(y.size()), dy(y);
    cuda::gated_query(dqg.p, dq.p, rows, n_head, hd, nullptr);
    cuda::output_gate(dy.p, dqg.p, rows, n_head, hd, nullptr);
    return report("gated attention: query split", q, dq.get()) + report("gated attention: output gate", gated, dy.get());
}

}  // namespace

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    thread_pool pool(4);
    auto shape = [](int nk, int nv, int dk, bool tiled, int dv = 0) {
        kernels::delta_net_shape s;
        s.n_k_heads = nk;
        s.n_v_heads = nv;
        s.head_k_dim = dk;
        s.head_v_dim = dv > 0 ? dv : dk;
        s.d_conv = 4;
        s.v_tiled = tiled;
        s.eps = 1e-6f;
        return s;
    };
    const dn_case cases[] = {
        {"tiny grouped, ssm_ba", shape(2, 4, 16, false), false, 5, 3},
        {"tiny tiled, beta+alpha", shape(2, 4, 16, true), true, 7, 7},
        {"Qwen3-Next shape decode", shape(16, 32, 128, false), false, 1, 1},
        {"Qwen3-Next shape window", shape(16, 32, 128, false), false, 16, 16},
        {"Qwen3.6 shape window", shape(16, 32, 128, true), true, 9, 4},
        {"dv 80 (partial column group)", shape(1, 2, 80, false), false, 3, 2},
        // dk 64 and 128 take the rule kernel with the state column in registers, 16 and 80 the
        // shared-memory one.
        {"dk 64 tiled decode", shape(4, 8, 64, true), true, 1, 1},
        {"dk 64 grouped window", shape(2, 4, 64, false), false, 6, 3},
        {"dk 128, dv 80 (registers, partial column group)", shape(2, 4, 128, false, 80), false, 4, 2},

    };
    int failures = test_gated_attention_ops();
    for (const dn_case& c : cases) failures += test_delta_net(pool, c);
    std::printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
