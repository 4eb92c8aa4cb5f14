#!/usr/bin/env python3
"""bench/record.py: put a benchmark run of sluice and its peers side by side, print the ratio
table, and (with --record) append it to bench/RESULTS.md and bench/results.jsonl.

A run is described by a manifest (JSON) that the bench scripts build one engine run at a time:

    bench/record.py add RUN.json --name "sluice cpu -t 2" --engine sluice --file sluice.json \
        --placement cpu --command "sluice bench ... --json"
    bench/record.py add RUN.json --name "llama.cpp cpu -t 2" --engine llama.cpp --file llama.json \
        --placement cpu --command "llama-bench ..."
    bench/record.py compare RUN.json "sluice cpu -t 2" "llama.cpp cpu -t 2"
    bench/record.py add-probe RUN.json --file gpu_probe.json     (GPU figures for the ceilings)
    bench/record.py report RUN.json --model "synthetic Qwen3-30B-A3B Q4_K_M, 12 layers" \
        --scenario cpu/q30-12l [--note "run_cpu.sh took 412 s"] [--record]

Files: `sluice bench --json` output (engine sluice) or `llama-bench -o json` output (engine
llama.cpp). Tests are matched by (prefill|decode, tokens, depth): sluice's pp512 is llama-bench's
n_prompt 512, its tg64@d0 llama-bench's n_gen 64 at n_depth 0.

Ceilings: every figure is shown as a fraction of the roofline ceiling of its test, bytes per
token from the sluice run's report (the same file, so the same traffic) over the bandwidth its
placement reads from: cpu = the RAM read probe, gpu = the GPU's HBM probe, experts-cpu = routed
expert bytes from RAM and the rest from HBM (time = bytes_e / RAM + bytes_rest / HBM),
three-lane = routed expert bytes from RAM and over PCIe at once, the rest from HBM (time =
bytes_e / (RAM + PCIe) + bytes_rest / HBM: what a split with nothing cached allows); for a
three-lane decode the report adds the same with the run's cache hits (cached_bound: only the
split layers' misses from RAM and PCIe), which a cache that hits cannot pass. A
bandwidth that was not measured (no GPU probe in a CPU-only build) gives no ceiling: "-".

Each ceiling is min(memory bound, compute bound): the compute bound is the peak of the device
that computes (cpu: the CPU int8 dot kernel's rate measured by sluice bench; gpu: the GPU's int8
tensor-core peak from the report or the probe) over 2 x multiply-adds per token (the report's
ops_per_token); experts-cpu splits the operations as it splits the bytes. A peer's prefill is held
to the memory bound of its own micro-batch (llama-bench's n_ubatch: the weights are read once per
batch), recomputed from the report's traffic model, not to that of sluice's chunk.

Rows appended to results.jsonl (one per compared test):
{"date","commit","machine","scenario","model","metric","value","peer","peer_value","ratio","command",
 "ceiling_fraction","peer_ceiling_fraction",
 "memory_ceiling_tok_s","compute_ceiling_tok_s","ceiling_bound", and the same three with peer_;
 three-lane decode rows of a split sluice run also "cached_ceiling_tok_s","cached_ceiling_fraction",
 "hit_rate"}
metric: "prefill" / "decode" (tok/s; scenario names the test, e.g. cpu/q30-12l/tg64@d0); the two
last keys are each engine's fraction of its roofline ceiling (null where none was measured).
Peer-only runs (no sluice counterpart, e.g. llama.cpp fully on the GPU) are recorded with value
and ratio null. A sluice run's oracle-tape windows give metric "spec_speedup" rows: each drafted
run (windows of several rows, or the MTP head drafting) against the same run's one-row windows at
the same depth and acceptance (serial decoding through the same path), with "tokens_per_step",
"acceptance" and "same_tokens" (spec_speedup_rows).
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLACEMENTS = ("cpu", "gpu", "experts-cpu", "three-lane")


def load_manifest(path):
    p = pathlib.Path(path)
    if p.exists():
        return json.loads(p.read_text())
    return {"runs": [], "compare": []}


def save_manifest(path, m):
    pathlib.Path(path).write_text(json.dumps(m, indent=1) + "\n")


def read_json_file(path):
    text = pathlib.Path(path).read_text()
    # llama-bench may print a line of its own before the JSON; start at the first bracket.
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        raise ValueError(f"{path}: no JSON in the file")
    return json.loads(text[min(starts):])


def tests_of(run, base_dir):
    """{(metric, n, depth): {"tok_s", "stddev", "sluice": result or None}} for one run."""
    path = pathlib.Path(run["file"])
    if not path.is_absolute():
        path = base_dir / path
    data = read_json_file(path)
    out = {}
    if run["engine"] == "sluice":
        for r in data["results"]:
            if r["kind"] == "prefill":
                key = ("prefill", r["n_prompt"], r["depth"])
            elif r["kind"] == "decode":
                key = ("decode", r["n_gen"], r["depth"])
            else:
                continue
            out[key] = {"tok_s": r["tok_s"], "stddev": r["stddev_tok_s"], "result": r}
    elif run["engine"] == "llama.cpp":
        for r in data:
            depth = int(r.get("n_depth", 0))
            if r["n_prompt"] > 0 and r["n_gen"] == 0:
                key = ("prefill", r["n_prompt"], depth)
            elif r["n_gen"] > 0 and r["n_prompt"] == 0:
                key = ("decode", r["n_gen"], depth)
            else:
                continue
            out[key] = {"tok_s": float(r["avg_ts"]), "stddev": float(r["stddev_ts"]), "result": None,
                        "chunk": int(r["n_ubatch"]) if r.get("n_ubatch") else None}
    else:
        raise ValueError(f"run {run['name']}: engine must be sluice or llama.cpp, got {run['engine']}")
    return out, data


def test_order(key):
    """Prefill before decode, then by depth and tokens."""
    metric, n, depth = key
    return (0 if metric == "prefill" else 1, depth, n)


def test_name(key):
    metric, n, depth = key
    return f"pp{n}" if metric == "prefill" and depth == 0 else (
        f"pp{n}@d{depth}" if metric == "prefill" else f"tg{n}@d{depth}")


def ceiling(report, result, placement, probe=None):
    """The ceiling in tok/s of `result` (a sluice result) on `placement`: the smaller of its memory
    and compute bounds (bounds() gives both and which one binds)."""
    return bounds(report, result, placement, probe)["ceiling"]


def expected_distinct_experts(n_expert, n_used, rows):
    """runtime/roofline.cpp's: distinct experts one layer reads for `rows` rows, uniform routing."""
    if n_expert <= 0 or n_used <= 0 or rows <= 0:
        return 0.0
    if rows == 1:
        return float(min(n_used, n_expert))
    return n_expert * (1.0 - max(1.0 - n_used / n_expert, 0.0) ** rows)


