"""What the fidelity page says about a plan's deployment: the held-out checks that cover it.

:func:`specsim.validate.fidelity.fidelity_table` takes seconds (it re-simulates the CPU runs),
too slow for ``plan``'s interactive goal, so its summary
(:func:`specsim.validate.fidelity.fidelity_summary`) is committed as :data:`SUMMARY_FILE`,
written by ``python -m specsim.plan.fidelity``; a test checks that the committed file matches
a fresh computation, so it cannot go stale.

:data:`COVERAGE` says which deployments each family's predictions stand for: the hardware
card, the stack (the runtime profile's slug, or the card's default profile when the plan has
no ``--runtime``; None: the card's own numbers, no profile), the weight formats and the
proposer kinds (``none``: plain decoding) the family's prediction ran through (a speculative
run's speedup over plain checks the plain prediction too, so draft families cover ``none``).
A family covers a deployment by hardware, stack and weights, whatever its model pair.
Families predicted without the cost model (the timed passes, the tiny real models) check
the simulator, not a card, and cover no deployment. :func:`fidelity_flags` names every
covering family that misses its goal, and says when no family covers the deployment or one
of its proposer kinds at all.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from specsim.cost.deployment import Deployment

__all__ = [
    "COVERAGE",
    "SUMMARY_FILE",
    "Coverage",
    "fidelity_flags",
    "read_summary",
    "write_summary",
]

SUMMARY_FILE = Path(__file__).with_name("fidelity-summary.csv")
"""The committed :func:`specsim.validate.fidelity.fidelity_summary` (see the module docstring)."""
PAGE = "docs/fidelity.md"


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """The deployments a fidelity family's predictions stand for (module docstring)."""

    hardware: str
    runtime: str | None
    weights: tuple[str, ...]
    kinds: tuple[str, ...]


_CPU_GPT = "CPU runs, gpt-like-97m + gpt-like-6m (calibrated card)"
_CPU_LLAMA = "CPU runs, llama-160m + llama-68m (calibrated card)"
_ROWS = "CPU interleaved runs, {pair} (runtime profile{joint})"
_JOINT = " fitted on fp32, int8 and int4 passes"
_EPYC = Coverage(
    hardware="cpu-epyc-2vcpu", runtime=None, weights=("float32",), kinds=("none", "draft")
)
_XEON = Coverage(
    hardware="cpu-xeon-2vcpu",
    runtime="cpu-xeon-eager-rows-fp32",
    weights=("float32",),
    kinds=("none", "draft"),
)
_XEON_JOINT = Coverage(
    hardware="cpu-xeon-2vcpu",
    runtime="cpu-xeon-eager-rows",
    weights=("float32",),
    kinds=("none", "draft"),
)
_TPU = Coverage(
    hardware="tpu-v4", runtime="t5x-tpu-v4", weights=("bfloat16",), kinds=("none", "draft")
)
COVERAGE: dict[str, Coverage] = {
    _CPU_GPT: _EPYC,
    _CPU_LLAMA: _EPYC,
    **{
        _ROWS.format(pair=p, joint=j): c
        for p in ("gpt-like-97m + gpt-like-6m", "llama-160m + llama-68m")
        for j, c in (("", _XEON), (_JOINT, _XEON_JOINT))
    },
    "Leviathan Table 2, EnDe rows (full model, fitted on CNNDM)": _TPU,
    "Leviathan Table 2, CNNDM rows (full model, fitted on EnDe)": _TPU,
    "vLLM v0.19.1 on H100 (vllm-h100 profile)": Coverage(
        hardware="h100-sxm", runtime="vllm-h100", weights=("bfloat16",), kinds=("none",)
    ),
}
"""Which deployments each family covers; every family not named here covers none. The
weights are those of the speculative runs checked (all float32 on the CPUs; the joint CPU
profile was fitted on int8 and int4 passes too, but no int8 or int4 speculative run is
checked)."""
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


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _miss(family: str, row: pd.Series, stack: str, hardware: str) -> str:
    return (
        f"fidelity: {row['quantity']} on {hardware} under {stack} ({family}): median error "
        f"{_pct(float(row['median |error|']))}, worst {_pct(float(row['worst |error|']))} "
        f"(goal {row['goal']}), {PAGE}"
    )


def fidelity_flags(
    deployment: Deployment, kinds: Sequence[str], *, summary: pd.DataFrame | None = None
) -> list[str]:
    """The fidelity flags for ``deployment`` weighing proposer ``kinds`` (``none``: plain
    decoding), from ``summary`` (default: the committed :data:`SUMMARY_FILE`)."""
    table = read_summary() if summary is None else summary
    hw = deployment.hardware.slug
    rt = deployment.runtime
    slug = rt.slug if rt is not None else deployment.hardware.runtime
    stack = slug or "the card's own numbers"
    fmt = deployment.formats().weight_format
    weights = _SAME_BYTES.get(fmt, fmt)
    here = {
        fam: c
        for fam, c in COVERAGE.items()
        if c.hardware == hw and c.runtime == slug and weights in c.weights
    }
    if not here:
        return [f"fidelity: no held-out check covers {stack} on {hw} ({fmt} weights), {PAGE}"]
    out: list[str] = []
    for fam, c in here.items():
        if not set(c.kinds) & set(kinds):
            continue
        for _, row in table[table["family"] == fam].iterrows():
            if not bool(row["goal met"]):
                out.append(_miss(fam, row, stack, hw))
    covered = {k for c in here.values() for k in c.kinds}
    for k in dict.fromkeys(kinds):
        if k not in covered:
            what = "plain decoding" if k == "none" else f"{k} proposers"
            out.append(f"fidelity: no held-out check covers {what} under {stack} on {hw}, {PAGE}")
    return out


if __name__ == "__main__":
    out = write_summary(Path(sys.argv[1]) if len(sys.argv) > 1 else SUMMARY_FILE)
    sys.stdout.write(out.to_string() + "\n")
