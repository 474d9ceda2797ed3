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
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.cards import read_toml
from specsim.cards.files import packaged_root
from specsim.config import build
from specsim.cost.deployment import Deployment, deployment_from_table
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
    "request_from_toml",
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
    its acceptance: ``alpha`` (an assumed i.i.d. chain acceptance, draft and n-gram only) or
    ``acceptance`` (a measured file of acceptance by depth and rank); neither means the card's
    published table (heads, parallel, self-speculation) or, for n-gram, the sample corpus's."""

    kind: str
    card: str | None = None
    alpha: float | None = None
    acceptance: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")
        if (self.kind in CARD_KINDS) != (self.card is not None):
            need = "needs a card" if self.kind in CARD_KINDS else "takes no card"
            raise ValueError(f"kind {self.kind!r}: {need} (card = {self.card!r})")
        if self.alpha is not None and self.acceptance is not None:
            raise ValueError("alpha, acceptance: give one (an assumed alpha or a measured file)")
        given = self.alpha is not None or self.acceptance is not None
        if given and not PROPOSER_KINDS[self.kind].needs_acceptance:
            raise ValueError(
                f"kind {self.kind!r}: its card carries its published acceptance; alpha and "
                "acceptance apply to draft and ngram options only"
            )
        a = self.alpha
        if a is not None and (isinstance(a, bool) or not (0.0 <= float(a) <= 1.0)):
            raise ValueError(f"alpha: expected a probability in [0, 1], got {a!r}")


@dataclass(frozen=True)
class Option:
    """A built option: its label, its proposer (None: no speculation), where its acceptance
    came from and whether that was ``measured`` (a file or a card's published table) or
    assumed (an alpha)."""

    label: str
    kind: str
    proposer: Proposer | None
    acceptance_source: str
    measured: bool


