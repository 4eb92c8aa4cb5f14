"""The GGUF reader against the gguf Python package: files written by gguf.GGUFWriter (every value
type, nested arrays, split sets), a version-2 file written by hand and the shipped SmolLM2 model
must read back, through `sluice inspect --json --full`, exactly as gguf.GGUFReader (or the
writer's own input) says."""
import json
import math
import struct
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as T

TYPE_NAMES = {T.UINT8: "u8", T.INT8: "i8", T.UINT16: "u16", T.INT16: "i16", T.UINT32: "u32", T.INT32: "i32",
              T.FLOAT32: "f32", T.BOOL: "bool", T.STRING: "string", T.ARRAY: "array", T.UINT64: "u64",
              T.INT64: "i64", T.FLOAT64: "f64"}


def inspect_json(sluice_bin, path):
    out = subprocess.run([str(sluice_bin), "inspect", "--json", "--full", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def same_value(got, want, vtype):
    if vtype in (T.FLOAT32, T.FLOAT64):
        want = float(np.float32(want)) if vtype == T.FLOAT32 else float(want)
        return got == want or (math.isnan(got) and math.isnan(want))
    return got == want


def check_against_reader(report, path):
    """Every key and tensor GGUFReader sees, sluice sees with the same type and value."""
    reader = gguf.GGUFReader(path)
    meta = report["metadata"]
    seen = 0
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's pseudo-fields for the header
            continue
        seen += 1
        assert key in meta, key
        main = T(field.types[0])
        assert meta[key]["type"] == TYPE_NAMES[main], key
        if main == T.ARRAY and len(field.types) > 2:
            continue  # nested: the reader flattens them; checked against the writer's input instead
        value = field.contents()
        if main == T.ARRAY:
            sub = T(field.types[-1])
            assert meta[key]["elem"] == TYPE_NAMES[sub], key
            assert meta[key]["length"] == len(value), key
            assert all(same_value(g, w, sub) for g, w in zip(meta[key]["value"], value, strict=True)), key
        else:
            assert same_value(meta[key]["value"], value, main), (key, meta[key]["value"], value)
    assert seen == len(meta)
    tensors = report["tensors"]
    assert [t["name"] for t in tensors] == [t.name for t in reader.tensors]
    for got, want in zip(tensors, reader.tensors):
        assert got["type"] == Q(want.tensor_type).name, want.name
        assert got["shape"] == [int(d) for d in want.shape], want.name
        assert got["bytes"] == int(want.n_bytes), want.name
    assert report["total_bytes"] == sum(int(t.n_bytes) for t in reader.tensors)


NESTED_INTS = [[1, 2], [3], [4, 5, 6]]
NESTED_STRINGS = [["a"], ["b", "c"]]
DEEP = [[[7, 8]], [[9]]]


def write_every_type(path):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool_true", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.string", "h\u00e9llo \u4e16\u754c\n\"quoted\"")
    w.add_string("t.empty_string", "")
    w.add_uint64("t.u64", 2**63 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", math.pi)
    for sub, vals in [(T.UINT8, [0, 255]), (T.INT8, [-1, 1]), (T.UINT16, [7]), (T.INT16, [-7, 7]),
                      (T.UINT32, [1, 2, 3]), (T.INT32, [-5] * 100), (T.FLOAT32, [1.5, -0.3, 1e-30]),
                      (T.BOOL, [True, False, True]), (T.UINT64, [2**40]), (T.INT64, [-(2**40)]),
                      (T.FLOAT64, [math.e, -1e300])]:
        w.add_key_value(f"a.{TYPE_NAMES[sub]}", vals, T.ARRAY, sub)
    w.add_array("a.strings", ["x", "", "y\u00fc"])
    w.add_array("n.ints", NESTED_INTS)
    w.add_array("n.strings", NESTED_STRINGS)
    w.add_array("n.deep", DEEP)
    rng = np.random.default_rng(0)
    w.add_tensor("f32.weight", rng.standard_normal((3, 5), dtype=np.float32))  # ne = [5, 3]
    w.add_tensor("f16.weight", rng.standard_normal(64).astype(np.float16))
    # quantised tensors: raw blocks given by their byte shape; only their size is checked
    w.add_tensor("q8.weight", rng.integers(0, 255, (2, 34 * 2), dtype=np.uint8), raw_dtype=Q.Q8_0)
    w.add_tensor("q4k.weight", rng.integers(0, 255, (3, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    w.add_tensor("blk.0.ffn_up_exps.weight", rng.integers(0, 255, (4, 2, 34), dtype=np.uint8), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_every_value_type_reads_as_gguf_writes_it(sluice_bin, tmp_path):
    path = tmp_path / "every_type.gguf"
    write_every_type(path)
    report = inspect_json(sluice_bin, path)
    check_against_reader(report, path)
    meta = report["metadata"]
    assert meta["n.ints"]["value"] == NESTED_INTS
    assert meta["n.strings"]["value"] == NESTED_STRINGS
    assert meta["n.deep"]["value"] == DEEP
    assert meta["n.deep"]["elem"] == "array"
    # spot checks written here, not read from the reader, so a reader bug shared by both fails
    assert meta["t.u64"]["value"] == 2**63 - 1
    assert meta["t.i64"]["value"] == -(2**63)
    assert meta["t.f32"]["value"] == float(np.float32(0.1))
    assert meta["t.string"]["value"] == "h\u00e9llo \u4e16\u754c\n\"quoted\""
    assert report["architecture"] == "llama"
    shapes = {t["name"]: t["shape"] for t in report["tensors"]}
    assert shapes["f32.weight"] == [5, 3]
    assert shapes["q4k.weight"] == [256, 3]
    assert shapes["blk.0.ffn_up_exps.weight"] == [32, 2, 4]


def test_version_2_file_written_by_hand(sluice_bin, tmp_path):
    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    kvs = [s("general.architecture") + struct.pack("<I", T.STRING) + s("llama"),
           s("general.alignment") + struct.pack("<II", T.UINT32, 64),
           s("v2.scores") + struct.pack("<IIQ", T.ARRAY, T.FLOAT32, 2) + struct.pack("<2f", 0.5, -2.0)]
    ti = s("v.weight") + struct.pack("<IQQ", 2, 4, 2) + struct.pack("<IQ", Q.F32, 0)
    body = b"GGUF" + struct.pack("<IQQ", 2, 1, len(kvs)) + b"".join(kvs) + ti
    body += b"\0" * ((-len(body)) % 64) + struct.pack("<8f", *range(8))
    path = tmp_path / "v2.gguf"
    path.write_bytes(body)
    report = inspect_json(sluice_bin, path)
    check_against_reader(report, path)
    assert report["metadata"]["v2.scores"]["value"] == [0.5, -2.0]
    assert report["tensors"] == [{"name": "v.weight", "type": "F32", "shape": [4, 2], "bytes": 32,
                                  "group": "attention/dense"}]
    # the same body claiming version 1 is refused with a reason
    path.write_bytes(body[:4] + struct.pack("<I", 1) + body[8:])
    out = subprocess.run([str(sluice_bin), "inspect", str(path)], capture_output=True, text=True)
    assert out.returncode != 0 and "version 1 is not supported" in out.stderr


def test_split_set_from_gguf_writer_opens_from_any_part(sluice_bin, tmp_path):
    base = tmp_path / "model.gguf"
    w = gguf.GGUFWriter(str(base), "llama", split_max_tensors=2)
    w.add_name("split test")
    names = [f"t{i}.weight" for i in range(5)]
    for i, n in enumerate(names):
        w.add_tensor(n, np.full(8 * (i + 1), i, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parts = sorted(tmp_path.glob("model-*-of-*.gguf"))
    assert len(parts) == 3, parts
    for part in parts:
        report = inspect_json(sluice_bin, part)
        assert [t["name"] for t in report["tensors"]] == names
        assert [t["bytes"] for t in report["tensors"]] == [32 * (i + 1) for i in range(5)]
        assert report["name"] == "split test"
        assert report["metadata"]["split.count"]["value"] == 3
    parts[1].unlink()
    out = subprocess.run([str(sluice_bin), "inspect", str(parts[0])], capture_output=True, text=True)
    assert out.returncode != 0 and "split part 2 of 3 is missing" in out.stderr


def test_smollm2_reads_as_gguf_reader_reads_it(sluice_bin, smollm2_gguf):
    report = inspect_json(sluice_bin, smollm2_gguf)
    check_against_reader(report, smollm2_gguf)
    assert report["output_tied"]  # SmolLM2 ties its output to token_embd.weight


def test_bytes_per_token_counts_a_share_of_routed_experts(sluice_bin, tmp_path):
    n_embd, n_ff, n_expert, n_used, n_vocab = 64, 32, 8, 2, 100
    w = gguf.GGUFWriter(str(tmp_path / "moe.gguf"), "qwen3moe")
    w.add_uint32("qwen3moe.expert_count", n_expert)
    w.add_uint32("qwen3moe.expert_used_count", n_used)
    f32 = lambda *shape: np.zeros(shape[::-1], dtype=np.float32)  # noqa: E731 (GGML order in)
    tensors = {
        "token_embd.weight": f32(n_embd, n_vocab),
        "output.weight": f32(n_embd, n_vocab),
        "output_norm.weight": f32(n_embd),
        "blk.0.attn_q.weight": f32(n_embd, n_embd),
        "blk.0.ffn_gate_inp.weight": f32(n_embd, n_expert),
        "blk.0.ffn_up_exps.weight": f32(n_embd, n_ff, n_expert),
        "blk.0.ffn_down_exps.weight": f32(n_ff, n_embd, n_expert),
        "blk.0.ffn_up_shexp.weight": f32(n_embd, n_ff),
    }
    for n, a in tensors.items():
        w.add_tensor(n, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    report = inspect_json(sluice_bin, tmp_path / "moe.gguf")
    groups = {g["name"]: g for g in report["groups"]}
    nb = {n: a.nbytes for n, a in tensors.items()}
    exps = nb["blk.0.ffn_up_exps.weight"] + nb["blk.0.ffn_down_exps.weight"]
    dense = nb["output_norm.weight"] + nb["blk.0.attn_q.weight"] + nb["blk.0.ffn_gate_inp.weight"]
    assert groups["embeddings"]["bytes_per_token"] == n_embd * 4
    assert groups["routed experts"]["bytes"] == exps
    assert groups["routed experts"]["bytes_per_token"] == exps * n_used // n_expert
    assert groups["shared experts"]["bytes_per_token"] == nb["blk.0.ffn_up_shexp.weight"]
    assert groups["attention/dense"]["bytes_per_token"] == dense
    assert groups["output"]["bytes_per_token"] == nb["output.weight"]
    assert report["bytes_per_token"] == sum(g["bytes_per_token"] for g in report["groups"])
    assert not report["output_tied"]
    text = subprocess.run([str(sluice_bin), "inspect", str(tmp_path / "moe.gguf")], capture_output=True,
                          text=True, check=True).stdout
    assert "2/8 of the bytes" in text and "blk.0.ffn_up_exps.weight" in text


@pytest.mark.parametrize("name", ["dims_product_overflow.gguf", "offset_past_eof.gguf"])
def test_cli_reports_malformed_files(sluice_bin, name):
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "malformed_gguf" / name
    out = subprocess.run([str(sluice_bin), "inspect", str(path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.startswith("sluice: gguf: ") and name in out.stderr
