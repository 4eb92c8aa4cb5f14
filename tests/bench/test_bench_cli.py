"""`sluice bench` end to end on a tiny synthetic Qwen3-MoE file (seconds), and bench/record.py's
rows and ratio table on its output."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
pytest.importorskip("gguf")
import make_synthetic  # noqa: E402

FAST = ["-t", "2", "-p", "48", "-n", "6", "-r", "2", "--ctx", "0,16", "--chunk", "16", "--windows", "1,2,4",
        "--spec-windows", "1,4", "--spec-policy", "4", "--spec-n", "8", "--probe-mb", "64"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("bench") / "tiny.gguf"
    argv = ["--tiny", "--layers", "2", "--vocab", "2048", "--pool-mb", "1", "--threads", "2", "-o", str(out)]
    assert make_synthetic.main(argv) == 0
    return out


def bench(sluice_bin, model, *args, check=True):
    return subprocess.run([str(sluice_bin), "bench", str(model), *args], capture_output=True, text=True,
                          timeout=300, check=check)


@pytest.fixture(scope="module")
def report(sluice_bin, tiny_model):
    p = bench(sluice_bin, tiny_model, *FAST, "--json")
    return json.loads(p.stdout)


def test_bench_json_reports_every_test_with_its_ceiling(report, tiny_model):
    tests = [r["test"] for r in report["results"]]
    assert tests == ["pp48", "tg6@d0", "tg6@d16", "win 1@d0", "win 2@d0", "win 4@d0", "spec 1@d0", "spec 4@d0",
                     "spec policy 4@d0"]
    assert report["model"]["path"] == str(tiny_model)
    assert report["threads"] == 2
    assert report["decode_warmup"] is True   # one untimed decode token a depth, as llama-bench warms up
    # The RAM probe ran: a bandwidth, and every result has a positive ceiling and its fraction.
    bw = report["roofline"]["bandwidth_gb_s"]
    assert bw == report["bandwidth"]["ram_read_gb_s"] and bw > 0.1
    for r in report["results"]:
        assert r["tok_s"] > 0 and r["ceiling_tok_s"] > 0, r
        assert r["ceiling_fraction"] == pytest.approx(r["tok_s"] / r["ceiling_tok_s"])
        assert len(r["seconds"]) == (1 if r["kind"] == "spec" else 2)
    # Decode traffic = inspect's bytes per token + the K/V the run reads.
    tg0 = report["results"][1]
    assert tg0["bytes_per_token"] > report["roofline"]["bytes_per_token"]
    # Oracle runs keep serial decoding's tokens.
    for r in report["results"]:
        if r["kind"] == "spec":
            assert r["same_tokens"] is True
            assert 1.0 <= r["tokens_per_step"] <= r["rows"]


def test_ceiling_is_the_smaller_of_the_memory_and_compute_bounds(report):
    rl = report["roofline"]
    # The CPU's int8 peak was measured (the dot kernel), and the compute model came from the shapes.
    assert rl["cpu_peak_ops_s"] > 1e8 and rl["peak_ops_s"] == rl["cpu_peak_ops_s"]
    assert "measured" in rl["peak_source"]
    assert rl["weight_macs_per_row"] > rl["routed_macs_per_row"] > 0 and rl["attn_macs_per_position"] > 0
    for r in report["results"]:
        mem, comp = r["memory_ceiling_tok_s"], r["compute_ceiling_tok_s"]
        assert mem > 0 and comp > 0 and r["ops_per_token"] > 0, r
        assert r["ceiling_tok_s"] == pytest.approx(min(mem, comp))
        assert r["ceiling_bound"] == ("memory" if mem <= comp else "compute")
        assert r["compute_ceiling_tok_s"] == pytest.approx(rl["peak_ops_s"] / r["ops_per_token"])
    # Prefill reads the weights once per chunk of 16 rows but computes every row: its
    # operations per byte are far above decode's.
    pp = next(r for r in report["results"] if r["kind"] == "prefill")
    tg = next(r for r in report["results"] if r["test"] == "tg6@d0")
    assert pp["bytes_per_token"] / pp["ops_per_token"] < tg["bytes_per_token"] / tg["ops_per_token"] / 4


def test_bench_bytes_per_token_is_inspects(report, sluice_bin, tiny_model):
    ins = json.loads(subprocess.run([str(sluice_bin), "inspect", str(tiny_model), "--json"], capture_output=True,
                                    text=True, check=True).stdout)
    assert report["roofline"]["bytes_per_token"] == ins["bytes_per_token"]
    assert [g["name"] for g in report["roofline"]["groups"]] == [g["name"] for g in ins["groups"]]


def test_placement_figures_are_absent_not_zero(report, sluice_bin, tiny_model):
    assert report["placement"] is None
    assert "not active" in report["placement_note"]
    assert all("hit_rate" not in r and "swaps" not in r for r in report["results"])   # no split: no per-test figures
    text = bench(sluice_bin, tiny_model, *FAST, "--spec-windows", "0", "--windows", "0", "-q").stdout
    assert "placement: expert placement" in text and "not active" in text
    assert "hit rate" not in text.split("placement:")[0]  # no hit-rate column in the table
    if report["bandwidth"]["gpu"] is None:  # a CPU-only build, or no device: said in words
        assert f"GPU: {report['bandwidth']['gpu_note']}" in text
        assert report["bandwidth"]["gpu_note"].startswith("no GPU")


def test_no_warmup_times_the_same_decode_tests_and_says_so(sluice_bin, tiny_model):
    rep = json.loads(bench(sluice_bin, tiny_model, "-t", "2", "-p", "0", "-n", "6", "-r", "2", "--ctx", "0,16",
                           "--windows", "0", "--spec-windows", "0", "--no-probe", "--no-warmup", "--json").stdout)
    assert rep["decode_warmup"] is False
    assert [r["test"] for r in rep["results"]] == ["tg6@d0", "tg6@d16"]
    assert all(len(r["seconds"]) == 2 and r["tok_s"] > 0 for r in rep["results"])


def test_bad_flags_fail_with_the_flag_named(sluice_bin, tiny_model):
    p = bench(sluice_bin, tiny_model, "--accept", "2", check=False)
    assert p.returncode != 0 and "--accept" in p.stderr
    p = bench(sluice_bin, tiny_model, "--windows", "17", check=False)
    assert p.returncode != 0 and "--windows" in p.stderr


def test_record_py_writes_documented_rows_and_ratios(report, tmp_path):
    (tmp_path / "sluice.json").write_text(json.dumps(report))
    # A peer at exactly half of sluice's speeds, in llama-bench's JSON shape.
    pp = next(r for r in report["results"] if r["test"] == "pp48")
    tg = next(r for r in report["results"] if r["test"] == "tg6@d0")
    peer = [{"n_prompt": 48, "n_gen": 0, "n_depth": 0, "avg_ts": pp["tok_s"] / 2, "stddev_ts": 0.0},
            {"n_prompt": 0, "n_gen": 6, "n_depth": 0, "avg_ts": tg["tok_s"] / 2, "stddev_ts": 0.0}]
    (tmp_path / "peer.json").write_text("some log line\n" + json.dumps(peer))
    rec = [sys.executable, str(ROOT / "bench" / "record.py")]
    m = str(tmp_path / "m.json")
    subprocess.run(rec + ["add", m, "--name", "sluice", "--engine", "sluice", "--file", "sluice.json",
                          "--command", "sluice bench X"], check=True)
    subprocess.run(rec + ["add", m, "--name", "peer", "--engine", "llama.cpp", "--file", "peer.json"], check=True)
    subprocess.run(rec + ["compare", m, "sluice", "peer"], check=True)
    jsonl, md = tmp_path / "r.jsonl", tmp_path / "R.md"
    p = subprocess.run(rec + ["report", m, "--model", "tiny", "--scenario", "test/tiny", "--record", "--jsonl",
                              str(jsonl), "--md", str(md), "--commit", "abc1234"], capture_output=True, text=True,
                       check=True)
    all_rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    # The oracle runs' rows (metric spec_speedup, against the same run's serial windows) have
    # their own test below; here the speed comparisons.
    rows = [r for r in all_rows if r["metric"] != "spec_speedup"]
    n_spec = len(all_rows) - len(rows)
    assert n_spec == len(record_spec_rows(report))
    keys = ["date", "commit", "machine", "scenario", "model", "metric", "value", "peer", "peer_value", "ratio",
            "command"]
    # The standard keys in order, then each engine's fraction of its ceiling, then (extra fields)
    # both bounds of each engine's placement and the one that binds.
    bound_keys = ["memory_ceiling_tok_s", "compute_ceiling_tok_s", "ceiling_bound"]
    assert all(list(r) == keys + ["ceiling_fraction", "peer_ceiling_fraction"] + bound_keys +
               ["peer_" + k for k in bound_keys] for r in rows)
    for r in rows:
        known = [v for v in (r["memory_ceiling_tok_s"], r["compute_ceiling_tok_s"]) if v]
        assert r["ceiling_bound"] in ("memory", "compute")
        ceiling = r[r["ceiling_bound"] + "_ceiling_tok_s"]
        assert ceiling == min(known)
        assert r["ceiling_fraction"] == pytest.approx(r["value"] / ceiling, rel=1e-4)
    speed = {r["scenario"]: r for r in rows if r["metric"] in ("prefill", "decode")}
    assert set(speed) == {"test/tiny/pp48", "test/tiny/tg6@d0"}
    assert all(r["ratio"] == pytest.approx(2.0, abs=1e-3) for r in speed.values())
    assert speed["test/tiny/pp48"]["machine"] == report["machine"]
    assert all(r["ceiling_fraction"] == pytest.approx(2 * r["peer_ceiling_fraction"], rel=1e-3) for r in rows)
    assert "| pp48 | sluice |" in md.read_text()
    assert p.stdout.rstrip().splitlines()[-1].startswith(f"recorded: {2 + n_spec} rows")


def record_spec_rows(report):
    sys.path.insert(0, str(ROOT / "bench"))
    import record  # noqa: E402
    common = {"date": "d", "commit": "c", "machine": "m", "model": "tiny"}
    return record.spec_speedup_rows(report, "sluice", "", common, "test/tiny")


def test_record_py_holds_a_peer_to_its_own_micro_batch(report, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import record  # noqa: E402
    pp = next(r for r in report["results"] if r["test"] == "pp48")
    traffic = report["roofline"]["traffic"]
    # The Python traffic model is the C++ one: at sluice's chunk it gives sluice's bytes.
    assert record.prefill_bytes_per_token(traffic, 48, report["chunk"]) == pytest.approx(pp["bytes_per_token"])
    # One forward of all 48 rows reads the weights once: fewer bytes per token, a higher bound.
    whole = record.at_chunk(report, pp, 48)
    assert whole["bytes_per_token"] < pp["bytes_per_token"]
    b16 = record.bounds(report, pp, "cpu")
    b48 = record.bounds(report, pp, "cpu", chunk=48)
    assert b48["memory"] > b16["memory"] and b48["compute"] == b16["compute"]
    assert b48["ceiling"] == min(b48["memory"], b48["compute"])
    # Decode is one row per forward whatever the batch size.
    tg = next(r for r in report["results"] if r["test"] == "tg6@d0")
    assert record.bounds(report, tg, "cpu", chunk=48) == record.bounds(report, tg, "cpu")
    # Through the manifest: a llama-bench row with n_ubatch 48 gets that bound.
    (tmp_path / "sluice.json").write_text(json.dumps(report))
    (tmp_path / "peer.json").write_text(json.dumps([
        {"n_prompt": 48, "n_gen": 0, "n_depth": 0, "n_ubatch": 48, "avg_ts": pp["tok_s"], "stddev_ts": 0.0}]))
    rec = [sys.executable, str(ROOT / "bench" / "record.py")]
    m = str(tmp_path / "m.json")
    subprocess.run(rec + ["add", m, "--name", "sluice", "--engine", "sluice", "--file", "sluice.json"], check=True)
    subprocess.run(rec + ["add", m, "--name", "peer", "--engine", "llama.cpp", "--file", "peer.json"], check=True)
    subprocess.run(rec + ["compare", m, "sluice", "peer"], check=True)
    jsonl = tmp_path / "r.jsonl"
    subprocess.run(rec + ["report", m, "--model", "tiny", "--scenario", "t", "--record", "--jsonl", str(jsonl),
                          "--md", str(tmp_path / "R.md"), "--commit", "abc1234"], capture_output=True, check=True)
    row = json.loads(jsonl.read_text().splitlines()[0])
    assert row["peer_memory_ceiling_tok_s"] == pytest.approx(b48["memory"], rel=1e-5)
    assert row["memory_ceiling_tok_s"] == pytest.approx(b16["memory"], rel=1e-5)


def test_record_py_cached_ceiling_counts_only_the_split_layers_misses():
    sys.path.insert(0, str(ROOT / "bench"))
    import record  # noqa: E402
    # 4 layers of 8 experts, one whole; routed 600 of 1000 bytes a token; RAM 10 + PCIe 5 GB/s,
    # HBM 100 GB/s; the split layers hit half their lookups.
    rep = {"bandwidth": {"ram_read_gb_s": 10.0, "gpu": {"hbm_read_gb_s": 100.0, "pcie_h2d_gb_s": 5.0}},
           "roofline": {"traffic": {"n_expert": 8}, "groups": [{"name": "routed experts", "bytes_per_token": 600},
                                                               {"name": "attention/dense", "bytes_per_token": 400}]},
           "placement": {"total_experts": 32, "whole_layers": 1, "metrics": {"experts": 48, "hit_rate": 0.5}}}
    tg = {"kind": "decode", "bytes_per_token": 1000.0}
    missed = 600 * 0.75 * 0.5   # three split layers of four, half of their lookups missed
    want = 1.0 / (missed / 15e9 + (1000 - missed) / 100e9)
    assert record.cached_bound(rep, tg) == pytest.approx(want)
    # No hits at all and no whole layer: the plain three-lane memory bound.
    rep0 = json.loads(json.dumps(rep))
    rep0["placement"].update({"whole_layers": 0, "metrics": {"experts": 48, "hit_rate": 0.0}})
    assert record.cached_bound(rep0, tg) == pytest.approx(record.memory_bound(rep0, tg, "three-lane"))
    # Nothing split (no placement metrics), or not a decode: none.
    assert record.cached_bound({**rep, "placement": None}, tg) is None
    assert record.cached_bound(rep, {"kind": "prefill", "bytes_per_token": 1000.0}) is None
    # A test that carries its own hit rate (bench_result.hit_rate) is bounded by it, not the run's.
    own = {**tg, "hit_rate": 1.0}
    assert record.cached_bound(rep, own) == pytest.approx(1.0 / (1000 / 100e9))
    assert record.cached_bound(rep, {**tg, "hit_rate": -1.0}) == pytest.approx(want)   # -1: not measured


def test_record_py_spec_speedup_rows_use_the_same_runs_serial_windows():
    sys.path.insert(0, str(ROOT / "bench"))
    import record  # noqa: E402

    def spec(test, rows, accept, tok_s, depth=512):
        return {"kind": "spec", "test": test, "rows": rows, "accept": accept, "depth": depth, "tok_s": tok_s,
                "tokens_per_step": 1.0 if rows == 1 else 3.37, "acceptance": 0.0 if rows == 1 else 0.82,
                "same_tokens": True}

    rep = {"results": [{"kind": "decode", "test": "tg64@d0", "tok_s": 120.0},
                       spec("spec 1@d512", 1, 0.87, 80.0), spec("spec 4@d512", 4, 0.87, 100.0),
                       spec("spec+mtp 4@d512", 4, 0.87, 110.0),
                       spec("spec 4@d512", 4, 0.6, 60.0),            # no serial run at acceptance 0.6: no row
                       spec("spec 4@d64", 4, 0.87, 90.0, depth=64)]}  # nor at another depth
    common = {"date": "2026-12-04", "commit": "abc1234", "machine": "m", "model": "tiny"}
    rows = record.spec_speedup_rows(rep, "sluice", "sluice bench X", common, "test/tiny")
    assert [r["scenario"] for r in rows] == ["test/tiny/spec 4@d512 accept 0.87", "test/tiny/spec+mtp 4@d512 accept 0.87"]
    keys = ["date", "commit", "machine", "scenario", "model", "metric", "value", "peer", "peer_value", "ratio",
            "command"]
    for r, v in zip(rows, (100.0, 110.0)):
        assert list(r)[:len(keys)] == keys
        assert r["metric"] == "spec_speedup" and r["value"] == v and r["peer_value"] == 80.0
        assert r["ratio"] == pytest.approx(v / 80.0, abs=1e-3)
        assert r["peer"] == "serial decoding (spec 1@d512 of sluice)" and r["same_tokens"] is True


def test_run_scripts_parse_and_plan_both_engines_with_the_same_threads(tmp_path):
    for script in ("run_cpu.sh", "run_gpu.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "bench" / script)], check=True)
    p = subprocess.run(["bash", str(ROOT / "bench" / "run_cpu.sh"), "--dry-run", "-t", "3", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, check=True)
    plan = [line for line in p.stderr.splitlines() if line.startswith("+ ")]
    sluice = next(line for line in plan if " bench " in line)
    llama = next(line for line in plan if "run_llama_bench.sh" in line)
    for flag in ("-t 3", "-p 512", "-n 64", "-r 2"):
        assert flag in sluice and flag in llama, (flag, sluice, llama)
    assert plan[-1].split()[3] == "report"  # "+ python3 .../record.py report": the ratio table comes last
    # The GPU script plans from the carried folder, or says how to make it.
    p = subprocess.run(["bash", str(ROOT / "bench" / "run_gpu.sh"), "--dry-run"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "OUT": str(tmp_path / "gpu")})
    if p.returncode != 0:
        assert "--prepare" in p.stderr
    else:
        assert "llama.cpp GPU -ngl 99" in p.stderr and "sluice CPU" in p.stderr


def test_bench_runs_a_hybrid_model(sluice_bin, tmp_path):
    # A hybrid's recurrent state rolls back only over the last window's rows: the decode
    # repetitions, the depths and the oracle runs go back to their prompt by a new prefill.
    out = tmp_path / "hybrid.gguf"
    argv = ["--shape", "qwen3.6-35b-a3b", "--mix", "q8_0", "--tiny", "--layers", "2", "--vocab", "2048", "--pool-mb",
            "1", "--threads", "2", "-o", str(out)]
    assert make_synthetic.main(argv) == 0
    rep = json.loads(bench(sluice_bin, out, *FAST, "--json").stdout)
    tests = [r["test"] for r in rep["results"]]
    # The synthetic file carries an MTP block: the oracle's window runs again with the head drafting.
    assert tests == ["pp48", "tg6@d0", "tg6@d16", "win 1@d0", "win 2@d0", "win 4@d0", "spec 1@d0", "spec 4@d0",
                     "spec policy 4@d0", "spec+mtp 4@d0", "spec+mtp policy 4@d0"]
    assert all(r["same_tokens"] for r in rep["results"] if r["kind"] == "spec")


def test_record_py_flags_a_cpu_lane_far_below_its_calibration():
    sys.path.insert(0, str(ROOT / "bench"))
    import record  # noqa: E402

    def rep(cpu_bytes, seconds, calibrated=100.0):
        return {"placement": {"cpu_expert_gb_s_calibrated": calibrated,
                              "metrics": {"cpu_bytes": cpu_bytes, "lanes": {"cpu": {"measured_s": seconds}}}}}
    # Session 31's 235B run at 7 GiB: 48.3 GB in 2.64 s against 95 GB/s calibrated, and its repeat.
    slow = record.cpu_lane_health(rep(48.26e9, 2.6385, 95.04))
    sound = record.cpu_lane_health(rep(48.26e9, 0.6047, 101.53))
    assert slow[0] == pytest.approx(18.29, abs=0.01) and slow[2] < record.k_cpu_lane_sound
    assert sound[2] == pytest.approx(0.786, abs=0.001) and sound[2] >= record.k_cpu_lane_sound
    assert "SUSPECT" in record.cpu_lane_line("s", slow) and "SUSPECT" not in record.cpu_lane_line("s", sound)
    # No CPU lane work, no placement, no calibration: nothing to judge (not a zero rate).
    assert record.cpu_lane_health(rep(0, 0.0)) is None
    assert record.cpu_lane_health({"placement": None}) is None
    assert record.cpu_lane_health(rep(1e9, 1.0, 0.0)) is None
    assert record.cpu_lane_health(None) is None
