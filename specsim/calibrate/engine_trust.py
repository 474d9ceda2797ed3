"""Whether a stack fit to engine outputs can be trusted, and the unit slip that most likely
spoiled one that cannot (``specsim calibrate --engine-output``).

A stack profile fitted to plain decode runs (:func:`specsim.calibrate.stack_fit.fit_stack`)
predicts every run it was fitted to. When its worst run is off by more than
:data:`RESIDUAL_LIMIT` (the limit of :data:`specsim.calibrate.cards.TRUST_LIMITS` for a
held-out error: the prediction is off by more than the measurement itself), the profile
says nothing about that engine, and the usual cause is a unit slip in one file: seconds
written in ``median_tpot_ms``, milliseconds in ``median_decode_latency``. The runs of one
file (or of one format) are then rescaled by 1000 and by 1/1000 in turn and refitted; a
rescaling whose fit is within the limit names the file, its field and the likely slip.

Errors raised after reading (a run the cost model refuses: a context past the model's
``max_position``, a batch that does not fit) name the file, the record and the fields the
run was read from (:data:`specsim.calibrate.engine_outputs.RUN_FIELDS`), by pricing each
run alone before the fit (:func:`check_runs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from specsim.calibrate.engine_outputs import RUN_FIELDS, DecodeRun, RunFields
from specsim.calibrate.spec_fit import ForcedRun, iteration_s
from specsim.calibrate.stack_fit import StackFit, roofline_steps
from specsim.cards import HardwareCard, ModelCard
from specsim.cards.stack import StackProfile

__all__ = [
    "RESIDUAL_LIMIT",
    "check_runs",
    "check_forced_runs",
    "worst_error",
    "find_slip",
    "fit_problems",
    "fit_explained",
]

RESIDUAL_LIMIT = 1.0
"""The worst ``|predicted / measured - 1|`` of a trusted fit (100%)."""

_FACTORS = (1e3, 1e-3)
_SLIPS = {
    ("ms", 1e3): "seconds, not milliseconds",
    ("ms", 1e-3): "microseconds, not milliseconds",
    ("s", 1e-3): "milliseconds, not seconds",
}
Refit = Callable[[list[DecodeRun]], StackFit]


def _fields(engine: str) -> RunFields:
    return RUN_FIELDS.get(
        engine, RunFields(batch="its batch", context="its context", step="its step", unit="")
    )


def check_runs(
    runs: Sequence[DecodeRun], *, stack: StackProfile, hardware: HardwareCard, model: ModelCard
) -> None:
    """Each run priced alone by the cost model before the fit; a ValueError naming the run's
    file, record and fields for one it refuses (a context past ``max_position``, ...)."""
    for r in runs:
        try:
            roofline_steps([r], stack=stack, hardware=hardware, model=model)
        except (ValueError, TypeError) as exc:
            f = _fields(r.engine)
            raise ValueError(
                f"{r.source}: batch {r.batch} ({f.batch}) at a context of {r.context:g} tokens "
                f"({f.context}) on {model.slug}: {exc}"
            ) from None


def check_forced_runs(
    runs: Sequence[ForcedRun],
    *,
    stack: StackProfile,
    hardware: HardwareCard,
    model: ModelCard,
    draft: ModelCard,
) -> None:
    """:func:`check_runs` for the forced-acceptance runs (the draft priced too)."""
    for r in runs:
        try:
            iteration_s(r, stack=stack, hardware=hardware, model=model, draft=draft)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{r.source}: batch {r.batch}, {r.k} drafted tokens at a context of "
                f"{r.context:g} tokens, on {model.slug} drafted by {draft.slug}: {exc}"
            ) from None


def worst_error(residuals: pd.DataFrame) -> tuple[float, str]:
    """The largest ``|predicted / measured - 1|`` of a residual table, and its run's source."""
    rel = (residuals["predicted_s"] / residuals["time_s"] - 1.0).abs().to_numpy()
    i = int(np.argmax(rel))
    return float(rel[i]), str(residuals["source"].iloc[i])


