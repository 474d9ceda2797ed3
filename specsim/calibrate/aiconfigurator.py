"""``python -m specsim.calibrate.aiconfigurator [--extract] [--write]``: device parts of the
TensorRT-LLM and SGLang stacks fitted on aiconfigurator's per-operation tables.

For each committed system and backend (:data:`PAIRS`) it fits the GEMM and all-reduce terms
(:mod:`specsim.calibrate.aic_fit`) on the committed extract
(``models/measured/aiconfigurator/``, :mod:`specsim.calibrate.aic_tables`), compares them out
of sample with the numbers the stack uses today, and prints both. ``--extract`` first
re-extracts the CSVs from the installed ``aiconfigurator_core`` package (or
``--systems-path``; needs pyarrow). ``--write`` writes one device part per system and
backend, ``models/stacks/devices/<card>-<stack>.toml`` (named for that stack only,
:func:`specsim.cards.stack_files.device_part_for`), holding the fitted GEMM numbers if they
beat today's on the held-out shapes and the fitted all-reduce numbers if they beat the
hardware card's on the held-out message sizes; what does not beat what it would replace is
taken from the device part the stack used before, unchanged. A pair where neither wins
writes no part. ``tests/calibrate/test_aiconfigurator.py`` checks that the committed parts
are the refit's.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specsim.calibrate.aic_fit import (
    AllreduceFit,
    allreduce_holdout,
    fit_allreduce,
    fit_gemm,
    gemm_holdout,
)
from specsim.calibrate.aic_moe import MoeChoice, choose_moe, extract_moe
from specsim.calibrate.aic_tables import BACKENDS, SYSTEMS, extract, load_extract, systems_root
from specsim.calibrate.kernels import KernelFit
from specsim.cards import load_hardware
from specsim.cards.stack import DevicePart
from specsim.cards.stack_files import device_part_for, stacks_dir

__all__ = ["COMMAND", "PACKAGE_VERSION", "PAIRS", "PartFit", "fit_part", "holdout_table"]
__all__ += ["part_values", "part_text", "write_parts", "report", "main"]

COMMAND = "python -m specsim.calibrate.aiconfigurator --write"
PACKAGE_VERSION = "aiconfigurator-core 0.12.0"
PAIRS: tuple[tuple[str, str], ...] = tuple(
    (s, b) for s in ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm") for b in BACKENDS
)
"""The systems and backends whose extract is committed and whose parts are fitted."""


@dataclass(frozen=True, kw_only=True)
class PartFit:
    """One system and backend: its fits, their held-out rows (``rel_error`` columns
    ``fitted`` and ``current``), and the rows each was fitted on."""

    system: str
    backend: str
    gemm: KernelFit
    allreduce: AllreduceFit
    gemm_holdout: pd.DataFrame
    allreduce_holdout: pd.DataFrame
    gemm_rows: pd.DataFrame
    allreduce_rows: pd.DataFrame
    moe: tuple[MoeChoice, ...] = ()
    moe_rows: pd.DataFrame | None = None

    @property
    def hardware(self) -> str:
        return SYSTEMS[self.system]

    @property
    def stack(self) -> str:
        return BACKENDS[self.backend]

    def held_out(self, op: str) -> tuple[float, float]:
        """Median |relative error| on the held-out rows of ``op``: (fitted, current)."""
        ho = self.gemm_holdout if op == "gemm" else self.allreduce_holdout
        return float(ho["fitted"].abs().median()), float(ho["current"].abs().median())

    def wins(self, op: str) -> bool:
        """True when the fit of ``op`` beats today's numbers on the held-out rows."""
        fitted, current = self.held_out(op)
        return fitted < current

    @property
    def moe_committed(self) -> tuple[MoeChoice, ...]:
        """The MoE fits the part takes (:attr:`MoeChoice.committed`)."""
        return tuple(c for c in self.moe if c.committed)


