"""Acceptance measured on the tiny models trained on real text, read without torch.

``specsim measure --preset real --stage alpha`` writes ``models/measured/real/``
(``docs/real-acceptance.md``): for each draft, temperature, test corpus and kind
of text, the mean of alpha = sum_x min(p(x), q(x)) over positions with its 95%
batch-means interval (``ci_low``, ``ci_high``) and the autocorrelation of alpha
along the sequence; ``alpha-positions.csv.gz`` holds alpha per position. This
module reads and checks those two tables: it needs pandas only, so every layer
(the studies, the report) can use the measurements without the ``measure`` extra.

>>> s = read_alpha_summary()
>>> round(float(alpha_cell(s, draft="draft-en", corpus="en", temperature=0.0)["alpha_mean"]), 3)
0.415
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "DRAFTS",
    "CORPORA",
    "TEXTS",
    "SUMMARY_COLUMNS",
    "POSITION_COLUMNS",
    "measured_dir",
    "read_alpha_summary",
    "read_alpha_positions",
    "alpha_cell",
    "TABLE3_COLUMNS",
    "read_table3",
]

DRAFTS: tuple[str, ...] = ("draft-all", "draft-en", "draft-code", "draft-distil")
"""The drafts of ``models/tiny/``: trained on every corpus, on English, on code, distilled."""
CORPORA: tuple[str, ...] = ("en", "de", "es", "it", "code", "licences")
"""The test corpora; ``licences`` is formal English that no model trained on."""
TEXTS: tuple[str, ...] = ("test", "generated")
"""``test``: held-out test text; ``generated``: text the target generated at that temperature."""
SUMMARY_COLUMNS: tuple[str, ...] = (
    "draft",
    "target",
    "temperature",
    "corpus",
    "text",
    "sequences",
    "positions",
    "alpha_mean",
    "alpha_sd",
    "ci_low",
    "ci_high",
    "acf_1",
)
"""The columns of ``alpha-summary.csv`` this module needs (the file has more)."""
POSITION_COLUMNS: tuple[str, ...] = (
    "draft",
    "temperature",
    "corpus",
    "text",
    "seq",
    "position",
    "alpha",
)
"""The columns of ``alpha-positions.csv.gz`` this module needs."""
TABLE3_COLUMNS: tuple[str, ...] = ("target", "draft", "alpha_temp0", "alpha_temp1")
"""The columns of Leviathan et al. 2023's Table 3 as ``leviathan2023_table3.csv`` holds it."""


def measured_dir() -> Path:
    """``models/measured/real`` of this checkout (FileNotFoundError naming it when absent)."""
    path = Path(__file__).resolve().parents[2] / "models" / "measured" / "real"
    if not path.is_dir():
        raise FileNotFoundError(
            f"measured alphas: no folder {str(path)!r} (a checkout of specsim "
            "has it; pass the path of alpha-summary.csv instead)"
        )
    return path


def _check(frame: pd.DataFrame, columns: tuple[str, ...], source: str) -> pd.DataFrame:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; it has {list(frame.columns)}")
    if frame.empty:
        raise ValueError(f"{source}: no rows")
    for col, known in (("draft", DRAFTS), ("corpus", CORPORA), ("text", TEXTS)):
        bad = sorted(set(frame[col].astype(str)) - set(known))
        if bad:
            raise ValueError(
                f"{source}: column {col!r} has unknown value(s) {bad}; "
                f"expected one of {list(known)}"
            )
    temps = pd.to_numeric(frame["temperature"], errors="coerce").to_numpy(dtype=float)
    bad_t = frame["temperature"][~(np.isfinite(temps) & (temps >= 0))]
    if len(bad_t):
        raise ValueError(
            f"{source}: column 'temperature' must hold numbers >= 0, got "
            f"{bad_t.iloc[0]} (row {int(bad_t.index[0]) + 2})"
        )
    return frame.assign(temperature=temps)


def _probabilities(frame: pd.DataFrame, columns: tuple[str, ...], source: str) -> None:
    for col in columns:
        x = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        bad = ~((x >= 0.0) & (x <= 1.0))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{source}: column {col!r} must lie in [0, 1], got "
                f"{frame[col].iloc[i]} (row {i + 2})"
            )


