"""The explorer: one self-contained HTML page with sliders for alpha, gamma, c, v and c-hat.

It draws, live, the token yield :math:`E = (1-\\alpha^{\\gamma+1})/(1-\\alpha)` (Leviathan et al.
2023, Equation 1), the walltime speedup :math:`E/(\\gamma c + v)` (Theorem 3.8 when v = 1), the
buried bill :math:`(\\gamma\\hat c + \\gamma + 1)/E` (Theorem 3.11) and a token-tree toy whose
expected tokens per pass follow Sequoia's positional acceptance (Chen et al. 2024, Section 3).
The page needs no network: its script and its SVG drawing are inline. The JavaScript formulas
are those of :mod:`specsim.theory` (``numeric``, ``token_trees``); a browser test evaluates them
on a grid and compares them with the Python numeric twins.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specsim import __version__
from specsim.theory.numeric import TIE_RTOL

__all__ = ["ExplorerStart", "explorer_html", "write_explorer", "FILE_NAME"]

FILE_NAME = "explore.html"
"""The page's file name inside the output folder."""

# (slider, lowest, highest, integer?) as the page's range inputs allow them.
_RANGES: dict[str, tuple[float, float, bool]] = {
    "alpha": (0.0, 1.0, False),
    "gamma": (1.0, 16.0, True),
    "c": (0.0, 1.0, False),
    "v": (1.0, 3.0, False),
    "c_hat": (0.0, 1.0, False),
    "beta": (0.0, 1.0, False),
}
_WIDTH_RANGES = ((1, 4), (0, 4), (0, 3), (0, 3))
_FIELD = re.compile(r"__[A-Z0-9]+__")


@dataclass(frozen=True, kw_only=True)
class ExplorerStart:
    """Where the page's sliders start (each within its slider's range).

    ``widths`` are the token tree's children per node at depths 1 to 4 (0 ends the tree).
    """

    alpha: float = 0.8
    gamma: int = 4
    c: float = 0.05
    v: float = 1.0
    c_hat: float = 0.05
    beta: float = 0.3
    widths: tuple[int, int, int, int] = (2, 2, 1, 0)

    def __post_init__(self) -> None:
        for name, (low, high, integer) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"ExplorerStart.{name}: expected a number, got {value!r}")
            if integer and value != int(value):
                raise ValueError(f"ExplorerStart.{name}: expected an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(
                    f"ExplorerStart.{name}: expected {low:g} <= {name} <= {high:g} (the "
                    f"slider's range), got {value!r}"
                )
        if len(self.widths) != len(_WIDTH_RANGES):
            raise ValueError(f"ExplorerStart.widths: expected 4 widths, got {self.widths!r}")
        for depth, (w, (low, high)) in enumerate(
            zip(self.widths, _WIDTH_RANGES, strict=True), start=1
        ):
            if isinstance(w, bool) or not isinstance(w, int) or not low <= w <= high:
                raise ValueError(
                    f"ExplorerStart.widths: depth {depth} expects an integer in "
                    f"[{low}, {high}], got {w!r}"
                )


def explorer_html(start: ExplorerStart | None = None, *, command: str = "specsim explore") -> str:
    """The explorer page as one HTML string; ``command`` is the line that wrote it."""
    s = start or ExplorerStart()
    page = resources.files("specsim.report").joinpath(FILE_NAME).read_text(encoding="utf-8")
    fields = {
        "COMMAND": html.escape(command),
        "VERSION": html.escape(__version__),
        "TIE_RTOL": repr(float(TIE_RTOL)),
        "ALPHA": f"{s.alpha:g}",
        "GAMMA": f"{int(s.gamma)}",
        "C": f"{s.c:g}",
        "V": f"{s.v:g}",
        "CHAT": f"{s.c_hat:g}",
        "BETA": f"{s.beta:g}",
        **{f"W{i}": str(w) for i, w in enumerate(s.widths, start=1)},
    }
    for key, value in fields.items():
        page = page.replace(f"__{key}__", value)
    left = _FIELD.search(page)
    if left:  # the template names a field this function does not fill
        raise ValueError(f"explorer_html: template field {left.group(0)} was not filled")
    return page


def write_explorer(
    out_dir: Path | str, *, start: ExplorerStart | None = None, command: str = "specsim explore"
) -> Path:
    """Write the page as ``out_dir/explore.html`` (the folder is made) and return its path."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAME
    path.write_text(explorer_html(start, command=command), encoding="utf-8")
    return path
