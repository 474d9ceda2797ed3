"""Measured routing skew: the expert-load profiles a model card's ``moe.routing`` may name.

``models/measured/moe-routing/expert-load.csv`` holds published expert-load statistics,
one row per statistic with its source (``models/measured/moe-routing/README.md``). A
*profile* is a name in its ``profile`` column; the row that describes it is its logical
experts' token counts (``level = expert``, ``layer = average``, ``eplb = none``): the mean
and standard deviation of the tokens each expert receives per iteration, and the hottest
expert's excess ``(max - mean) / mean``. The cost model turns it into a load vector
(:func:`specsim.cost.moe.routing_load`); this module only reads and checks it.

>>> p = load_routing_profile("deepseek-r1-translation")
>>> p.experts, p.top_k, p.mean_tokens, p.std_tokens
(256, 8, 128.0, 164.1)
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

from specsim.cards.root import packaged_root

__all__ = ["RoutingProfile", "ROUTING_FILE", "list_routing_profiles", "load_routing_profile"]

ROUTING_FILE = Path("measured") / "moe-routing" / "expert-load.csv"
"""The profiles' file, under the packaged cards' root (``models/`` in a checkout)."""


@dataclass(frozen=True, kw_only=True)
class RoutingProfile:
    """One published expert-load statistic of a model's logical experts (module docstring)."""

    slug: str
    model: str
    dataset: str
    engine: str
    experts: int
    top_k: int
    mean_tokens: float
    std_tokens: float
    imbalance_ratio: float
    source: str


def _path() -> Path:
    root = packaged_root()
    if root is None or not (root / ROUTING_FILE).is_file():  # pragma: no cover - packaging
        raise ValueError(f"routing profiles: no {ROUTING_FILE} among the packaged cards")
    return root / ROUTING_FILE


@functools.cache
def _profiles(path: Path) -> dict[str, RoutingProfile]:
    out: dict[str, RoutingProfile] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            if (row["level"], row["layer"], row["eplb"]) != ("expert", "average", "none"):
                continue
            try:
                profile = RoutingProfile(
                    slug=row["profile"],
                    model=row["model"],
                    dataset=row["dataset"],
                    engine=row["engine"],
                    experts=int(row["experts"]),
                    top_k=int(row["top_k"]),
                    mean_tokens=float(row["mean_tokens"]),
                    std_tokens=float(row["std_tokens"]),
                    imbalance_ratio=float(row["imbalance_ratio"]),
                    source=row["source"],
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}: line {i}: not a routing profile row: {exc}") from None
            if profile.slug in out:
                raise ValueError(f"{path}: line {i}: profile {profile.slug!r} is described twice")
            out[profile.slug] = profile
    return out


def list_routing_profiles() -> list[RoutingProfile]:
    """Every routing profile shipped, by name."""
    return [p for _, p in sorted(_profiles(_path()).items())]


def load_routing_profile(name: str, *, where: str = "routing") -> RoutingProfile:
    """The routing profile called ``name``; a ValueError naming ``where`` and the known ones."""
    profiles = _profiles(_path())
    if name not in profiles:
        known = ", ".join(["uniform", *sorted(profiles)])
        raise ValueError(f"{where}: no routing profile {name!r} (known: {known})")
    return profiles[name]
