"""--vram-budget and `sluice profile` (src/placement/): every budget gives the same tokens as no
budget on a machine without a GPU (E3: placement never changes a token) and says every expert runs
on the CPU; a malformed budget is rejected naming the flag; `sluice profile` writes a profile
beside the model or to -o, the same bytes on a second run."""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
MOE = ROOT / "models" / "sluice-moe-25m-Q8_0.gguf"


def sluice(sluice_bin, *args):
    r = subprocess.run([str(sluice_bin), *args], capture_output=True, timeout=600)
    r.stdout = r.stdout.decode("utf-8", errors="replace")
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    return r


def token_sha(stderr):
    for line in stderr.splitlines():
        if line.startswith("token_sha:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no token_sha in {stderr!r}")


def test_every_vram_budget_gives_the_same_tokens_without_a_gpu(sluice_bin):
    base = ["run", str(MOE), "-p", "def fib(n):", "-n", "12", "--temp", "0", "-t", "2"]
    ref = sluice(sluice_bin, *base)
    assert ref.returncode == 0, ref.stderr
    for budget in ["0", "512M", "12G"]:
        r = sluice(sluice_bin, *base, "--vram-budget", budget)
        assert r.returncode == 0, r.stderr
        assert token_sha(r.stderr) == token_sha(ref.stderr), budget
        assert r.stdout == ref.stdout
        if budget != "0":
            assert "every routed expert runs on the CPU" in r.stderr, r.stderr
        else:
            assert "vram-budget" not in r.stderr


def test_malformed_vram_budget_is_rejected(sluice_bin):
    for cmd in (["run", str(MOE), "-p", "x", "-n", "1"], ["bench", str(MOE), "-n", "1", "-p", "0", "--no-probe"]):
        r = sluice(sluice_bin, *cmd, "--vram-budget", "12X")
        assert r.returncode != 0
        assert "--vram-budget '12X'" in r.stderr and "12G" in r.stderr, r.stderr


def test_profile_command_writes_the_same_profile_twice(sluice_bin, tmp_path):
    text = tmp_path / "calib.txt"
    text.write_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n" * 4)
    out1, out2 = tmp_path / "a.bin", tmp_path / "b.bin"
    r1 = sluice(sluice_bin, "profile", str(MOE), "--text", str(text), "-o", str(out1), "-t", "2")
    assert r1.returncode == 0, r1.stderr
    assert "top quarter of pairs serve" in r1.stdout and str(out1) in r1.stdout, r1.stdout
    r2 = sluice(sluice_bin, "profile", str(MOE), "--text", str(text), "-o", str(out2), "-t", "1")
    assert r2.returncode == 0, r2.stderr
    data = out1.read_bytes()
    assert data[:8] == b"SLUPROF\0"
    assert data == out2.read_bytes()   # threads never change the routing (E2)
    # 6 layers x 32 experts of u64 counts, a 48-byte header and an 8-byte checksum.
    assert len(data) == 48 + 8 * 6 * 32 + 8


def test_profile_of_a_missing_text_is_an_error(sluice_bin, tmp_path):
    r = sluice(sluice_bin, "profile", str(MOE), "--text", str(tmp_path / "nope.txt"))
    assert r.returncode != 0 and "cannot open" in r.stderr, r.stderr