def prefill_bytes_per_token(traffic, n_prompt, chunk):
    """runtime/roofline.cpp's prefill traffic: forwards of `chunk` rows from an empty cache, each
    reading the shared weights once, the distinct experts of its rows and the K/V so far."""
    total, done = 0.0, 0
    while done < n_prompt:
        rows = min(chunk, n_prompt - done)
        b = traffic["shared_bytes"] + traffic["embd_row_bytes"] * rows
        if traffic["n_expert"] > 0:
            b += traffic["routed_bytes_total"] / traffic["n_expert"] * expected_distinct_experts(
                traffic["n_expert"], traffic["n_expert_used"], rows)
        b += traffic["kv_bytes_per_position"] * (done + rows)
        total += b
        done += rows
    return total / n_prompt


def at_chunk(report, result, chunk):
    """`result` with the prefill traffic of forwards of `chunk` rows: another engine's prefill
    reads the weights once per its own micro-batch (llama-bench's n_ubatch, 512 by default), not
    once per sluice's chunk, so its memory bound is that of its own batch size."""
    traffic = (report or {}).get("roofline", {}).get("traffic")
    if not (result and chunk and traffic and result.get("kind") == "prefill" and result.get("n_prompt")):
        return result
    return {**result, "bytes_per_token": prefill_bytes_per_token(traffic, result["n_prompt"], chunk)}