@dataclass(frozen=True, kw_only=True)
class Load:
    """The load: a closed ``batch`` of sequences, or requests arriving at ``rate_per_s``
    with the lengths of a workload ``preset`` (:data:`specsim.sim.workload.workload.PRESETS`) or
    ``prompt_tokens`` and ``output_tokens`` (uniform over +-50% of each); ``requests`` served
    per run."""

    batch: int | None = None
    rate_per_s: float | None = None
    workload: str | None = None
    prompt_tokens: int = 512
    output_tokens: int = 256
    requests: int = 200

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
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ValueError(f"{name}: expected an integer >= 2, got {v!r}")

    def served(self, *, requests: int) -> PresetWorkload | PoissonWorkload:
        """The served workload at this load's rate: the preset's lengths and burstiness, or
        Poisson arrivals with lengths uniform over +-50% of the given ones."""
        if self.rate_per_s is None:
            raise ValueError("load: a closed batch has no arrivals to serve")
        if self.workload is not None:
            return PresetWorkload(name=self.workload, requests=requests, rate_per_s=self.rate_per_s)
        return PoissonWorkload(
            rate_per_s=self.rate_per_s,
            requests=requests,
            prompt_tokens=(max(1, self.prompt_tokens // 2), self.prompt_tokens * 3 // 2),
            output_tokens=(max(1, self.output_tokens // 2), self.output_tokens * 3 // 2),
        )

    @property
    def mean_output_tokens(self) -> float:
        """The mean output length (the preset's histogram mean, or the given length)."""
        if self.workload is not None:
            return float(preset_workload(self.workload, requests=2).output.mean)
        return float(self.output_tokens)

    def describe(self) -> str:
        if self.batch is not None:
            return f"batch {self.batch}"
        lengths = (
            f"the {self.workload} preset"
            if self.workload is not None
            else f"prompts ~{self.prompt_tokens}, outputs ~{self.output_tokens} tokens"
        )
        return f"{self.rate_per_s:g} req/s, {lengths}"


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The whole question: deployment, options, load, latency targets (p99 TTFT and TPOT,
    seconds), price per GPU-hour, ``precise`` (more requests, tighter intervals), seed."""

    deployment: Deployment
    options: tuple[OptionSpec, ...]
    load: Load
    slo_ttft_p99_s: float | None = None
    slo_tpot_p99_s: float | None = None
    price_per_gpu_hour: float | None = None
    precise: bool = False
    seed: int = 0
    max_batch: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.deployment, Deployment):
            raise TypeError(f"deployment: expected a Deployment, got {self.deployment!r}")
        if not self.options:
            raise ValueError(
                "options: name at least one proposer to weigh against no speculation "
                "(--draft SLUG, --heads SLUG, --ngram, --parallel SLUG, --selfspec SLUG)"
            )
        twice = sorted({_label(o) for o in self.options if self.options.count(o) > 1})
        if twice:
            raise ValueError(f"options: {', '.join(twice)} given twice")
        for name in ("slo_ttft_p99_s", "slo_tpot_p99_s", "price_per_gpu_hour"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not math.isfinite(v) or v <= 0):
                raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")

    @property
    def requests(self) -> int:
        """Requests per serving run: the load's, five times more with ``precise``."""
        return self.load.requests * (5 if self.precise else 1)


def _label(spec: OptionSpec) -> str:
    if spec.card is None:
        return spec.kind
    name = Path(spec.card).name
    return f"{spec.kind} {name.removesuffix('.toml')}"


def build_option(spec: OptionSpec, deployment: Deployment, *, where: str) -> Option:
    """The proposer of ``spec`` for ``deployment``'s target, with its acceptance's source.
    A proposer for another target is a ValueError naming both cards and ``where``."""
    table: dict[str, Any] = {"kind": spec.kind}
    if spec.card is not None:
        table["card"] = spec.card
    measured = spec.alpha is None
    if spec.alpha is not None:
        table["acceptance"] = float(spec.alpha)
    elif spec.acceptance is not None:
        table["acceptance"] = os.path.abspath(spec.acceptance)
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
    src = proposer.acceptance.source or "unnamed"
    if spec.kind == "ngram" and spec.alpha is None and spec.acceptance is None:
        src = f"{src} (default: the packaged sample corpus, {ngram_sample().name})"
    if spec.alpha is not None:
        src = f"alpha = {spec.alpha:g}, assumed (i.i.d. chain), not measured"
    return Option(
        label=_label(spec),
        kind=spec.kind,
        proposer=proposer,
        acceptance_source=src,
        measured=measured,
    )


def _options(data: Mapping[str, Any], where: str) -> tuple[OptionSpec, ...]:
    if "options" in data and "proposer" in data:
        raise ValueError(f"{where}: give [[options]] or [proposer], not both")
    raw = data.get("options", [data["proposer"]] if "proposer" in data else [])
    if not isinstance(raw, list):
        raise ValueError(f"{where} [[options]]: expected an array of tables, got {raw!r}")
    return tuple(
        build(OptionSpec, t, where=f"{where} [[options]] #{i + 1}") for i, t in enumerate(raw)
    )


def request_from_toml(path: str | os.PathLike[str], **overrides: Any) -> PlanRequest:
    """The :class:`PlanRequest` of a TOML file: ``[deployment]`` (the Deployment's fields),
    ``[[options]]`` (or one ``[proposer]``) with the keys of :class:`OptionSpec`, ``[load]``
    (the keys of :class:`Load`), ``[slo]`` (``ttft_p99_s``, ``tpot_p99_s``) and top-level
    ``price_per_gpu_hour``, ``seed``, ``max_batch``; ``overrides`` replace request fields."""
    where = os.fspath(path)
    data = read_toml(path)
    known = {"deployment", "options", "proposer", "load", "slo", "price_per_gpu_hour"}
    unknown = sorted(set(data) - known - {"seed", "max_batch", "precise"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    if "deployment" not in data:
        raise ValueError(f"{where}: expected a [deployment] table")
    slo = data.get("slo", {})
    bad = sorted(set(slo) - {"ttft_p99_s", "tpot_p99_s"})
    if bad:
        raise ValueError(f"{where} [slo]: unknown key(s) {bad}; allowed: ttft_p99_s, tpot_p99_s")
    fields: dict[str, Any] = {
        "deployment": deployment_from_table(data["deployment"], where=f"{where} [deployment]"),
        "options": _options(data, where),
        "load": build(Load, data.get("load", {}), where=f"{where} [load]"),
        "slo_ttft_p99_s": slo.get("ttft_p99_s"),
        "slo_tpot_p99_s": slo.get("tpot_p99_s"),
        **{k: data[k] for k in ("price_per_gpu_hour", "seed", "max_batch", "precise") if k in data},
    }
    fields.update(overrides)
    try:
        return PlanRequest(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
