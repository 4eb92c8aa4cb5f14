#!/usr/bin/env python3
"""Golden fixtures made by someone else's code: tiny random models built with transformers' own
classes, their float32 logits and greedy tokens, and GGUF files written the way llama.cpp's
convert_hf_to_gguf.py writes them (names, shapes, metadata keys, the llama q/k permutation).

Output (see tests/golden/fixtures/README.md for the format):
  tests/golden/fixtures/tokenizer/            shared byte-level BPE (tokenizer.json + config)
  tests/golden/fixtures/<name>/hf/            save_pretrained (F32 safetensors) + tokenizer
  tests/golden/fixtures/<name>/model-<T>.gguf F32 / Q8_0 / Q4_0 / Q4_1 / Q5_0
  tests/golden/fixtures/<name>/logits_p<i>.bin  f32 LE [n_pos, n_vocab], transformers float32
  tests/golden/fixtures/<name>/manifest.json  prompts, greedy ids, shapes, files

Runs on CPU (fixtures are made there); nothing depends on CUDA.
  python3 tools/make_golden.py                  # everything
  python3 tools/make_golden.py --only llama_tied_mha
  python3 tools/make_golden.py --retrain-tokenizer
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gguf_vocab import gguf_vocab  # noqa: E402,F401  (also used as mg.gguf_vocab by tools/peers)

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "golden" / "fixtures"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 384  # 256 byte tokens + 125 merges + 3 specials: one vocabulary for every fixture
# Qwen2's pre-tokenizer split (llama.cpp pre "qwen2"), so HF and llama.cpp split text the same way.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
N_GREEDY = 64

# Training text for the BPE merges: fixed here so the tokenizer is reproducible anywhere.
CORPUS = """\
The river carried the boat past the mill, and the miller waved from the door of the old stone house.
A mixture of experts routes every token to a few of many small networks; the router picks the top
experts by a softmax over its scores, and the chosen experts' outputs are added with those weights.
When the water rose in spring, the sluice gates were opened one by one, and the fields stayed dry.
She read the letter twice, folded it, and put it back in the drawer with the others.
The quick brown fox jumps over the lazy dog. The lazy dog does not mind; it is asleep in the sun.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 128 256 512 1024 2048 3.14159 2.71828 -1 +1 100% 1e-3.
def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

def softmax(xs):
    m = max(xs)
    es = [math.exp(x - m) for x in xs]
    s = sum(es)
    return [e / s for e in es]

for i in range(10):
    print(i, fibonacci(i))

class Tensor:
    def __init__(self, shape, data):
        self.shape = shape
        self.data = data

    def __repr__(self):
        return f"Tensor(shape={self.shape})"

