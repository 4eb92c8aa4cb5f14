#!/usr/bin/env python3
"""Which experts does llama.cpp route to? Reads `ffn_moe_topk-<layer>` through an eval callback
of llama-cpp-python's llama.cpp while it evaluates random tokens, and prints per layer how
concentrated the routing is and how much of it goes to the experts that the synthetic routing
model (sluice.synthetic.router.*, tools/README.md) ranks hottest.

    python3 tools/peers/llama_routing.py /tmp/q30-8l.gguf --tokens 256

CPU only (the callback reads tensors through ggml_backend_tensor_get). Reads the ggml_tensor
fields ne/nb at their offsets in ggml.h (type, buffer pointer, then ne[4] at byte 16, nb[4] at
48), which have been stable for years; a mismatch shows as nonsense expert ids (checked below).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys

import numpy as np
import llama_cpp
from llama_cpp import llama_cpp as L

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import synthetic_shapes as S  # noqa: E402

NE_OFFSET, NB_OFFSET = 16, 48   # struct ggml_tensor: enum type (4 + 4 padding), buffer*, ne[4], nb[4]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    base = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    base.ggml_get_name.restype = ctypes.c_char_p
    base.ggml_get_name.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    base.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    picks: dict[int, list[np.ndarray]] = {}

    def on_tensor(t, ask, _user):
        m = re.match(r"ffn_moe_topk-(\d+)$", base.ggml_get_name(t).decode())
        if ask or not m:
            return bool(m) if ask else True
        ne = (ctypes.c_int64 * 4).from_address(t + NE_OFFSET)   # [n_used, n_tokens] int32, a view
        nb = (ctypes.c_size_t * 4).from_address(t + NB_OFFSET)
        raw = (ctypes.c_uint8 * base.ggml_nbytes(t))()
        base.ggml_backend_tensor_get(t, raw, 0, len(raw))
        buf = np.frombuffer(raw, dtype=np.uint8)
        for j in range(ne[1]):
            picks.setdefault(int(m.group(1)), []).append(
                buf[j * nb[1]: j * nb[1] + ne[0] * 4].view(np.int32).copy())
        return True

    callback = L.ggml_backend_sched_eval_callback(on_tensor)
    default_params = L.llama_context_default_params

    def with_callback():
        params = default_params()
        params.cb_eval = callback
        return params

    L.llama_context_default_params = with_callback  # the Llama class builds its context from it
    model = llama_cpp.Llama(a.model, n_ctx=a.tokens + 8, n_batch=a.tokens, n_threads=a.threads,
                            n_gpu_layers=0, verbose=False)
    L.llama_context_default_params = default_params
    meta = model.metadata  # GGUF key-values as strings, read by llama.cpp
    n_expert = int(meta[f"{meta['general.architecture']}.expert_count"])
    n_vocab = model.n_vocab()
    router_seed = int(meta.get("sluice.synthetic.router.seed", 1))
    tokens = np.random.default_rng(a.seed).integers(0, min(n_vocab, 151643), a.tokens)
    model.eval([int(x) for x in tokens])

    print(f"{a.model}: {a.tokens} random tokens; 'intended' = the routing model's hottest experts "
          f"(router seed {router_seed})")
    for il in sorted(picks):
        got = np.array(picks[il])
        if len(got) < 2:
            continue  # llama.cpp computes only the rows it needs in the last layer
        if got.min() < 0 or got.max() >= n_expert:
            sys.exit(f"layer {il}: expert ids outside 0..{n_expert - 1}: struct offsets differ")
        rank = S.expert_ranks(router_seed, il, n_expert)[got]
        print(f"layer {il:3d}: top 25% of experts serve {S.top_share(got, n_expert, 0.25):.2f}, "
              f"top 50% {S.top_share(got, n_expert, 0.5):.2f}; intended hottest 25% get "
              f"{(rank < n_expert // 4).mean():.2f}, 50% {(rank < n_expert // 2).mean():.2f}; "
              f"reuse {S.reuse_fraction(got):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
