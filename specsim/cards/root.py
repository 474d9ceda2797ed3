"""Where the shipped cards live: ``specsim/_models`` in a wheel, ``models/`` in a checkout.

Its own module so that the card parsers (the ``[moe]`` table's routing profiles,
:mod:`specsim.cards.routing`) and the card finder (:mod:`specsim.cards.files`) share it
without importing each other.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["packaged_root"]


def packaged_root() -> Path | None:
    """The cards shipped with specsim: ``specsim/_models`` in a wheel, ``models/`` in a checkout."""
    try:
        root = resources.files("specsim") / "_models"
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - namespace oddities
        root = None
    if root is not None and root.is_dir():
        return Path(str(root))
    checkout = Path(__file__).resolve().parents[2] / "models"
    return checkout if checkout.is_dir() else None