def read_alpha_summary(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """``alpha-summary.csv`` (default: :func:`measured_dir`'s), checked: one row per draft,
    temperature, corpus and text.

    Raises ValueError naming the file and what is wrong: a missing column, an
    unknown draft, corpus or text, a negative temperature, an alpha or interval
    bound outside [0, 1], an interval that does not hold its mean, or a repeated cell.
    """
    file = Path(path) if path is not None else measured_dir() / "alpha-summary.csv"
    source = str(file)
    frame = _check(pd.read_csv(file), SUMMARY_COLUMNS, source)
    _probabilities(frame, ("alpha_mean", "ci_low", "ci_high"), source)
    lo, mid, hi = (frame[c].to_numpy(dtype=float) for c in ("ci_low", "alpha_mean", "ci_high"))
    bad = ~((lo <= mid + 1e-12) & (mid <= hi + 1e-12))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{source}: row {i + 2}: the interval [{lo[i]}, {hi[i]}] does not hold "
            f"the mean {mid[i]}"
        )
    keys = ["draft", "temperature", "corpus", "text"]
    dup = frame.duplicated(keys)
    if dup.any():
        raise ValueError(f"{source}: cell {frame.loc[dup, keys].iloc[0].tolist()} appears twice")
    return frame.reset_index(drop=True)


def read_alpha_positions(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """``alpha-positions.csv.gz`` (default: :func:`measured_dir`'s): alpha per drafted
    position, checked like :func:`read_alpha_summary` (columns, names, alpha in [0, 1])."""
    file = Path(path) if path is not None else measured_dir() / "alpha-positions.csv.gz"
    source = str(file)
    frame = _check(pd.read_csv(file), POSITION_COLUMNS, source)
    _probabilities(frame, ("alpha",), source)
    return frame


def alpha_cell(
    summary: pd.DataFrame, *, draft: str, corpus: str, temperature: float, text: str = "test"
) -> pd.Series:
    """The row of ``summary`` (from :func:`read_alpha_summary`) for one cell.

    ValueError naming the argument when ``draft``, ``corpus``, ``text`` or
    ``temperature`` is not among the measured ones.
    """
    for key, value, known in (
        ("draft", draft, DRAFTS),
        ("corpus", corpus, CORPORA),
        ("text", text, TEXTS),
    ):
        if value not in known or value not in set(summary[key]):
            raise ValueError(
                f"alpha_cell: unknown {key} {value!r}; measured: {sorted(set(summary[key]))}"
            )
    temps = np.unique(summary["temperature"].to_numpy(dtype=float))
    near = np.isclose(temps, float(temperature), atol=1e-9)
    if not near.any():
        raise ValueError(
            f"alpha_cell: temperature {temperature!r} was not measured; measured: {temps.tolist()}"
        )
    t = float(temps[near][0])
    rows = summary[
        (summary["draft"] == draft)
        & (summary["corpus"] == corpus)
        & (summary["text"] == text)
        & np.isclose(summary["temperature"], t)
    ]
    if len(rows) != 1:
        raise ValueError(
            f"alpha_cell: {len(rows)} rows for draft {draft!r}, corpus {corpus!r}, "
            f"temperature {t}, text {text!r}; expected one"
        )
    return rows.iloc[0]


def read_table3(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Leviathan et al. 2023, Table 3 (alpha of each target/draft pair at T = 0 and T = 1),
    one row per pair with ``part = "paper"``: ``target``, ``draft``, ``alpha_temp0`` and
    ``alpha_temp1``. ValueError naming the file when a column is missing."""
    frame = pd.read_csv(path)
    missing = [c for c in TABLE3_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{str(path)}: missing column(s) {missing}; it has {list(frame.columns)}")
    rows = [
        {
            "part": "paper",
            "target": p.target,
            "draft": p.draft,
            "alpha_temp0": float(p.alpha_temp0),
            "alpha_temp1": float(p.alpha_temp1),
        }
        for p in frame.itertuples(index=False)
    ]
    return pd.DataFrame(rows)
