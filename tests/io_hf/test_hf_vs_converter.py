"""The HF reader against llama.cpp's own converter: tiny models made by transformers
(save_pretrained, so the files are what users have), converted to F32 GGUF by
convert_hf_to_gguf.py, read back with the gguf package. Every GGUF tensor must come out of the
HF reader with the same name, shape, type and bytes, and every GGUF metadata key (but the
ones derived from the file rather than the config) with the same type and value. The golden
fixtures (tests/golden/fixtures/*/hf + model-F32.gguf) are checked the same way."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from hf_capi import HfModel

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
TOKENIZER = ROOT / "tests/golden/fixtures/tokenizer"
# Keys that come from the file or the tokenizer, not from config.json.
NOT_FROM_CONFIG = ("GGUF.", "tokenizer.", "general.name", "general.file_type",
                   "general.quantization_version", "general.size_label", "general.basename",
                   "general.finetune")


def find_converter(scratch: pathlib.Path):
    """$SLUICE_LLAMA_CPP_CONVERTER, an unpacked llama.cpp under .peers/src, or the converter's
    files taken from the llama.cpp source archive in .peers (tools/peers fetches it)."""
    env = os.environ.get("SLUICE_LLAMA_CPP_CONVERTER")
    if env:
        return pathlib.Path(env)
    hits = sorted(ROOT.glob(".peers/src/*/llama.cpp/convert_hf_to_gguf.py"))
    hits += sorted(ROOT.glob(".peers/src/*/*/vendor/llama.cpp/convert_hf_to_gguf.py"))
    if hits:
        return hits[0]
    archive = ROOT / ".peers/llama.cpp-slim.tar.gz"
    if not archive.exists():
        return None
    import tarfile

    wanted = ("llama.cpp/convert_hf_to_gguf.py", "llama.cpp/conversion/", "llama.cpp/gguf-py/")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        tar.extractall(scratch, members=members, filter="data")
    conv = scratch / "llama.cpp/convert_hf_to_gguf.py"
    return conv if conv.exists() else None


def assert_matches_gguf(capi, hf_dir, gguf_path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(gguf_path))
    with HfModel(capi, hf_dir) as m:
        want = {t.name: t for t in r.tensors}
        assert sorted(m.tensors) == sorted(want), f"{hf_dir}: tensor names differ"
        for name, t in want.items():
            got = m.tensors[name]
            assert got.ne == [int(x) for x in t.shape], name
            assert got.type == int(t.tensor_type), name
            assert got.raw == np.ascontiguousarray(t.data).tobytes(), f"{name}: bytes differ"
        checked = 0
        for key, field in r.fields.items():
            if key.startswith(NOT_FROM_CONFIG):
                continue
            assert m.meta_type(key) == int(field.types[0]), key
            value = field.contents()
            if isinstance(value, float):
                assert m.meta(key) == float(np.float32(value)), key
            else:
                assert m.meta(key) == value, key
            checked += 1
        assert checked >= 8, "too few metadata keys compared"


def assert_same_layout_as_gguf(capi, hf_dir, gguf_path):
    """For quantised GGUFs: the same tensor names and shapes (the bytes differ by design)."""
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(gguf_path))
    with HfModel(capi, hf_dir) as m:
        want = {t.name: [int(x) for x in t.shape] for t in r.tensors}
        assert {n: t.ne for n, t in m.tensors.items()} == want


QUANTISED = sorted((p.parent, p) for p in (ROOT / "tests/golden/fixtures").glob("*/model-Q8_0.gguf")
                   if (p.parent / "hf/config.json").exists())


@pytest.mark.parametrize("fixture,gguf_path", QUANTISED, ids=[p.name for p, _ in QUANTISED])
def test_golden_hf_fixture_has_the_layout_of_its_q8_gguf(capi, fixture, gguf_path):
    assert_same_layout_as_gguf(capi, fixture / "hf", gguf_path)


GOLDEN = sorted(p.parent for p in (ROOT / "tests/golden/fixtures").glob("*/model-F32.gguf")
                if (p.parent / "hf/config.json").exists())


@pytest.mark.parametrize("fixture", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_hf_fixture_reads_like_its_f32_gguf(capi, fixture):
    assert_matches_gguf(capi, fixture / "hf", fixture / "model-F32.gguf")


# The hybrid Qwen MoEs (tools/make_hybrid_golden.py): llama.cpp's converter output is
# converted-F32.gguf, with the MTP block and every Gated DeltaNet reshape (qkvz split, V-head
# reorder, -exp(A_log), +1 on the zero-centred norms) applied.
HYBRID = sorted(p.parent for p in (ROOT / "tests/golden/fixtures").glob("*/converted-F32.gguf")
                if (p.parent / "hf/config.json").exists())


@pytest.mark.parametrize("fixture", HYBRID, ids=[p.name for p in HYBRID])
def test_hybrid_hf_fixture_reads_like_llama_cpp_conversion(capi, fixture):
    assert_matches_gguf(capi, fixture / "hf", fixture / "converted-F32.gguf")


def _configs():
    base = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=128, rms_norm_eps=1e-5)
    moe = dict(base, num_key_value_heads=2, head_dim=8, moe_intermediate_size=12, num_experts=4,
               num_experts_per_tok=2)
    return {
        "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", dict(base, num_key_value_heads=2,
                                                               tie_word_embeddings=False, rope_theta=5e5)),
        "llama3_rope": ("LlamaConfig", "LlamaForCausalLM", dict(
            base, num_key_value_heads=1, tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 512})),
        "llama_tied": ("LlamaConfig", "LlamaForCausalLM", dict(base, num_key_value_heads=4,
                                                                tie_word_embeddings=True)),
        "qwen3_tied": ("Qwen3Config", "Qwen3ForCausalLM", dict(base, num_key_value_heads=2, head_dim=16,
                                                                tie_word_embeddings=True)),
        "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(moe, norm_topk_prob=True)),
        "qwen2moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                     dict(moe, shared_expert_intermediate_size=24, num_key_value_heads=4)),
    }


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conv = find_converter(tmp_path_factory.mktemp("llama_cpp"))
    if conv is None or not conv.exists():
        pytest.skip("llama.cpp's convert_hf_to_gguf.py not found (set SLUICE_LLAMA_CPP_CONVERTER)")
    import torch

    out = tmp_path_factory.mktemp("hf_models")
    jobs, made = [], {}
    for name, (cfg_cls, model_cls, kw) in _configs().items():
        torch.manual_seed(len(name))
        cfg = getattr(transformers, cfg_cls)(**kw)
        model = getattr(transformers, model_cls)(cfg)
        d = out / name
        model.save_pretrained(str(d))
        for f in TOKENIZER.iterdir():
            shutil.copy(f, d / f.name)
        made[name] = (d, out / f"{name}.gguf")
        jobs.append(f"{d}:{out / f'{name}.gguf'}")
    res = subprocess.run([sys.executable, str(HERE / "run_llama_cpp_converter.py"), str(conv), *jobs],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    return made


@pytest.mark.parametrize("name", list(_configs()))
def test_transformers_directory_reads_like_llama_cpp_conversion(capi, converted, name):
    hf_dir, gguf_path = converted[name]
    assert_matches_gguf(capi, hf_dir, gguf_path)
    with HfModel(capi, hf_dir) as m:
        cfg = json.loads((hf_dir / "config.json").read_text())
        assert ("output.weight" in m.tensors) == (not cfg.get("tie_word_embeddings", False))
        if name == "llama3_rope":  # all three branches of the converter's rope factor loop
            f = m.tensors["rope_freqs.weight"].array()
            assert f[0] == 1.0 and f[-1] == 32.0 and any(1.0 < x < 32.0 for x in f), f
