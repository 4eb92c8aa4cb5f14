"""tools/shape_clone.py: the rebuilt file has the real file's header byte for byte, the same
tensors at the same offsets, the small F32 tensors unchanged, and quantised tensors made only of
blocks taken from the real file."""
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
gguf = pytest.importorskip("gguf")
import shape_clone  # noqa: E402

REAL = ROOT / "models" / "sluice-draft-5m-Q8_0.gguf"


def test_clone_keeps_the_layout_and_draws_real_blocks(tmp_path):
    pack, clone = tmp_path / "p.npz", tmp_path / "c.gguf"
    shape_clone.pack(str(REAL), str(pack), pool_mb=0.05)
    assert pack.stat().st_size < REAL.stat().st_size / 2
    shape_clone.unpack(str(pack), str(clone), seed=1)
    assert clone.stat().st_size == REAL.stat().st_size
    a, b = gguf.GGUFReader(str(REAL)), gguf.GGUFReader(str(clone))
    raw_a = REAL.read_bytes()
    assert clone.read_bytes()[:a.data_offset] == raw_a[:a.data_offset]
    quantised = 0
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert (ta.name, ta.tensor_type, ta.data_offset, ta.n_bytes) == (tb.name, tb.tensor_type, tb.data_offset, tb.n_bytes)
        da, db = np.asarray(ta.data).tobytes(), np.asarray(tb.data).tobytes()
        if ta.tensor_type == gguf.GGMLQuantizationType.F32:
            assert da == db, ta.name
            continue
        quantised += 1
        _, block = gguf.GGML_QUANT_SIZES[ta.tensor_type]
        # every block of the clone is one of the real file's blocks of that type
        real_blocks = {raw_a[i:i + block] for t in a.tensors if t.tensor_type == ta.tensor_type
                       for i in range(int(t.data_offset), int(t.data_offset) + int(t.n_bytes), block)}
        for i in range(0, min(len(db), 64 * block), block):
            assert db[i:i + block] in real_blocks, (ta.name, i)
    assert quantised > 0


def test_two_seeds_draw_different_blocks(tmp_path):
    pack = tmp_path / "p.npz"
    shape_clone.pack(str(REAL), str(pack), pool_mb=0.05)
    shape_clone.unpack(str(pack), str(tmp_path / "a.gguf"), seed=1)
    shape_clone.unpack(str(pack), str(tmp_path / "b.gguf"), seed=2)
    assert (tmp_path / "a.gguf").read_bytes() != (tmp_path / "b.gguf").read_bytes()
