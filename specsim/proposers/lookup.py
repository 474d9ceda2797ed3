"""Prompt lookup (n-gram) drafting: no model, but a host-CPU search every pass.

An n-gram proposer drafts the tokens that followed the last ``n`` tokens earlier in the
same sequence. vLLM's (``vllm/v1/spec_decode/ngram_proposer.py``, vllm-project/vllm at
commit 016e8ede870e3c087fdcdfb36ed3622112712f10) scans each sequence's whole context with
KMP for its longest suffix n-gram (``prompt_lookup_min..prompt_lookup_max``), compiled with
numba, and copies the ``k`` tokens after the match into a Python list; a batch runs its
sequences in parallel over ``max(1, (cpu_count // 2) // tensor_parallel)`` numba threads
(``batch_propose``). The GPU model runner calls the proposer on the host after a step's
sampled tokens reach the CPU, before the next step's inputs are built, so the search adds to
every step: it does not overlap verification (:attr:`NGram.overlappable` False unless
``overlap`` says an engine hides it).

SGLang does it differently (``python/sglang/srt/speculative/cpp_ngram/ngram_cache.py``,
sgl-project/sglang at commit 4ef715730f599fe7066e8e3affe47cd5d43ca0b1): a C++ trie of the
n-grams seen, filled asynchronously (``asyncInsert``, off the critical path) and matched
per batch (``batchMatch``: match windows of 1 to 10 tokens, a breadth-first token tree of
``draft_token_num`` nodes), so its lookup does not scan the context. That engine is a
:class:`LookupCost` with ``per_context_token_s = 0`` and its own per-node cost, which is
not measured here.

**The cost** (:class:`LookupCost`): per sequence and pass, ``per_sequence_s +
per_context_token_s * context + per_draft_token_s * nodes`` of host time, the batch's
sequences spread over ``threads`` threads (``ceil(batch / threads)`` rounds). The default,
:data:`LOOKUP_COST`, is fitted (:func:`fit_lookup_cost`) to
``models/measured/ngram/lookup-cost.csv``: that KMP search re-implemented and compiled with
numba 0.68.1 on this project's build machine (an AMD EPYC vCPU), by
``models/measured/ngram/bench_lookup.py`` (the command is in its docstring and the folder's
README). About 1.1 ns per context token: 1.4 us a sequence at a 512-token context, 37 us at 32k.
The drafted-token term is not distinguishable from zero in those data (its standard error
is larger than it). While the host searches the accelerators idle: the energy is their idle
power over that time (the host CPU's own power is not modelled: no card gives it).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from specsim.cards import ModelCard
from specsim.checks import check_int
from specsim.cost.deployment import Deployment
from specsim.proposers.kinds import check_batch, contexts, contexts_of
from specsim.proposers.protocol import DraftCost
from specsim.proposers.tables import RankAcceptance, check_tree

__all__ = ["LookupCost", "LOOKUP_COST", "fit_lookup_cost", "NGram"]

_CSV = "models/measured/ngram/lookup-cost.csv"


@dataclass(frozen=True, kw_only=True)
class LookupCost:
    """Host seconds of one sequence's lookup: a fixed part, per context token searched, per
    drafted token (see the module docstring); ``*_se``: their standard errors from the fit."""

    per_sequence_s: float
    per_context_token_s: float
    per_draft_token_s: float
    source: str
    per_sequence_se: float = 0.0
    per_context_token_se: float = 0.0
    per_draft_token_se: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_sequence_s", "per_context_token_s", "per_draft_token_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0.0:
                raise ValueError(f"lookup cost {name}: expected a number >= 0, got {v!r}")

    def seconds(self, *, context: ArrayLike, nodes: int) -> np.ndarray:
        """One sequence's host time at each ``context`` for a tree of ``nodes`` nodes."""
        ctx = np.asarray(context, dtype=np.float64)
        return self.per_sequence_s + self.per_context_token_s * ctx + self.per_draft_token_s * nodes


