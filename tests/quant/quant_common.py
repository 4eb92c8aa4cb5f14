"""Helpers shared by the tests/quant pytest files: random GGML blocks with finite f16 scales,
and ctypes wrappers of the quant C ABI (tests/capi/capi_quant.cpp)."""
import ctypes

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES

# Byte offsets of the f16 scale fields of each format's block (GGML's ggml-common.h layouts).
F16_SCALES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0], T.IQ4_XS: [0],
    T.MXFP4: [],
}
BLOCK_FORMATS = list(F16_SCALES)
ALL_FORMATS = [T.F32, T.F16, T.BF16] + BLOCK_FORMATS


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int, moderate: bool = False) -> np.ndarray:
    """Random block bytes. f16 scales are forced finite; with moderate=True they are drawn
    from +-[2^-8, 2^2) and MXFP4 exponents from 2^-12..2^6, so dot products stay far from
    overflow."""
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_SCALES[qtype]:
        if moderate:
            h = (rng.uniform(2.0**-8, 4.0, n_blocks) * rng.choice([-1.0, 1.0], n_blocks)).astype(np.float16)
        else:
            h = raw[:, off:off + 2].copy().view(np.uint16).reshape(-1)
            h = np.where((h & 0x7C00) == 0x7C00, h & ~np.uint16(0x4000), h).astype(np.uint16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    if qtype == T.MXFP4 and moderate:
        raw[:, 0] = rng.integers(128 - 12, 128 + 6, n_blocks, dtype=np.uint8)
    return raw


class Capi:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        P, I64, U32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32
        lib.sluice_dequantize.argtypes = [U32, P, P, I64]
        lib.sluice_quantize.argtypes = [U32, P, P, I64]
        lib.sluice_act_row_bytes.argtypes = [U32, I64]
        lib.sluice_act_row_bytes.restype = I64
        lib.sluice_quantize_act.argtypes = [U32, P, I64, P]
        lib.sluice_dot_ref.argtypes = [U32, P, P, I64, P]

    def dequantize(self, qtype: T, raw: np.ndarray, n: int) -> np.ndarray:
        raw = np.ascontiguousarray(raw)
        out = np.empty(n, dtype=np.float32)
        assert self.lib.sluice_dequantize(int(qtype), raw.ctypes.data, out.ctypes.data, n) == 0
        return out

    def quantize(self, qtype: T, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        block, type_size = GGML_QUANT_SIZES[qtype]
        out = np.empty(x.size // block * type_size, dtype=np.uint8)
        assert self.lib.sluice_quantize(int(qtype), x.ctypes.data, out.ctypes.data, x.size) == 0
        return out

    def quantize_act(self, wtype: T, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        nbytes = self.lib.sluice_act_row_bytes(int(wtype), x.size)
        assert nbytes >= 0
        out = np.empty(nbytes, dtype=np.uint8)
        assert self.lib.sluice_quantize_act(int(wtype), x.ctypes.data, x.size, out.ctypes.data) == 0
        return out

    def dot_ref(self, wtype: T, w: np.ndarray, act: np.ndarray, n: int) -> np.float32:
        w, act = np.ascontiguousarray(w), np.ascontiguousarray(act)
        out = np.zeros(1, dtype=np.float32)
        assert self.lib.sluice_dot_ref(int(wtype), w.ctypes.data, act.ctypes.data, n, out.ctypes.data) == 0
        return out[0]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
