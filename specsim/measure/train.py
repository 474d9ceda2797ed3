"""Train the tiny target and drafts: seeded, resumable, with progress and validation loss.

The plan (:data:`PLAN`): one target of a few million parameters (``llama``
family) trained on every training corpus, and drafts about ten times smaller
(``gpt-like`` family): one on every corpus, one on English only (language
shift), one on code only (domain shift), and one distilled from the target
(forward KL to the target's softmax at temperature 1 on the same mixture: the
best a draft of that size can do).

A training step draws its batch from ``numpy.random.default_rng([seed,
step])``: windows of ``context + 1`` tokens at uniform offsets of corpora
drawn by the mixture weights. The batch of step ``s`` therefore depends only on
(seed, s), so a run resumed from a checkpoint (model, optimizer, step and loss
history, written atomically every ``checkpoint_every`` steps) continues
exactly as if it had never stopped. Dropout is off; the learning rate has a
linear warm-up and a cosine decay to a tenth. Validation loss is the mean
next-token cross-entropy (nats) on fixed windows of each corpus' validation
split, the same windows for every model.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from tokenizers import Tokenizer

from specsim.checks import check_int
from specsim.measure.corpus import SPLITS, atomic_write_bytes, read_split
from specsim.measure.tinylm import (
    EOS,
    TinySpec,
    tokenizer_sha256,
)

__all__ = [
    "TrainConfig",
    "PLAN",
    "TRAIN_CORPORA",
    "encode_corpora",
    "TokenData",
    "batch_windows",
    "eval_windows",
    "validation_loss",
]

TRAIN_CORPORA: tuple[str, ...] = ("en", "de", "es", "it", "code")
TokenArray = NDArray[np.int32]
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """One model's training run. ``mixture`` maps corpus to sampling weight; ``teacher``
    names a trained model (``<teacher>.safetensors`` beside the output) to distil from."""

    name: str
    spec: TinySpec
    mixture: dict[str, float]
    steps: int
    batch: int = 16
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.05
    seed: int = 0
    eval_every: int = 250
    eval_windows: int = 16
    checkpoint_every: int = 100
    teacher: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").isalnum():
            raise ValueError(
                f"TrainConfig.name: expected letters, digits and '-', got {self.name!r}"
            )
        for f in ("steps", "batch", "eval_every", "eval_windows", "checkpoint_every"):
            v = getattr(self, f)
            check_int(v, name=f"TrainConfig.{f}", minimum=1)
        if not self.mixture or any(not (w > 0) for w in self.mixture.values()):
            raise ValueError(
                f"TrainConfig.mixture: expected positive weights, got {self.mixture!r}"
            )
        if not (self.lr > 0):
            raise ValueError(f"TrainConfig.lr: expected > 0, got {self.lr!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


TARGET = TinySpec(family="llama", layers=4, d_model=192, heads=4, d_ff=512, context=128)
DRAFT = TinySpec(family="gpt-like", layers=2, d_model=48, heads=2, d_ff=192, context=128)
_ALL = {c: 1.0 for c in TRAIN_CORPORA}


def _plan() -> list[TrainConfig]:
    return [
        TrainConfig(name="target", spec=TARGET, mixture=_ALL, steps=2000, lr=2e-3, seed=1),
        TrainConfig(name="draft-all", spec=DRAFT, mixture=_ALL, steps=1000, seed=2),
        TrainConfig(name="draft-en", spec=DRAFT, mixture={"en": 1.0}, steps=1000, seed=3),
        TrainConfig(name="draft-code", spec=DRAFT, mixture={"code": 1.0}, steps=1000, seed=4),
        TrainConfig(
            name="draft-distil", spec=DRAFT, mixture=_ALL, steps=800, seed=5, teacher="target"
        ),
    ]


#: The committed models, in training order (the distilled draft needs the target).
PLAN: tuple[TrainConfig, ...] = tuple(_plan())


@dataclass(slots=True)
class TokenData:
    """Token ids of each (corpus, split), documents joined by the EOS token."""

    tokenizer_sha256: str
    arrays: dict[tuple[str, str], TokenArray] = field(default_factory=dict)

    def get(self, corpus: str, split: str) -> TokenArray:
        key = (corpus, split)
        if key not in self.arrays:
            raise ValueError(f"corpus {corpus!r} split {split!r}: not encoded")
        return self.arrays[key]


def encode_corpora(
    *,
    corpora_dir: str | os.PathLike[str],
    tokenizer: Tokenizer,
    corpora: Iterable[str],
    cache_dir: str | os.PathLike[str] | None = None,
    splits: Iterable[str] = SPLITS,
) -> TokenData:
    """Encode every (corpus, split) once; cached as ``.npy`` keyed by the tokenizer's sha256."""
    sha = tokenizer_sha256(tokenizer)
    eos = tokenizer.token_to_id(EOS)
    if eos is None:
        raise ValueError(f"tokenizer: has no {EOS!r} token")
    data = TokenData(tokenizer_sha256=sha)
    for corpus in corpora:
        for split in splits:
            cache = (
                Path(cache_dir) / f"{sha[:12]}.{corpus}.{split}.npy"
                if cache_dir is not None
                else None
            )
            if cache is not None and cache.is_file():
                data.arrays[(corpus, split)] = np.load(cache)
                continue
            docs = read_split(corpora_dir, corpus, split)
            ids: list[int] = []
            for enc in tokenizer.encode_batch(docs):
                ids.extend(enc.ids)
                ids.append(eos)
            arr = np.asarray(ids, dtype=np.int32)
            if cache is not None:
                buf = io.BytesIO()
                np.save(buf, arr)
                atomic_write_bytes(cache, buf.getvalue())
            data.arrays[(corpus, split)] = arr
    return data


def batch_windows(
    data: TokenData,
    *,
    mixture: dict[str, float],
    split: str,
    batch: int,
    length: int,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """``batch`` windows of ``length`` tokens: corpus by ``mixture`` weight, uniform offset."""
    names = sorted(mixture)
    w = np.asarray([mixture[n] for n in names], dtype=np.float64)
    which = rng.choice(len(names), size=batch, p=w / w.sum())
    rows = []
    for i in which:
        arr = data.get(names[int(i)], split)
        if len(arr) <= length:
            raise ValueError(
                f"corpus {names[int(i)]!r} split {split!r}: {len(arr)} tokens, "
                f"need more than {length}"
            )
        start = int(rng.integers(0, len(arr) - length))
        rows.append(arr[start : start + length])
    return np.stack(rows).astype(np.int64)


def eval_windows(
    data: TokenData, *, corpus: str, split: str, count: int, length: int, seed: int = 20260
) -> NDArray[np.int64]:
    """Fixed windows for validation: the same for every model trained on ``data``."""
    rng = np.random.default_rng([seed, *corpus.encode("utf-8")])
    return batch_windows(
        data, mixture={corpus: 1.0}, split=split, batch=count, length=length, rng=rng
    )


def _loss(model: Any, x: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))


def validation_loss(
    model: Any, data: TokenData, *, corpora: Iterable[str], count: int, length: int
) -> dict[str, float]:
    """Mean next-token cross-entropy (nats) on fixed validation windows of each corpus."""
    was = model.training
    model.eval()
    out: dict[str, float] = {}
    with torch.no_grad():
        for corpus in corpora:
            x = torch.from_numpy(
                eval_windows(data, corpus=corpus, split="validation", count=count, length=length)
            )
            losses = [
                float(_loss(model, x[i : i + 8])) * len(x[i : i + 8]) for i in range(0, len(x), 8)
            ]
            out[corpus] = sum(losses) / len(x)
    model.train(was)
    return out