def bounds(report, result, placement, probe=None, chunk=None):
    """Both roofline bounds of `result` (tok/s, None where unknown), the ceiling (the smaller) and
    which one binds ("memory", "compute" or None). chunk: the rows per prefill forward of the
    engine measured (None: sluice's own)."""
    mem = memory_bound(report, at_chunk(report, result, chunk), placement, probe)
    comp = compute_bound(report, result, placement, probe)
    known = [(v, k) for v, k in ((mem, "memory"), (comp, "compute")) if v]
    ceil, binds = min(known) if known else (None, None)
    return {"memory": mem, "compute": comp, "ceiling": ceil, "binds": binds}


def compute_bound(report, result, placement, probe=None):
    """Peak operations per second of the device(s) that compute on `placement` over the result's
    operations per token (2 per multiply-add, from sluice bench's compute model). cpu: the CPU int8
    dot kernel's measured rate; gpu: the GPU's int8 tensor-core peak; experts-cpu: routed experts
    on the CPU, the rest on the GPU (time = ops_e / cpu + ops_rest / gpu)."""
    if report is None or result is None or not result.get("ops_per_token"):
        return None
    ops = result["ops_per_token"]
    rl = report["roofline"]
    cpu = rl.get("cpu_peak_ops_s")
    gpu_info = report["bandwidth"].get("gpu") or (probe if probe and probe.get("present") else {})
    gpu = rl.get("gpu_peak_ops_s") or gpu_info.get("peak_int8_ops_s")
    if placement == "cpu":
        return cpu / ops if cpu else None
    if placement == "gpu":
        return gpu / ops if gpu else None
    if placement in ("experts-cpu", "three-lane"):
        routed = 2.0 * (rl.get("routed_macs_per_row") or 0.0)
        if not (cpu and gpu) or routed > ops:
            return None
        return 1.0 / (routed / cpu + (ops - routed) / gpu)
    return None


def memory_bound(report, result, placement, probe=None):
    """The memory bound in tok/s of `result` (a sluice result) when its bytes come from `placement`.
    probe: a GPU probe (the manifest's) for reports made without one (sluice built without CUDA)."""
    if report is None or result is None or not result.get("bytes_per_token"):
        return None
    bpt = result["bytes_per_token"]
    ram = report["bandwidth"].get("ram_read_gb_s")
    gpu = report["bandwidth"].get("gpu") or (probe if probe and probe.get("present") else {})
    hbm = gpu.get("hbm_read_gb_s")
    if placement == "cpu":
        bw = report["roofline"].get("bandwidth_gb_s") if report.get("backend", "cpu") == "cpu" else ram
        return bw * 1e9 / bpt if bw else None
    if placement == "gpu":
        return hbm * 1e9 / bpt if hbm else None
    if placement in ("experts-cpu", "three-lane"):
        pcie = gpu.get("pcie_h2d_gb_s") if placement == "three-lane" else 0.0
        if not (ram and hbm) or pcie is None:
            return None
        groups = {g["name"]: g["bytes_per_token"] for g in report["roofline"]["groups"]}
        total = sum(groups.values()) or 1
        experts = bpt * groups.get("routed experts", 0) / total
        return 1.0 / (experts / ((ram + pcie) * 1e9) + (bpt - experts) / (hbm * 1e9))
    return None


def cached_bound(report, result, probe=None):
    """The three-lane memory bound (memory only: no compute bound is applied) of a decode
    `result` with the run's cache hits counted (tok/s), or None. The plain three-lane ceiling
    assumes no routed expert is cached, so a run whose cache hits goes past it; here only the
    misses of the split layers come from RAM and PCIe together, and every other byte (whole
    layers, hits, dense weights) from HBM; the swaps' own copies are left out. The hit rate is the
    test's own where the report has it (bench_result.hit_rate), else the run's (placement.metrics:
    the split layers' planned lookups, the decode steps' and those of any window below the
    streaming cut-over; a streamed prefill plans none). Every layer is taken
    to hold routed experts of one size (the MoE shapes measured here)."""
    pl = (report or {}).get("placement") or {}
    met = pl.get("metrics") or {}
    if not (result and result.get("kind") == "decode" and result.get("bytes_per_token") and met.get("experts")):
        return None
    ram = report["bandwidth"].get("ram_read_gb_s")
    gpu = report["bandwidth"].get("gpu") or (probe if probe and probe.get("present") else {})
    hbm, pcie = gpu.get("hbm_read_gb_s"), gpu.get("pcie_h2d_gb_s")
    n_expert = report["roofline"].get("traffic", {}).get("n_expert") or 0
    if not (ram and hbm and pcie and n_expert and pl.get("total_experts")):
        return None
    n_layer = pl["total_experts"] / n_expert
    split_share = max(0.0, 1.0 - (pl.get("whole_layers") or 0) / n_layer)
    bpt = result["bytes_per_token"]
    groups = {g["name"]: g["bytes_per_token"] for g in report["roofline"]["groups"]}
    experts = bpt * groups.get("routed experts", 0) / (sum(groups.values()) or 1)
    missed = experts * split_share * (1.0 - test_hit_rate(report, result))
    return 1.0 / (missed / ((ram + pcie) * 1e9) + (bpt - missed) / (hbm * 1e9))


