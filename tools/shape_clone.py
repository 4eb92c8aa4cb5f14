#!/usr/bin/env python3
"""Carry a real GGUF's shape to a machine the file itself cannot reach, and rebuild it there.

The GPU machine takes at most 64 MiB of files per call, the tracked tree included, so a real
model (SmolLM2-135M Q4_1 is 98 MB) cannot travel. Speed does not depend on the weights' values,
only on their shapes and formats, so this packs what speed depends on:

    shape_clone.py pack REAL.gguf PACK.npz [--pool-mb 2]
        the header byte for byte (metadata, tokenizer, tensor infos), every tensor's type, offset
        and size, the small F32 tensors whole, and per quantised type a pool of real blocks
        (evenly spaced runs taken from every tensor of that type)
    shape_clone.py unpack PACK.npz OUT.gguf [--seed 0]
        the same header, then each tensor filled with blocks of its own type drawn from the pool
        (a seeded start per tensor, cycling): a valid file of the real model's exact layout whose
        weights are real blocks in a different order

The clone loads in sluice and llama.cpp alike; its logits mean nothing, its timings are the real
model's. Used by bench/gpu/cpu_formats.sh for SmolLM2-135M on the GPU machine's CPU.
"""
import argparse
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader

WHOLE_BYTES = 1 << 20  # tensors of a type whose total is below this travel whole (norms, biases)


def pack(src: str, dst: str, pool_mb: float) -> None:
    reader = GGUFReader(src)
    raw = np.memmap(src, dtype=np.uint8, mode="r")
    data_start = int(reader.data_offset)
    tensors = sorted(reader.tensors, key=lambda t: int(t.data_offset))
    by_type: dict[int, list] = {}
    for t in tensors:
        by_type.setdefault(int(t.tensor_type), []).append(t)
    arrays = {"header": np.array(raw[:data_start]), "file_bytes": np.array([raw.size], np.int64)}
    arrays["names"] = np.array([t.name for t in tensors])
    arrays["types"] = np.array([int(t.tensor_type) for t in tensors], np.int32)
    arrays["offsets"] = np.array([int(t.data_offset) - data_start for t in tensors], np.int64)
    arrays["sizes"] = np.array([int(t.n_bytes) for t in tensors], np.int64)
    for ty, ts in by_type.items():
        _, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ty)]
        total = sum(int(t.n_bytes) for t in ts)
        if total <= WHOLE_BYTES:
            arrays[f"whole_{ty}"] = np.concatenate([np.array(raw[int(t.data_offset):int(t.data_offset) + int(t.n_bytes)]) for t in ts])
            continue
        # Runs of 64 blocks spread evenly over every tensor of the type, up to pool_mb in all.
        run = 64 * block_bytes
        want = max(run, int(pool_mb * (1 << 20)) // run * run)
        pieces = []
        per_tensor = max(1, want // run // len(ts))
        for t in ts:
            n_runs = int(t.n_bytes) // run
            if n_runs == 0:
                continue
            for k in np.linspace(0, n_runs - 1, num=min(per_tensor, n_runs)).astype(np.int64):
                begin = int(t.data_offset) + int(k) * run
                pieces.append(np.array(raw[begin:begin + run]))
        if not pieces:
            sys.exit(f"shape_clone: no whole run of 64 blocks in the {GGMLQuantizationType(ty).name} tensors")
        arrays[f"pool_{ty}"] = np.concatenate(pieces)
    np.savez_compressed(dst, **arrays)
    print(f"shape_clone: {src}: {len(tensors)} tensors, header {data_start} bytes -> {dst}")


def unpack(src: str, dst: str, seed: int) -> None:
    z = np.load(src)
    rng = np.random.default_rng(seed)
    header = z["header"]
    with open(dst, "wb") as out:
        out.write(header.tobytes())
        at = 0  # bytes written after the header
        whole_used: dict[int, int] = {}
        for name, ty, off, size in zip(z["names"], z["types"], z["offsets"], z["sizes"]):
            ty, off, size = int(ty), int(off), int(size)
            if off < at:
                sys.exit(f"shape_clone: tensor {name} at {off} overlaps the one before (ends at {at})")
            out.write(bytes(off - at))
            if f"whole_{ty}" in z:
                whole = z[f"whole_{ty}"]
                start = whole_used.get(ty, 0)
                out.write(whole[start:start + size].tobytes())
                whole_used[ty] = start + size
            else:
                pool = z[f"pool_{ty}"]
                _, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ty)]
                blocks = pool.size // block_bytes
                start = int(rng.integers(blocks)) * block_bytes
                left = size
                pos = start
                while left > 0:
                    take = min(left, pool.size - pos)
                    out.write(pool[pos:pos + take].tobytes())
                    left -= take
                    pos = 0
            at = off + size
        total = int(z["file_bytes"][0])
        out.write(bytes(max(0, total - header.size - at)))
    print(f"shape_clone: {dst}: {len(z['names'])} tensors, {total} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--pool-mb", type=float, default=2.0)
    u = sub.add_parser("unpack")
    u.add_argument("src")
    u.add_argument("dst")
    u.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "pack":
        pack(a.src, a.dst, a.pool_mb)
    else:
        unpack(a.src, a.dst, a.seed)


if __name__ == "__main__":
    main()