def fit_lookup_cost(path: str | os.PathLike[str] = _CSV) -> LookupCost:
    """Least squares of the CSV's ``min_s`` on ``1, context, k`` (columns as
    ``bench_lookup.py`` writes them), with the coefficients' standard errors; a ValueError
    naming the file for missing columns, too few rows, columns that do not vary or a negative
    coefficient."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    try:
        X = np.array([[1.0, float(r["context"]), float(r["k"])] for r in rows])
        y = np.array([float(r["min_s"]) for r in rows])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{path}: expected numeric columns context, k, min_s ({exc})") from None
    if len(rows) <= 3:
        raise ValueError(f"{path}: expected more than 3 rows to fit 3 coefficients")
    beta, _, rank, _ = np.linalg.lstsq(X, y, rcond=None)
    if rank < 3:
        raise ValueError(f"{path}: context and k must both vary to fit the three coefficients")
    resid = y - X @ beta
    cov = float(resid @ resid) / (len(y) - 3) * np.linalg.inv(X.T @ X)
    se = np.sqrt(np.diag(cov))
    names = ("per_sequence_s", "per_context_token_s", "per_draft_token_s")
    for name, b in zip(names, beta, strict=True):
        if b < 0.0:
            raise ValueError(f"{path}: the fitted {name} is negative ({b:.3g}); measure again")
    return LookupCost(
        per_sequence_s=float(beta[0]),
        per_context_token_s=float(beta[1]),
        per_draft_token_s=float(beta[2]),
        per_sequence_se=float(se[0]),
        per_context_token_se=float(se[1]),
        per_draft_token_se=float(se[2]),
        source=f"{os.fspath(path)} (fit_lookup_cost)",
    )


LOOKUP_COST = LookupCost(
    per_sequence_s=8.53e-7,
    per_context_token_s=1.099e-9,
    per_draft_token_s=3.3e-9,
    per_sequence_se=3.6e-8,
    per_context_token_se=2.0e-12,
    per_draft_token_se=3.6e-9,
    source=f"{_CSV}: vLLM's KMP lookup under numba on an AMD EPYC vCPU (fit_lookup_cost)",
)
"""The fit of :func:`fit_lookup_cost` to the committed measurement, rounded
(``tests/proposers/test_proposers.py`` refits it)."""


def idle_watts(deployment: Deployment) -> float:
    """What the accelerators draw while the host searches: every device of the tensor-parallel
    group idles."""
    return deployment.hardware.idle_power_w * deployment.tensor_parallel


@dataclass(frozen=True, kw_only=True)
class NGram:
    """Prompt lookup drafting (module docstring): no model, so no accelerator work and no
    draft step (the drafting rule prices model work; a lookup is host work, measured); the
    host searches each sequence's context every pass (``cost``, on ``threads`` host threads).
    ``acceptance`` is measured from text (:mod:`specsim.proposers.ngram`). ``overlap``: the
    engine hides the search behind verification (vLLM's runner does not)."""

    acceptance: RankAcceptance
    n: int = 2
    cost: LookupCost = LOOKUP_COST
    threads: int = 1
    overlap: bool = False

    def __post_init__(self) -> None:
        t = self.threads
        check_int(t, name="n-gram threads", minimum=1)

    @property
    def name(self) -> str:
        return f"{self.n}-gram lookup"

    @property
    def overlappable(self) -> bool:
        return self.overlap

    def check_target(self, target: ModelCard) -> None:
        del target  # text lookup drafts for any target

    def memory_bytes(self, deployment: Deployment) -> float:
        del deployment  # the context is already on the host: nothing added per device
        return 0.0

    def draft_costs(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: ArrayLike
    ) -> DraftCost:
        """Per element of ``context``, the host search of one pass over ``batch`` sequences
        (the accelerators idle meanwhile; no accelerator flops)."""
        tree = check_tree(parents)
        ctx = contexts(context)
        rounds = math.ceil(check_batch(batch) / self.threads)
        time = rounds * self.cost.seconds(context=ctx, nodes=len(tree)) if tree else 0.0 * ctx
        return DraftCost(time, idle_watts(deployment) * time, np.zeros(ctx.shape))

    def draft_cost(
        self, parents: Sequence[int], *, deployment: Deployment, batch: int, context: int
    ) -> DraftCost:
        return self.draft_costs(parents, deployment=deployment, batch=batch, context=context).at(0)

    def ragged_draft_cost(
        self, trees: Sequence[Sequence[int]], contexts: ArrayLike, *, deployment: Deployment
    ) -> DraftCost:
        """One tree per sequence (floats): the ``n`` sequences with a tree search their own
        contexts, ``ceil(n / threads)`` rounds of their mean search time (the homogeneous
        :meth:`draft_costs` when every tree and context is the same)."""
        ctx = contexts_of(trees, contexts)
        seconds = [
            float(self.cost.seconds(context=c, nodes=len(check_tree(t))))
            for t, c in zip(trees, ctx.tolist(), strict=True)
            if len(t)
        ]
        if not seconds:
            return DraftCost(0.0, 0.0, 0.0)
        time = math.ceil(len(seconds) / self.threads) * math.fsum(seconds) / len(seconds)
        return DraftCost(time, idle_watts(deployment) * time, 0.0)

    def prefill_cost(
        self, *, deployment: Deployment, tokens: ArrayLike, context: ArrayLike
    ) -> DraftCost:
        """0: no model, no KV cache of its own (the prompt is already on the host)."""
        del deployment, tokens, context
        return DraftCost(0.0, 0.0, 0.0)

    def kv_bytes_per_token(self, deployment: Deployment) -> float:
        """0: nothing cached per token on the devices."""
        del deployment
        return 0.0
