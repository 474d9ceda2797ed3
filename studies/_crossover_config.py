"""The crossover study's settings: its ``Config`` (checked on construction: sizes, head
cards and their targets) and the deployments and head proposers it names
(:mod:`studies.crossover`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.cards import load_hardware, load_head, load_model
from specsim.checks import check_size
from specsim.cost.deployment import Deployment
from specsim.proposers import Heads

from ._common import check_positive, check_positive_int, check_probability, setting

__all__ = ["Config", "MIN_RATE_REQUESTS", "deployment_of", "heads_of"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """The study's settings (``specsim study crossover --list-keys``); checked on construction."""

    deployments: tuple[str, ...] = setting(
        ("h100-sxm@vllm-v1", "a100-80gb@vllm-v1"),
        "cards, each optionally CARD@STACK (a runtime profile or stack slug, passed through; "
        "a bare card prices on its own default numbers)",
    )
    targets: tuple[str, ...] = setting(("vicuna-7b-v1.3", "llama-3.1-70b"), "target model cards")
    drafts: tuple[str, ...] = setting(("llama-68m", "llama-3.2-1b"), "one draft model per target")
    draft_alphas: tuple[float, ...] = setting(
        (0.6, 0.75), "assumed acceptance of each draft model (a what-if)", "probability"
    )
    tensor_parallel: tuple[int, ...] = setting((1, 4), "chips per target", "chips")
    heads: tuple[str, ...] = setting(
        ("medusa-vicuna-7b-v1.3",),
        "head cards (models/heads/), each used with the target it was trained for (one of "
        "targets), labelled by kind (Medusa heads, EAGLE head, MTP module)",
    )
    ngram_acceptance: str = setting(
        "measured/ngram/corpora-test/accept-corpora-test.toml",
        "acceptance by depth and rank of n-gram lookup (a file under models/)",
    )
    gammas: tuple[int, ...] = setting((1, 2, 4), "chain lookaheads tried", "tokens")
    fast_gammas: tuple[int, ...] = (1, 3)
    tree_budget: int = setting(16, "nodes of the heads' best tree (at batch 1)", "nodes")
    batches: tuple[int, ...] = setting((1, 16, 64, 256), "closed batch sizes", "sequences")
    fast_batches: tuple[int, ...] = (1, 16, 256)
    prompt: int = setting(512, "prompt length of every request", "tokens")
    output: int = setting(128, "output length of every request", "tokens")
    replicates: int = setting(3, "independent runs per point (standard errors)")
    fast_replicates: int = 2
    rate_fractions: tuple[float, ...] = setting(
        (0.3, 0.6, 0.9), "arrival rates, as fractions of plain decoding's capacity"
    )
    fast_rate_fractions: tuple[float, ...] = (0.5, 0.9)
    rate_requests: int = setting(128, "requests per rate-sweep run", "requests")
    fast_rate_requests: int = 24
    policy_pair: tuple[str, str] = setting(
        ("llama-3.1-8b", "llama-3.2-1b"),
        "target and draft of the engine-rule comparison (on the first deployment)",
    )
    policy_alpha: float = setting(
        0.7, "assumed acceptance of the rule comparison's draft (a what-if)", "probability"
    )
    policy_gamma: int = setting(3, "lookahead of the rules that have one", "tokens")
    policy_off_batch: int = setting(
        32, "batch from which the vLLM rules turn speculation off", "sequences"
    )
    rate_max_batch: int = setting(
        64,
        "max_batch of the rate sweep (its capacity: the closed batch nearest below)",
        "sequences",
    )

    def __post_init__(self) -> None:
        n = len(self.targets)
        for key in ("drafts", "draft_alphas", "tensor_parallel"):
            if len(getattr(self, key)) != n:
                raise ValueError(
                    f"{key}: expected one value per target ({n}), got {getattr(self, key)!r}"
                )
        if not self.deployments or n == 0:
            raise ValueError("deployments and targets must each name at least one card")
        check_probability(self.draft_alphas, "draft_alphas")
        for key in ("tensor_parallel", "gammas", "fast_gammas", "tree_budget", "batches"):
            check_positive_int(getattr(self, key), key)
        for key in ("fast_batches", "prompt", "output", "rate_requests", "fast_rate_requests"):
            check_positive_int(getattr(self, key), key)
        check_positive_int([self.replicates, self.fast_replicates], "replicates", minimum=2)
        check_positive([*self.rate_fractions, *self.fast_rate_fractions], "rate_fractions")
        for key in ("batches", "fast_batches", "rate_fractions", "fast_rate_fractions"):
            v = list(getattr(self, key))
            if sorted(set(v)) != v:
                raise ValueError(f"{key}: expected increasing values, got {v}")
        check_positive_int(self.rate_max_batch, "rate_max_batch")
        self._check_sizes()
        heads_of(self)  # a head card for none of the targets fails here
        check_probability(self.policy_alpha, "policy_alpha")
        check_positive_int(self.policy_gamma, "policy_gamma")
        check_positive_int(self.policy_off_batch, "policy_off_batch", minimum=4)
        for d in self.deployments:
            deployment_of(d, target=self.targets[0], tensor_parallel=1)  # a bad card fails here

    def _check_sizes(self) -> None:
        """Every size within :data:`specsim.checks.LIMITS`, and enough requests a rate run
        for its median TPOT to be more than a handful of requests' (before any work)."""
        for key in ("gammas", "fast_gammas", "tree_budget"):  # a chain of g is a g-node tree
            for v in np.atleast_1d(getattr(self, key)):
                check_size(int(v), name=key, limit="tree_nodes")
        for key in ("batches", "fast_batches", "rate_max_batch", "policy_off_batch"):
            for v in np.atleast_1d(getattr(self, key)):
                check_size(int(v), name=key, limit="batch")
        for key in ("rate_requests", "fast_rate_requests"):
            n = check_size(getattr(self, key), name=key, limit="requests")
            if n < MIN_RATE_REQUESTS:
                raise ValueError(
                    f"{key}: {n} requests a run is too few to state a rate crossing (at least "
                    f"{MIN_RATE_REQUESTS}: a run of fewer hardly queues, and its median TPOT is "
                    "a handful of requests')"
                )