def _groups(runs: Sequence[DecodeRun]) -> dict[str, tuple[str, list[int]]]:
    """The runs that may share a slip: each file's, then each format's (over several files);
    label -> (format, indices)."""
    out: dict[str, tuple[str, list[int]]] = {}
    files: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        files.setdefault(r.source.rsplit(" record ", 1)[0], []).append(i)
    for name, idx in files.items():
        out[name] = (runs[idx[0]].engine, idx)
    for engine in dict.fromkeys(r.engine for r in runs):
        idx = [i for i, r in enumerate(runs) if r.engine == engine]
        if len({runs[i].source.rsplit(" record ", 1)[0] for i in idx}) > 1:
            out[f"every {engine} file"] = (engine, idx)
    return out


def _slip_words(engine: str, factor: float) -> str:
    """What the step field of ``engine``'s runs looks like when ``factor`` times its step
    times fit: ``"its median_tpot_ms values look like seconds, not milliseconds"``."""
    f = _fields(engine)
    unit = _SLIPS.get((f.unit, factor))
    if unit is not None:
        return f"its {f.step} values look like {unit}"
    small = (factor > 1) != (f.unit == "tokens/s")  # a rate is the inverse of the step
    times = f"{max(factor, 1 / factor):g}"
    return f"its {f.step} values look {times} times too {'small' if small else 'large'}"


def find_slip(runs: Sequence[DecodeRun], refit: Refit) -> str:
    """The likely unit slip, as a sentence (``""`` when none is found): the rescaling (by 1000
    or 1/1000) of one file's runs, or one format's, whose refit is within
    :data:`RESIDUAL_LIMIT`. Where several are (three runs fit either way), the one with the
    shortest mean step wins: a fit cannot price a run below its roofline (its overheads are
    not negative), so rescaling the right runs down fails, and rescaling the wrong ones up
    leaves every step a thousand times too long."""
    best: tuple[float, str] | None = None
    for label, (engine, idx) in _groups(runs).items():
        if len(idx) == len(runs):
            continue  # every run rescaled: the same fit, with overheads 1000 times over
        for factor in _FACTORS:
            scaled = [
                dataclasses.replace(r, step_s=r.step_s * factor) if i in idx else r
                for i, r in enumerate(runs)
            ]
            try:
                table = refit(scaled).residuals
            except ValueError:
                continue
            worst, _ = worst_error(table)
            mean = float(table["time_s"].mean())
            if worst <= RESIDUAL_LIMIT and (best is None or mean < best[0]):
                words = _slip_words(engine, factor)
                off = f"{worst * 100:.1f}%"
                best = (mean, f"{label}: {words} (rescaled, the fit's worst run is off by {off})")
    return "" if best is None else f"the likely unit slip: {best[1]}"


def fit_problems(fit: StackFit, runs: Sequence[DecodeRun], refit: Refit) -> list[str]:
    """Why ``fit`` (of ``runs``, and any forced runs in its residuals) cannot be trusted: its
    worst run off by more than :data:`RESIDUAL_LIMIT`, with the likely unit slip; empty when
    it can."""
    worst, source = worst_error(fit.residuals)
    if worst <= RESIDUAL_LIMIT:
        return []
    slip = find_slip(runs, refit)
    why = slip or (
        "no one file's times rescaled by 1000 fit either; check each file's units and that "
        "--model and --hardware are the ones the engine ran"
    )
    return [
        f"its worst run, {source}, is predicted {worst * 100:.0f}% off its measured time "
        f"(the limit is {RESIDUAL_LIMIT * 100:.0f}%): {why}"
    ]


def fit_explained(runs: Sequence[DecodeRun], refit: Refit) -> StackFit:
    """``refit(runs)``; its ValueError (an estimate below zero, say) with the likely unit slip
    added when one rescaled file fits."""
    try:
        return refit(list(runs))
    except ValueError as exc:
        slip = find_slip(runs, refit)
        if not slip:
            raise
        raise ValueError(f"{exc}; {slip}") from None
