"""dot_ref (src/kernels/cpu/dot_ref.cpp) keeps its two promises for every format:
- it is the documented per-block term formula, bit for bit: a second evaluation written here,
  which takes the integer parts from the gguf package's dequantisation (scale fields set to 1
  or 0) and does the float part in numpy float32 scalars, gives the same bits;
- it is a dot product: it agrees with a double-precision dot of gguf's dequantised weights and
  the dequantised activations within a tight relative bound.
It also checks the int8 activation blocks against their definition (act.h)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, quants

from quant_common import BLOCK_FORMATS, Capi, random_blocks

K_FORMATS = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS,
             T.IQ3_S, T.IQ4_XS}
# Byte offsets of (d, min) f16 fields; the min is m (Q4_1/Q5_1: added) or dmin (K: subtracted).
SCALE_FIELDS = {
    T.Q4_0: (0, None), T.Q4_1: (0, 2), T.Q5_0: (0, None), T.Q5_1: (0, 2), T.Q8_0: (0, None),
    T.IQ4_NL: (0, None), T.Q2_K: (80, 82), T.Q3_K: (108, None), T.Q4_K: (0, 2), T.Q5_K: (0, 2),
    T.Q6_K: (208, None), T.IQ2_XXS: (0, None), T.IQ2_XS: (0, None), T.IQ2_S: (0, None),
    T.IQ3_XXS: (0, None), T.IQ3_S: (0, None), T.IQ4_XS: (0, None),
}
PLUS_MIN = {T.Q4_1, T.Q5_1}
# The constant factor folded into d (dot_ref.cpp's table): value = d * fold * integer parts.
FOLD = {T.IQ2_XXS: 8, T.IQ2_XS: 8, T.IQ2_S: 8, T.IQ3_XXS: 4}

ACT32 = np.dtype([("d", "<f4"), ("q", "i1", 32)])
ACT256 = np.dtype([("d", "<f4"), ("q", "i1", 256), ("bsums", "<i2", 16)])


@pytest.fixture(scope="module")
def q(capi):
    return Capi(capi)


def f16_at(raw: np.ndarray, off: int) -> np.ndarray:
    return raw[:, off:off + 2].copy().view(np.float16).astype(np.float32).reshape(-1)


def with_scales(raw: np.ndarray, qtype: T, d: float, m: float) -> np.ndarray:
    """A copy of the blocks with the d field set to d and the min field (if any) to m."""
    out = raw.copy()
    if qtype == T.MXFP4:
        out[:, 0] = 128 if d == 1.0 else 0   # e = 128: 2^(e-128) = 1
        return out
    d_off, m_off = SCALE_FIELDS[qtype]
    out[:, d_off:d_off + 2] = np.full((raw.shape[0], 1), d, dtype=np.float16).view(np.uint8)
    if m_off is not None:
        out[:, m_off:m_off + 2] = np.full((raw.shape[0], 1), m, dtype=np.float16).view(np.uint8)
    return out


def integer_parts(qtype: T, raw: np.ndarray):
    """(W, M, d, dmin): per-element integer weights including the sub-block scale, per-element
    integer mins (or None), and the fp32 block scales of the documented term."""
    n_blocks = raw.shape[0]
    deq = lambda blocks: quants.dequantize(blocks.reshape(1, -1), qtype).reshape(n_blocks, -1).astype(np.float64)
    w = deq(with_scales(raw, qtype, 1.0, 0.0)) * FOLD.get(qtype, 1)
    assert np.array_equal(w, np.round(w)), "integer parts are not integers"
    M = None
    if SCALE_FIELDS.get(qtype, (0, None))[1] is not None:
        mins = deq(with_scales(raw, qtype, 0.0, 1.0))
        M = mins if qtype in PLUS_MIN else -mins
        assert np.array_equal(M, np.round(M))
        M = M.astype(np.int64)
    if qtype == T.MXFP4:
        d = quants.MXFP4.e8m0_to_fp32_half(raw[:, 0].copy()).astype(np.float32)
        dmin = None
    else:
        d_off, m_off = SCALE_FIELDS[qtype]
        d = f16_at(raw, d_off) * np.float32(1.0 / FOLD.get(qtype, 1))   # exact: a power of two
        dmin = f16_at(raw, m_off) if m_off is not None else None
    return w.astype(np.int64), M, d, dmin


def act_blocks(qtype: T, act: np.ndarray):
    return np.frombuffer(act.tobytes(), dtype=ACT256 if qtype in K_FORMATS else ACT32)


def documented_terms(qtype: T, raw: np.ndarray, act: np.ndarray):
    """The per-block terms t_b and their magnitudes, from the formula in dot_ref.cpp."""
    W, M, d, dmin = integer_parts(qtype, raw)
    a = act_blocks(qtype, act)
    qx = a["q"].astype(np.int64)
    terms, mags = [], []
    for b in range(raw.shape[0]):
        sumi = int((W[b] * qx[b]).sum())
        assert -2**31 <= sumi < 2**31
        dx = np.float32(a["d"][b])
        t = (np.float32(d[b]) * dx) * np.float32(sumi)
        mag = abs(float(t))
        if M is not None:
            summ = int((M[b] * qx[b]).sum())
            assert -2**31 <= summ < 2**31
            u = (np.float32(dmin[b]) * dx) * np.float32(summ)
            t = t + u if qtype in PLUS_MIN else t - u
            mag += abs(float(u))
        terms.append(np.float32(t))
        mags.append(mag)
    return terms, mags


def fold(terms):
    y = terms[0]
    for t in terms[1:]:
        y = np.float32(y + t)
    return y


DOT_FORMATS = BLOCK_FORMATS


@pytest.mark.parametrize("qtype", DOT_FORMATS, ids=lambda t: t.name)
def test_dot_ref_is_the_documented_block_formula(q, qtype):
    rng = np.random.default_rng(200 + int(qtype))
    block, _ = GGML_QUANT_SIZES[qtype]
    for trial in range(12):
        n_blocks = int(rng.integers(1, 9))
        n = n_blocks * block
        raw = random_blocks(rng, qtype, n_blocks, moderate=True)
        x = (rng.standard_normal(n) * np.exp(rng.uniform(-3, 3))).astype(np.float32)
        if trial == 0:
            x[:block] = 0   # an all-zero activation block: dx = 0
        act = q.quantize_act(qtype, x)
        got = q.dot_ref(qtype, raw, act, n)
        want = fold(documented_terms(qtype, raw, act)[0])
        assert np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32), (trial, got, want)


@pytest.mark.parametrize("qtype", DOT_FORMATS, ids=lambda t: t.name)
def test_dot_ref_is_close_to_the_double_dot_of_dequantised_values(q, qtype):
    rng = np.random.default_rng(300 + int(qtype))
    block, _ = GGML_QUANT_SIZES[qtype]
    for trial in range(12):
        n_blocks = int(rng.integers(1, 17))
        n = n_blocks * block
        raw = random_blocks(rng, qtype, n_blocks, moderate=True)
        x = rng.standard_normal(n).astype(np.float32)
        act = q.quantize_act(qtype, x)
        a = act_blocks(qtype, act)
        xa = (a["q"].astype(np.float64) * a["d"].astype(np.float64)[:, None]).reshape(-1)
        w = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float64)
        ref = float(np.dot(w, xa))
        got = float(q.dot_ref(qtype, raw, act, n))
        _, mags = documented_terms(qtype, raw, act)
        # Each term has <= 4 roundings, the fold n_blocks more, and gguf's dequantised weights
        # are themselves rounded per element: all relative 2^-24 of these magnitudes.
        bound = 2.0**-24 * (8 + n_blocks) * (sum(mags) + float(np.abs(w * xa).sum())) + 1e-30
        assert abs(got - ref) <= bound, (trial, got, ref, bound)


def test_dot_ref_of_weights_quantised_from_the_same_values_tracks_the_float_dot(q):
    # An end-to-end sanity check: weights quantised by sluice from x itself give dot ~ |x|^2.
    rng = np.random.default_rng(9)
    x = rng.standard_normal(1024).astype(np.float32)
    exact = float(np.dot(x.astype(np.float64), x.astype(np.float64)))
    for qtype, tol in [(T.Q8_0, 0.01), (T.Q5_0, 0.05), (T.Q5_1, 0.05), (T.Q4_0, 0.1), (T.Q4_1, 0.1),
                       (T.MXFP4, 0.2)]:
        w = q.quantize(qtype, x)
        got = float(q.dot_ref(qtype, w, q.quantize_act(qtype, x), x.size))
        assert abs(got - exact) <= tol * exact, (qtype.name, got, exact)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_K], ids=lambda t: t.name)
def test_act_blocks_follow_their_definition(q, qtype):
    rng = np.random.default_rng(11)
    width = 256 if qtype in K_FORMATS else 32
    x = (rng.standard_normal(4096) * np.exp(rng.uniform(-10, 10, 4096))).astype(np.float32)
    x[:width] = 0
    x[width:2 * width] = np.round(rng.standard_normal(width) * 8) / 2   # ties
    a = act_blocks(qtype, q.quantize_act(qtype, x))
    xb = x.reshape(-1, width)
    amax = np.abs(xb).max(axis=1)
    dx = (amax / np.float32(127)).astype(np.float32)
    assert np.array_equal(a["d"].view(np.uint32), dx.view(np.uint32))
    with np.errstate(divide="ignore", invalid="ignore"):
        qx = np.where(dx[:, None] == 0, 0, np.clip(np.rint(xb / dx[:, None]), -127, 127))
    assert np.array_equal(a["q"], qx.astype(np.int8))
    if qtype in K_FORMATS:
        assert np.array_equal(a["bsums"], a["q"].astype(np.int64).reshape(-1, 16, 16).sum(axis=2))


@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_float_weight_dot_is_close_to_double(q, qtype):
    rng = np.random.default_rng(12)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    wf = rng.standard_normal(n).astype(np.float32)
    raw = {T.F32: wf.view(np.uint8), T.F16: wf.astype(np.float16).view(np.uint8),
           T.BF16: np.asarray(quants.quantize(wf.reshape(1, -1), T.BF16)).view(np.uint8).reshape(-1)}[qtype]
    w = quants.dequantize(raw.view(np.float16) if qtype == T.F16 else (raw.view(np.float32) if qtype == T.F32 else raw), qtype)
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    ref = float(np.dot(w, x.astype(np.float64)))
    got = float(q.dot_ref(qtype, raw, q.quantize_act(qtype, x), n))
    assert abs(got - ref) <= 2.0**-24 * 80 * float(np.abs(w * x).sum())
