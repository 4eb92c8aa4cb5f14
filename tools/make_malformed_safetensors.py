#!/usr/bin/env python3
"""Writes tests/data/malformed_safetensors/: one Hugging Face directory per way a file can be
broken, each with an `expect.txt` holding a fragment the reader's error must contain, plus
`valid_*` directories that must load (so the test can tell a reader that rejects everything
from one that validates). Also seeds the fuzz corpus tests/fuzz/corpus/safetensors/ with every
model.safetensors written here. The bytes are written by hand, not with the safetensors
package, because most of them are files that package refuses to write.

usage: tools/make_malformed_safetensors.py [OUT_DIR] [CORPUS_DIR]
"""
import json
import pathlib
import shutil
import struct
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
    "vocab_size": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "max_position_embeddings": 64, "tie_word_embeddings": True,
}
QWEN3MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
    "moe_intermediate_size": 4, "num_experts": 2, "num_experts_per_tok": 1, "vocab_size": 16,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 64,
}


def f32(*shape):
    n = int(np.prod(shape)) if shape else 1
    return np.arange(n, dtype=np.float32).reshape(shape).tobytes()


def raw_file(header: dict | str | bytes, data: bytes, length: int | None = None) -> bytes:
    """A safetensors image: u64 little-endian header length, the header, the data."""
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    header += b" " * (-len(header) % 8)  # the writer pads to 8 bytes; so do we
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def good_tensors():
    """embed [16, 8] and norm [8], F32, back to back: the smallest llama that loads."""
    return ({"model.embed_tokens.weight": entry("F32", [16, 8], 0, 512),
             "model.norm.weight": entry("F32", [8], 512, 544)},
            f32(16, 8) + f32(8))


