#!/usr/bin/env python3
"""Summarise an Nsight Compute raw CSV (bench/gpu/profile.sh): time and DRAM bytes per kernel
name and launch shape, in order of first launch, with the bandwidth each reached and its share
of the phase. --layers L also prints the time per layer (every layer of the synthetic files has
the same shape).

    python3 bench/gpu/profile_summary.py ncu_decode.csv --layers 8 --title decode
"""
import argparse
import csv
import io
import re
import sys


def rows_of(text):
    """The CSV rows after ncu's log lines: the header starts with "ID"; the line after it holds units."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        raise SystemExit("no ncu CSV header in the file")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    units = next(reader)
    return header, units, [r for r in reader if len(r) == len(header)]


def column(header, name):
    for i, h in enumerate(header):
        if h == name:
            return i
    raise SystemExit(f"column {name!r} not in the CSV")


def scale(unit, value):
    """ncu writes durations in ns/us/ms/s and bytes in byte/Kbyte/Mbyte/Gbyte: to seconds and bytes."""
    f = float(value.replace(",", "")) if value else 0.0
    factors = {"ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "second": 1.0, "s": 1.0,
               "nsecond": 1e-9, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
               "GB": 1e9}
    return f * factors.get(unit, 1.0)


def short(name):
    """A kernel's name without its namespaces and argument list, templates kept."""
    name = re.sub(r"\(.*$", "", name)
    return re.sub(r"\b[a-z_]+::", "", name)[:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    header, units, rows = rows_of(open(a.csv, errors="replace").read())
    c_name = column(header, "Kernel Name")
    c_t = column(header, "gpu__time_duration.sum")
    c_b = column(header, "dram__bytes_read.sum")
    c_grid = column(header, "launch__grid_size")
    c_block = column(header, "launch__block_size")
    groups = {}
    total_t = total_b = 0.0
    for r in rows:
        t = scale(units[c_t], r[c_t])
        b = scale(units[c_b], r[c_b])
        key = (short(r[c_name]), r[c_grid], r[c_block])
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += 1
        g[1] += t
        g[2] += b
        total_t += t
        total_b += b
    print(f"## {a.title}: {len(rows)} kernels, {total_t * 1e3:.3f} ms, {total_b / 1e6:.1f} MB read "
          f"({total_b / total_t / 1e9 if total_t else 0:.0f} GB/s)")
    if a.layers:
        print(f"per layer (all kernels / {a.layers}): {total_t / a.layers * 1e6:.1f} us")
    print(f"{'kernel':70} {'grid':>7} {'block':>5} {'n':>5} {'total us':>9} {'us each':>8} {'share':>6} {'GB/s':>6}")
    for (name, grid, block), (n, t, b) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:70} {grid:>7} {block:>5} {n:>5} {t * 1e6:9.1f} {t / n * 1e6:8.2f} {t / total_t:6.1%} "
              f"{b / t / 1e9 if t else 0:6.0f}")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