def fit_part(system: str, backend: str, *, folder: str | os.PathLike[str] | None = None) -> PartFit:
    """The fits and held-out comparisons of ``system`` and ``backend`` on the extract in
    ``folder`` (default the committed one)."""
    g = load_extract(system, backend, "gemm", folder=folder)
    a = load_extract(system, backend, "allreduce", folder=folder)
    hw = load_hardware(SYSTEMS[system])
    try:
        m: pd.DataFrame | None = load_extract(system, backend, "moe", folder=folder)
    except ValueError:  # a system and backend without an MoE table (aic_moe.moe_table)
        m = None
    before = device_part_for(hw).memory_efficiency
    return PartFit(
        system=system,
        backend=backend,
        gemm=fit_gemm(g, hardware=hw),
        allreduce=fit_allreduce(a),
        gemm_holdout=gemm_holdout(g, hardware=hw),
        allreduce_holdout=allreduce_holdout(a, hardware=hw),
        gemm_rows=g,
        allreduce_rows=a,
        moe=tuple(choose_moe(m, before)) if m is not None else (),
        moe_rows=m,
    )


def holdout_table(fits: list[PartFit]) -> pd.DataFrame:
    """One row per system, backend and operation: held-out median |error| of the fit and of
    today's numbers, and whether the fit is committed."""
    out = []
    for f in fits:
        for op, rows in (("gemm", f.gemm_rows), ("allreduce", f.allreduce_rows)):
            fitted, current = f.held_out(op)
            out.append(
                {
                    "system": f.system,
                    "backend": f.backend,
                    "hardware": f.hardware,
                    "stack": f.stack,
                    "operation": op,
                    "rows": len(rows),
                    "fitted_median_abs_error": fitted,
                    "current_median_abs_error": current,
                    "committed": f.wins(op),
                }
            )
        for c in f.moe:
            out.append(
                {
                    "system": f.system,
                    "backend": f.backend,
                    "hardware": f.hardware,
                    "stack": f.stack,
                    "operation": f"moe {c.fit.weights}",
                    "rows": c.fit.rows,
                    "fitted_median_abs_error": c.fitted_median,
                    "current_median_abs_error": c.current_median,
                    "committed": c.committed,
                }
            )
    return pd.DataFrame(out)


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def part_values(fit: PartFit) -> dict[str, float]:
    """The numbers of the device part ``fit`` writes (``table.format`` keys for the format
    tables): the stack's previous part's, with the fitted GEMM numbers and all-reduce numbers
    in place of them where they win."""
    before = device_part_for(load_hardware(fit.hardware))
    values: dict[str, float] = {
        "compute_efficiency": before.compute_efficiency,
        "memory_efficiency": before.memory_efficiency,
    }
    for table in ("format_memory_factor", "format_dequant_ops"):
        values |= {f"{table}.{k}": v for k, v in (getattr(before, table) or {}).items()}
    if fit.wins("gemm"):
        p = fit.gemm.parameters.loc[~fit.gemm.parameters["fixed"]]
        values |= {
            str(n): _sig(v)
            for n, v in zip(p["name"], p["value"], strict=True)
            if not str(n).startswith("fixed_s.")
        }
    if fit.wins("allreduce"):
        values["allreduce_latency_s"] = _sig(fit.allreduce.latency_s)
        values["allreduce_bandwidth"] = _sig(fit.allreduce.bandwidth)
    for c in fit.moe_committed:
        values[f"moe_fixed_s.{c.fit.weights}"] = _sig(c.fit.floor_s)
        values[f"moe_memory_efficiency.{c.fit.weights}"] = _sig(c.fit.efficiency)
    return values


def _source(fit: PartFit, op: str) -> str:
    rows = fit.gemm_rows if op == "gemm" else fit.allreduce_rows
    return (
        f"models/measured/aiconfigurator/{fit.system}-{fit.backend}-{op}.csv ({len(rows)} rows "
        f"of {PACKAGE_VERSION}, {rows['source'].iloc[0]}, {fit.backend} "
        f"{rows['version'].iloc[0]}; {COMMAND})"
    )


