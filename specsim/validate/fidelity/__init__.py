"""Fidelity: every committed measurement and published anchor, predicted against measured.

:func:`fidelity_table` is one tidy table (columns :data:`COLUMNS`), one row per
anchor and quantity, each prediction made without the row's own measurement
(``fitted_on`` says what it used):

- ``models/measured/cpu``: the speculative runs on this CPU, per-token latency and
  speedup over plain decoding, predicted by the calibrated card
  ``models/calibrated/cpu-epyc-2vcpu.toml`` (fitted on plain passes only) and each run's
  accepted counts (:func:`specsim.validate.forms.predict_runs`, ``replay``);
- the same runs predicted from the timed passes of ``passes.csv`` themselves (no cost
  model): what a perfect model of pass time would give on these data;
- ``models/measured/real``: the tiny real-text models' speculative runs per (draft,
  temperature, gamma), predicted from other cells' pass times and the cell's acceptance;
- ``models/measured/cpu-rows``: speculative runs interleaved with their plain twins,
  predicted by the runtime profile ``models/runtime/cpu-xeon-eager-rows-fp32.toml``,
  fitted on that folder's plain passes only (:mod:`specsim.validate.fidelity.profile`);
- the same runs predicted by ``models/runtime/cpu-xeon-eager-rows.toml``, the profile
  fitted jointly on the float32, dynamic int8 and weight-only int4 passes;
- ``models/measured/llama.cpp``: llama.cpp's own speculative runs on this CPU, per-token
  latency per one-thread cell, predicted by a step line in ``k`` through the other draft
  lengths and by the models' llama-bench passes (:mod:`specsim.validate.fidelity.llamacpp`);
- Leviathan et al. 2023, Table 2: the full model fitted on one task, scored on the other;
- vLLM v0.19.1 on one H100 (vLLM blog, 2026-04-22): the FP8 KV-cache ITL line and the
  median ITL at concurrency 8, predicted by ``models/runtime/vllm-h100.toml``, fitted on
  the same post's BF16 line only (:func:`specsim.validate.fidelity.anchors.vllm_checks`),
  and the same rows predicted by the ``vllm-v1`` stack on the H100 SXM;
- ``models/measured/published``: published plain-decoding figures no fit used (the gpt-fast
  README's quantized 70B rows, llama.cpp's microbatch sweep at 32k context on an RTX 3090
  and 4090, Sequoia's baseline on an A100), each priced by the stack closest to its engine
  on its card (:mod:`specsim.validate.fidelity.published`);
- ``models/measured/plain-decode``: published plain decode steps of the serving stacks, each
  predicted by its stack with the fixed host costs refitted without the row's source (the
  leave-one-source-out check of a committed fit), or by the stack as shipped where the fit
  was not committed (:mod:`specsim.validate.fidelity.fixed`).

The figures the hardware cards, the stack profiles and their device parts were tuned to are
in sample, so they are not rows here: :func:`fitted_anchors` lists them, predicted by the
cards and stacks as they are now (the kernel sweeps' fit joins it as a family of its own).
Leviathan et al.'s Table 3 holds acceptance rates, which the model takes as input and does
not predict, so it has no row.

:func:`fidelity_summary` gives, per family and quantity, the median and worst |error|,
the misses and the accuracy goal (:data:`GOALS`). ``python -m specsim.validate.fidelity`` prints
both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specsim.cards import load_hardware, load_runtime
from specsim.cards.files import packaged_root
from specsim.traces.io import read_trace

from .anchors import VLLM_STACK, fitted_anchors, vllm_checks
from .fixed import fixed_cost_rows
from .leviathan import table2_reference, table2_rows
from .llamacpp import MEASURED as LLAMACPP_TRACES
from .llamacpp import llamacpp_rows
from .profile import profile_rows
from .published import published_rows
from .rows import COLUMNS, LEVEL, cpu_pass_rows, cpu_rows, cpu_runs, real_rows

__all__ = [
    "COLUMNS",
    "LEVEL",
    "GOALS",
    "ROOT",
    "CPU_TRACES",
    "CPU_CARD",
    "REAL_TRACES",
    "ROWS_TRACES",
    "ROWS_CARD",
    "ROWS_PROFILE",
    "ROWS_JOINT_PROFILE",
    "LLAMACPP_TRACES",
    "measured_frames",
    "fidelity_table",
    "fidelity_summary",
    "fitted_anchors",
]

ROOT = Path(__file__).resolve().parents[3]
"""The checkout (the committed measurements live under ``models/``)."""
CPU_TRACES = "models/measured/cpu"
CPU_CARD = "models/calibrated/cpu-epyc-2vcpu.toml"
REAL_TRACES = "models/measured/real"
ROWS_TRACES = "models/measured/cpu-rows"
ROWS_CARD = "models/calibrated/cpu-xeon-2vcpu.toml"
ROWS_PROFILE = "models/runtime/cpu-xeon-eager-rows-fp32.toml"
ROWS_JOINT_PROFILE = "models/runtime/cpu-xeon-eager-rows.toml"
GOALS: dict[str, tuple[float, float | None]] = {
    "per-token latency": (0.10, 0.25),
    "speedup over plain": (0.10, None),
}
"""The accuracy goals per quantity: (median |error|, worst |error| or None), per family."""


def measured_frames(folder: str | Path, kinds: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """The traces ``kinds`` of ``folder`` (``read_trace`` each ``<kind>.csv``), by kind."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"fidelity: no folder {str(folder)!r} (a checkout has it)")
    return {k: read_trace(folder / f"{k}.csv", kind=k).data for k in kinds}


