"""Write GGUF files for llama.cpp from the committed tiny models, and from configs.

llama.cpp's own ``convert_hf_to_gguf.py`` refuses the tiny byte-level BPE
tokenizer ("BPE pre-tokenizer was not recognized": it identifies a
pre-tokenizer by hashing the encoding of a fixed text against known models).
This module writes the file itself with the ``gguf`` package:

- the tokenizer as ``tokenizer.ggml.model = "gpt2"`` with the GPT-2
  pre-tokenizer (``tokenizer.ggml.pre = "gpt-2"``, llama.cpp's name for it: the
  same regex as the Hugging Face ``ByteLevel`` pre-tokenizer with
  ``use_regex``), its 4096 tokens in id
  order, its merges, ``<|endoftext|>`` (id 0) as a control token and as BOS/EOS;
- a ``LlamaForCausalLM`` as architecture ``llama``: q and k rows permuted from
  Hugging Face's rotate-half order to GGML's (as ``convert_hf_to_gguf`` does),
  the output tied to the token embedding;
- a ``GPT2LMHeadModel`` as architecture ``gpt2``: Conv1D weights transposed to
  (out, in), the fused qkv kept, the output written out (the tied embedding).

:func:`write_tiny_gguf` converts one committed model (after checking its
sha256 against its sidecar); :func:`write_random_llama` writes a Llama of any
shape with random weights from a numpy ``Generator`` (for timing, never for
acceptance). :func:`read_gguf` reads a file back and refuses one that is not
GGUF with a ``ValueError`` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors import safe_open

from specsim.measure.tinylm import file_sha256

__all__ = [
    "DTYPES",
    "RandomLlama",
    "GgufSummary",
    "tokenizer_fields",
    "write_tiny_gguf",
    "write_random_llama",
    "read_gguf",
]

DTYPES: dict[str, gguf.GGMLQuantizationType] = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
}
_FILE_TYPE = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}
_FILE_TYPE["q8_0"] = gguf.LlamaFileType.MOSTLY_Q8_0
_GPT2_TRANSPOSED: tuple[str, ...] = (".attn.c_attn.weight", ".attn.c_proj.weight")
_GPT2_TRANSPOSED += (".mlp.c_fc.weight", ".mlp.c_proj.weight")


@dataclass(frozen=True)
class GgufSummary:
    """What a GGUF file holds: architecture, tensors (name -> GGML shape), vocabulary size."""

    path: str
    architecture: str
    tensors: dict[str, tuple[int, ...]]
    tensor_types: dict[str, str]
    vocab_size: int
    fields: dict[str, Any]


def tokenizer_fields(tokenizer_json: str | os.PathLike[str]) -> dict[str, Any]:
    """Tokens (id order), token types, merges and special ids of a byte-level BPE tokenizer."""
    path = Path(tokenizer_json)
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"{path}: not a BPE tokenizer (model type {model.get('type')!r})")
    vocab: dict[str, int] = dict(model["vocab"])
    for added in spec.get("added_tokens", []):
        vocab[added["content"]] = int(added["id"])
    size = max(vocab.values()) + 1
    tokens = [""] * size
    for text, idx in vocab.items():
        tokens[idx] = text
    if any(t == "" for t in tokens):
        raise ValueError(f"{path}: token ids are not contiguous 0..{size - 1}")
    types = [int(gguf.TokenType.NORMAL)] * size
    for added in spec.get("added_tokens", []):
        if added.get("special"):
            types[int(added["id"])] = int(gguf.TokenType.CONTROL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    eot = vocab.get("<|endoftext|>", 0)
    return {"tokens": tokens, "types": types, "merges": merges, "bos": eot, "eos": eot}


def _add_tokenizer(writer: gguf.GGUFWriter, tokenizer_json: str | os.PathLike[str]) -> None:
    tok = tokenizer_fields(tokenizer_json)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tok["tokens"])
    writer.add_token_types(tok["types"])
    writer.add_token_merges(tok["merges"])
    writer.add_bos_token_id(tok["bos"])
    writer.add_eos_token_id(tok["eos"])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face's rotate-half q/k rows to GGML's interleaved order (convert_hf_to_gguf)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _llama_tensors(
    weights: dict[str, np.ndarray], cfg: dict[str, Any]
) -> Iterator[tuple[str, np.ndarray]]:
    yield "token_embd.weight", weights["lm_head.weight"]
    yield "output_norm.weight", weights["model.norm.weight"]
    parts = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(int(cfg["num_hidden_layers"])):
        for hf, gg in parts.items():
            w = weights[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = _permute(w, int(cfg["num_attention_heads"]))
            elif gg == "attn_k":
                w = _permute(w, int(cfg["num_key_value_heads"]))
            yield f"blk.{i}.{gg}.weight", w


def _gpt2_tensors(
    weights: dict[str, np.ndarray], cfg: dict[str, Any]
) -> Iterator[tuple[str, np.ndarray]]:
    yield "token_embd.weight", weights["lm_head.weight"]
    yield "position_embd.weight", weights["transformer.wpe.weight"]
    yield "output_norm.weight", weights["transformer.ln_f.weight"]
    yield "output_norm.bias", weights["transformer.ln_f.bias"]
    yield "output.weight", weights["lm_head.weight"]
    parts = {
        "ln_1": "attn_norm",
        "attn.c_attn": "attn_qkv",
        "attn.c_proj": "attn_output",
        "ln_2": "ffn_norm",
        "mlp.c_fc": "ffn_up",
        "mlp.c_proj": "ffn_down",
    }
    for i in range(int(cfg["n_layer"])):
        for hf, gg in parts.items():
            for kind in ("weight", "bias"):
                name = f"transformer.h.{i}.{hf}.{kind}"
                w = weights[name]
                yield f"blk.{i}.{gg}.{kind}", w.T.copy() if name.endswith(_GPT2_TRANSPOSED) else w


def _add_llama_params(writer: gguf.GGUFWriter, cfg: dict[str, Any]) -> None:
    d, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    rope = cfg.get("rope_parameters") or {}
    writer.add_context_length(int(cfg["max_position_embeddings"]))
    writer.add_embedding_length(d)
    writer.add_block_count(int(cfg["num_hidden_layers"]))
    writer.add_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(cfg.get("num_key_value_heads", heads)))
    writer.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    writer.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    writer.add_rope_dimension_count(int(cfg.get("head_dim") or d // heads))
    writer.add_vocab_size(int(cfg["vocab_size"]))


def _add_gpt2_params(writer: gguf.GGUFWriter, cfg: dict[str, Any]) -> None:
    d = int(cfg["n_embd"])
    writer.add_context_length(int(cfg["n_positions"]))
    writer.add_embedding_length(d)
    writer.add_block_count(int(cfg["n_layer"]))
    writer.add_feed_forward_length(int(cfg.get("n_inner") or 4 * d))
    writer.add_head_count(int(cfg["n_head"]))
    writer.add_layer_norm_eps(float(cfg["layer_norm_epsilon"]))
    writer.add_vocab_size(int(cfg["vocab_size"]))


def _quantized(w: np.ndarray, dtype: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """Matrices in ``dtype``; vectors (norms, biases) stay f32 as llama.cpp expects."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    kind = DTYPES[dtype]
    if w.ndim < 2 or kind == gguf.GGMLQuantizationType.F32:
        return w, gguf.GGMLQuantizationType.F32
    if kind == gguf.GGMLQuantizationType.Q8_0 and w.shape[-1] % 32 != 0:
        return w.astype(np.float16), gguf.GGMLQuantizationType.F16
    return gguf.quants.quantize(w, kind), kind