MIN_RATE_REQUESTS = 16
"""Requests a rate-sweep run needs at least (``rate_requests``, ``fast_rate_requests``)."""

_HEAD_LABELS = {"parallel": "Medusa heads", "autoregressive": "EAGLE head", "mtp": "MTP module"}


def heads_of(cfg: Config) -> dict[str, dict[str, Heads]]:
    """Per target slug, its head proposers by label; a ValueError for a head card trained for
    none of ``targets``, or two cards of one kind for one target."""
    out: dict[str, dict[str, Heads]] = {}
    for slug in cfg.heads:
        card = load_head(slug)
        if card.target not in cfg.targets:
            raise ValueError(
                f"heads: {slug!r} was trained for {card.target!r}, which is not one of targets "
                f"{list(cfg.targets)} (a head card drafts only for its own target)"
            )
        label = _HEAD_LABELS[card.kind]
        if label in out.setdefault(card.target, {}):
            raise ValueError(
                f"heads: two {label} cards for {card.target!r}; give one of each kind a target"
            )
        out[card.target][label] = Heads(card=card)
    return out


def deployment_of(spec: str, *, target: str, tensor_parallel: int) -> Deployment:
    """``CARD`` or ``CARD@STACK`` as the target's deployment (the stack passed through)."""
    card, _, stack = spec.partition("@")
    if not card or (spec.count("@") > 1) or ("@" in spec and not stack):
        raise ValueError(f"deployments: expected CARD or CARD@STACK, got {spec!r}")
    return Deployment(
        target=load_model(target),
        hardware=load_hardware(card),
        tensor_parallel=tensor_parallel,
        runtime=stack or None,
    )
