"""What the fidelity page says about a plan's deployment: the held-out checks that cover it.

:func:`specsim.validate.fidelity.fidelity_table` takes seconds (it re-simulates the CPU runs),
too slow for ``plan``'s interactive goal, so its summary
(:func:`specsim.validate.fidelity.fidelity_summary`) is committed as :data:`SUMMARY_FILE`,
written by ``python -m specsim.plan.fidelity``; a test checks that the committed file matches
a fresh computation, so it cannot go stale.

:data:`~specsim.plan.fidelity.coverage.COVERAGE` says which deployments and model pairs each
family's predictions stand for. A family covers a deployment by hardware, stack and weights;
for one option (plain decoding, or a proposer kind with its card) it is on the **same model
pair** when it checked that target with that draft or head card (plain decoding: that
target). :func:`fidelity_coverage` says, per option, which of three it is: covered by a family
on the same model pair, the same hardware and stack checked on another model pair only, or no
held-out check; :func:`fidelity_flags` names every covering family that misses its goal, and
every option that is not on a checked model pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from specsim.cost.deployment import Deployment

from .coverage import COVERAGE, Coverage, Pair

__all__ = [
    "COVERAGE",
    "SUMMARY_FILE",
    "Coverage",
    "OptionCoverage",
    "fidelity_coverage",
    "fidelity_flags",
    "read_summary",
    "write_summary",
]

SUMMARY_FILE = Path(__file__).resolve().parent.parent / "fidelity-summary.csv"
"""The committed :func:`specsim.validate.fidelity.fidelity_summary` (see the module docstring)."""
PAGE = "docs/fidelity.md"
_SAME_BYTES = {"float16": "bfloat16"}
"""Formats the cost model prices alike (two bytes a weight, no dequantization), so a check
in one covers the other."""


def write_summary(path: Path = SUMMARY_FILE) -> pd.DataFrame:
    """Compute the fidelity summary afresh and write it to ``path`` (CSV); returns it."""
    # start-up: plan reads the summary; only writing it computes the table
    from specsim.validate import fidelity as fid

    summary = fid.fidelity_summary(fid.fidelity_table())
    summary.to_csv(path, index=False, float_format="%.6g")
    read_summary.cache_clear()
    return summary


@cache
def read_summary(path: Path = SUMMARY_FILE) -> pd.DataFrame:
    """The committed summary; a missing file is a FileNotFoundError naming the command."""
    if not path.is_file():
        raise FileNotFoundError(
            f"fidelity summary {str(path)!r} is missing: run python -m specsim.plan.fidelity"
        )
    return pd.read_csv(path)


@dataclass(frozen=True)
class OptionCoverage:
    """How the fidelity page covers one option: ``status`` is ``same pair`` (``families``
    checked this model pair), ``other pair`` (``families`` checked the same hardware, stack and
    weights on other pairs only) or ``none``; ``line`` says it in words."""

    status: str
    families: tuple[str, ...]
    line: str


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _miss(family: str, row: pd.Series, stack: str, hardware: str) -> str:
    return (
        f"fidelity: {row['quantity']} on {hardware} under {stack} ({family}): median error "
        f"{_pct(float(row['median |error|']))}, worst {_pct(float(row['worst |error|']))} "
        f"(goal {row['goal']}), {PAGE}"
    )


def _where(deployment: Deployment) -> tuple[str, str | None, str, str]:
    """(hardware slug, stack slug or None, the stack in words, the weight format)."""
    rt = deployment.runtime
    slug = rt.slug if rt is not None else deployment.hardware.runtime
    return (
        deployment.hardware.slug,
        slug,
        slug or "the card's own numbers",
        (deployment.formats().weight_format),
    )


def _here(deployment: Deployment) -> dict[str, Coverage]:
    hw, slug, _, fmt = _where(deployment)
    weights = _SAME_BYTES.get(fmt, fmt)
    return {
        fam: c
        for fam, c in COVERAGE.items()
        if hw in c.hardware and c.runtime == slug and weights in c.weights
    }


def _pair_words(pair: Pair) -> str:
    return pair[0] if pair[1] is None else f"{pair[0]} + {pair[1]}"


def _one(deployment: Deployment, kind: str, card: str | None) -> OptionCoverage:
    hw, _, stack, fmt = _where(deployment)
    pair: Pair = (deployment.target.slug, None if kind == "none" else card)
    if kind == "none":
        subject = "plain decoding"
    else:
        subject = f"{kind} {card}" if card else f"{kind} proposers"
    here = {f: c for f, c in _here(deployment).items() if kind in c.kinds}
    same = tuple(f for f, c in here.items() if pair in c.pairs)
    if same:
        return OptionCoverage(
            "same pair",
            same,
            f"fidelity: {subject} under {stack} on {hw}: covered by {same[0]!r} on the same "
            f"model pair ({_pair_words(pair)}), {PAGE}",
        )
    if here:
        plain = kind == "none"
        checked = sorted(
            {_pair_words(p) for c in here.values() for p in c.pairs if (p[1] is None) == plain}
        )
        mine = _pair_words(pair) if plain or card else f"{pair[0]} with a {kind} proposer"
        return OptionCoverage(
            "other pair",
            tuple(here),
            f"fidelity: {subject} under {stack} on {hw} ({fmt} weights): same hardware and "
            f"stack, other model pair ({next(iter(here))!r} checked {', '.join(checked)}; "
            f"not {mine}), {PAGE}",
        )
    return OptionCoverage(
        "none", (), f"fidelity: no held-out check covers {subject} under {stack} on {hw}, {PAGE}"
    )


def fidelity_coverage(
    deployment: Deployment, kinds: Sequence[str], cards: Sequence[str | None] | None = None
) -> list[OptionCoverage]:
    """Per option (``kinds[i]``, ``none``: plain decoding; with its draft or head card
    ``cards[i]``), how the fidelity page covers it on ``deployment`` (:class:`OptionCoverage`).
    Without ``cards`` a speculative option has no card, so it is never on a checked pair."""
    cards = [None] * len(kinds) if cards is None else list(cards)
    if len(cards) != len(kinds):
        raise ValueError(f"fidelity_coverage: {len(kinds)} kinds but {len(cards)} cards")
    return [_one(deployment, k, c) for k, c in zip(kinds, cards, strict=True)]


def fidelity_flags(
    deployment: Deployment,
    kinds: Sequence[str],
    *,
    cards: Sequence[str | None] | None = None,
    summary: pd.DataFrame | None = None,
) -> list[str]:
    """The fidelity flags for ``deployment`` weighing proposer ``kinds`` (``none``: plain
    decoding) with their ``cards`` (see :func:`fidelity_coverage`), from ``summary`` (default:
    the committed :data:`SUMMARY_FILE`): one line when no family covers the deployment's
    hardware, stack and weights; else every covering family of those kinds that misses its
    goal, then every option checked on another model pair only or not at all."""
    table = read_summary() if summary is None else summary
    hw, _, stack, fmt = _where(deployment)
    here = _here(deployment)
    if not here:
        return [f"fidelity: no held-out check covers {stack} on {hw} ({fmt} weights), {PAGE}"]
    out: list[str] = []
    for fam, c in here.items():
        if not set(c.kinds) & set(kinds):
            continue
        for _, row in table[table["family"] == fam].iterrows():
            if not bool(row["goal met"]):
                out.append(_miss(fam, row, stack, hw))
    for cov in fidelity_coverage(deployment, kinds, cards):
        if cov.status != "same pair" and cov.line not in out:
            out.append(cov.line)
    return out
