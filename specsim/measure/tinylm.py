"""Tiny language models trained here: the shared tokenizer, model shapes, safe saving and loading.

One byte-level BPE tokenizer (Hugging Face ``tokenizers``) is shared by every
model, so any draft can verify against any target. Models are built with
``transformers`` from :class:`TinySpec` shapes in the families of the cards
in ``models/lm``: ``llama`` (``LlamaForCausalLM``: RMSNorm, rotary positions,
SwiGLU) and ``gpt-like`` (``GPT2LMHeadModel``: LayerNorm, learned positions,
GELU), the families of Leviathan et al.'s GPT-like pair and of LLaMA-68M.

Weights are saved as safetensors with the transformers config and the
tokenizer's sha256 in the header, beside a JSON sidecar holding the file's
own sha256, the training config and the final losses. :func:`load_tiny`
refuses, with a :class:`ValueError` naming the file, a file that is not
safetensors or is corrupted (sha256 differs from the sidecar), weights of
another architecture than asked for, and a tokenizer other than the one the
model was trained with. Every write is atomic (temporary file, then rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from specsim.checks import check_int
from specsim.measure.corpus import atomic_write_text

__all__ = [
    "EOS",
    "TinySpec",
    "FORMAT",
    "train_tokenizer",
    "load_tokenizer",
    "tokenizer_sha256",
    "build_tiny",
    "param_count",
    "save_tiny",
    "load_tiny",
    "file_sha256",
]

EOS = "<|endoftext|>"
FORMAT = "specsim-tiny-lm/1"
FAMILIES = ("llama", "gpt-like")


@dataclass(frozen=True, slots=True, kw_only=True)
class TinySpec:
    """The shape of a tiny model; ``family`` is ``llama`` or ``gpt-like``."""

    family: str
    layers: int
    d_model: int
    heads: int
    d_ff: int
    context: int = 256
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"TinySpec.family: expected one of {FAMILIES}, got {self.family!r}")
        for field in ("layers", "d_model", "heads", "d_ff", "context"):
            v = getattr(self, field)
            check_int(v, name=f"TinySpec.{field}", minimum=1)
        if self.d_model % self.heads:
            raise ValueError(f"TinySpec.heads: {self.heads} does not divide d_model {self.d_model}")

    def hf_config(self, *, vocab: int, eos_id: int) -> transformers.PretrainedConfig:
        """The transformers config of this shape with a vocabulary of ``vocab`` tokens."""
        # No pad token: windows are never padded (and GPT-2 warns when pad == bos).
        special: dict[str, Any] = {
            "bos_token_id": eos_id,
            "eos_token_id": eos_id,
            "pad_token_id": None,
        }
        if self.family == "gpt-like":
            return transformers.GPT2Config(
                vocab_size=vocab,
                n_positions=self.context,
                n_embd=self.d_model,
                n_layer=self.layers,
                n_head=self.heads,
                n_inner=self.d_ff,
                activation_function="gelu_new",
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                tie_word_embeddings=self.tied_embeddings,
                use_cache=True,
                **special,
            )
        return transformers.LlamaConfig(
            vocab_size=vocab,
            hidden_size=self.d_model,
            intermediate_size=self.d_ff,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.heads,
            head_dim=self.d_model // self.heads,
            max_position_embeddings=self.context,
            tie_word_embeddings=self.tied_embeddings,
            use_cache=True,
            **special,
        )


def train_tokenizer(texts: Iterable[str], *, vocab_size: int, path: str | os.PathLike[str]) -> str:
    """Train a byte-level BPE tokenizer of ``vocab_size`` tokens on ``texts``; save it as JSON.

    Returns the sha256 of the saved JSON. Training is deterministic for the
    same texts in the same order (the trainer breaks frequency ties by the
    pair itself).
    """
    check_int(vocab_size, name="vocab_size", minimum=300)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    text = tok.to_str()
    atomic_write_text(Path(path), text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer saved by :func:`train_tokenizer`, or a ValueError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"tokenizer {p}: no such file")
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as exc:
        raise ValueError(f"tokenizer {p}: not a tokenizers JSON file ({exc})") from exc
    if tok.token_to_id(EOS) is None:
        raise ValueError(f"tokenizer {p}: has no {EOS!r} token; not a specsim tokenizer")
    return tok


def tokenizer_sha256(tok: Tokenizer) -> str:
    """The sha256 of the tokenizer's JSON form: its identity for model compatibility."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()


def build_tiny(spec: TinySpec, *, tokenizer: Tokenizer, seed: int) -> transformers.PreTrainedModel:
    """A freshly initialised model of ``spec`` for ``tokenizer``'s vocabulary (float32, CPU).

    Initialised from ``torch.Generator`` state ``seed`` inside
    :func:`torch.random.fork_rng`, so torch's global state is left as it was.
    """
    config = spec.hf_config(vocab=tokenizer.get_vocab_size(), eos_id=_eos(tokenizer))
    cls = _class(config.model_type)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = cls(config)
    return model


def _eos(tok: Tokenizer) -> int:
    eos = tok.token_to_id(EOS)
    if eos is None:
        raise ValueError(f"tokenizer: has no {EOS!r} token")
    return int(eos)