def write_case(out: pathlib.Path, name: str, expect: str, files: dict, config=None):
    d = out / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(LLAMA if config is None else config))
    for fname, content in files.items():
        (d / fname).write_bytes(content if isinstance(content, bytes) else content.encode())
    (d / "expect.txt").write_text(expect)


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/data/malformed_safetensors"
    corpus = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "tests/fuzz/corpus/safetensors"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    hdr, data = good_tensors()
    good = raw_file(hdr, data)

    def single(name, expect, content, config=None):
        write_case(out, name, expect, {"model.safetensors": content}, config)

    # Control cases: these must load.
    single("valid_single", "", good)
    write_case(out, "valid_sharded", "", {
        "model-00001-of-00002.safetensors": raw_file(
            {"model.embed_tokens.weight": entry("F32", [16, 8], 0, 512)}, f32(16, 8)),
        "model-00002-of-00002.safetensors": raw_file(
            {"model.norm.weight": entry("F32", [8], 0, 32), "__metadata__": {"format": "pt"}},
            f32(8)),
        "model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors"}}),
    })

    # Header-level damage.
    single("file_too_short", "shorter than the 8-byte header length", b"\x10\x00\x00")
    single("header_length_past_eof", "runs past the end of the file",
           raw_file(hdr, data, length=1 << 40))
    single("header_length_huge", "runs past the end of the file",
           raw_file(hdr, data, length=(1 << 64) - 1))
    single("json_garbage", "not valid JSON", raw_file("{\"model.norm.weight\": {dtype", data))
    single("json_not_object", "must be a JSON object", raw_file("[1, 2, 3]", data))
    single("json_truncated", "not valid JSON", raw_file(json.dumps(hdr)[:-9], data))
    # Valid JSON nested far deeper than any header needs: a million levels overflowed the stack of
    # the recursive JSON parser (found by probing); the reader now refuses depth > 8 up front.
    single("json_deeply_nested", "nested deeper than", raw_file(
        '{"model.norm.weight": {"dtype": "F32", "shape": ' + "[" * 5000 + "]" * 5000 + "}}", f32(8)))
    single("config_deeply_nested", "nested deeper than", good)
    (out / "config_deeply_nested" / "config.json").write_text(
        json.dumps(LLAMA)[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}")
    single("duplicate_name", "twice", raw_file(
        '{"model.norm.weight": ' + json.dumps(entry("F32", [8], 0, 32)) +
        ', "model.norm.weight": ' + json.dumps(entry("F32", [8], 32, 64)) + "}", f32(16)))
    single("entry_not_object", "expected an object", raw_file({"model.norm.weight": [1, 2]}, data))
    single("missing_dtype", "missing string 'dtype'",
           raw_file({"model.norm.weight": {"shape": [8], "data_offsets": [0, 32]}}, f32(8)))
    single("unknown_dtype", "unsupported dtype 'F8_E4M3'",
           raw_file({"model.norm.weight": entry("F8_E4M3", [8], 0, 8)}, bytes(8)))
    single("made_up_dtype", "unsupported dtype 'Q4_K'",
           raw_file({"model.norm.weight": entry("Q4_K", [8], 0, 8)}, bytes(8)))
    single("u8_weight", "has no GGML type",
           raw_file({"model.norm.weight": entry("U8", [8], 0, 8)}, bytes(8)))
    single("shape_not_array", "missing array 'shape'", raw_file(
        {"model.norm.weight": {"dtype": "F32", "shape": 8, "data_offsets": [0, 32]}}, f32(8)))
    single("shape_negative", "non-negative", raw_file(
        {"model.norm.weight": entry("F32", [-8], 0, 32)}, f32(8)))
    single("shape_float", "non-negative", raw_file(
        {"model.norm.weight": entry("F32", [8.5], 0, 32)}, f32(8)))
    single("shape_overflow", "overflows 64 bits", raw_file(
        {"model.norm.weight": entry("F32", [1 << 32, 1 << 32, 16], 0, 32)}, f32(8)))
    single("shape_bytes_overflow", "overflows 64 bits in bytes", raw_file(
        {"model.norm.weight": entry("F32", [1 << 62], 0, 32)}, f32(8)))
    single("shape_too_deep", "dimensions", raw_file(
        {"model.norm.weight": entry("F32", [1] * 9 + [8], 0, 32)}, f32(8)))
    single("shape_zero_dim", "zero dimension", raw_file(
        {"model.norm.weight": entry("F32", [0, 8], 0, 0)}, b""))
    single("offsets_not_pair", "must be [begin, end]", raw_file(
        {"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0]}}, f32(8)))
    single("offsets_begin_after_end", "begin after end", raw_file(
        {"model.norm.weight": entry("F32", [8], 32, 0)}, f32(8)))
    single("offsets_past_end", "ends past the end of the data", raw_file(
        {"model.embed_tokens.weight": entry("F32", [16, 8], 0, 512),
         "model.norm.weight": entry("F32", [8], 512, 544)}, f32(16, 8) + f32(4)))
    single("offsets_huge", "ends past the end of the data", raw_file(
        {"model.norm.weight": entry("F32", [8], (1 << 64) - 32, (1 << 64) - 1)}, f32(8)))
    single("size_mismatch", "needs 32", raw_file(
        {"model.norm.weight": entry("F32", [8], 0, 28)}, f32(8)))
    single("overlap", "overlap", raw_file(
        {"model.embed_tokens.weight": entry("F32", [16, 8], 0, 512),
         "model.norm.weight": entry("F32", [8], 480, 512)}, f32(16, 8)))
    single("metadata_not_strings", "must be a string", raw_file(
        dict(hdr, __metadata__={"format": 1}), data))

    # Directory-level damage.
    write_case(out, "no_weights", "neither model.safetensors nor", {})
    write_case(out, "no_config", "has no config.json", {"model.safetensors": good})
    (out / "no_config" / "config.json").unlink()
    single("config_garbage", "not valid JSON", good)
    (out / "config_garbage" / "config.json").write_text("{\"architectures\": [")
    single("unknown_architecture", "is not supported; supported: LlamaForCausalLM", good,
           dict(LLAMA, architectures=["GPT2LMHeadModel"]))
    single("config_missing_hidden_size", "missing 'hidden_size'", good,
           {k: v for k, v in LLAMA.items() if k != "hidden_size"})
    single("config_bad_heads", "not a multiple of num_key_value_heads", good,
           dict(LLAMA, num_key_value_heads=3))
    single("config_llama3_equal_freq_factors", "expected positive values, low != high", good,
           dict(LLAMA, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))
    single("config_yarn_negative_context", "is not a positive u32", good,
           dict(LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": -5}))
    single("config_experts_without_top_k", "without 'num_experts_per_tok'", good,
           {k: v for k, v in QWEN3MOE.items() if k != "num_experts_per_tok"})
    # Counts the reader allocates by, bounded before it does: 2^32 - 1 experts asked for ~100 GB
    # of expert slots, a head_dim of 2^32 - 1 made llama3's rope table take 16 GB and a minute.
    single("config_huge_expert_count", "'num_experts': expected an integer in [1, 65536]", good,
           dict(QWEN3MOE, num_experts=4294967295, num_experts_per_tok=1))
    single("config_rope_type_not_a_string", "rope scaling 'type': expected a string", good,
           dict(LLAMA, rope_scaling={"type": 5, "factor": 2.0}))
    single("config_huge_head_dim", "'head_dim': expected an integer in [1, 65536]", good,
           dict(LLAMA, head_dim=4294967295, rope_scaling={
               "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}))
    single("unknown_tensor_name", "has no GGUF name", raw_file(
        dict(hdr, **{"model.mystery.weight": entry("F32", [8], 544, 576)}), data + f32(8)))
    single("layer_out_of_range", "num_hidden_layers 1", raw_file(
        {"model.layers.5.input_layernorm.weight": entry("F32", [8], 0, 32)}, f32(8)))
    shard1 = raw_file({"model.embed_tokens.weight": entry("F32", [16, 8], 0, 512)}, f32(16, 8))
    shard2 = raw_file({"model.norm.weight": entry("F32", [8], 0, 32)}, f32(8))
    write_case(out, "missing_shard", "which does not exist", {
        "model-00001-of-00002.safetensors": shard1,
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors"}}),
    })
    write_case(out, "shard_lacks_tensor", "which does not contain it", {
        "model-00001-of-00002.safetensors": shard1,
        "model-00002-of-00002.safetensors": shard2,
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.embed_tokens.weight": "model-00002-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors"}}),
    })
    write_case(out, "shard_path_escapes", "is not a file name in the directory", {
        "model-00001-of-00001.safetensors": good,
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.embed_tokens.weight": "../valid_single/model.safetensors"}}),
    })
    write_case(out, "tensor_in_two_shards", "is in both", {
        "a.safetensors": shard2, "b.safetensors": shard2,
        "model.safetensors.index.json": json.dumps({"weight_map": {
            "model.norm.weight": "a.safetensors", "x": "b.safetensors"}}),
    })
    write_case(out, "index_without_weight_map", "weight_map", {
        "model.safetensors.index.json": json.dumps({"metadata": {}})})

    # MoE: experts are stacked, so all of them must be there and agree.
    e = {f"model.layers.0.mlp.experts.0.{p}.weight": entry("F32", [4, 8] if p != "down_proj" else [8, 4],
                                                           i * 128, i * 128 + 128)
         for i, p in enumerate(["gate_proj", "up_proj", "down_proj"])}
    single("missing_expert", "expert 1 of 2 is missing", raw_file(e, f32(3, 4, 8)), QWEN3MOE)
    e1 = dict(e, **{"model.layers.0.mlp.experts.1.gate_proj.weight": entry("F32", [8, 4], 384, 512),
                    "model.layers.0.mlp.experts.1.up_proj.weight": entry("F32", [4, 8], 512, 640),
                    "model.layers.0.mlp.experts.1.down_proj.weight": entry("F32", [8, 4], 640, 768)})
    single("expert_shape_mismatch", "differs from expert 0", raw_file(e1, f32(6, 4, 8)), QWEN3MOE)
    single("expert_index_out_of_range", "num_experts 2", raw_file(
        {"model.layers.0.mlp.experts.7.gate_proj.weight": entry("F32", [4, 8], 0, 128)},
        f32(4, 8)), QWEN3MOE)
    single("fused_expert_count_mismatch", "num_experts 2", raw_file(
        {"model.layers.0.mlp.experts.gate_up_proj": entry("F32", [3, 8, 8], 0, 768)},
        f32(3, 8, 8)), QWEN3MOE)

    corpus.mkdir(parents=True, exist_ok=True)
    for f in sorted(out.glob("*/*.safetensors")):
        shutil.copyfile(f, corpus / f"{f.parent.name}_{f.name}")
    print(f"wrote {len(list(out.iterdir()))} cases to {out}")


if __name__ == "__main__":
    main()
