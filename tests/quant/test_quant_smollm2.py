"""On real weights (the SmolLM2-135M Q4_1 file: Q4_1 layers, Q8_0 embeddings, F32 norms),
sluice's dequantisation equals the gguf package's bit for bit, and dot_ref of a real weight row
with a real-looking activation agrees with the double dot of the dequantised values."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, quants

from quant_common import Capi, same_bits


@pytest.fixture(scope="module")
def q(capi):
    return Capi(capi)


@pytest.fixture(scope="module")
def tensors(smollm2_gguf):
    reader = GGUFReader(str(smollm2_gguf))
    wanted = {"token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
              "blk.0.ffn_down.weight", "blk.29.ffn_gate.weight"}
    return {t.name: t for t in reader.tensors if t.name in wanted}


def rows_of(t) -> np.ndarray:
    """The tensor's bytes as [rows, bytes per row] (t.shape is GGML's [ne0, ne1, ...])."""
    n_rows = int(np.prod([int(v) for v in t.shape[1:]]))
    return np.ascontiguousarray(t.data).view(np.uint8).reshape(n_rows, -1)


def test_real_tensors_dequantize_like_gguf(q, tensors):
    assert len(tensors) == 5
    for t in tensors.values():
        raw = rows_of(t)
        rows = raw[:64] if t.name == "token_embd.weight" else raw   # the embedding: 64 rows
        n = rows.shape[0] * int(t.shape[0])
        ours = q.dequantize(t.tensor_type, rows, n)
        typed = rows.view(np.float32) if t.tensor_type == T.F32 else rows
        ref = quants.dequantize(typed, t.tensor_type).reshape(-1)
        assert same_bits(ours, ref), t.name


def test_real_rows_dot_ref_tracks_the_double_dot(q, tensors):
    rng = np.random.default_rng(3)
    for name in ["blk.0.attn_q.weight", "blk.0.ffn_down.weight", "token_embd.weight"]:
        t = tensors[name]
        qtype, n = t.tensor_type, int(t.shape[0])
        raw = rows_of(t)
        x = rng.standard_normal(n).astype(np.float32)
        act = q.quantize_act(qtype, x)
        a = np.frombuffer(act.tobytes(), dtype=[("d", "<f4"), ("q", "i1", 32)])
        xa = (a["q"].astype(np.float64) * a["d"].astype(np.float64)[:, None]).reshape(-1)
        for r in range(0, raw.shape[0], max(1, raw.shape[0] // 50)):
            w = quants.dequantize(raw[r:r + 1], qtype).reshape(-1).astype(np.float64)
            got = float(q.dot_ref(qtype, raw[r], act, n))
            ref = float(np.dot(w, xa))
            assert abs(got - ref) <= 1e-5 * float(np.abs(w * xa).sum()) + 1e-30, (name, r, got, ref)