def _class(model_type: str) -> type[transformers.PreTrainedModel]:
    classes: dict[str, type[transformers.PreTrainedModel]] = {
        "llama": transformers.LlamaForCausalLM,
        "gpt2": transformers.GPT2LMHeadModel,
    }
    if model_type not in classes:
        raise ValueError(f"model_type: {model_type!r} is not one of {sorted(classes)}")
    return classes[model_type]


def param_count(model: torch.nn.Module) -> int:
    """Parameters of ``model``, each shared tensor (tied embeddings) counted once."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def save_tiny(
    model: transformers.PreTrainedModel,
    *,
    path: str | os.PathLike[str],
    tokenizer: Tokenizer,
    spec: TinySpec,
    info: dict[str, Any],
) -> dict[str, Any]:
    """Save weights (safetensors) and their JSON sidecar atomically; return the sidecar.

    ``info`` (training config, losses, corpus manifest...) goes into the
    sidecar beside the spec, parameter count, tokenizer and weights sha256.
    """
    from safetensors.torch import save_model

    p = Path(path)
    if p.suffix != ".safetensors":
        raise ValueError(f"path: expected a .safetensors file, got {str(p)!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": "pt",
        "specsim": FORMAT,
        "model_type": str(model.config.model_type),
        "config": model.config.to_json_string(use_diff=False),
        "tokenizer_sha256": tokenizer_sha256(tokenizer),
    }
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    os.close(fd)
    try:
        # save_model drops the tied copy of a shared tensor (safetensors refuses aliases).
        save_model(model, tmp, metadata=meta)
        os.chmod(tmp, 0o644)
        sha = file_sha256(tmp)
        sidecar = {
            "format": FORMAT,
            "weights": p.name,
            "weights_sha256": sha,
            "model_type": meta["model_type"],
            "spec": asdict(spec),
            "params": param_count(model),
            "vocab": tokenizer.get_vocab_size(),
            "tokenizer_sha256": meta["tokenizer_sha256"],
            **info,
        }
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write_text(_sidecar(p), json.dumps(sidecar, indent=2, sort_keys=True) + "\n")
    return sidecar


def load_tiny(
    path: str | os.PathLike[str],
    *,
    tokenizer: Tokenizer,
    family: str | None = None,
) -> tuple[transformers.PreTrainedModel, dict[str, Any]]:
    """Load a model saved by :func:`save_tiny` (eval mode, no gradients) and its sidecar.

    Raises ValueError naming the file when it is corrupted or not
    safetensors, holds another ``family`` than asked for, or was trained
    with another tokenizer than ``tokenizer``.
    """
    from safetensors import safe_open
    from safetensors.torch import load_model

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"weights {p}: no such file")
    sidecar = _checked_sidecar(p)
    try:
        with safe_open(str(p), framework="pt") as fh:
            meta = fh.metadata() or {}
    except Exception as exc:
        raise ValueError(f"weights {p}: not a readable safetensors file ({exc})") from exc
    if meta.get("specsim") != FORMAT:
        raise ValueError(f"weights {p}: no {FORMAT!r} header; not weights saved by specsim")
    model_type = meta.get("model_type", "?")
    if family is not None:
        expected = "gpt2" if family == "gpt-like" else family
        if model_type != expected:
            raise ValueError(
                f"weights {p}: architecture {model_type!r}, expected {expected!r} "
                f"(family {family!r})"
            )
    want_tok = meta.get("tokenizer_sha256", "")
    have_tok = tokenizer_sha256(tokenizer)
    if want_tok != have_tok:
        raise ValueError(
            f"weights {p}: trained with tokenizer sha256 {want_tok[:12]}..., "
            f"given tokenizer sha256 {have_tok[:12]}... does not match"
        )
    cls = _class(model_type)
    config_class = cls.config_class
    if config_class is None:
        raise ValueError(f"weights {p}: {model_type!r} has no config class")
    config = config_class.from_dict(json.loads(meta["config"]))
    if config.vocab_size != tokenizer.get_vocab_size():
        raise ValueError(
            f"weights {p}: vocabulary {config.vocab_size} differs from the "
            f"tokenizer's {tokenizer.get_vocab_size()}"
        )
    model = cls(config)
    try:
        load_model(model, str(p), strict=True)
    except Exception as exc:
        raise ValueError(
            f"weights {p}: tensors do not fit a {model_type!r} model of the recorded config ({exc})"
        ) from exc
    model.eval()
    model.requires_grad_(False)
    return model, sidecar


def _checked_sidecar(p: Path) -> dict[str, Any]:
    """The sidecar of the weights ``p`` (empty if there is none); a ValueError if the file's
    sha256 differs from the one recorded there."""
    side = _sidecar(p)
    sidecar: dict[str, Any] = {}
    if side.is_file():
        sidecar = json.loads(side.read_text(encoding="utf-8"))
        want = sidecar.get("weights_sha256")
        got = file_sha256(p)
        if want is not None and got != want:
            raise ValueError(
                f"weights {p}: corrupted: sha256 {got[:12]}... differs from "
                f"{want[:12]}... recorded in {side.name}"
            )
    return sidecar
