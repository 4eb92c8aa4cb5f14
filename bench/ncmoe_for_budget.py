#!/usr/bin/env python3
"""The llama.cpp --n-cpu-moe (-ncmoe) that keeps about as many routed-expert bytes in VRAM as a
sluice --vram-budget: -ncmoe N leaves the routed experts of layers 0..N-1 in host memory and
puts those of layers N.. on the GPU, so the answer is the smallest N whose layers N.. fit the
budget (the file's own tensor sizes; an MTP block after the trunk is not counted).

    python3 bench/ncmoe_for_budget.py MODEL.gguf 0 12G    -> prints 0:N0 12G:N12
"""
from __future__ import annotations

import re
import sys

import gguf

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise ValueError(f"size '{text}': expected a number with an optional K, M, G or T suffix")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


# GGUF value types (the format's numbering) and the sizes of the fixed-width ones.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Header:
    """Just enough of a GGUF header: the integer metadata and each tensor's (name, dims, type).
    gguf.GGUFReader builds Python objects for every vocabulary string (~20 s for a 151,936-token
    vocabulary); this skips them."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            self.buf = f.read(64 << 20)   # the header is far smaller than this
        self.pos = 0
        if self._take(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.version = self._u(4)
        n_tensors, n_kv = self._u(8), self._u(8)
        self.ints: dict[str, int] = {}
        self.strings: dict[str, str] = {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._u(4)
            if vtype in _FIXED and vtype not in (6, 12):
                self.ints[key] = int.from_bytes(self._take(_FIXED[vtype]), "little", signed=vtype in (1, 3, 5, 11))
            elif vtype == _STRING:
                self.strings[key] = self._str()
            else:
                self._skip(vtype)
        self.tensors = []
        for _ in range(n_tensors):
            name = self._str()
            dims = [self._u(8) for _ in range(self._u(4))]
            ttype = self._u(4)
            self._u(8)   # offset
            self.tensors.append((name, dims, ttype))

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError("GGUF header: truncated")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _u(self, n: int) -> int:
        return int.from_bytes(self._take(n), "little")

    def _str(self) -> str:
        return self._take(self._u(8)).decode("utf-8", "replace")

    def _skip(self, vtype: int) -> None:
        if vtype in _FIXED:
            self.pos += _FIXED[vtype]
        elif vtype == _STRING:
            n = self._u(8)   # read first: `self.pos += self._u(8)` would add to the old position
            self.pos += n
        elif vtype == _ARRAY:
            etype, count = self._u(4), self._u(8)
            if etype in _FIXED:
                self.pos += _FIXED[etype] * count
            else:
                for _ in range(count):
                    self._skip(etype)
        else:
            raise ValueError(f"GGUF header: value type {vtype}")


def expert_bytes_per_layer(path: str) -> list[int]:
    h = _Header(path)
    arch = h.strings["general.architecture"]
    n_layer = h.ints[f"{arch}.block_count"] - h.ints.get(f"{arch}.nextn_predict_layers", 0)
    per = [0] * n_layer
    for name, dims, ttype in h.tensors:
        m = re.fullmatch(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight", name)
        if m and int(m.group(1)) < n_layer:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
            count = 1
            for d in dims:
                count *= d
            per[int(m.group(1))] += count // block * size
    return per


def ncmoe_for(per_layer: list[int], budget: int) -> int:
    resident = 0
    n = len(per_layer)
    while n > 0 and resident + per_layer[n - 1] <= budget:
        n -= 1
        resident += per_layer[n]
    return n


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    per = expert_bytes_per_layer(argv[1])
    print(" ".join(f"{b}:{ncmoe_for(per, parse_size(b))}" for b in argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
