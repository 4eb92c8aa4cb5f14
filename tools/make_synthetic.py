#!/usr/bin/env python3
"""Write a synthetic GGUF with the exact tensor names, shapes, types and metadata of a real MoE
model, filled with valid random quantised blocks, so speed can be measured without the weights.

    python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q4_k_m -o /tmp/q30.gguf
    python3 tools/make_synthetic.py --shape qwen3-235b-a22b --mix q4_k_m --layers 8 -o /tmp/q235-8l.gguf
    python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q8_0 --tiny --layers 2 -o /tmp/t.gguf
    python3 tools/make_synthetic.py --shape qwen3-next-80b-a3b --mix q4_k_m --layers 8 -o /tmp/qn-8l.gguf
    python3 tools/make_synthetic.py --shape qwen3.6-35b-a3b --mix q4_k_m -o /tmp/q36.gguf

The hybrid shapes (qwen3next, qwen35moe) carry their MTP block after the --layers trunk layers.

Speed: a pool of random blocks is made once per (block type, weight scale) with numpy; each
tensor is then written as chunks of that pool taken at random block offsets (a per-tensor
stream of offsets), with os.pwrite from several threads, so the cost is the disk's (or page
cache's) write speed, not the random number generator's. The values are valid for every
format (finite f16 scales, every index in range) and scaled so each dequantised weight has a
standard deviation near 1/sqrt(n_in): activations neither vanish nor blow up through the layers.
See tools/README.md for the router-realism keys.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synthetic_shapes as S  # noqa: E402

ALIGN = gguf.GGUF_DEFAULT_ALIGNMENT
POOL_BYTES = 16 << 20        # per (type, scale): big enough that chunks rarely repeat in a row
CHUNK_BYTES = 4 << 20        # one pwrite; large enough that Python's per-call cost is noise
EMBD_STD = 0.05              # token embeddings: the first RMSNorm rescales them anyway


def block_info(qtype: Q) -> tuple[int, int]:
    """(weights per block, bytes per block)"""
    return gguf.GGML_QUANT_SIZES[qtype]


def tensor_nbytes(spec: S.TensorSpec) -> int:
    n_per, size = block_info(spec.qtype)
    if spec.ne[0] % n_per:
        raise ValueError(f"{spec.name}: row of {spec.ne[0]} is not a multiple of the "
                         f"{spec.qtype.name} block ({n_per})")
    return int(np.prod(spec.ne)) // n_per * size


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _raw_blocks(qtype: Q, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """[n, bytes] blocks with unit scale before calibration, and the byte offset of the f16
    scale `d` (-1 for MXFP4, whose scale is an exponent byte)."""
    _, size = block_info(qtype)
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    one = _f16(np.ones(n, dtype=np.float32))
    if qtype == Q.Q8_0:  # d f16 | qs int8[32]; quantised weights are roughly normal, |q| <= 127
        q = np.clip(np.rint(rng.standard_normal((n, 32)) * 42.0), -127, 127).astype(np.int8)
        b[:, 2:] = q.view(np.uint8)
        b[:, 0:2] = one
        return b, 0
    if qtype == Q.Q4_K:  # d f16 | dmin f16 | scales 12 (6-bit sc, m x8) | qs 128 nibbles
        # m_j = sc_j with dmin = 7.5 d centres each sub-block: w = d * sc_j * (q - 7.5).
        v = rng.integers(16, 64, size=(n, 8), dtype=np.uint8)
        lo, hi = v[:, :4], v[:, 4:]
        b[:, 4:8] = (lo & 0x3F) | ((hi >> 4) << 6)
        b[:, 8:12] = (lo & 0x3F) | ((hi >> 4) << 6)
        b[:, 12:16] = (hi & 0x0F) | ((hi & 0x0F) << 4)
        b[:, 0:2] = one
        b[:, 2:4] = _f16(np.full(n, 7.5, dtype=np.float32))
        return b, 0
    if qtype == Q.Q5_K:  # d f16 | dmin f16 | scales 12 | qh 32 | qs 128: as Q4_K, 5-bit q centred at 15.5
        v = rng.integers(16, 64, size=(n, 8), dtype=np.uint8)
        lo, hi = v[:, :4], v[:, 4:]
        b[:, 4:8] = (lo & 0x3F) | ((hi >> 4) << 6)
        b[:, 8:12] = (lo & 0x3F) | ((hi >> 4) << 6)
        b[:, 12:16] = (hi & 0x0F) | ((hi & 0x0F) << 4)
        b[:, 0:2] = one
        b[:, 2:4] = _f16(np.full(n, 15.5, dtype=np.float32))
        return b, 0
    if qtype == Q.Q6_K:  # ql 128 | qh 64 | scales int8[16] | d f16
        b[:, 208:210] = one
        return b, 208
    if qtype in (Q.IQ4_XS, Q.IQ3_S):  # d f16 first; every other bit pattern is a valid index
        b[:, 0:2] = one
        return b, 0
    if qtype == Q.MXFP4:  # e8m0 exponent | 16 bytes of e2m1 pairs
        b[:, 0] = 127
        return b, -1
    raise ValueError(f"no random block maker for {qtype.name}")


def make_pool(qtype: Q, std: float, rng: np.random.Generator, pool_bytes: int = POOL_BYTES) -> np.ndarray:
    """A flat uint8 pool of whole blocks whose dequantised values have standard deviation
    ~std (per-block scales jittered by ~10% so blocks are not all alike)."""
    _, size = block_info(qtype)
    n = max(64, pool_bytes // size)
    b, d_off = _raw_blocks(qtype, n, rng)
    unit_std = float(gguf.quants.dequantize(b[:4096], qtype).std())
    if not np.isfinite(unit_std) or unit_std <= 0:
        raise ValueError(f"{qtype.name}: calibration blocks have std {unit_std}")
    jitter = np.exp(rng.normal(0.0, 0.1, size=n))
    if d_off >= 0:
        scale = (std / unit_std * jitter).astype(np.float32)
        b[:, d_off:d_off + 2] = _f16(scale)
        if qtype == Q.Q4_K:
            b[:, 2:4] = _f16(scale * 7.5)
        elif qtype == Q.Q5_K:
            b[:, 2:4] = _f16(scale * 15.5)
    else:  # MXFP4: the scale is 2^(e-127) (halved by ggml); round log2 of the needed factor
        e = 127 + np.rint(np.log2(std / unit_std * jitter))
        b[:, 0] = np.clip(e, 1, 254).astype(np.uint8)
    return b.reshape(-1)


def weight_std(spec: S.TensorSpec) -> float:
    return EMBD_STD if spec.role == "token_embd" else 1.0 / np.sqrt(spec.n_in)


class Writer:
    def __init__(self, args: argparse.Namespace):
        base = S.SHAPES[args.shape]
        if args.layers is not None:
            if args.layers < 1:
                raise SystemExit(f"--layers: expected >= 1, got {args.layers}")
            base = S.dataclasses.replace(base, n_layer=args.layers)
        self.shape = S.tiny(base) if args.tiny else base
        if args.vocab is not None:
            if args.vocab < 512:
                raise SystemExit(f"--vocab: expected >= 512, got {args.vocab}")
            self.shape = S.dataclasses.replace(self.shape, n_vocab=args.vocab)
        self.args = args
        self.specs = S.tensor_specs(self.shape, args.mix)
        self.pools: dict[tuple[Q, float], np.ndarray] = {}
        self.row_scales = S.router_row_scales(args.router_skew, self.shape.n_expert,
                                              self.shape.n_expert_used)

    def add_metadata(self, w: gguf.GGUFWriter) -> None:
        s, a = self.shape, self.args
        _, ftype = S.MIXES[a.mix]
        w.add_name(f"synthetic {s.name} {a.mix}")
        w.add_type("model")
        w.add_file_type(int(ftype))
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        w.add_context_length(s.n_ctx_train)
        w.add_embedding_length(s.n_embd)
        if s.n_ff:  # the qwen35moe converter writes no dense FFN length
            w.add_feed_forward_length(s.n_ff)
        w.add_block_count(s.n_layer + s.n_nextn)   # llama.cpp counts the MTP layers in
        w.add_head_count(s.n_head)
        w.add_head_count_kv(s.n_head_kv)
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
        w.add_rope_freq_base(s.rope_theta)
        w.add_layer_norm_rms_eps(s.rms_eps)
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        w.add_expert_feed_forward_length(s.n_ff_exp)
        if s.hybrid:
            self.add_hybrid_metadata(w)
        tokens, types, merges = S.make_vocab(s.n_vocab)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(S.special_id("<|endoftext|>", s.n_vocab))  # Qwen adds no BOS
        w.add_eos_token_id(S.special_id("<|im_end|>", s.n_vocab))
        w.add_pad_token_id(S.special_id("<|endoftext|>", s.n_vocab))
        w.add_add_bos_token(False)
        w.add_chat_template(S.CHATML_TEMPLATE)
        # What this file is, so that no benchmark mistakes it for a real model.
        w.add_bool("sluice.synthetic", True)
        w.add_string("sluice.synthetic.shape", s.name)
        w.add_string("sluice.synthetic.mix", a.mix)
        w.add_uint32("sluice.synthetic.seed", a.seed)
        w.add_float32("sluice.synthetic.router.skew", a.router_skew)
        w.add_float32("sluice.synthetic.router.locality", a.router_locality)
        w.add_uint32("sluice.synthetic.router.seed", a.router_seed)

    def add_hybrid_metadata(self, w: gguf.GGUFWriter) -> None:
        """The keys llama.cpp's Qwen3NextModel / Qwen3_5MoeTextModel converters add (written by
        name: gguf-py's helper methods for them vary between versions)."""
        s, a = self.shape, self.shape.arch
        n_all = s.n_layer + s.n_nextn
        w.add_uint32(f"{a}.expert_shared_feed_forward_length", s.n_ff_shexp)
        w.add_uint32(f"{a}.nextn_predict_layers", s.n_nextn)
        w.add_uint32(f"{a}.ssm.conv_kernel", s.ssm_d_conv)
        w.add_uint32(f"{a}.ssm.state_size", s.ssm_head)
        w.add_uint32(f"{a}.ssm.group_count", s.ssm_n_k)
        w.add_uint32(f"{a}.ssm.time_step_rank", s.ssm_n_v)
        w.add_uint32(f"{a}.ssm.inner_size", s.ssm_head * s.ssm_n_v)
        w.add_array(f"{a}.attention.recurrent_layers", [s.recurrent(il) for il in range(n_all)])
        w.add_uint32(f"{a}.full_attention_interval", s.full_attn_interval)
        w.add_uint32(f"{a}.rope.dimension_count", s.n_rot or s.head_dim)
        if s.rope_sections:
            w.add_array(f"{a}.rope.dimension_sections", list(s.rope_sections))

    def pool(self, qtype: Q, std: float) -> np.ndarray:
        key = (qtype, round(std, 9))
        if key not in self.pools:
            rng = np.random.default_rng([self.args.seed, int(qtype), int(std * 1e9)])
            self.pools[key] = make_pool(qtype, std, rng, self.args.pool_mb << 20)
        return self.pools[key]

    def f32_data(self, spec: S.TensorSpec, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.args.seed, 1 << 20, index])
        if spec.role == "norm":  # RMSNorm gains near 1
            return (1.0 + 0.05 * rng.standard_normal(spec.ne)).astype(np.float32)
        if spec.role == "router":  # [n_expert rows of n_embd]; hot experts get longer rows
            n_in, n_expert = spec.ne
            layer = int(spec.name.split(".")[1])
            rank = S.expert_ranks(self.args.router_seed, layer, n_expert)
            rows = rng.standard_normal((n_expert, n_in)) / np.sqrt(n_in)
            return (rows * self.row_scales[rank][:, None]).astype(np.float32)
        if spec.role == "router_shexp":  # the shared expert's gate row
            return (rng.standard_normal(spec.ne[::-1]) / np.sqrt(spec.ne[0])).astype(np.float32)
        if spec.role == "ssm_a":  # -exp(A_log) with A uniform in [1, 16] (HF's init), as converted
            return (-np.exp(rng.uniform(0.0, np.log(16.0), spec.ne))).astype(np.float32)
        if spec.role == "ssm_dt":  # inverse softplus of dt uniform (log scale) in [1e-3, 0.1]
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), spec.ne))
            return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
        if spec.role == "ssm_conv1d":  # [channels rows of d_conv]
            d_conv, ch = spec.ne
            return (rng.standard_normal((ch, d_conv)) / np.sqrt(d_conv)).astype(np.float32)
        raise ValueError(f"{spec.name}: no F32 maker for role {spec.role}")

    def write_tensor(self, fd: int, spec: S.TensorSpec, index: int, offset: int) -> int:
        if spec.qtype == Q.F32:
            data = self.f32_data(spec, index)
            os.pwrite(fd, data.tobytes(), offset)
            return data.nbytes
        nbytes = tensor_nbytes(spec)
        pool = self.pool(spec.qtype, weight_std(spec))
        _, size = block_info(spec.qtype)
        chunk = min(CHUNK_BYTES, pool.nbytes // 4) // size * size
        n_start = (pool.nbytes - chunk) // size + 1
        rng = np.random.default_rng([self.args.seed, 2 << 20, index])
        mv = memoryview(pool)
        done = 0
        while done < nbytes:
            n = min(chunk, nbytes - done)
            start = int(rng.integers(n_start)) * size
            os.pwrite(fd, mv[start:start + n], offset + done)
            done += n
        return nbytes

    def run(self, path: str) -> None:
        t0 = time.time()
        w = gguf.GGUFWriter(path, self.shape.arch)
        self.add_metadata(w)
        sizes = []
        for spec in self.specs:
            nbytes = 4 * int(np.prod(spec.ne)) if spec.qtype == Q.F32 else tensor_nbytes(spec)
            sizes.append(nbytes)
            w.add_tensor_info(spec.name, tuple(reversed(spec.ne)), np.dtype(np.float32), nbytes,
                              raw_dtype=spec.qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        header_end = w.fout[0].tell()
        w.close()
        offsets, pos = [], -(-header_end // ALIGN) * ALIGN
        for n in sizes:
            offsets.append(pos)
            pos += -(-n // ALIGN) * ALIGN
        total = pos
        # Pools first (single-threaded numpy), so the writer threads only copy bytes.
        for spec in self.specs:
            if spec.qtype != Q.F32:
                self.pool(spec.qtype, weight_std(spec))
        t1 = time.time()
        fd = os.open(path, os.O_WRONLY)
        ok = False
        try:
            os.ftruncate(fd, total)  # padding between tensors reads as zeros
            with concurrent.futures.ThreadPoolExecutor(self.args.threads) as ex:
                futs = [ex.submit(self.write_tensor, fd, spec, i, off)
                        for i, (spec, off) in enumerate(zip(self.specs, offsets))]
                written = sum(f.result() for f in futs)
            if self.args.fsync:
                os.fsync(fd)
            ok = True
        finally:
            os.close(fd)
            if not ok:  # never leave a file that looks whole but is not
                os.unlink(path)
        t2 = time.time()
        gb = written / 1e9
        print(f"make_synthetic: {path}: {len(self.specs)} tensors, {total / 1e9:.3f} GB "
              f"({self.shape.name}, {self.shape.n_layer} layers, {self.args.mix}); header+pools "
              f"{t1 - t0:.1f} s, data {gb:.2f} GB in {t2 - t1:.1f} s = {gb / max(t2 - t1, 1e-9):.2f} GB/s "
              f"with {self.args.threads} threads{' (fsync)' if self.args.fsync else ' (page cache)'}")


def plan(writer: Writer) -> None:
    by_type: dict[str, int] = {}
    for spec in writer.specs:
        n = 4 * int(np.prod(spec.ne)) if spec.qtype == Q.F32 else tensor_nbytes(spec)
        by_type[spec.qtype.name] = by_type.get(spec.qtype.name, 0) + n
    total = sum(by_type.values())
    print(f"{writer.shape.name} {writer.args.mix}: {len(writer.specs)} tensors, {total / 1e9:.3f} GB")
    for name, n in sorted(by_type.items(), key=lambda kv: -kv[1]):
        print(f"  {name:8s} {n / 1e9:9.3f} GB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(S.SHAPES), default="qwen3-30b-a3b")
    p.add_argument("--mix", choices=sorted(S.MIXES), default="q4_k_m")
    p.add_argument("--layers", type=int, help="override the layer count (default: the real one)")
    p.add_argument("--tiny", action="store_true", help="shrink dims (256 wide, 8 experts top-2) for tests")
    p.add_argument("--vocab", type=int, help="shrink the vocabulary (tests only: the special "
                   "tokens then leave their real ids 151643..)")
    p.add_argument("-o", "--out", help="output .gguf path")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--fsync", action="store_true", help="fsync before timing stops")
    p.add_argument("--router-skew", type=float, default=0.0,
                   help="Zipf exponent over experts' popularity ranks (0 = uniform)")
    p.add_argument("--router-locality", type=float, default=0.0,
                   help="probability a routed slot reuses an expert of the previous token")
    p.add_argument("--router-seed", type=int, default=1, help="seeds each layer's popularity order")
    p.add_argument("--pool-mb", type=int, default=POOL_BYTES >> 20,
                   help="random block pool per (type, scale), MiB (writes take chunks of it)")
    p.add_argument("--plan", action="store_true", help="print tensor bytes by type and exit")
    args = p.parse_args(argv)
    if not 0.0 <= args.router_locality <= 1.0:
        p.error(f"--router-locality: expected 0..1, got {args.router_locality}")
    for name in ("seed", "router_seed"):
        if not 0 <= getattr(args, name) < 2**32:
            p.error(f"--{name.replace('_', '-')}: expected 0..2^32-1, got {getattr(args, name)}")
    if args.threads < 1:
        p.error(f"--threads: expected >= 1, got {args.threads}")
    if args.pool_mb < 1:
        p.error(f"--pool-mb: expected >= 1, got {args.pool_mb}")
    if args.router_skew < 0:
        p.error(f"--router-skew: expected >= 0, got {args.router_skew}")
    writer = Writer(args)
    if args.plan:
        plan(writer)
        return 0
    if not args.out:
        p.error("-o/--out is required unless --plan")
    writer.run(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