int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
        printf("%s\\n", argv[i]);
    }
    return 0;
}
What is the capital of France? The capital of France is Paris. What is two plus two? Four.
Write a short poem about the sea. The sea is grey, the sea is wide, it keeps its secrets on the tide.
Please explain how a hash table works: keys are hashed to buckets, and collisions are chained.
The model answered politely, then stopped. The user asked again, and the model answered again.
In the morning the town was quiet; by noon the market was full of people, carts and dogs.
"""


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------
def train_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)  # appended last, as in Qwen's vocabulary
    if tok.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f"tokenizer: expected {VOCAB_SIZE} tokens, got {tok.get_vocab_size()}")
    return tok


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 4096,
        "chat_template": CHATML,
    }


def load_or_train_tokenizer(retrain: bool) -> pathlib.Path:
    tdir = FIXTURES / "tokenizer"
    path = tdir / "tokenizer.json"
    if retrain or not path.exists():
        tdir.mkdir(parents=True, exist_ok=True)
        train_tokenizer().save(str(path))
        (tdir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    return tdir


# ----------------------------------------------------------------------------------------------
# Fixture specs
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Spec:
    name: str
    cls: str                  # transformers class
    arch: str                 # GGUF general.architecture
    cfg: dict                 # config kwargs (on top of the shared ones)
    seed: int
    quants: tuple = ("Q8_0",)  # quantised GGUFs besides F32
    long_prompt: int = 0      # >0: one extra prompt of this many tokens (YaRN)
    f32_gguf: bool = True     # commit the F32 GGUF (the 64-expert one is too big; made in a temp dir)
    note: str = ""


COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, rms_norm_eps=1e-6,
              max_position_embeddings=512, bos_token_id=None, eos_token_id=VOCAB_SIZE - 1,
              pad_token_id=VOCAB_SIZE - 3)

SPECS = [
    Spec("llama_gqa2_tied", "LlamaForCausalLM", "llama",
         dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
              tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=101, quants=("Q8_0", "Q4_0", "Q5_0"),
         note="GQA 2, tied embeddings (no output.weight in the GGUF), q/k permuted for llama's rope"),
    Spec("qwen3_gqa4", "Qwen3ForCausalLM", "qwen3",
         dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16, intermediate_size=96,
              tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=103, note="dense qwen3: q/k RMSNorm, GQA 4, n_head*head_dim (128) != n_embd (64), tied"),
    Spec("qwen3moe_e8_k2", "Qwen3MoeForCausalLM", "qwen3moe",
         dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
              moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
              tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=104, quants=("Q8_0", "Q4_0", "Q4_1"),
         note="8 experts, top-2, norm_topk_prob true (Qwen3-30B-A3B's routing), GQA 2, untied"),
    Spec("qwen3moe_e8_k1_nonorm", "Qwen3MoeForCausalLM", "qwen3moe",
         dict(num_attention_heads=3, num_key_value_heads=1, head_dim=32, intermediate_size=96,
              moe_intermediate_size=32, num_experts=8, num_experts_per_tok=1, norm_topk_prob=False,
              tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=105, f32_gguf=False, note="top-1, norm_topk_prob false (expert output scaled by its softmax prob), "
                        "3 q heads / 1 kv head (odd; GQA 3), tied. llama.cpp's qwen3moe always "
                        "renormalises, so llama.cpp does not reproduce this one; no committed F32 GGUF "
                        "(size; compare hf/)"),
    Spec("qwen3moe_e64_k8", "Qwen3MoeForCausalLM", "qwen3moe",
         dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
              intermediate_size=96, moe_intermediate_size=32, num_experts=64, num_experts_per_tok=8,
              norm_topk_prob=True, tie_word_embeddings=True,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=106, f32_gguf=False,
         note="64 experts, top-8, GQA 4, tied; n_embd 32, ONE layer and no committed F32 GGUF "
              "(size: 64 experts at n_embd 64 over 2 layers are 3 MB per F32 copy); compare hf/"),
    Spec("qwen3_yarn", "Qwen3ForCausalLM", "qwen3",
         dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=96,
              tie_word_embeddings=True, max_position_embeddings=256,
              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 64}),
         seed=107, long_prompt=200,
         note="dense qwen3 with YaRN (Qwen3 style rope_scaling) factor 4 over an original context "
              "of 64, max 256; the 200-token prompt goes past 64"),
    Spec("qwen2moe_shexp", "Qwen2MoeForCausalLM", "qwen2moe",
         dict(num_attention_heads=4, num_key_value_heads=4, intermediate_size=96,
              moe_intermediate_size=32, shared_expert_intermediate_size=64, num_experts=4,
              num_experts_per_tok=2, norm_topk_prob=False, qkv_bias=True, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=108, note="Qwen1.5/2-MoE: shared expert with sigmoid gate, qkv bias, MHA (GQA 1), "
                        "4 experts top-2, no renormalisation, untied (llama.cpp's qwen2moe requires output.weight)"),
]


# ----------------------------------------------------------------------------------------------
# Model building
# ----------------------------------------------------------------------------------------------
def build_model(spec: Spec):
    import torch
    import transformers

    cfg_kwargs = dict(COMMON)
    cfg_kwargs.update(spec.cfg)
    model_cls = getattr(transformers, spec.cls)
    config = model_cls.config_class(**cfg_kwargs)
    config._attn_implementation = "eager"  # plain matmul/softmax attention, same on CPU and GPU
    torch.manual_seed(spec.seed)
    model = model_cls(config).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(spec.seed * 7919)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Scales, each tried on these shapes before settling:
            # - embeddings small (0.1) so the residual is not dominated by the input token: with
            #   tied embeddings and std 1.0 greedy output repeats the prompt's last token forever;
            # - layer gain 1.5/sqrt(fan_in): 3.0 gives varied greedy text but a chaotic network
            #   (Q8_0 weights move dense logits by 10% of their range), 1.0 collapses greedy
            #   output to a few tokens; 1.5 keeps both reasonable (Q8_0: ~5% on dense);
            # - the final norm ~4 spreads logits (std ~3) so top-1/top-2 are not a flat tie;
            # - routers 0.3 so the softmax over experts is decisive (std ~2.4 router logits).
            if name == "model.norm.weight":
                p.copy_(4.0 * (1.0 + 0.1 * torch.randn(p.shape, generator=gen)))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight") or "shared_expert_gate" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / fan_in ** 0.5))
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model, config


def make_prompts(spec: Spec, tok) -> list[dict]:
    """Three prompts (chat-formatted text, plain text, random ids), or chat + one long text."""
    rng = np.random.default_rng(spec.seed)
    chat = "<|im_start|>user\nWhat is a mixture of experts?<|im_end|>\n<|im_start|>assistant\n"
    plain = "The river carried the boat past the mill, and def fibonacci(n): return n if n < 2 else"
    prompts = [
        {"kind": "chatml", "text": chat, "ids": tok.encode(chat).ids},
        {"kind": "text", "text": plain, "ids": tok.encode(plain).ids},
        {"kind": "random_ids", "text": None,
         "ids": [int(x) for x in rng.integers(0, VOCAB_SIZE - len(SPECIAL_TOKENS), size=24)]},
    ]
    if spec.long_prompt:
        long_text = CORPUS[:4000]
        ids = tok.encode(long_text).ids[:spec.long_prompt]
        assert len(ids) == spec.long_prompt, f"corpus too short for {spec.long_prompt} tokens"
        prompts = [prompts[0], {"kind": "long_text", "text": tok.decode(ids), "ids": ids}]
    return prompts


def hf_logits_and_greedy(model, ids: list[int]):
    """Float32 logits for every prompt position, then N_GREEDY argmax tokens.

    Greedy decoding recomputes the whole sequence each step (no KV cache), so every logit row
    comes from the same kind of full forward as the prompt rows; ties go to the lowest id."""
    import torch

    with torch.no_grad():
        x = torch.tensor([ids], dtype=torch.long)
        logits = model(input_ids=x, use_cache=False).logits[0].float().cpu().numpy()
        seq = list(ids)
        greedy, margins = [], []
        last = logits[-1]
        for _ in range(N_GREEDY):
            nxt = int(np.argmax(last))
            top2 = np.sort(last)[-2:]
            greedy.append(nxt)
            margins.append(float(top2[1] - top2[0]))
            seq.append(nxt)
            last = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float().cpu().numpy()
    return logits.astype("<f4"), greedy, margins


# ----------------------------------------------------------------------------------------------
# GGUF writing (llama.cpp convert_hf_to_gguf.py conventions)
# ----------------------------------------------------------------------------------------------
def llama_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """HF stores q/k rows as [half0 dims..., half1 dims...] per head (rotate_half rope); llama.cpp's
    llama uses adjacent-pair rope, so convert_hf_to_gguf interleaves the two halves of each head."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(spec: Spec, config, sd: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """(gguf name, numpy array in HF [out, in] order == ggml ne [in, out]) in file order."""
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    n_head, n_kv = config.num_attention_heads, config.num_key_value_heads
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if spec.arch == "llama":
            q, k = llama_permute(q, n_head, n_head), llama_permute(k, n_head, n_kv)
        out += [(b + "attn_norm.weight", sd[p + "input_layernorm.weight"]),
                (b + "attn_q.weight", q), (b + "attn_k.weight", k),
                (b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"]),
                (b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])]
        if spec.arch == "qwen2moe":
            out += [(b + f"attn_{x}.bias", sd[p + f"self_attn.{x}_proj.bias"]) for x in "qkv"]
        if spec.arch in ("qwen3", "qwen3moe"):
            out += [(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"]),
                    (b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])]
        out.append((b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"]))
        if spec.arch in ("llama", "qwen3"):
            out += [(b + f"ffn_{x}.weight", sd[p + f"mlp.{x}_proj.weight"]) for x in ("gate", "up", "down")]
            continue
        n_exp = config.num_experts
        out.append((b + "ffn_gate_inp.weight", sd[p + "mlp.gate.weight"]))  # [n_expert, n_embd]
        for x in ("gate", "up", "down"):
            # stacked: gate/up (n_expert, n_ff, n_embd) = ne [n_embd, n_ff, n_expert]; down transposed
            out.append((b + f"ffn_{x}_exps.weight",
                        np.stack([sd[p + f"mlp.experts.{e}.{x}_proj.weight"] for e in range(n_exp)])))
        if spec.arch == "qwen2moe":
            out.append((b + "ffn_gate_inp_shexp.weight", sd[p + "mlp.shared_expert_gate.weight"]))  # [1, n_embd]
            out += [(b + f"ffn_{x}_shexp.weight", sd[p + f"mlp.shared_expert.{x}_proj.weight"])
                    for x in ("gate", "up", "down")]
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    if not config.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    return out


def keeps_f32(name: str, arr: np.ndarray) -> bool:
    """Tensors every quantised file keeps in F32: 1-D ones (norms, biases) and the routers, as
    convert_hf_to_gguf.py does (it forces ffn_gate_inp to F32)."""
    return arr.ndim == 1 or "ffn_gate_inp" in name


def write_gguf(path: pathlib.Path, spec: Spec, config, tensors, qname: str, vocab) -> dict:
    import gguf

    qtype = gguf.GGMLQuantizationType[qname]
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
             "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0}[qname]
    tokens, types, merges, _ = vocab
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(spec.name)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_file_type(ftype)
    if spec.arch == "llama":
        w.add_vocab_size(config.vocab_size)
        w.add_rope_dimension_count(head_dim)
    if "head_dim" in config.to_dict():  # convert_hf_to_gguf: whenever config.json has head_dim
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    rp = config.rope_parameters
    if rp.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    if spec.arch in ("qwen3moe", "qwen2moe"):
        w.add_expert_count(config.num_experts)
        w.add_expert_used_count(config.num_experts_per_tok)
        w.add_expert_feed_forward_length(config.moe_intermediate_size)
        if spec.arch == "qwen3moe" and not config.norm_topk_prob:
            # convert_hf_to_gguf does not write it; llama.cpp's qwen3moe always renormalises.
            w.add_expert_weights_norm(False)
    if spec.arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(config.shared_expert_intermediate_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(VOCAB_SIZE - 1)      # <|im_end|>
    w.add_pad_token_id(VOCAB_SIZE - 3)  # <|endoftext|>
    w.add_bos_token_id(VOCAB_SIZE - 3)      # Qwen's convention: bos = <|endoftext|>, never added
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types_out = {}
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if qtype == gguf.GGMLQuantizationType.F32 or keeps_f32(name, arr):
            w.add_tensor(name, arr)
            types_out[name] = "F32"
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
            types_out[name] = qname
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types_out


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def add_legacy_config_keys(hf_dir: pathlib.Path, config) -> None:
    """transformers 5 saves rope_parameters/num_local_experts; released Qwen3/Llama checkpoints
    carry rope_theta, rope_scaling and num_experts. Write both spellings so a loader written for
    real checkpoints reads these too (transformers 5 reads them back identically: checked)."""
    p = hf_dir / "config.json"
    cfg = json.loads(p.read_text())
    rp = dict(cfg["rope_parameters"])
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = None if rp.get("rope_type") == "default" else dict(rp, type=rp["rope_type"])
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg["num_local_experts"]
    p.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_fixture(spec: Spec, tok_dir: pathlib.Path, vocab, tok) -> dict:
    import torch
    import transformers
    from safetensors.numpy import load_file

    out = FIXTURES / spec.name
    if out.exists():
        shutil.rmtree(out)
    hf_dir = out / "hf"
    model, config = build_model(spec)
    model.save_pretrained(str(hf_dir), safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, hf_dir / f)
    add_legacy_config_keys(hf_dir, config)
    gen_cfg = hf_dir / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()  # only restates config ids; greedy settings live in the manifest

    # The committed safetensors are what every consumer reads: reload them and compute from those.
    reloaded = getattr(transformers, spec.cls).from_pretrained(str(hf_dir), dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    for k, v in reloaded.state_dict().items():
        if not np.array_equal(v.detach().cpu().numpy(), sd[k]):
            sys.exit(f"{spec.name}: reloaded weight {k} differs from the saved one")
    disk = load_file(str(hf_dir / "model.safetensors"))

    prompts = make_prompts(spec, tok)
    manifest_prompts = []
    for i, pr in enumerate(prompts):
        logits, greedy, margins = hf_logits_and_greedy(reloaded, pr["ids"])
        fname = f"logits_p{i}.bin"
        logits.tofile(out / fname)
        top = np.sort(logits, axis=1)
        manifest_prompts.append({
            "kind": pr["kind"], "text": pr["text"], "ids": pr["ids"], "n_pos": len(pr["ids"]),
            "logits_file": fname, "logits_shape": [len(pr["ids"]), config.vocab_size],
            "logits_argmax": [int(x) for x in logits.argmax(axis=1)],
            "min_top1_top2_margin": float((top[:, -1] - top[:, -2]).min()),
            "greedy_ids": greedy, "greedy_text": tok.decode(greedy, skip_special_tokens=False),
            "greedy_margins": [round(m, 6) for m in margins],
        })

    tensors = gguf_tensors(spec, config, disk)
    ggufs = {}
    for qname in ("F32",) + tuple(spec.quants):
        if qname == "F32" and not spec.f32_gguf:
            continue
        path = out / f"model-{qname}.gguf"
        types = write_gguf(path, spec, config, tensors, qname, vocab)
        ggufs[qname] = {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path),
                        "quantised_tensors": sorted(n for n, t in types.items() if t != "F32")}

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    manifest = {
        "name": spec.name, "note": spec.note, "hf_class": spec.cls, "gguf_arch": spec.arch,
        "seed": spec.seed,
        "hparams": {
            "n_vocab": config.vocab_size, "n_embd": config.hidden_size, "n_layer": config.num_hidden_layers,
            "n_head": config.num_attention_heads, "n_head_kv": config.num_key_value_heads,
            "head_dim": head_dim, "n_ff": config.intermediate_size, "rms_norm_eps": config.rms_norm_eps,
            "rope": dict(config.rope_parameters), "tied_embeddings": bool(config.tie_word_embeddings),
            "n_expert": getattr(config, "num_experts", 0), "n_expert_used": getattr(config, "num_experts_per_tok", 0),
            "n_ff_exp": getattr(config, "moe_intermediate_size", 0),
            "n_ff_shexp": getattr(config, "shared_expert_intermediate_size", 0),
            "norm_topk_prob": getattr(config, "norm_topk_prob", None),
            "qkv_bias": bool(getattr(config, "qkv_bias", False)),
        },
        "hf_dir": "hf", "hf_safetensors_sha256": sha256(hf_dir / "model.safetensors"),
        "gguf": ggufs,
        "logits_format": "little-endian float32, row-major [n_pos, n_vocab]; row t = logits after ids[0..t]",
        "greedy": f"{N_GREEDY} argmax tokens after the prompt, full recompute each step, no stop on EOS",
        "prompts": manifest_prompts,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def versions() -> dict:
    import importlib.metadata as md
    import torch
    import transformers

    def dist(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:  # e.g. gguf put on PYTHONPATH by hand
            return "unknown"

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": dist("gguf"), "tokenizers": dist("tokenizers"),
            "safetensors": dist("safetensors"), "numpy": np.__version__,
            "python": sys.version.split()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="fixture name (repeatable)")
    ap.add_argument("--retrain-tokenizer", action="store_true")
    args = ap.parse_args()

    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(min(torch.get_num_threads(), 2))
    tok_dir = load_or_train_tokenizer(args.retrain_tokenizer)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    vocab = gguf_vocab(tok_dir / "tokenizer.json")
    names = {s.name for s in SPECS}
    for n in args.only or []:
        if n not in names:
            sys.exit(f"unknown fixture {n}; known: {sorted(names)}")
    index = {"versions": versions(), "fixtures": {}}
    index_path = FIXTURES / "index.json"
    if index_path.exists() and args.only:
        index["fixtures"] = json.loads(index_path.read_text()).get("fixtures", {})
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        m = make_fixture(spec, tok_dir, vocab, tok)
        index["fixtures"][spec.name] = {"manifest": f"{spec.name}/manifest.json", "note": spec.note}
        margins = [p["min_top1_top2_margin"] for p in m["prompts"]]
        print(f"{spec.name}: ggufs {list(m['gguf'])}, min top1-top2 margin per prompt "
              f"{[round(x, 4) for x in margins]}", flush=True)
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