def test_hit_rate(report, result):
    """The VRAM cache's hit rate over `result`'s own lookups where the report has it, else the run's."""
    own = result.get("hit_rate")
    return own if own is not None and own >= 0 else report["placement"]["metrics"]["hit_rate"]


def bound_fields(prefix, b):
    """Extra fields of a results.jsonl row: both bounds (tok/s) and the one that binds."""
    return {f"{prefix}memory_ceiling_tok_s": None if b["memory"] is None else sig(b["memory"]),
            f"{prefix}compute_ceiling_tok_s": None if b["compute"] is None else sig(b["compute"]),
            f"{prefix}ceiling_bound": b["binds"]}


# A split run's CPU lane read its experts at 60-87% of the rate calibrated at its start in
# session 31's eight sound runs (two H100 hosts); the three whose host slowed mid-run read at
# 19-37%, one of them with the same hit rates and swaps as a sound repeat on the same machine.
k_cpu_lane_sound = 0.5


def cpu_lane_health(report):
    """The CPU lane's measured expert read rate against the one calibrated at the run's start:
    (measured GB/s, calibrated GB/s, measured / calibrated), or None where the run has no CPU lane
    work (no placement, nothing missed to the CPU, or no calibration)."""
    p = (report or {}).get("placement") or {}
    m = p.get("metrics") or {}
    seconds = ((m.get("lanes") or {}).get("cpu") or {}).get("measured_s") or 0.0
    calibrated = p.get("cpu_expert_gb_s_calibrated") or 0.0
    if seconds <= 0 or calibrated <= 0 or not m.get("cpu_bytes"):
        return None
    measured = m["cpu_bytes"] / seconds / 1e9
    return measured, calibrated, measured / calibrated


def cpu_lane_line(run_name, health):
    measured, calibrated, share = health
    line = (f"{run_name}: CPU lane {measured:.1f} GB/s of experts against {calibrated:.1f} calibrated at the "
            f"run's start ({share:.0%})")
    if share < k_cpu_lane_sound:
        line += (" -- SUSPECT: the host ran slower during this run than at its start (below "
                 f"{k_cpu_lane_sound:.0%}); its split figures understate the engine, rerun it")
    return line


def sig(x, digits=6):
    """x to `digits` significant figures (fractions of a ceiling can be small)."""
    return float(f"{x:.{digits}g}")


