"""The weight-format numbers of a runtime profile fitted to timed plain passes.

A profile (:class:`~specsim.cards.RuntimeProfile`) prices a quantized weight format with
three numbers of the stack that runs it, each optional:

- ``format_memory_factor``: a factor on the bandwidth fraction of the weight reads (a
  kernel may stream packed weights at another rate than the compute dtype's);
- ``format_compute_factor``: a factor on the compute fraction, for a format whose GEMMs run
  in another arithmetic (torch's dynamic int8 quantization multiplies int8 activations by
  int8 weights, ``torch.ao.quantization.quantize_dynamic``);
- ``format_dequant_ops``: the dequantization operations per weight and row that the
  stack's kernel costs, replacing the default of :mod:`specsim.cost.quant` (fitted there
  on gpt-fast's A100 decode, a weight-only kernel), e.g. 0 for a kernel that never
  dequantizes the weights, or a slow kernel's much larger cost (this torch build's CPU
  int4 kernel, ``_weight_int4pack_mm_for_cpu``).

:func:`format_parameters` names them for each quantized format of a fit, with a start and
bounds; :func:`with_format_tables` puts fitted values into a profile's tables. What
identifies each (the roofline: time = fixed + max(compute, memory) + dequant): the memory
factor by passes where the weight reads bind (few rows), the compute factor by passes
where compute binds (many rows), the dequantization work by how the time grows with the
rows where the memory term binds (it adds to the roofline term, it does not hide under
it). A format measured only at few rows (int4 here: 1, 2 and 4) identifies the memory
factor and the dequantization work, not the compute factor: the fit reports that one as
not determined (infinite or large standard error,
:func:`specsim.calibrate.profile.profile_trust_problems`). :func:`errors_by_format` is
the in-sample (and predicted) error of each format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from specsim.cards import RuntimeProfile
from specsim.cost.quant import WEIGHT_FORMATS, canonical_format

__all__ = [
    "FORMAT_TABLES",
    "OWN_ARITHMETIC",
    "own_arithmetic",
    "format_parameters",
    "with_format_tables",
    "errors_by_format",
    "kernel_note",
]

FORMAT_TABLES = ("format_memory_factor", "format_compute_factor", "format_dequant_ops")
"""The profile's per-format tables a fit may set (:class:`~specsim.cards.RuntimeProfile`)."""

OWN_ARITHMETIC = ("dynamic",)
"""Values of a ``passes`` trace's ``quant`` column whose GEMMs run in the format's own
arithmetic (``dynamic``: ``quantize_dynamic``'s int8 x int8 products); a ``weight-only``
kernel dequantizes and multiplies in the compute dtype, so its compute factor is 1 by
construction and is not fitted."""

# Bounds: a factor within 1/1000 to 50 of the compute dtype's fraction; dequantization work
# from none to 1e4 operations per weight and row (a CPU int4 kernel measured at about 6
# times a float32 pass per row needs a few hundred at the card's float32 peak).
_BOUNDS = {
    "format_memory_factor": (1e-3, 50.0),
    "format_compute_factor": (1e-3, 50.0),
    "format_dequant_ops": (0.0, 1e4),
}


def own_arithmetic(configs: pd.DataFrame) -> set[str] | None:
    """The weight formats of ``configs`` whose passes ran in the format's own arithmetic
    (``quant`` in :data:`OWN_ARITHMETIC`); None when the configurations do not say (no
    ``quant`` column): then every quantized format gets a compute factor."""
    if "quant" not in configs.columns:
        return None
    return {str(w) for w in configs.loc[configs["quant"].isin(OWN_ARITHMETIC), "weights"]}


def format_parameters(
    formats: Sequence[str], base: str, *, own: Collection[str] | None = None
) -> list[tuple[str, float, float, float]]:
    """``(name, start, low, high)`` of the per-format numbers a fit over ``formats`` (the
    trace's ``weights`` names) chooses, for every format but ``base`` (the compute dtype's
    own, whose factors are 1 by definition): the memory factor, the dequantization work
    (starting at :mod:`specsim.cost.quant`'s default) and, for a format in ``own`` (None:
    every one; :func:`own_arithmetic`), the compute factor. Names are ``table.format``
    with the format's canonical name (``int8``, ``int4``)."""
    base_canon = canonical_format(base, field="base format", known=WEIGHT_FORMATS)
    out = []
    for fmt in formats:
        canon = canonical_format(fmt, field="formats", known=WEIGHT_FORMATS)
        if canon == base_canon:
            continue
        for table in FORMAT_TABLES:
            if table == "format_compute_factor" and own is not None and fmt not in own:
                continue
            low, high = _BOUNDS[table]
            start = WEIGHT_FORMATS[canon].dequant_ops if table == "format_dequant_ops" else 1.0
            out.append((f"{table}.{canon}", float(start), low, high))
    return out


def with_format_tables(profile: RuntimeProfile, values: Mapping[str, float]) -> RuntimeProfile:
    """``profile`` with its per-format tables (:data:`FORMAT_TABLES`, None where empty) set
    from fitted ``{"table.format": value}`` (other names are ignored)."""
    t: dict[str, dict[str, float] | None] = {}
    for table in FORMAT_TABLES:
        got = {k.split(".", 1)[1]: float(v) for k, v in values.items() if k.startswith(table + ".")}
        t[table] = got or None
    return dataclasses.replace(
        profile,
        format_memory_factor=t["format_memory_factor"],
        format_compute_factor=t["format_compute_factor"],
        format_dequant_ops=t["format_dequant_ops"],
    )


def errors_by_format(residuals: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |relative error| of the pass times by weight format (and, where the
    residuals say so, whether the format was in the fit: ``in_fit``) and the number of
    configurations; ``residuals`` needs ``weights`` and ``rel_error``."""
    missing = [c for c in ("weights", "rel_error") if c not in residuals.columns]
    if missing:
        raise ValueError(f"residuals: lacks column(s) {missing}")
    keys = ["weights", "in_fit"] if "in_fit" in residuals.columns else ["weights"]
    err = residuals.assign(abs_error=np.abs(residuals["rel_error"].to_numpy(dtype=float)))
    return err.groupby(keys, as_index=False).agg(
        configs=("abs_error", "size"),
        median_abs_error=("abs_error", "median"),
        worst_abs_error=("abs_error", "max"),
    )


def kernel_note(configs: pd.DataFrame) -> str:
    """A profile's note naming the kernel each quantized format was measured with (the
    trace's ``quant`` column): the format's numbers describe that kernel, not the format
    in general. Empty when the configurations do not say."""
    if "quant" not in configs.columns:
        return ""
    kinds = configs.loc[configs["quant"].fillna("none") != "none", ["weights", "quant"]]
    pairs = sorted({f"{w} {q}" for w, q in kinds.drop_duplicates().itertuples(index=False)})
    if not pairs:
        return ""
    return (
        "format numbers fitted on passes with these kernels (trace column quant): "
        + ", ".join(pairs)
        + "; another kernel for the same format needs its own profile"
    )
