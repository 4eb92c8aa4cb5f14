#!/usr/bin/env python3
"""Speculative decoding workload suite: each workload decoded serially and with drafting, in
the same run, same binary, same model; checks that the token_sha is identical and reports the
speedup, tokens per verify step and acceptance.

    python3 bench/spec_workloads.py [--model PATH] [--sluice build/release/sluice] [-n 200]
        [--threads N] [--reps R] [--only NAME,...] [--record]
        # --record appends to bench/RESULTS.md and bench/results.jsonl

With --reps R each workload runs serial, drafted, serial, drafted, ... R times each, and the
figures are the medians (speedup: the median of the R paired ratios, each drafted run over the
serial run just before it), so a burst of load from another process on a shared machine moves
one pair rather than the result; the spread (min..max of the paired ratios) is printed too.
"""
import statistics
import argparse
import datetime
import json
import pathlib
import platform
import site
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
# (name, prompt file, chat?): chat workloads use the model's ChatML template; the completion is raw.
WORKLOADS = [
    ("rewrite", "rewrite.txt", True),
    ("patch", "patch.txt", True),
    ("copy_edit", "copy_edit.txt", True),
    ("complete_function", "complete_function.txt", False),
    ("write_tests", "write_tests.txt", True),
    ("summarise_json", "summarise_json.txt", True),
]


def run_once(args, prompt_file, chat, extra):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [args.sluice, "run"] + ([args.model] if args.model else []) + [
            "-f", str(prompt_file), "-n", str(args.n), "--temp", "0", "-t", str(args.threads),
            "--stats-json", f.name] + (["--chat"] if chat else []) + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(f.name)), cmd


def shown(path):
    """A path as the results show it: a package's file under <site-packages>, the project's relative."""
    text = str(pathlib.Path(path).resolve())
    prefixes = {str(pathlib.Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()] if p}
    for prefix in sorted(prefixes, key=len, reverse=True):
        if text.startswith(prefix + "/"):
            return "<site-packages>" + text[len(prefix):]
    try:
        return str(pathlib.Path(text).relative_to(ROOT))
    except ValueError:
        return str(path)


def shown_command(cmd):
    """The command a reader can rerun: the binary's name, shown paths, no --stats-json scratch file."""
    out, skip = [], False
    for i, c in enumerate(cmd):
        if skip:
            skip = False
        elif c == "--stats-json":
            skip = True
        elif i == 0:
            out.append(pathlib.Path(c).name)
        else:
            out.append(shown(c) if "/" in c else c)
    return " ".join(out)


def machine():
    cpu = "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    return f"{cpu}, {os.cpu_count()} cores"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--sluice", default=str(ROOT / "build" / "release" / "sluice"))
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    rows = []
    only = set(filter(None, args.only.split(",")))
    for name, fname, chat in WORKLOADS:
        if only and name not in only:
            continue
        pf = HERE / "workloads" / fname
        pairs = []
        for _ in range(max(1, args.reps)):
            serial, _ = run_once(args, pf, chat, [])
            drafted, cmd = run_once(args, pf, chat, ["--spec"])
            if serial["token_sha"] != drafted["token_sha"]:
                print(f"{name}: drafted output differs from serial: {serial['token_sha']} != {drafted['token_sha']}")
                sys.exit(1)
            pairs.append((serial, drafted, drafted["decode_tok_s"] / serial["decode_tok_s"]))
        ratios = sorted(p[2] for p in pairs)
        speedup = statistics.median(ratios)
        # The figures of the pair whose ratio is the median (the upper one for an even count).
        serial, drafted, _ = sorted(pairs, key=lambda p: p[2])[len(pairs) // 2]
        rows.append(dict(name=name, serial=serial, drafted=drafted, speedup=speedup, command=shown_command(cmd)))
        spread = f"  spread {ratios[0]:.2f}..{ratios[-1]:.2f}x over {len(ratios)}" if len(ratios) > 1 else ""
        print(f"{name:18s} serial {serial['decode_tok_s']:7.1f} tok/s  drafted {drafted['decode_tok_s']:7.1f} tok/s  "
              f"speedup {speedup:5.2f}x  tokens/step {drafted['tokens_per_step']:5.2f}  "
              f"acceptance {drafted['acceptance']:.3f}  tokens {serial['n_decoded']}  sha equal{spread}", flush=True)

    if args.record:
        model = shown(args.model) if args.model else "SmolLM2-135M-Instruct Q4_1 (default)"
        mach = machine()
        with open(HERE / "results.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps({"date": date, "commit": commit, "machine": mach, "scenario": f"spec/{r['name']}",
                                    "model": model, "metric": "spec_speedup", "value": r["drafted"]["decode_tok_s"],
                                    "peer": "sluice serial", "peer_value": r["serial"]["decode_tok_s"],
                                    "ratio": round(r["speedup"], 3), "command": r["command"]}) + "\n")
        with open(HERE / "RESULTS.md", "a") as f:
            f.write(f"\n## Speculative decoding workloads (prompt lookup), {date}, commit {commit}\n\n")
            f.write(f"Machine: {mach}. Model: {model}. Greedy, {args.n} tokens at most, {args.threads} threads. "
                    f"Command: `python3 bench/spec_workloads.py -n {args.n} --threads {args.threads} --reps {args.reps} --record`"
                    f"{' (median of ' + str(args.reps) + ' serial/drafted pairs)' if args.reps > 1 else ''}. "
                    "Drafted and serial gave the same token_sha on every workload.\n\n")
            f.write("| workload | serial tok/s | drafted tok/s | speedup | tokens/step | acceptance | tokens |\n")
            f.write("|---|---|---|---|---|---|---|\n")
            for r in rows:
                d, s = r["drafted"], r["serial"]
                f.write(f"| {r['name']} | {s['decode_tok_s']:.1f} | {d['decode_tok_s']:.1f} | {r['speedup']:.2f}x | "
                        f"{d['tokens_per_step']:.2f} | {d['acceptance']:.3f} | {s['n_decoded']} |\n")


if __name__ == "__main__":
    main()
