#!/usr/bin/env python3
"""Writes the malformed-GGUF corpus: small files that each break one rule of the format, plus
a few valid ones (single and split) that must open.

    python3 tools/make_malformed_gguf.py [OUT_DIR]   (default tests/data/malformed_gguf)

OUT_DIR/manifest.json maps each file to open to the substring its sluice::error must contain
("rejected"), and each valid file to the tensor count it must expose ("valid"). The files are
written by hand with struct (not gguf.GGUFWriter), because the writer refuses most of these
mistakes. tests/unit/test_gguf_malformed.cpp runs the manifest; tests/fuzz/corpus/gguf is
seeded from it with --fuzz-seeds DIR.
"""
import json
import pathlib
import shutil
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T, Q4_0_T, Q8_0_T = 0, 2, 8
INT64_MAX = (1 << 63) - 1


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def kv_str(key, v):
    return kv(key, STR, s(v))


def tinfo(name: str, dims, ttype: int, offset: int) -> bytes:
    out = s(name) + struct.pack("<I", len(dims))
    for d in dims:
        out += struct.pack("<Q", d)
    return out + struct.pack("<IQ", ttype, offset)


def gguf(kvs=(), tensors=(), data=b"", version=3, n_kv=None, n_tensors=None, align=32) -> bytes:
    """A whole file: header, kvs (already encoded), tensor infos (encoded), padding, data."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    pad = (-len(body)) % align
    return body + b"\0" * pad + data


BASE_KV = [kv_str("general.architecture", "llama"), kv_str("general.name", "tiny")]


def f32_tensor(name, n, offset):
    return tinfo(name, [n], F32_T, offset)


def valid_file() -> bytes:
    # two f32 vectors of 8 values, the second at offset 32
    data = struct.pack("<8f", *range(8)) + struct.pack("<8f", *range(8, 16))
    return gguf(BASE_KV, [f32_tensor("a.weight", 8, 0), f32_tensor("b.weight", 8, 32)], data)


def split_part(no: int, count: int, names, tensors_count=None, count_key=None) -> bytes:
    kvs = (BASE_KV if no == 0 else []) + [
        kv("split.no", U16, struct.pack("<H", no)),
        kv("split.count", U16, struct.pack("<H", count if count_key is None else count_key)),
        kv("split.tensors.count", I32, struct.pack("<i", tensors_count if tensors_count is not None else 0)),
    ]
    infos = [f32_tensor(n, 8, 32 * i) for i, n in enumerate(names)]
    data = b"".join(struct.pack("<8f", *([float(10 * no + i)] * 8)) for i in range(len(names)))  # 10*part + index
    return gguf(kvs, infos, data)


def build(out: pathlib.Path) -> dict:
    rejected: dict[str, str] = {}
    valid: dict[str, int] = {}

    def bad(name: str, content: bytes, expect: str):
        (out / name).write_bytes(content)
        rejected[name] = expect

    good = valid_file()
    data8 = struct.pack("<8f", *range(8))
    (out / "valid_two_tensors.gguf").write_bytes(good)
    valid["valid_two_tensors.gguf"] = 2
    (out / "valid_v2.gguf").write_bytes(gguf(BASE_KV, [f32_tensor("a.weight", 8, 0)],
                                             struct.pack("<8f", *range(8)), version=2))
    valid["valid_v2.gguf"] = 1
    (out / "valid_no_tensors.gguf").write_bytes(gguf(BASE_KV))
    valid["valid_no_tensors.gguf"] = 0

    depth8 = struct.pack("<IQ", I32, 1) + struct.pack("<i", 7)
    for _ in range(7):  # 8 levels of arrays in all: the deepest the reader accepts
        depth8 = struct.pack("<IQ", ARR, 1) + depth8
    (out / "valid_nested_depth_8.gguf").write_bytes(gguf(BASE_KV + [kv("x.nested", ARR, depth8)]))
    valid["valid_nested_depth_8.gguf"] = 0
    (out / "valid_alignment_64.gguf").write_bytes(
        gguf(BASE_KV + [kv_u32("general.alignment", 64)], [f32_tensor("a.weight", 8, 0), f32_tensor("b.weight", 8, 64)],
             data8 + b"\0" * 32 + data8, align=64))
    valid["valid_alignment_64.gguf"] = 2

    # header
    bad("empty.gguf", b"", "too short for the GGUF magic")
    bad("magic_only.gguf", b"GGUF", "version needs 4 bytes")
    bad("bad_magic.gguf", b"GGML" + good[4:], "not a GGUF file")
    bad("version1.gguf", gguf(BASE_KV, version=1), "version 1 is not supported")
    bad("version_big_endian.gguf", b"GGUF" + struct.pack(">I", 3) + good[8:], "big-endian GGUF")
    bad("version_99.gguf", gguf(BASE_KV, version=99), "unsupported GGUF version 99")
    bad("truncated_counts.gguf", good[:12], "tensor count needs 8 bytes")
    bad("truncated_in_metadata.gguf", good[:60], "key 'general.architecture' needs 8 bytes at offset 56")
    bad("truncated_in_key.gguf", gguf(BASE_KV[:1])[:40], "metadata key 0: string length 20 at offset 24")
    bad("truncated_in_tensor_data.gguf", good[:-4], "tensor 'b.weight': data [offset")
    bad("n_kv_huge.gguf", gguf(BASE_KV, n_kv=10**12), "metadata count 1,000,000,000,000 is larger than the file")
    bad("n_tensors_huge.gguf", gguf(BASE_KV, n_tensors=2**62), "tensor count 4,611,686,018,427,387,904 is larger")

    # metadata values
    bad("key_length_past_eof.gguf", gguf([struct.pack("<Q", 1 << 40) + b"general"]),
        "string length 1,099,511,627,776 at offset 24 is larger than the rest of the file")
    bad("string_length_past_eof.gguf", gguf([kv("general.name", STR, struct.pack("<Q", 1 << 33) + b"x")]),
        "key 'general.name': string length 8,589,934,592")
    bad("array_length_past_eof.gguf", gguf([kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 1 << 40))]),
        "array of 1,099,511,627,776 string elements is larger than the rest of the file")
    bad("array_length_overflow.gguf", gguf([kv("x.scores", ARR, struct.pack("<IQ", F64, 1 << 62))]),
        "array of 4,611,686,018,427,387,904 f64 elements")
    nested = struct.pack("<IQ", I32, 1) + struct.pack("<i", 7)
    for _ in range(9):  # 10 levels of arrays in all
        nested = struct.pack("<IQ", ARR, 1) + nested
    bad("nested_too_deep.gguf", gguf([kv("x.nested", ARR, nested)]), "arrays nested deeper than 8 levels")
    bad("duplicate_key.gguf", gguf(BASE_KV + [kv_str("general.name", "again")]), "duplicate key 'general.name'")
    bad("empty_key.gguf", gguf([kv("", U32, struct.pack("<I", 1))]), "metadata key 0 is empty")
    bad("unknown_value_type.gguf", gguf([kv("x.y", 13, struct.pack("<I", 1))]), "unknown value type 13")
    bad("unknown_array_elem_type.gguf", gguf([kv("x.y", ARR, struct.pack("<IQ", 99, 0))]),
        "key 'x.y': unknown value type 99")
    bad("bool_not_0_or_1.gguf", gguf([kv("x.flag", BOOL, b"\x02")]), "bool byte is 2")
    bad("u64_above_int64_max.gguf", gguf([kv("x.big", U64, struct.pack("<Q", 1 << 63))]),
        "u64 value 9223372036854775808 is larger than INT64_MAX")

    # alignment
    bad("alignment_zero.gguf", gguf(BASE_KV + [kv_u32("general.alignment", 0)]), "general.alignment is 0")
    bad("alignment_not_pow2.gguf", gguf(BASE_KV + [kv_u32("general.alignment", 48)], align=48),
        "general.alignment is 48 (expected a power of two)")
    bad("alignment_wrong_type.gguf", gguf(BASE_KV + [kv("general.alignment", U64, struct.pack("<Q", 64))]),
        "general.alignment has type u64 (expected u32)")

    # tensor table
    bad("dims_product_overflow.gguf", gguf(BASE_KV, [tinfo("t.weight", [INT64_MAX, 2], F32_T, 0)], data8),
        "tensor 't.weight': element count overflows int64")
    bad("dim_negative.gguf", gguf(BASE_KV, [tinfo("t.weight", [8, (1 << 64) - 1], F32_T, 0)], data8),
        "dimension 1 is 18446744073709551615 (negative as int64)")
    bad("dim_zero.gguf", gguf(BASE_KV, [tinfo("t.weight", [8, 0], F32_T, 0)], data8), "dimension 1 is 0")
    bad("n_dims_5.gguf", gguf(BASE_KV, [tinfo("t.weight", [1, 1, 1, 1, 8], F32_T, 0)], data8),
        "n_dims is 5 (expected 1..4)")
    bad("n_dims_0.gguf", gguf(BASE_KV, [tinfo("t.weight", [], F32_T, 0)], data8), "n_dims is 0")
    bad("unknown_tensor_type.gguf", gguf(BASE_KV, [tinfo("t.weight", [32], 4, 0)], data8 * 4),
        "tensor 't.weight': unknown tensor type 4")
    bad("negative_tensor_type.gguf", gguf(BASE_KV, [tinfo("t.weight", [8], 0xFFFFFFFF, 0)], data8),
        "unknown tensor type 4294967295 (-1 as int32)")
    bad("row_not_whole_blocks.gguf", gguf(BASE_KV, [tinfo("t.weight", [33, 2], Q4_0_T, 0)], b"\0" * 64),
        "row of 33 elements is not a whole number of Q4_0 blocks")
    bad("offset_past_eof.gguf", gguf(BASE_KV, [f32_tensor("blk.0.ffn_up.weight", 8, 64)], data8),
        "tensor 'blk.0.ffn_up.weight': data [offset 224, 32 bytes] ends past the end of the file (192 bytes)")
    bad("offset_overflow.gguf", gguf(BASE_KV, [f32_tensor("t.weight", 8, (1 << 64) - 32)], data8),
        "ends past the end of the file")
    bad("offset_unaligned.gguf", gguf(BASE_KV, [f32_tensor("t.weight", 4, 16)], data8 * 2),
        "data offset 16 is not a multiple of the alignment 32")
    bad("size_past_eof.gguf", gguf(BASE_KV, [tinfo("t.weight", [256, 256], Q8_0_T, 0)], data8),
        "tensor 't.weight': data [offset 160, 69,632 bytes] ends past the end of the file (192 bytes)")
    bad("duplicate_tensor.gguf", gguf(BASE_KV, [f32_tensor("a.weight", 8, 0), f32_tensor("a.weight", 8, 32)],
                                      data8 * 2), "duplicate tensor name 'a.weight'")
    bad("overlapping_tensors.gguf", gguf(BASE_KV, [f32_tensor("a.weight", 16, 0), f32_tensor("b.weight", 8, 32)],
                                         data8 * 2), "tensors 'a.weight' [offset")
    bad("empty_tensor_name.gguf", gguf(BASE_KV, [f32_tensor("", 8, 0)], data8), "tensor 0 has an empty name")

    # split sets (the file named is the one opened)
    def write_split(prefix, parts):
        for i, content in enumerate(parts):
            if content is not None:
                (out / f"{prefix}-{i + 1:05d}-of-{len(parts):05d}.gguf").write_bytes(content)
        return f"{prefix}-00001-of-{len(parts):05d}.gguf"

    name = write_split("valid_split", [split_part(0, 2, ["a.weight", "b.weight"], 3),
                                       split_part(1, 2, ["c.weight"], 3)])
    valid[name] = 3
    valid["valid_split-00002-of-00002.gguf"] = 3  # opening any part opens all
    rejected[write_split("split_missing", [split_part(0, 3, ["a.weight"], 3), None,
                                           split_part(2, 3, ["c.weight"], 3)])] = "split part 2 of 3 is missing"
    rejected[write_split("split_count_mismatch", [split_part(0, 2, ["a.weight"], 2),
                                                  split_part(1, 2, ["b.weight"], 2, count_key=3)])] = \
        "split.count is 3, but part 1 says 2"
    rejected[write_split("split_no_mismatch", [split_part(0, 2, ["a.weight"], 2),
                                               split_part(0, 2, ["b.weight"], 2)])] = "split.no is 0 (expected 1)"
    rejected[write_split("split_duplicate_tensor", [split_part(0, 2, ["a.weight"], 2),
                                                    split_part(1, 2, ["a.weight"], 2)])] = \
        "tensor 'a.weight' appears in more than one split part"
    rejected[write_split("split_tensor_count_mismatch", [split_part(0, 2, ["a.weight"], 5),
                                                         split_part(1, 2, ["b.weight"], 5)])] = \
        "split.tensors.count is 5 but the 2 parts hold 2 tensors"
    bad("split_bad_name.gguf", split_part(0, 2, ["a.weight"], 2), "the file name does not follow")
    bad("split_no_out_of_range.gguf", split_part(4, 2, ["a.weight"], 1), "split.no is 4 (expected 0..1")

    manifest = {"rejected": rejected, "valid": valid}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    args = sys.argv[1:]
    seeds = None
    if "--fuzz-seeds" in args:
        i = args.index("--fuzz-seeds")
        seeds = pathlib.Path(args[i + 1])
        del args[i:i + 2]
    root = pathlib.Path(__file__).resolve().parent.parent
    out = pathlib.Path(args[0]) if args else root / "tests" / "data" / "malformed_gguf"
    if out.exists():
        for p in out.glob("*.gguf"):
            p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    manifest = build(out)
    if seeds is not None:
        seeds.mkdir(parents=True, exist_ok=True)
        for name in list(manifest["valid"]) + list(manifest["rejected"]):
            shutil.copyfile(out / name, seeds / name.replace(".gguf", ""))
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"{len(manifest['rejected'])} rejected, {len(manifest['valid'])} valid, {total} bytes in {out}")


if __name__ == "__main__":
    main()
