"""Dequantisation and quantisation equal the gguf package's numpy code bit for bit."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, quants

from quant_common import ALL_FORMATS, BLOCK_FORMATS, Capi, random_blocks, same_bits


@pytest.fixture(scope="module")
def q(capi):
    return Capi(capi)


def first_mismatch(a, b):
    i = int(np.nonzero(a.view(np.uint32) != b.view(np.uint32))[0][0])
    return f"element {i}: sluice {a[i]!r} ({a.view(np.uint32)[i]:#010x}), gguf {b[i]!r} ({b.view(np.uint32)[i]:#010x})"


@pytest.mark.filterwarnings("ignore:overflow encountered")   # MXFP4 e = 255 times 12 is inf
@pytest.mark.parametrize("qtype", BLOCK_FORMATS, ids=lambda t: t.name)
def test_dequantize_equals_gguf_bit_for_bit(q, qtype):
    rng = np.random.default_rng(1000 + int(qtype))
    block, _ = GGML_QUANT_SIZES[qtype]
    n_blocks = 4096 // block * 8
    raw = random_blocks(rng, qtype, n_blocks)
    ours = q.dequantize(qtype, raw, n_blocks * block)
    ref = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float32)
    assert same_bits(ours, ref), first_mismatch(ours, ref)


@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_float_formats_widen_exactly(q, qtype):
    rng = np.random.default_rng(7 + int(qtype))
    width = {T.F32: 4, T.F16: 2, T.BF16: 2}[qtype]
    raw = rng.integers(0, 256, size=4096 * width, dtype=np.uint8)
    if qtype == T.F16:
        # Every f16 class: zeros, subnormals, normals, infinities. NaNs are compared as a class
        # (hardware conversion may quiet a signalling payload).
        raw[:8] = np.array([0, 0, 0, 0x80, 1, 0, 0, 0x7C], dtype=np.uint8)
    ours = q.dequantize(qtype, raw, raw.size // width)
    typed = {T.F32: raw.view(np.float32), T.F16: raw.view(np.float16), T.BF16: raw}[qtype]
    ref = np.asarray(quants.dequantize(typed, qtype), dtype=np.float32).reshape(-1)
    assert ours.size == ref.size == 4096
    nan = np.isnan(ref)
    assert np.array_equal(nan, np.isnan(ours))
    assert same_bits(ours[~nan], ref[~nan]), first_mismatch(ours[~nan], ref[~nan])


def quant_inputs(rng):
    """Rows that exercise the quantisers: gaussian, zeros, a lone non-zero, tiny and huge
    magnitudes, exact ties (multiples of 1/2), all-equal rows, mixed signs at the absmax."""
    n = 256
    rows = [
        rng.standard_normal(n),
        np.zeros(n),
        np.where(np.arange(n) == 37, 3.0, 0.0),
        rng.standard_normal(n) * 1e-30,
        rng.standard_normal(n) * 1e4,
        rng.standard_normal(n) * 6e4,
        np.round(rng.standard_normal(n) * 16) / 2,
        np.full(n, 0.7),
        np.tile([-2.0, 2.0, 1.0, -1.0], n // 4),
        rng.uniform(-1, 1, n) * np.exp(rng.uniform(-20, 20, n)),
        np.where(rng.random(n) < 0.5, 0.0, rng.standard_normal(n)),
    ]
    return np.stack(rows).astype(np.float32)


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4],
                         ids=lambda t: t.name)
def test_quantize_equals_gguf_byte_for_byte(q, qtype):
    rng = np.random.default_rng(31 + int(qtype))
    x = quant_inputs(rng)
    for r, row in enumerate(x):
        ours = q.quantize(qtype, row)
        ref = np.asarray(quants.quantize(row.reshape(1, -1), qtype)).view(np.uint8).reshape(-1)
        assert np.array_equal(ours, ref), f"row {r}: first differing byte {int(np.nonzero(ours != ref)[0][0])}"


def test_mxfp4_exponent_near_powers_of_two(q):
    # floor(log2(amax)) decides the shared exponent; values just below and at powers of two
    # are where a different log2 would disagree.
    vals = []
    for k in range(-30, 30):
        p = np.float32(2.0**k)
        vals += [p, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf))]
    x = np.zeros((len(vals), 32), dtype=np.float32)
    x[:, 5] = vals
    x[:, 6] = np.float32(0.3) * np.array(vals, dtype=np.float32)
    ours = q.quantize(T.MXFP4, x.reshape(-1))
    ref = np.asarray(quants.quantize(x, T.MXFP4)).view(np.uint8).reshape(-1)
    assert np.array_equal(ours, ref)


def test_quantize_round_trip_is_gguf_dequantize(q):
    # What sluice writes, sluice and gguf read back identically (layouts agree both ways).
    rng = np.random.default_rng(5)
    x = rng.standard_normal(1024).astype(np.float32)
    for qtype in [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4]:
        raw = q.quantize(qtype, x)
        assert same_bits(q.dequantize(qtype, raw, x.size),
                         quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1))


def test_bad_sizes_and_types_are_refused(q):
    raw = np.zeros(64, dtype=np.uint8)
    out = np.zeros(64, dtype=np.float32)
    assert q.lib.sluice_dequantize(int(T.Q4_0), raw.ctypes.data, out.ctypes.data, 31) != 0
    assert q.lib.sluice_dequantize(int(T.IQ1_S), raw.ctypes.data, out.ctypes.data, 256) != 0
    assert q.lib.sluice_dequantize(12345, raw.ctypes.data, out.ctypes.data, 32) != 0
    assert q.lib.sluice_quantize(int(T.IQ1_S), out.ctypes.data, raw.ctypes.data, 256) != 0


def test_every_issue_format_is_covered():
    assert len(ALL_FORMATS) == 21


# Our own simple quantisers (quant_simple.h): the gguf package reads their blocks as
# sluice does, and the reconstruction error (relative RMS per 256 values) stays near what
# round-to-nearest at that bit width gives on gaussian data.
SIMPLE_BOUNDS = {T.Q2_K: 0.42, T.Q3_K: 0.21, T.Q4_K: 0.11, T.Q5_K: 0.055, T.Q6_K: 0.028,
                 T.IQ4_NL: 0.11, T.IQ4_XS: 0.11, T.IQ2_XXS: 0.45, T.IQ2_XS: 0.38, T.IQ2_S: 0.34,
                 T.IQ3_XXS: 0.26, T.IQ3_S: 0.19}


@pytest.mark.parametrize("qtype", list(SIMPLE_BOUNDS), ids=lambda t: t.name)
def test_simple_quantisers_write_blocks_that_gguf_reads_back_close(q, qtype):
    rng = np.random.default_rng(77 + int(qtype))
    x = (rng.standard_normal(256 * 64) * np.exp(rng.uniform(-6, 6, 64)).repeat(256)).astype(np.float32)
    x[:256] = 0   # a zero block must stay zero
    raw = q.quantize(qtype, x)
    ref = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
    assert same_bits(q.dequantize(qtype, raw, x.size), ref)
    assert not np.any(ref[:256])
    err = (ref - x).reshape(-1, 256)[1:]
    rel = np.sqrt((err.astype(np.float64) ** 2).sum(1) / (x.reshape(-1, 256)[1:].astype(np.float64) ** 2).sum(1))
    assert rel.max() <= SIMPLE_BOUNDS[qtype], rel.max()


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("qtype", [T.F16, T.BF16], ids=lambda t: t.name)
def test_half_conversions_round_like_gguf_on_every_float_class(q, qtype):
    # A million random finite bit patterns (every exponent: f16 subnormals, overflow to inf,
    # ties) plus values just around the f16 range edges.
    rng = np.random.default_rng(99)
    bits = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]
    edges = np.array([65504, 65519.996, 65520, 65536, 2.0**-14, 2.0**-24, 2.0**-25, 1.5 * 2.0**-24,
                      2.0**-25 * 1.0000001, 0.0, -0.0], dtype=np.float32)
    x = np.concatenate([edges, -edges, bits.view(np.float32)])
    x = x[: x.size // 32 * 32]
    ours = q.quantize(qtype, x)
    ref = np.asarray(quants.quantize(x.reshape(1, -1), qtype)).view(np.uint8).reshape(-1)
    assert np.array_equal(ours, ref)