def _moe_source(fit: PartFit, rows: pd.DataFrame) -> str:
    return (
        f"models/measured/aiconfigurator/{fit.system}-{fit.backend}-moe.csv ({len(rows)} rows "
        f"of {PACKAGE_VERSION}, {rows['source'].iloc[0]}, {fit.backend} "
        f"{rows['version'].iloc[0]}; specsim.calibrate.aic_moe; {COMMAND})"
    )


def _comment(fit: PartFit, name: str) -> str:
    if name.startswith("moe_"):
        table, fmt = name.split(".", 1)
        (c,) = [c for c in fit.moe_committed if c.fit.weights == fmt]
        v, se = (
            (c.fit.floor_s, c.fit.floor_se)
            if table == "moe_fixed_s"
            else (c.fit.efficiency, c.fit.efficiency_se)
        )
        return f"fitted: {v:.4g} +- {se:.2g}, {c.fit.kernel}, {c.fit.rows} rows"
    if name.startswith("allreduce_"):
        v, se = (
            (fit.allreduce.latency_s, fit.allreduce.latency_s_se)
            if name == "allreduce_latency_s"
            else (fit.allreduce.bandwidth, fit.allreduce.bandwidth_se)
        )
        return f"fitted: {v:.4g} +- {se:.2g}"
    if name in set(fit.gemm.parameters["name"]) and fit.wins("gemm"):
        return f"fitted: {fit.gemm.value(name):.4g} +- {fit.gemm.std_error(name):.2g}"
    return f"as devices/{device_part_for(load_hardware(fit.hardware)).slug}.toml"


def _header(fit: PartFit, before: DevicePart) -> list[str]:
    lines = [
        f"# The {fit.hardware} device part of stack {fit.stack!r}, fitted by "
        f"specsim.calibrate.aiconfigurator on {PACKAGE_VERSION}'s {fit.backend} tables "
        "(models/measured/aiconfigurator/README.md).",
        f"# Written by `{COMMAND}`: do not edit by hand.",
    ]
    for op in ("gemm", "allreduce"):
        fitted, current = fit.held_out(op)
        verdict = "committed" if fit.wins(op) else f"NOT committed: as devices/{before.slug}.toml"
        lines.append(
            f"# {op}: held-out median |error| {fitted:.1%} fitted, {current:.1%} with the "
            f"previous numbers: {verdict}."
        )
    floors = fit.gemm.parameters.loc[fit.gemm.parameters["name"].str.startswith("fixed_s.")]
    text = ", ".join(
        f"{n.split('.', 1)[1]} {v * 1e6:.2f} +- {s * 1e6:.2f} us"
        for n, v, s in zip(floors["name"], floors["value"], floors["std_error"], strict=True)
    )
    lines.append(
        f"# The GEMM floor (fixed cost per call, fitted beside the fractions): {text}; not a "
        "term of the cost model (the stack's layer_overhead_s holds what a pass's floors cost)."
    )
    for c in fit.moe:
        verdict = "committed" if c.committed else "NOT committed"
        lines.append(
            f"# moe {c.fit.weights} ({c.fit.kernel}): held-out median |error| "
            f"{c.fitted_median:.1%} fitted, {c.current_median:.1%} with no floor and the "
            f"memory efficiency: {verdict}."
        )
    return lines


