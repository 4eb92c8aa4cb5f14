"""bench/ncmoe_for_budget.py: the llama.cpp -ncmoe that matches a sluice --vram-budget (the
peer of each budget run in bench/run_gpu.sh --placement)."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
pytest.importorskip("gguf")
import ncmoe_for_budget as N  # noqa: E402


def test_sizes_parse():
    assert N.parse_size("0") == 0
    assert N.parse_size("12G") == 12 << 30
    assert N.parse_size("1.5g") == 3 << 29
    assert N.parse_size("512MiB") == 512 << 20
    with pytest.raises(ValueError):
        N.parse_size("twelve")


def test_smallest_first_layer_whose_experts_fit():
    per = [10, 20, 30, 40]
    assert N.ncmoe_for(per, 0) == 4          # nothing fits: every layer's experts on the CPU
    assert N.ncmoe_for(per, 39) == 4         # the last layer alone needs 40
    assert N.ncmoe_for(per, 40) == 3
    assert N.ncmoe_for(per, 70) == 2
    assert N.ncmoe_for(per, 99) == 1
    assert N.ncmoe_for(per, 100) == 0        # everything in VRAM


def test_counts_the_trunk_of_a_hybrid_file():
    # The golden qwen35moe fixture: 4 trunk layers plus the MTP block, whose experts are never
    # placed; sizes as gguf's own reader gives them.
    gguf = pytest.importorskip("gguf")
    f = ROOT / "tests" / "golden" / "fixtures" / "qwen35moe_e4_k2_mtp" / "converted-F32.gguf"
    want = [0] * 4
    for t in gguf.GGUFReader(f).tensors:
        if "_exps." in t.name and int(t.name.split(".")[1]) < 4:
            want[int(t.name.split(".")[1])] += int(t.n_bytes)
    per = N.expert_bytes_per_layer(str(f))
    assert per == want and per[0] > 0
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ncmoe_for_budget.py"), str(f), "0", str(per[3]), "1G"],
                         check=True, capture_output=True, text=True).stdout
    assert out.split() == ["0:4", f"{per[3]}:3", "1G:0"]


def test_a_malformed_header_is_an_error(tmp_path):
    f = tmp_path / "bad.gguf"
    f.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (5).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="truncated"):
        N.expert_bytes_per_layer(str(f))
