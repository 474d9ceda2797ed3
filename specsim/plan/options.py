"""What ``specsim plan`` is asked: the deployment, the options to compare and the load.

A :class:`PlanRequest` holds one :class:`~specsim.cost.deployment.Deployment`, the
speculative options to weigh against no speculation (:class:`OptionSpec`: a proposer kind,
its card, and where its acceptance comes from), the :class:`Load` (a closed batch, or a
request rate with a workload preset or prompt and output lengths), the latency targets and
a price per GPU-hour. :func:`build_option` turns an :class:`OptionSpec` into a proposer
through the same function a composed simulate config uses
(:func:`specsim.sim.config.config_compose.proposer_from_table`) and says where its acceptance came
from and whether it was measured or assumed. :func:`request_from_toml` reads the same
request from a TOML file (``[deployment]``, ``[[options]]`` or ``[proposer]``, ``[load]``,
``[slo]``). Every bad value is a ValueError naming the key or flag it came from.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.cards.files import packaged_root
from specsim.cost.deployment import Deployment
from specsim.plan.draft_runs import DRAFT_KEYS, check_draft_keys, own_deployment, with_own
from specsim.plan.lookahead import check_lookahead, fixed_tree
from specsim.plan.option_acceptance import (
    check_forms,
    given_acceptance,
    has_acceptance,
    replaced_card,
)
from specsim.proposers import CARD_KINDS, Proposer
from specsim.proposers import KINDS as PROPOSER_KINDS
from specsim.sim.config.config_compose import proposer_from_table
from specsim.sim.workload.arrivals import PoissonWorkload
from specsim.sim.workload.workload import PRESETS, PresetWorkload, preset_workload

__all__ = [
    "KINDS",
    "Load",
    "Option",
    "OptionSpec",
    "PlanRequest",
    "build_option",
    "ngram_sample",
    "spec_label",
]

KINDS = tuple(PROPOSER_KINDS)
"""The proposer kinds a plan weighs (:data:`specsim.proposers.KINDS`, written there once)."""


def ngram_sample() -> Path:
    """The n-gram acceptance measured on the sample corpus (``models/measured/ngram``), the
    default acceptance of an ``--ngram`` option (flagged: not the user's traffic)."""
    root = packaged_root()
    if root is None:  # pragma: no cover - a broken install
        raise FileNotFoundError("the packaged models folder is missing")
    return root / "measured" / "ngram" / "accept-sample.toml"


@dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """One speculative option: ``kind`` (one of :data:`KINDS`), its ``card`` slug or path
    (draft model, head card, parallel or self-speculation proposer card; none for n-gram), and
    its acceptance, one form at most (:mod:`specsim.plan.option_acceptance`): ``alpha`` (an
    assumed i.i.d. chain acceptance, draft and n-gram only), ``acceptance`` (a measured file
    of acceptance by depth and rank), ``acceptance_per_position`` (vLLM's per-position
    rates) or ``accept_length`` at ``accept_length_k`` (SGLang's or TensorRT-LLM's mean
    accepted length), given where ``acceptance_from`` says (None: to the plan); any but an
    alpha replaces a card's published table. None means the card's published table (heads,
    parallel, self-speculation), for n-gram the sample corpus's, and for a draft model none:
    the plan answers with its break-even
    (:mod:`specsim.plan.breakeven`). ``k`` or ``tree``: a lookahead fixed for it
    (:mod:`specsim.plan.lookahead`; None: the tree optimizer's best). A draft model's own
    ``weights``, ``runtime`` and ``tensor_parallel`` (:mod:`specsim.plan.draft_runs`;
    None: the target's deployment with the draft card's weights)."""

    kind: str
    card: str | None = None
    alpha: float | None = None
    acceptance: str | None = None
    acceptance_per_position: tuple[float, ...] | None = None
    accept_length: float | None = None
    accept_length_k: int | None = None
    acceptance_from: str | None = None
    k: int | None = None
    tree: str | None = None
    weights: str | None = None
    runtime: str | None = None
    tensor_parallel: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")
        if (self.kind in CARD_KINDS) != (self.card is not None):
            need = "needs a card" if self.kind in CARD_KINDS else "takes no card"
            raise ValueError(f"kind {self.kind!r}: {need} (card = {self.card!r})")
        check_forms(self)
        a = self.alpha
        real = isinstance(a, numbers.Real) and not isinstance(a, bool)
        if a is not None and (not real or not (0.0 <= float(a) <= 1.0)):
            raise ValueError(f"alpha: expected a probability in [0, 1], got {a!r}")
        check_lookahead(self.k, self.tree)
        check_draft_keys(self.kind, self.draft_keys)

    @property
    def draft_keys(self) -> dict[str, Any]:
        """The draft model's own deployment keys (:data:`~specsim.plan.draft_runs.DRAFT_KEYS`)."""
        return {k: getattr(self, k) for k in DRAFT_KEYS}


@dataclass(frozen=True)
class Option:
    """A built option: its label, its proposer (None: no speculation), where its acceptance
    came from and whether that was ``measured`` (a file or a card's published table) or
    assumed (an alpha); ``fixed``: the tree the user fixed for it (None: searched), as
    ``lookahead`` says it was given (``"k = 3"``)."""

    label: str
    kind: str
    proposer: Proposer | None
    acceptance_source: str
    measured: bool
    fixed: tuple[int, ...] | None = None
    lookahead: str = ""


@dataclass(frozen=True, kw_only=True)
class Load:
    """The load: a closed ``batch`` of sequences, or requests arriving at ``rate_per_s``
    with the lengths of a workload ``preset`` (:data:`specsim.sim.workload.workload.PRESETS`) or
    ``prompt_tokens`` and ``output_tokens`` (uniform over +-50% of each; None: 512 and 256);
    ``requests`` served per run (None: 200). A value the load would not use (lengths beside
    a preset, requests in a closed batch) is refused, not ignored."""

    batch: int | None = None
    rate_per_s: float | None = None
    workload: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    requests: int | None = None

    def __post_init__(self) -> None:
        if (self.batch is None) == (self.rate_per_s is None):
            raise ValueError("load: give a batch (--batch N) or a rate (--rate R), one of them")
        b = self.batch
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ValueError(f"batch: expected an integer >= 1, got {b!r}")
        r = self.rate_per_s
        if r is not None and (isinstance(r, bool) or not math.isfinite(r) or r <= 0):
            raise ValueError(f"rate: expected requests per second > 0, got {r!r}")
        if self.workload is not None and self.workload not in PRESETS:
            raise ValueError(f"workload: unknown preset {self.workload!r}; known: {list(PRESETS)}")
        for name in ("prompt_tokens", "output_tokens", "requests"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 2):
                raise ValueError(f"{name}: expected an integer >= 2, got {v!r}")
        for name in ("prompt_tokens", "output_tokens"):
            if self.workload is not None and getattr(self, name) is not None:
                raise ValueError(
                    f"{name}: the {self.workload} preset gives the lengths, so it is not "
                    "used; drop it or the preset"
                )
        if self.batch is not None and self.requests is not None:
            raise ValueError(
                "requests: a closed batch serves no requests (closed forms), so it is not "
                "used; drop it or give a rate"
            )

    @property
    def lengths(self) -> tuple[int, int]:
        """The prompt and output tokens given (or 512 and 256; a preset's are its own)."""
        return self.prompt_tokens or 512, self.output_tokens or 256

    @property
    def requests_per_run(self) -> int:
        """Requests per serving run: the given count, or 200."""
        return self.requests or 200

    def served(self, *, requests: int) -> PresetWorkload | PoissonWorkload:
        """The served workload at this load's rate: the preset's lengths and burstiness, or
        Poisson arrivals with lengths uniform over +-50% of the given ones."""
        if self.rate_per_s is None:
            raise ValueError("load: a closed batch has no arrivals to serve")
        if self.workload is not None:
            return PresetWorkload(name=self.workload, requests=requests, rate_per_s=self.rate_per_s)
        prompt, output = self.lengths
        return PoissonWorkload(
            rate_per_s=self.rate_per_s,
            requests=requests,
            prompt_tokens=(max(1, prompt // 2), prompt * 3 // 2),
            output_tokens=(max(1, output // 2), output * 3 // 2),
        )

    @property
    def mean_output_tokens(self) -> float:
        """The mean output length (the preset's histogram mean, or the given length)."""
        if self.workload is not None:
            return float(preset_workload(self.workload, requests=2).output.mean)
        return float(self.lengths[1])

    def describe(self) -> str:
        if self.batch is not None:
            return f"batch {self.batch}"
        lengths = (
            f"the {self.workload} preset"
            if self.workload is not None
            else f"prompts ~{self.lengths[0]}, outputs ~{self.lengths[1]} tokens"
        )
        return f"{self.rate_per_s:g} req/s, {lengths}"


MAX_PRICE = 1000.0
"""The most dollars per GPU-hour a plan takes: list prices are a few dollars; a larger
number is a unit slip (per node, per month) and would print meaningless costs."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The whole question: deployment, options, load, latency targets (p99 TTFT and TPOT,
    seconds), price per GPU-hour (at most :data:`MAX_PRICE`), ``precise`` (more requests,
    tighter intervals), seed, ``max_batch`` (sequences per pass when served; None: 64). A
    closed batch serves nothing, so ``precise`` and ``max_batch`` are refused there."""

    deployment: Deployment
    options: tuple[OptionSpec, ...]
    load: Load
    slo_ttft_p99_s: float | None = None
    slo_tpot_p99_s: float | None = None
    price_per_gpu_hour: float | None = None
    precise: bool = False
    seed: int = 0
    max_batch: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.deployment, Deployment):
            raise TypeError(f"deployment: expected a Deployment, got {self.deployment!r}")
        if not self.options:
            raise ValueError(
                "options: name at least one proposer to weigh against no speculation "
                "(--draft SLUG, --heads SLUG, --ngram, --parallel SLUG, --selfspec SLUG)"
            )
        for i, o in enumerate(self.options):
            if not isinstance(o, OptionSpec):
                raise TypeError(
                    f"options[{i}]: expected an OptionSpec (OptionSpec(kind='ngram'), "
                    f"OptionSpec(kind='draft', card='llama-68m', alpha=0.7)), got {o!r}"
                )
        labels = [spec_label(o) for o in self.options]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(
                f"options: {', '.join(twice)} given twice (one option per card: plan another "
                "lookahead or draft deployment separately)"
            )
        for name in ("slo_ttft_p99_s", "slo_tpot_p99_s", "price_per_gpu_hour"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not math.isfinite(v) or v <= 0):
                raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")
        price = self.price_per_gpu_hour
        if price is not None and price > MAX_PRICE:
            raise ValueError(
                f"price_per_gpu_hour: {price:g} dollars per GPU-hour is above {MAX_PRICE:g}, "
                "no accelerator's price (per node or per month?)"
            )
        self._check_run()

    def _check_run(self) -> None:
        """The run's own settings: their types, and none a closed batch would ignore."""
        if not isinstance(self.precise, bool):
            raise ValueError(f"precise: expected true or false, got {self.precise!r}")
        s = self.seed
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**63:
            raise ValueError(f"seed: expected an integer from 0 to 2**63 - 1, got {s!r}")
        m = self.max_batch
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"max_batch: expected an integer >= 1, got {m!r}")
        if self.load.batch is not None:
            unused = [n for n in ("max_batch", "precise") if getattr(self, n) not in (None, False)]
            if unused:
                raise ValueError(
                    f"{unused[0]}: a closed batch (batch {self.load.batch}) is closed forms, "
                    "no serving run, so it is not used; drop it or give a rate"
                )

    @property
    def requests(self) -> int:
        """Requests per serving run: the load's, five times more with ``precise``."""
        return self.load.requests_per_run * (5 if self.precise else 1)

    @property
    def served_max_batch(self) -> int:
        """Sequences per pass at most in a serving run: ``max_batch``, or 64."""
        return self.max_batch or 64


def spec_label(spec: OptionSpec) -> str:
    if spec.card is None:
        return spec.kind
    name = Path(spec.card).name
    return f"{spec.kind} {name.removesuffix('.toml')}"


def build_option(spec: OptionSpec, deployment: Deployment, *, where: str) -> Option:
    """The proposer of ``spec`` for ``deployment``'s target, with its acceptance's source.
    A proposer for another target is a ValueError naming both cards and ``where``, and so is
    a draft with no acceptance (:func:`specsim.plan.plan` prices those at acceptance 0 for
    their break-even instead)."""
    table: dict[str, Any] = {"kind": spec.kind}
    if spec.card is not None:
        table["card"] = spec.card
    given, measured = given_acceptance(spec)
    if given is not None:
        table["acceptance"] = given
    elif spec.kind == "ngram":
        table["acceptance"] = str(ngram_sample())
    elif spec.kind == "draft":
        raise ValueError(
            f"{where}: a draft model has no published acceptance for a given target; give "
            "--alpha A (assumed) or --acceptance FILE (measured)"
        )
    proposer = proposer_from_table(table, base=".", where=where)
    target = deployment.target.slug
    try:
        proposer.check_target(deployment.target)
    except ValueError as exc:
        raise ValueError(
            f"{where}: {proposer.name} cannot draft for the target card {target!r}: {exc}"
        ) from None
    label = spec_label(spec)
    own = own_deployment(proposer, deployment, spec.draft_keys, label=label)
    proposer = with_own(proposer, own)
    fixed = fixed_tree(spec.k, spec.tree, proposer, deployment, label=label)
    src = proposer.acceptance.source or _unsourced(spec)
    if spec.kind == "ngram" and not has_acceptance(spec):
        src = f"{src} (default: the packaged sample corpus, {ngram_sample().name})"
    if spec.alpha is not None:
        src = f"alpha = {spec.alpha:g}, assumed (i.i.d. chain), not measured"
    src += replaced_card(spec)
    return Option(
        label=spec_label(spec),
        kind=spec.kind,
        proposer=proposer,
        acceptance_source=src,
        measured=measured,
        fixed=fixed,
        lookahead="" if fixed is None else (f"k = {spec.k}" if spec.k else f"tree = {spec.tree!r}"),
    )


NO_SOURCE = "no source given"
"""What an acceptance that says not where its numbers come from is called, after its file:
the weak assumptions flag it (:func:`specsim.plan.verdict.weak_assumptions`)."""


def _unsourced(spec: OptionSpec) -> str:
    """An acceptance without a source, named by the file it was read from, if any."""
    if spec.acceptance is None:
        return NO_SOURCE
    line = "source key" if Path(spec.acceptance).suffix == ".toml" else "'# source:' line"
    return f"{spec.acceptance} ({NO_SOURCE}: the file has no {line})"
