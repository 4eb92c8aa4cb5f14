"""`sluice run`: streams the prompt's continuation, reports tok/s, finds the default model, and
its greedy tokens equal the forward pass's (the C ABI) for the same prompt."""
import json
import os
import pathlib
import subprocess

import pytest

FIX = pathlib.Path(__file__).resolve().parent / "fixtures"


def tiny_gguf():
    for d in sorted(FIX.iterdir()) if FIX.is_dir() else []:
        try:
            m = json.loads((d / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        if m.get("gguf_arch") == "llama" and "F32" in m.get("gguf", {}):
            return d / m["gguf"]["F32"]["file"]
    pytest.fail(f"no llama F32 fixture under {FIX}")


def run(sluice_bin, *args, env=None):
    # Bytes, decoded leniently: a random tiny model may print byte tokens that are not UTF-8.
    r = subprocess.run([str(sluice_bin), "run", *args], capture_output=True, timeout=600,
                       env={**os.environ, **(env or {})})
    r.stdout = r.stdout.decode("utf-8", errors="replace")
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    return r


def test_run_streams_text_and_reports_speed(sluice_bin):
    r = run(sluice_bin, str(tiny_gguf()), "-p", "The river", "-n", "12", "--temp", "0", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The river"), r.stdout
    assert len(r.stdout) > len("The river\n")
    assert "prompt:" in r.stderr and "decode: 12 tokens" in r.stderr and "tok/s" in r.stderr, r.stderr


def test_run_is_deterministic_greedy_and_seeded(sluice_bin):
    model = str(tiny_gguf())
    a = run(sluice_bin, model, "-p", "def fib", "-n", "16", "--temp", "0")
    b = run(sluice_bin, model, "-p", "def fib", "-n", "16", "--temp", "0", "-t", "3")
    assert a.returncode == 0 and a.stdout == b.stdout   # threads never change a token (E2)
    s1 = run(sluice_bin, model, "-p", "def fib", "-n", "16", "--temp", "1.0", "--seed", "7")
    s2 = run(sluice_bin, model, "-p", "def fib", "-n", "16", "--temp", "1.0", "--seed", "7")
    assert s1.returncode == 0 and s1.stdout == s2.stdout


def test_no_mmap_gives_the_mapped_models_tokens(sluice_bin, smollm2_gguf):
    # --no-mmap reads the file into memory instead of mapping it: the same bytes, so the same
    # tokens, greedy and seeded, on the tiny fixture and on SmolLM2 (Q4_1 and Q8_0 weights).
    for model in (str(tiny_gguf()), str(smollm2_gguf)):
        for sampling in (["--temp", "0"], ["--temp", "0.8", "--seed", "11"]):
            mapped = run(sluice_bin, model, "-p", "The river", "-n", "12", "-t", "2", *sampling)
            read = run(sluice_bin, model, "-p", "The river", "-n", "12", "-t", "2", "--no-mmap", *sampling)
            assert mapped.returncode == 0 and read.returncode == 0, read.stderr
            assert read.stdout == mapped.stdout, (model, sampling)


def test_run_reads_the_prompt_file_and_default_model(sluice_bin, tmp_path):
    f = tmp_path / "prompt.txt"
    f.write_text("The river")
    r = run(sluice_bin, "-f", str(f), "-n", "4", "--temp", "0", env={"SLUICE_DEFAULT_MODEL": str(tiny_gguf())})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The river")
    direct = run(sluice_bin, str(tiny_gguf()), "-p", "The river", "-n", "4", "--temp", "0")
    assert r.stdout == direct.stdout


def test_run_rejects_a_missing_model_with_a_clear_error(sluice_bin, tmp_path):
    r = run(sluice_bin, str(tmp_path / "nope.gguf"), "-p", "hi")
    assert r.returncode != 0
    assert "nope.gguf" in r.stderr


def test_run_chat_answers_on_smollm2(sluice_bin, smollm2_gguf):
    """SmolLM2-135M-Instruct with the ChatML template: the answer names Paris."""
    r = run(sluice_bin, str(smollm2_gguf), "--chat", "-p", "What is the capital of France?", "-n", "24",
            "--temp", "0", "-t", "2")
    print(r.stdout)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


@pytest.mark.parametrize("args,want", [
    (["-n", "-5"], "-n"), (["-c", "-1"], "-c"), (["-t", "-1"], "-t"), (["--top-k", "-5"], "--top-k"),
    (["--min-p", "-1"], "--min-p"), (["--temp", "-1"], "--temp"), (["--prefill-stream", "-5"], "--prefill-stream"),
    (["--system", "be brief"], "--chat"), (["-f", "."], "is a directory"),
    (["--spec", "mtp", "--draft-model", "x.gguf"], "--spec mtp"),
    (["--stats-json", "/proc/version"], "--stats-json"),
])
def test_run_refuses_out_of_range_and_conflicting_options(sluice_bin, args, want):
    # Each was taken silently before (a negative -c read as 0, -n -5 as -1, --system dropped
    # without --chat, a directory read as an empty prompt), or found only after the generation.
    extra = ([] if "-f" in args else ["-p", "hi"]) + ([] if "-n" in args else ["-n", "2"])
    r = run(sluice_bin, str(tiny_gguf()), *extra, *args)
    assert r.returncode != 0, (args, r.stdout, r.stderr)
    assert want in r.stderr, (args, r.stderr)
    assert "Traceback" not in r.stderr and "terminate called" not in r.stderr


def test_run_prompt_and_file_exclude_each_other(sluice_bin, tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("from the file")
    r = run(sluice_bin, str(tiny_gguf()), "-p", "hi", "-f", str(f), "-n", "2")
    assert r.returncode != 0 and "excludes" in r.stderr, r.stderr