def fidelity_table(
    rng: np.random.Generator | None = None,
    *,
    root: str | Path | None = None,
    seeds: int = 8,
) -> pd.DataFrame:
    """The fidelity table (see the module docstring); ``rng`` drives
    :func:`specsim.validate.forms.predict_runs`' streams (default: seed 0), ``seeds`` the simulated
    streams per CPU run (the table uses its ``replay``). The Table 2 rows are
    :func:`specsim.validate.fidelity.leviathan.table2_reference` (its own fixed seed), the
    numbers the
    ``table2`` study shows. Every family's data must be present."""
    rng_cpu = np.random.default_rng(0) if rng is None else rng
    base = ROOT if root is None else Path(root)

    def at(rel: str) -> Path:
        # A checkout (or ``root``) holds ``models/``; an installed wheel ships it as
        # ``specsim/_models`` (:func:`specsim.cards.packaged_root`).
        shipped = packaged_root()
        if root is None and not (base / "models").is_dir() and shipped is not None:
            return shipped / rel.removeprefix("models/")
        return base / rel

    cpu = measured_frames(at(CPU_TRACES), ("specdec", "autoregressive", "positions", "passes"))
    card = load_hardware(at(CPU_CARD))
    rows = cpu_rows(
        cpu_runs(cpu, card, rng_cpu, seeds=seeds), cpu, source=CPU_TRACES, card_source=CPU_CARD
    )
    rows += cpu_pass_rows(cpu, source=CPU_TRACES)
    rows += real_rows(
        measured_frames(at(REAL_TRACES), ("specdec", "autoregressive")), source=REAL_TRACES
    )
    interleaved = measured_frames(at(ROWS_TRACES), ("specdec", "autoregressive", "passes"))
    rows_card = load_hardware(at(ROWS_CARD))
    rows += profile_rows(
        interleaved,
        rows_card,
        load_runtime(at(ROWS_PROFILE)),
        source=ROWS_TRACES,
        profile_source=ROWS_PROFILE,
    )
    rows += profile_rows(
        interleaved,
        rows_card,
        load_runtime(at(ROWS_JOINT_PROFILE)),
        source=ROWS_TRACES,
        profile_source=ROWS_JOINT_PROFILE,
        label="runtime profile fitted on fp32, int8 and int4 passes",
    )
    rows += llamacpp_rows(folder=at(LLAMACPP_TRACES))
    rows += table2_rows(table2_reference())
    rows += vllm_checks()
    rows += vllm_checks(VLLM_STACK)
    rows += published_rows(root=root)
    rows += fixed_cost_rows(root=root)
    # (the kernel sweeps' held-out rows, if any, join here as a family of their own)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def fidelity_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per family and quantity of :func:`fidelity_table`: rows, median and worst |error|,
    rows within the measured interval, and whether the accuracy goal (:data:`GOALS`) is met."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"fidelity_summary: the table lacks column(s) {missing}")
    out = []
    for (family, quantity), g in table.groupby(["family", "quantity"], sort=False):
        err = g["error"].abs()
        med, worst = float(err.median()), float(err.max())
        goal_med, goal_worst = GOALS.get(str(quantity), (0.10, None))
        met = med <= goal_med and (goal_worst is None or worst <= goal_worst)
        goal = f"median <= {goal_med:.0%}" + (
            "" if goal_worst is None else f", worst <= {goal_worst:.0%}"
        )
        out.append(
            {
                "family": family,
                "quantity": quantity,
                "rows": len(g),
                "median |error|": med,
                "worst |error|": worst,
                "within interval": int((g["verdict"] == "within interval").sum()),
                "misses": int((g["verdict"] == "miss").sum()),
                "goal": goal,
                "goal met": met,
            }
        )
    return pd.DataFrame(out)