def _write(
    out: Path,
    arch: str,
    name: str,
    tensors: Iterator[tuple[str, np.ndarray]],
    add_params: Any,
    cfg: dict[str, Any],
    tokenizer_json: str | os.PathLike[str],
    dtype: str,
) -> Path:
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    writer.add_name(name)
    writer.add_file_type(int(_FILE_TYPE[dtype]))
    add_params(writer, cfg)
    _add_tokenizer(writer, tokenizer_json)
    for tname, w in tensors:
        data, kind = _quantized(w, dtype)
        writer.add_tensor(tname, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def _load_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    sidecar = path.with_suffix(".json")
    if sidecar.is_file():
        want = json.loads(sidecar.read_text(encoding="utf-8")).get("weights_sha256")
        if want and file_sha256(path) != want:
            raise ValueError(f"weights {path}: sha256 differs from {sidecar.name}")
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = dict(fh.metadata() or {})
            return {k: fh.get_tensor(k) for k in fh.keys()}, meta  # noqa: SIM118
    except Exception as exc:  # safetensors raises its own error types
        raise ValueError(f"weights {path}: not a readable safetensors file ({exc})") from exc


def write_tiny_gguf(
    weights: str | os.PathLike[str],
    tokenizer_json: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dtype: str = "f32",
) -> Path:
    """Convert one committed tiny model (``models/tiny/<name>.safetensors``) into ``out``."""
    path = Path(weights)
    tensors, meta = _load_safetensors(path)
    kind = meta.get("model_type")
    cfg = json.loads(meta.get("config", "{}"))
    name = path.stem
    if kind == "llama":
        return _write(Path(out), "llama", name, _llama_tensors(tensors, cfg), _add_llama_params,
                      cfg, tokenizer_json, dtype)  # fmt: skip
    if kind == "gpt2":
        return _write(Path(out), "gpt2", name, _gpt2_tensors(tensors, cfg), _add_gpt2_params,
                      cfg, tokenizer_json, dtype)  # fmt: skip
    raise ValueError(f"weights {path}: model type {kind!r}, expected llama or gpt2")


@dataclass(frozen=True)
class RandomLlama:
    """The shape of a random-weight Llama (timing only)."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int
    context: int = 2048
    vocab: int = 4096

    def params(self) -> int:
        head = self.d_model // self.heads
        attn = 2 * self.d_model * self.d_model + 2 * self.d_model * self.kv_heads * head
        return self.layers * (attn + 3 * self.d_model * self.d_ff) + self.vocab * self.d_model

    def hf_config(self) -> dict[str, Any]:
        return {
            "hidden_size": self.d_model,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "num_hidden_layers": self.layers,
            "intermediate_size": self.d_ff,
            "max_position_embeddings": self.context,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "vocab_size": self.vocab,
        }


def _random_tensors(
    shape: RandomLlama, rng: np.random.Generator
) -> Iterator[tuple[str, np.ndarray]]:
    d, head = shape.d_model, shape.d_model // shape.heads
    scale = 0.02

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float32)

    yield "token_embd.weight", mat(shape.vocab, d)
    yield "output_norm.weight", np.ones(d, dtype=np.float32)
    for i in range(shape.layers):
        yield f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32)
        yield f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32)
        yield f"blk.{i}.attn_q.weight", mat(d, d)
        yield f"blk.{i}.attn_k.weight", mat(shape.kv_heads * head, d)
        yield f"blk.{i}.attn_v.weight", mat(shape.kv_heads * head, d)
        yield f"blk.{i}.attn_output.weight", mat(d, d)
        yield f"blk.{i}.ffn_gate.weight", mat(shape.d_ff, d)
        yield f"blk.{i}.ffn_up.weight", mat(shape.d_ff, d)
        yield f"blk.{i}.ffn_down.weight", mat(d, shape.d_ff)


def write_random_llama(
    shape: RandomLlama,
    tokenizer_json: str | os.PathLike[str],
    out: str | os.PathLike[str],
    rng: np.random.Generator,
    *,
    dtype: str = "f16",
) -> Path:
    """A Llama of ``shape`` with N(0, 0.02) weights drawn from ``rng`` (unit norms)."""
    cfg = shape.hf_config()
    tensors = _random_tensors(shape, rng)
    return _write(
        Path(out), "llama", shape.name, tensors, _add_llama_params, cfg, tokenizer_json, dtype
    )


def _field_value(field: Any) -> Any:
    try:
        return field.contents()
    except Exception:  # a field type the reader cannot turn into a value
        return None


def read_gguf(path: str | os.PathLike[str]) -> GgufSummary:
    """Read a GGUF file's header back; ``ValueError`` naming the file if it is not GGUF."""
    p = Path(path)
    with p.open("rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{p}: not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(str(p))
    except Exception as exc:  # the reader raises bare ValueError/struct errors
        raise ValueError(f"{p}: unreadable GGUF ({exc})") from exc
    fields = {k: _field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tokens = fields.get("tokenizer.ggml.tokens") or []
    return GgufSummary(
        path=str(p),
        architecture=str(fields.get("general.architecture", "")),
        tensors={t.name: tuple(int(n) for n in t.shape) for t in reader.tensors},
        tensor_types={t.name: t.tensor_type.name for t in reader.tensors},
        vocab_size=len(tokens),
        fields={k: v for k, v in fields.items() if not k.startswith("tokenizer.ggml.")},
    )
