"""The tutorial as a Jupyter notebook, made from ``docs/tutorial.md`` so that the two cannot drift.

Prose becomes Markdown cells; each ``>>>`` example of a ```python block becomes code (its
expected output dropped: the notebook prints its own), one cell ending at each example that
shows a result; ```toml and other blocks stay in the Markdown. Relative links are rewritten
for the notebook's folder. The notebook is written without outputs (nbformat 4 JSON, written
here directly: no Jupyter package is needed to make it)::

    python -m specsim.report.notebook            # writes docs/notebooks/tutorial.ipynb
    python -m specsim.report.notebook --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["tutorial_cells", "notebook_json", "main", "TUTORIAL", "NOTEBOOK"]

_ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = _ROOT / "docs" / "tutorial.md"
"""The tutorial page the notebook is made from (in a checkout)."""
NOTEBOOK = _ROOT / "docs" / "notebooks" / "tutorial.ipynb"
"""Where the notebook is written."""

_PYTHON = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*\n?", re.M | re.S)
_LINK = re.compile(r"\]\((?!https?:|#|/)([^)\s]+)\)")


def _examples(block: str) -> list[str]:
    """The block's source as cells: each ends at an example whose expected output is shown."""
    cells: list[list[str]] = [[]]
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(">>> ") or line == ">>>":
            cells[-1].append(line[4:])
        elif line.startswith("... ") or line == "...":
            cells[-1].append(line[4:])
        else:  # an expected output line closes the cell of the example above it
            if cells[-1] and (i + 1 == len(lines) or lines[i + 1].startswith(">>>")):
                cells.append([])
    return ["\n".join(c) for c in cells if c]


def _markdown(text: str, *, prefix: str) -> str:
    return _LINK.sub(lambda m: f"]({prefix}{m.group(1)})", text).strip("\n")


def tutorial_cells(markdown: str, *, link_prefix: str = "../") -> list[tuple[str, str]]:
    """(``"markdown"`` or ``"code"``, source) of each cell, in the page's order."""
    cells: list[tuple[str, str]] = []
    pos = 0
    for m in _PYTHON.finditer(markdown):
        prose = _markdown(markdown[pos : m.start()], prefix=link_prefix)
        if prose.strip():
            cells.append(("markdown", prose))
        if ">>>" not in m.group(1):
            raise ValueError(
                f"{TUTORIAL.name}: a ```python block without >>> prompts at offset {m.start()}; "
                "the notebook maker reads doctest blocks only"
            )
        cells += [("code", src) for src in _examples(m.group(1))]
        pos = m.end()
    rest = _markdown(markdown[pos:], prefix=link_prefix)
    if rest.strip():
        cells.append(("markdown", rest))
    return cells


def _cell(number: int, kind: str, source: str) -> dict[str, Any]:
    lines = source.splitlines(keepends=True)
    cell_id = f"cell-{number:03d}"  # nbformat 4.5 ids; by position, so that remaking is stable
    if kind == "markdown":
        return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": lines}
    return {
        "cell_type": "code",
        "id": cell_id,
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": lines,
    }


def notebook_json(cells: Sequence[tuple[str, str]]) -> str:
    """An nbformat 4 notebook of ``cells``, without outputs, as the file's text."""
    nb = {
        "cells": [_cell(i, kind, src) for i, (kind, src) in enumerate(cells)],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# The notebook's own last section: section 7's capacity table as a figure, saved where the
# test (or the student) points SPECSIM_NOTEBOOK_OUT, and the answer as one printed line.
_FIGURE = (
    (
        "markdown",
        "## A figure of section 7\n\nTokens per second per user against the batch, with and "
        "without speculation; the dashed line is the promise of 50.",
    ),
    (
        "code",
        "import os\nfrom pathlib import Path\n"
        "import matplotlib.pyplot as plt\n\n"
        'figures = Path(os.environ.get("SPECSIM_NOTEBOOK_OUT", "figures"))\n'
        "figures.mkdir(parents=True, exist_ok=True)\n"
        "fig, ax = plt.subplots(figsize=(6, 3.6))\n"
        'ax.plot(batches, plain, "o-", label="plain decoding")\n'
        'ax.plot(batches, spec, "s--", label="speculative, alpha 0.7, gamma 4")\n'
        'ax.axhline(50, color="gray", ls="--")\n'
        'ax.set(xscale="log", xlabel="batch [users]", ylabel="per-user speed [tokens/s]",\n'
        '       title="Llama 2 7B on an A100 80GB, context 1,024")\n'
        "ax.legend()\n"
        'fig.savefig(figures / "tutorial-capacity.png", dpi=120, bbox_inches="tight")',
    ),
    (
        "code",
        "# The answer: the most users at 50 tokens/s, plain and speculative.\n"
        "print(int(batches[plain >= 50].max()), int(batches[spec >= 50].max()))",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsim.report.notebook")
    parser.add_argument("--check", action="store_true", help="exit 1 if the notebook is stale")
    args = parser.parse_args(argv)
    header = (
        "# The tutorial, as a notebook\n\nMade from `docs/tutorial.md` by "
        "`python -m specsim.report.notebook`; edit the page, not this notebook. Run the "
        "cells in order (Kernel > Restart & Run All)."
    )
    if not TUTORIAL.is_file():
        raise SystemExit(f"{TUTORIAL} not found: the notebook is made in a checkout of specsim")
    cells = [("markdown", header), *tutorial_cells(TUTORIAL.read_text("utf-8")), *_FIGURE]
    text = notebook_json(cells)
    if args.check:
        if not NOTEBOOK.is_file() or NOTEBOOK.read_text(encoding="utf-8") != text:
            raise SystemExit(f"{NOTEBOOK} is stale: run python -m specsim.report.notebook")
        return 0
    NOTEBOOK.parent.mkdir(parents=True, exist_ok=True)
    NOTEBOOK.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
