"""Published plain-decoding figures by engine and GPU, predicted by the stack profiles.

``models/measured/published/decode.csv`` holds each figure as printed, with its source (see
that folder's README). Every row is priced by the specsim stack profile closest to its engine
(``stack``) composed with the row's hardware card (:func:`specsim.cards.compose`: the
stack's host costs, the card's device part), on the row's model card, weight format,
tensor parallelism, batch, new tokens and context, as one plain (not verifying) pass.

A row whose ``fitted_by`` names a parameter was used to fit it: :func:`stack_fit_rows` gives
those, in sample, one family per stack and device part (the fit's residuals on the points it
was fitted on). :func:`published_rows` gives the others, out of sample, one family per
source, stack and card: checks no fit used. The speculative rows of ``speculative.csv`` are
held out too, but not scored: each says what its source does not publish that a prediction
needs (:func:`speculative_held_out`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specsim.calibrate.plain_rows import eager_variant
from specsim.cards import compose, load_hardware, load_model, load_stack
from specsim.cards.files import packaged_root
from specsim.cards.stack_files import device_part_for
from specsim.cost import step_cost

from .rows import COLUMNS, fidelity_row, rounding_interval

__all__ = [
    "PUBLISHED",
    "DECODE_COLUMNS",
    "read_published",
    "predict_published",
    "stack_fit_rows",
    "published_rows",
    "speculative_held_out",
]

PUBLISHED = "models/measured/published"
"""The folder of published figures (a checkout's ``models/``, a wheel's ``specsim/_models``)."""
DECODE_COLUMNS: tuple[str, ...] = (
    "id",
    "source",
    "where",
    "engine",
    "stack",
    "hardware",
    "model",
    "weights",
    "group_size",
    "tensor_parallel",
    "batch",
    "new_tokens",
    "context",
    "quantity",
    "value",
    "decimals",
    "fitted_by",
    "graphs",
)
"""The columns of ``decode.csv``, in order (``graphs``: ``off`` when the engine ran without
CUDA graphs, :func:`specsim.calibrate.plain_rows.eager_variant`)."""
_QUANTITY = {
    "tokens_per_s": ("plain pass throughput", "tokens/s"),
    "ms_per_token": ("plain time per token", "ms"),
}
_SOURCE = {
    "github.com/pytorch-labs/gpt-fast": "gpt-fast README",
    "pytorch.org/blog": "PyTorch blog",
    "llama.cpp/pull/4766": "llama.cpp PR #4766",
    "llama.cpp/pull/17505": "llama.cpp PR #17505",
    "together.ai/blog/sequoia": "Sequoia blog",
}


def _folder(root: str | Path | None) -> Path:
    if root is not None:
        return Path(root) / PUBLISHED
    checkout = Path(__file__).resolve().parents[3] / PUBLISHED
    shipped = packaged_root()
    if checkout.is_dir() or shipped is None:
        return checkout
    return shipped / PUBLISHED.removeprefix("models/")


def read_published(name: str = "decode.csv", *, root: str | Path | None = None) -> pd.DataFrame:
    """One CSV of the published folder; ``decode.csv`` must have :data:`DECODE_COLUMNS`
    (ValueError naming the file and the missing ones)."""
    path = _folder(root) / name
    if not path.is_file():
        raise FileNotFoundError(f"published figures: no file {str(path)!r} (a checkout has it)")
    data = pd.read_csv(path, dtype={"fitted_by": str}, keep_default_na=False)
    if name == "decode.csv":
        missing = [c for c in DECODE_COLUMNS if c not in data.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}")
    return data


def predict_published(row: pd.Series) -> float:
    """The row's ``quantity`` as the row's stack on its card prices it: tokens per second
    (generated or processed: ``batch * new_tokens`` over one pass) or ms per token."""
    hw = load_hardware(str(row["hardware"]))
    stack = load_stack(str(row["stack"]))
    if str(row.get("graphs", "")) == "off":
        stack = eager_variant(stack)
    runtime = compose(stack, hw)
    kw: dict[str, object] = {"weights": str(row["weights"])}
    if str(row["group_size"]).strip():
        kw["group_size"] = int(row["group_size"])
    cost = step_cost(
        load_model(str(row["model"])),
        hw,
        batch=int(row["batch"]),
        context=int(row["context"]),
        new_tokens=int(row["new_tokens"]),
        tensor_parallel=int(row["tensor_parallel"]),
        runtime=runtime,
        **kw,  # type: ignore[arg-type]
    )
    t = float(cost.time_s)
    if row["quantity"] == "tokens_per_s":
        return int(row["batch"]) * int(row["new_tokens"]) / t
    if row["quantity"] == "ms_per_token":
        return 1e3 * t / int(row["batch"])
    raise ValueError(f"{row['id']}: unknown quantity {row['quantity']!r}")


def _source_name(url: str) -> str:
    return next((name for key, name in _SOURCE.items() if key in url), url)


def _rows(data: pd.DataFrame, *, in_sample: bool) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for _, r in data.iterrows():
        stack = Path(str(r["stack"])).name.removesuffix(".toml")
        named = stack if stack.endswith("-stack") else f"{stack} stack"
        device = device_part_for(load_hardware(str(r["hardware"]))).slug
        if in_sample:
            family = f"in-sample: {named} on {r['hardware']} (device part {device})"
            fitted_on = f"itself: {r['fitted_by']}"
        else:
            family = f"{_source_name(str(r['source']))}: {named} on {r['hardware']}"
            fitted_on = (
                f"nothing of this source: stack {r['stack']} composed with {r['hardware']}'s "
                f"device part {device}"
            )
        quantity, unit = _QUANTITY[str(r["quantity"])]
        value, decimals = float(r["value"]), int(r["decimals"])
        shape = f"batch {r['batch']} x {r['new_tokens']} new token(s) at context {r['context']}"
        tp = f", TP {r['tensor_parallel']}" if int(r["tensor_parallel"]) > 1 else ""
        out.append(
            fidelity_row(
                family=family,
                anchor=f"{r['model']} {r['weights']}{tp}: {shape}",
                source=f"{r['source']} ({r['where']})",
                quantity=quantity,
                unit=unit,
                measured=value,
                interval=rounding_interval(value, decimals),
                how=f"rounding: printed to {decimals} decimal(s) (no spread published)",
                predicted=predict_published(r),
                fitted_on=fitted_on,
            )
        )
    return out


def stack_fit_rows(*, root: str | Path | None = None) -> pd.DataFrame:
    """The published points the stack profiles and device parts were fitted on, predicted
    by them now (in sample; columns :data:`specsim.validate.fidelity.rows.COLUMNS`)."""
    data = read_published(root=root)
    return pd.DataFrame(_rows(data[data["fitted_by"] != ""], in_sample=True), columns=COLUMNS)


def published_rows(*, root: str | Path | None = None) -> list[dict[str, object]]:
    """The published plain-decoding figures no fit used, predicted by the stacks (out of
    sample)."""
    data = read_published(root=root)
    return _rows(data[data["fitted_by"] == ""], in_sample=False)


def speculative_held_out(*, root: str | Path | None = None) -> pd.DataFrame:
    """The published speculative runs held out (``speculative.csv``), with why each is not
    scored yet."""
    return read_published("speculative.csv", root=root)