def git_commit():
    """HEAD, with "+dirty" when tracked files differ from it: then HEAD does not name the code that
    ran (the GPU machine's copy of the tree carries a .git from an earlier snapshot, so its HEAD
    named a commit sessions old while the files were the latest tree)."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def fmt_ts(x):
    return "-" if x is None else f"{x:.2f}"


def fmt_frac(tok_s, ceil):
    return "-" if (tok_s is None or not ceil) else f"{100.0 * tok_s / ceil:.1f}%"


def report(args):
    m = load_manifest(args.manifest)
    base = pathlib.Path(args.manifest).resolve().parent
    runs = {r["name"]: r for r in m["runs"]}
    parsed = {}
    for name, r in runs.items():
        try:
            parsed[name] = tests_of(r, base)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            print(f"record.py: run '{name}' skipped: {e}", file=sys.stderr)
    sluice_report = None
    for name, r in runs.items():
        if r["engine"] == "sluice" and name in parsed:
            sluice_report = parsed[name][1]
            break
    probe = m.get("gpu_probe")
    machine = args.machine or (sluice_report or {}).get("machine") or "unknown machine"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    commit = args.commit or git_commit()

    rows, table, cached = [], [], []
    compared_peers = set()
    lane_health = {name: cpu_lane_health(parsed[name][1]) for name, r in runs.items()
                   if r["engine"] == "sluice" and name in parsed}
    lane_lines = [cpu_lane_line(name, h) for name, h in lane_health.items() if h]
    for s_name, p_name in m["compare"]:
        if s_name not in parsed or p_name not in parsed:
            print(f"record.py: comparison {s_name} / {p_name} skipped: a run is missing", file=sys.stderr)
            continue
        compared_peers.add(p_name)
        s_tests, s_rep = parsed[s_name]
        p_tests, _ = parsed[p_name]
        for key in sorted(set(s_tests) & set(p_tests), key=test_order):
            s, p = s_tests[key], p_tests[key]
            s_b = bounds(s_rep, s["result"], runs[s_name].get("placement", "cpu"), probe)
            p_b = bounds(s_rep, s["result"], runs[p_name].get("placement", "cpu"), probe, p.get("chunk"))
            s_ceil, p_ceil = s_b["ceiling"], p_b["ceiling"]
            ratio = s["tok_s"] / p["tok_s"] if p["tok_s"] else None
            name = test_name(key)
            table.append([name, s_name, fmt_ts(s["tok_s"]), fmt_frac(s["tok_s"], s_ceil), p_name, fmt_ts(p["tok_s"]),
                          fmt_frac(p["tok_s"], p_ceil), "-" if ratio is None else f"{ratio:.2f}x"])
            common = {"date": date, "commit": commit, "machine": machine, "scenario": f"{args.scenario}/{name}",
                      "model": args.model}
            sf = s["tok_s"] / s_ceil if s_ceil else None
            pf = p["tok_s"] / p_ceil if p_ceil else None
            rows.append({**common, "metric": key[0], "value": s["tok_s"], "peer": p_name, "peer_value": p["tok_s"],
                         "ratio": None if ratio is None else round(ratio, 3),
                         "command": runs[s_name].get("command", ""),
                         "ceiling_fraction": None if sf is None else sig(sf),
                         "peer_ceiling_fraction": None if pf is None else sig(pf),
                         **bound_fields("", s_b), **bound_fields("peer_", p_b)})
            if lane_health.get(s_name):
                rows[-1]["cpu_lane_of_calibrated"] = sig(lane_health[s_name][2], 3)
            cb = cached_bound(s_rep, s["result"], probe) if runs[s_name].get("placement") == "three-lane" else None
            if cb:
                hit = test_hit_rate(s_rep, s["result"])
                rows[-1].update({"cached_ceiling_tok_s": sig(cb), "cached_ceiling_fraction": sig(s["tok_s"] / cb),
                                 "hit_rate": sig(hit)})
                cached.append(f"{name} {s_name}: {fmt_ts(cb)} tok/s at hit rate {hit:.3f}, "
                              f"{fmt_frac(s['tok_s'], cb)} of it")
    # Peers with no sluice counterpart: their figures, with the ceiling of their placement.
    for p_name, r in runs.items():
        if r["engine"] != "llama.cpp" or p_name in compared_peers or p_name not in parsed:
            continue
        s_tests = tests_of_sluice_first(parsed, runs)
        for key, p in sorted(parsed[p_name][0].items(), key=lambda kv: test_order(kv[0])):
            s = s_tests.get(key)
            p_b = bounds(sluice_report, s["result"] if s else None, r.get("placement", "cpu"), probe, p.get("chunk"))
            p_ceil = p_b["ceiling"]
            name = test_name(key)
            table.append([name, "-", "-", "-", p_name, fmt_ts(p["tok_s"]), fmt_frac(p["tok_s"], p_ceil), "-"])
            rows.append({"date": date, "commit": commit, "machine": machine, "scenario": f"{args.scenario}/{name}",
                         "model": args.model, "metric": key[0], "value": None, "peer": p_name,
                         "peer_value": p["tok_s"], "ratio": None, "command": r.get("command", ""),
                         "peer_ceiling_fraction": sig(p["tok_s"] / p_ceil) if p_ceil and p["tok_s"] else None,
                         **bound_fields("peer_", p_b)})

    header = ["test", "sluice", "tok/s", "of ceiling", "peer", "tok/s", "of ceiling", "ratio"]
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(t) + " |" for t in table]

    # sluice-only figures: the window cost curve and the oracle runs.
    extra = []
    for name, r_ in runs.items():
        if r_["engine"] != "sluice" or name not in parsed:
            continue
        rows += spec_speedup_rows(parsed[name][1], name, r_.get("command", ""),
                                  {"date": date, "commit": commit, "machine": machine, "model": args.model},
                                  args.scenario)
        for r in parsed[name][1]["results"]:
            if r["kind"] == "window":
                extra.append(f"| {name} | {r['test']} | {r['mean_s'] * 1e3:.2f} ms | {r['tok_s']:.1f} rows/s | "
                             f"{fmt_frac(r['tok_s'], r['ceiling_tok_s'])} | |")
            elif r["kind"] == "spec":
                extra.append(f"| {name} | {r['test']} | {r['tok_s']:.2f} tok/s | {r['tokens_per_step']:.2f} "
                             f"tokens/window of {r.get('rows_mean', r['rows']):.2f} rows (accept {r['accept']}) | "
                             f"{fmt_frac(r['tok_s'], r['ceiling_tok_s'])} | "
                             f"{'tokens = serial' if r['same_tokens'] else 'TOKENS DIFFER'} |")
            elif r["kind"] == "decode" and r["depth"] > 0:
                extra.append(f"| {name} | {r['test']} | {r['mean_s'] * 1e3:.0f} ms | {r['tok_s']:.2f} tok/s | "
                             f"{fmt_frac(r['tok_s'], r['ceiling_tok_s'])} | |")

    # The table people read, last (plain text: aligned columns).
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)] if table else []
    print()
    print(f"{args.scenario}: {args.model}; {machine}; commit {commit}")
    if table:
        for line in [header] + table:
            print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
    else:
        print("(no comparable tests: see the messages above)")
    if cached:
        print("three-lane ceiling with the run's cache hits (misses from RAM + PCIe, the rest from HBM):")
        for c in cached:
            print("  " + c)
    for line in lane_lines:
        print(line)

    if not args.record:
        print("\n(not recorded: pass --record to append to bench/RESULTS.md and bench/results.jsonl)")
        return 0
    jsonl = pathlib.Path(args.jsonl)
    with jsonl.open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    section = [f"\n## {args.title or args.scenario}, {date}, commit {commit}\n",
               f"Machine: {machine}. Model: {args.model}.",
               *(f"{x}" for x in (args.note or [])), "", "Commands:", "```"]
    section += [f"{r['name']}: {r.get('command', '')}" for r in m["runs"]]
    section += ["```", ""] + md
    if sluice_report:
        rl = sluice_report["roofline"]
        bw = sluice_report["bandwidth"]
        gpu = bw.get("gpu") or (probe if probe and probe.get("present") else None)
        section += ["", f"Roofline: {rl['bytes_per_token']:,} bytes per decoded token; RAM read "
                    f"{fmt_ts(bw.get('ram_read_gb_s'))} GB/s with {sluice_report['threads']} threads"
                    + (f"; GPU HBM {gpu['hbm_read_gb_s']:.0f} GB/s, PCIe {gpu['pcie_h2d_gb_s']:.1f} GB/s" if gpu
                       else f"; {bw.get('gpu_note', 'no GPU')}") + "."]
    if cached:
        section += ["", "The three-lane ceiling with each run's cache hits (the split layers' misses from RAM and "
                    "PCIe at once, every other byte from HBM): " + "; ".join(cached) + "."]
    if lane_lines:
        section += ["", "CPU lane against its calibration (a share below "
                    f"{k_cpu_lane_sound:.0%} marks a host that slowed mid-run): " + "; ".join(lane_lines) + "."]
    if extra:
        section += ["", "| sluice run | test | time | speed | of ceiling | |", "|---|---|---|---|---|---|"] + extra
    with pathlib.Path(args.md).open("a") as f:
        f.write("\n".join(section) + "\n")
    print(f"\nrecorded: {len(rows)} rows to {jsonl}, a section to {args.md}")
    return 0


def spec_speedup_rows(rep, run_name, command, common, scenario):
    """results.jsonl rows (metric spec_speedup) for a sluice report's oracle-tape runs: each drafted
    run (windows of more than one row, or the MTP head drafting) against the same run's one-row
    windows at the same depth and acceptance, which are serial decoding through the same path
    (the standard's peer for spec_speedup). Runs without that baseline give no row."""
    spec = [r for r in rep.get("results", []) if r.get("kind") == "spec"]
    base = {(r["accept"], r["depth"]): r for r in spec
            if r["rows"] == 1 and not r["test"].startswith("spec+") and r.get("tok_s")}
    out = []
    for r in spec:
        b = base.get((r["accept"], r["depth"]))
        if b is None or r is b or not r.get("tok_s"):
            continue
        out.append({**{k: common[k] for k in ("date", "commit", "machine")},
                    "scenario": f"{scenario}/{r['test']} accept {r['accept']}", "model": common["model"],
                    "metric": "spec_speedup", "value": r["tok_s"],
                    "peer": f"serial decoding ({b['test']} of {run_name})", "peer_value": b["tok_s"],
                    "ratio": round(r["tok_s"] / b["tok_s"], 3), "command": command,
                    "tokens_per_step": sig(r["tokens_per_step"]), "acceptance": sig(r["acceptance"]),
                    "same_tokens": bool(r["same_tokens"])})
    return out


def tests_of_sluice_first(parsed, runs):
    for name, r in runs.items():
        if r["engine"] == "sluice" and name in parsed:
            return parsed[name][0]
    return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="add one engine run to a manifest")
    a.add_argument("manifest")
    a.add_argument("--name", required=True)
    a.add_argument("--engine", required=True, choices=["sluice", "llama.cpp"])
    a.add_argument("--file", required=True, help="its JSON output (relative to the manifest's folder or absolute)")
    a.add_argument("--placement", default="cpu", choices=PLACEMENTS)
    a.add_argument("--command", default="")
    g = sub.add_parser("add-probe", help="attach a GPU probe (roofline_cuda.cpp's program) to a manifest")
    g.add_argument("manifest")
    g.add_argument("--file", required=True)
    c = sub.add_parser("compare", help="compare a sluice run with a peer run")
    c.add_argument("manifest")
    c.add_argument("sluice_name")
    c.add_argument("peer_name")
    r = sub.add_parser("report", help="print the ratio table; --record appends it")
    r.add_argument("manifest")
    r.add_argument("--model", required=True)
    r.add_argument("--scenario", required=True, help="e.g. cpu/q30-12l (the test name is appended)")
    r.add_argument("--machine", default="", help="default: the sluice report's")
    r.add_argument("--commit", default="", help="default: git rev-parse --short HEAD")
    r.add_argument("--title", default="")
    r.add_argument("--note", action="append", help="a line under the title (repeatable)")
    r.add_argument("--record", action="store_true")
    r.add_argument("--jsonl", default=str(ROOT / "bench" / "results.jsonl"))
    r.add_argument("--md", default=str(ROOT / "bench" / "RESULTS.md"))
    args = ap.parse_args()
    if args.cmd == "add":
        m = load_manifest(args.manifest)
        m["runs"] = [x for x in m["runs"] if x["name"] != args.name]
        m["runs"].append({"name": args.name, "engine": args.engine, "file": args.file, "placement": args.placement,
                          "command": args.command})
        save_manifest(args.manifest, m)
        return 0
    if args.cmd == "add-probe":
        m = load_manifest(args.manifest)
        m["gpu_probe"] = read_json_file(args.file)
        save_manifest(args.manifest, m)
        return 0
    if args.cmd == "compare":
        m = load_manifest(args.manifest)
        pair = [args.sluice_name, args.peer_name]
        if pair not in m["compare"]:
            m["compare"].append(pair)
        save_manifest(args.manifest, m)
        return 0
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