def part_text(fit: PartFit) -> str:
    """The TOML text of the device part ``fit`` writes (:func:`part_values`)."""
    before = device_part_for(load_hardware(fit.hardware))
    v = part_values(fit)
    slug = f"{fit.hardware}-{fit.stack}"
    out = _header(fit, before) + [
        f'slug = "{slug}"',
        f'name = "{fit.hardware} under {fit.stack} (aiconfigurator {fit.backend} tables)"',
        'kind = "gpu"',
        'vendor = "nvidia"',
        f'cards = ["{fit.hardware}"]',
        f'stacks = ["{fit.stack}"]',
    ]
    for name in (
        "compute_efficiency",
        "memory_efficiency",
        "allreduce_latency_s",
        "allreduce_bandwidth",
    ):
        if name in v:
            out.append(f"{name} = {v[name]!r}  # {_comment(fit, name)}")
    for table in (
        "format_memory_factor",
        "format_dequant_ops",
        "moe_fixed_s",
        "moe_memory_efficiency",
    ):
        keys = sorted(k for k in v if k.startswith(table + "."))
        if keys:
            out += ["", f"[{table}]"]
            out += [f"{k.split('.', 1)[1]} = {v[k]!r}  # {_comment(fit, k)}" for k in keys]
    out += ["", "[sources]"]
    kept = f"models/stacks/devices/{before.slug}.toml (the fit did not beat it out of sample)"
    out.append(f'gemm = "{_source(fit, "gemm") if fit.wins("gemm") else kept}"')
    if fit.wins("allreduce"):
        out.append(f'allreduce = "{_source(fit, "allreduce")}"')
    if fit.moe_committed and fit.moe_rows is not None:
        out.append(f'moe = "{_moe_source(fit, fit.moe_rows)}"')
    out.append(f'previous = "models/stacks/devices/{before.slug}.toml"')
    return "\n".join(out) + "\n"


def write_parts(fits: list[PartFit], folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write the part of every fit that wins for some operation; the paths written."""
    where = Path(folder) if folder is not None else stacks_dir() / "devices"
    paths = []
    for fit in fits:
        path = where / f"{fit.hardware}-{fit.stack}.toml"
        if fit.wins("gemm") or fit.wins("allreduce") or fit.moe_committed:
            path.write_text(part_text(fit))
            paths.append(path)
        elif path.exists():
            path.unlink()
    return paths


def report(fits: list[PartFit]) -> str:
    """The fitted numbers with their standard errors, and the held-out table, as text."""
    out = []
    for f in fits:
        p = f.gemm.parameters
        out.append(
            f"{f.system} {f.backend} ({f.hardware}, {f.stack}): GEMM {len(f.gemm_rows)} rows"
        )
        out += [
            f"  {n:32s} {v:12.5g} +- {s:.3g}"
            for n, v, s in zip(p["name"], p["value"], p["std_error"], strict=True)
        ]
        a = f.allreduce
        out.append(
            f"  all-reduce latency {a.latency_s * 1e6:.2f} +- {a.latency_s_se * 1e6:.2f} us, "
            f"bandwidth {a.bandwidth / 1e9:.0f} +- {a.bandwidth_se / 1e9:.0f} GB/s"
        )
        out += [
            f"  moe {c.fit.weights} ({c.fit.kernel}): floor {c.fit.floor_s * 1e6:.1f} +- "
            f"{c.fit.floor_se * 1e6:.1f} us a layer, bandwidth fraction {c.fit.efficiency:.3f} "
            f"+- {c.fit.efficiency_se:.3f}, {c.fit.rows} rows"
            for c in f.moe
        ]
    table = holdout_table(fits)
    out.append(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m specsim.calibrate.aiconfigurator", description=__doc__
    )
    ap.add_argument("--system", action="append", help="an aiconfigurator system (default: all)")
    ap.add_argument("--backend", action="append", choices=sorted(BACKENDS))
    ap.add_argument("--extract", action="store_true", help="re-extract the CSVs first")
    ap.add_argument("--systems-path", help="a copy of aiconfigurator_core/systems")
    ap.add_argument("--write", action="store_true", help="write the device parts that win")
    args = ap.parse_args(argv)
    pairs = [
        (s, b)
        for s, b in (PAIRS if not args.system else [(s, b) for s in args.system for b in BACKENDS])
        if not args.backend or b in args.backend
    ]
    if args.extract:
        for s, b in pairs:
            written = extract(s, b, systems_path=args.systems_path)
            try:
                root = systems_root(args.systems_path)
                extract_moe(s, b, root=root, out=written["gemm"].parent)
            except ValueError as e:  # no MoE table of the kept shapes: said, not fatal
                sys.stdout.write(f"{e}\n")
    fits = [fit_part(s, b) for s, b in pairs]
    sys.stdout.write(report(fits))
    if args.write:
        sys.stdout.write("".join(f"wrote {path}\n" for path in write_parts(fits)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
