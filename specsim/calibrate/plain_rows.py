"""Published plain-decoding steps as rows a stack's host terms are fitted on.

Two committed tables hold them: ``models/measured/plain-decode/decode.csv`` (this fit's own
rows: serving engines' time per output token at a batch, with each row's source) and the
single-token rows of ``models/measured/published/decode.csv`` (the rows the older profiles
were fitted or checked on; cited, not copied). Both become :class:`PlainRow`: one decode step
of ``batch`` sequences at a mean cached ``context`` on a deployment (model, hardware, weight
formats, tensor and expert parallelism), its measured time ``step_s`` and the rounding
interval of the printed figure, and ``group``: the source the row came from, one published
table (the URL and the table named before the first ``:`` of ``where``), which is what the
leave-one-source-out check leaves out.

:func:`modelled_step_s` prices a row's step on a stack profile through the cost model's one
pass function (:meth:`specsim.cost.deployment.Deployment.pass_cost` of a one-token chain);
``graphs = "off"`` (the source ran without CUDA graphs: ``--disable-cuda-graph``, or an engine
from before it captured any) prices the step off the graph path: every layer pays the stack's
``eager_layer_overhead_s`` on top of ``layer_overhead_s``, as a pass above the largest captured
size does (:mod:`specsim.cost.stack_terms`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from specsim.cards import HardwareCard, ModelCard, compose, load_hardware, load_model
from specsim.cards.files import packaged_root
from specsim.cards.stack import StackProfile
from specsim.cost.deployment import Deployment
from specsim.cost.shape import PassShape

__all__ = [
    "PLAIN_DECODE",
    "PUBLISHED_DECODE",
    "PLAIN_COLUMNS",
    "QUANTITIES",
    "PlainRow",
    "read_plain_rows",
    "modelled_step_s",
    "eager_variant",
]

PLAIN_DECODE = "models/measured/plain-decode/decode.csv"
PUBLISHED_DECODE = "models/measured/published/decode.csv"
PLAIN_COLUMNS: tuple[str, ...] = (
    "id",
    "source",
    "where",
    "engine",
    "engine_version",
    "stack",
    "hardware",
    "model",
    "weights",
    "expert_weights",
    "tensor_parallel",
    "expert_parallel",
    "batch",
    "input_tokens",
    "output_tokens",
    "context",
    "graphs",
    "quantity",
    "value",
    "decimals",
    "use",
    "assumptions",
)
"""The columns of ``plain-decode/decode.csv``, in order (its README says what each holds)."""
QUANTITIES = ("s_per_step", "ms_per_step", "tokens_per_s_per_seq", "tokens_per_s_total")
"""How a figure gives a step's time ``t`` of ``b`` sequences: ``t``, ``1e3 t``, ``1 / t``,
``b / t``."""
_GRAPHS = ("", "on", "off")


@dataclass(frozen=True, kw_only=True)
class PlainRow:
    """One published plain decode step (module docstring); ``origin`` is the table it was read
    from; ``step_low``/``step_high`` bound the step times that print as the published figure."""

    id: str
    origin: str
    group: str
    source: str
    stack: str
    hardware: str
    model: str
    weights: str
    expert_weights: str
    group_size: int | None
    tensor_parallel: int
    expert_parallel: int
    batch: int
    context: int
    graphs: str
    step_s: float
    step_low: float
    step_high: float

    def __post_init__(self) -> None:
        if self.graphs not in _GRAPHS:
            raise ValueError(f"plain row {self.id}: graphs must be '', 'on' or 'off'")
        if not (0 < self.step_low <= self.step_s <= self.step_high):
            raise ValueError(f"plain row {self.id}: step time {self.step_s} outside its interval")
        for name in ("tensor_parallel", "expert_parallel", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"plain row {self.id}: {name} must be >= 1")


def _path(root: str | Path | None, rel: str) -> Path:
    """``rel`` (``models/...``) under ``root``, a checkout, or a wheel's ``specsim/_models``."""
    if root is not None:
        return Path(root) / rel
    checkout = Path(__file__).resolve().parents[2] / rel
    shipped = packaged_root()
    if checkout.is_file() or shipped is None:
        return checkout
    return shipped / rel.removeprefix("models/")


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"plain-decode rows: no file {str(path)!r} (a checkout has it)")
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _step(quantity: str, value: float, batch: int, where: str) -> float:
    """The step time the figure ``value`` of ``quantity`` gives (see :data:`QUANTITIES`)."""
    if quantity == "s_per_step":
        return value
    if quantity == "ms_per_step":
        return value / 1e3
    if quantity == "tokens_per_s_per_seq":
        return 1.0 / value
    if quantity == "tokens_per_s_total":
        return batch / value
    raise ValueError(f"{where}: quantity {quantity!r} is not one of {', '.join(QUANTITIES)}")


def _row(r: pd.Series, *, quantity: str, where: str, origin: str) -> PlainRow:
    value, decimals, batch = float(r["value"]), int(r["decimals"]), int(r["batch"])
    half = 0.5 * 10.0 ** (-decimals)
    ends = sorted(_step(quantity, v, batch, where) for v in (value - half, value + half))
    group_size = str(r.get("group_size", "")).strip()
    return PlainRow(
        id=str(r["id"]),
        origin=origin,
        group=f"{r['source']} {str(r['where']).split(':', 1)[0]}",
        source=f"{r['source']} ({r['where']})",
        stack=str(r["stack"]),
        hardware=str(r["hardware"]),
        model=str(r["model"]),
        weights=str(r["weights"]),
        expert_weights=str(r.get("expert_weights", "")),
        group_size=int(group_size) if group_size else None,
        tensor_parallel=int(r["tensor_parallel"]),
        expert_parallel=int(r.get("expert_parallel", "1") or 1),
        batch=batch,
        context=int(r["context"]),
        graphs=str(r.get("graphs", "")),
        step_s=_step(quantity, value, batch, where),
        step_low=ends[0],
        step_high=ends[1],
    )


def _published(path: Path) -> list[PlainRow]:
    data = _read(path)
    one = data[data["new_tokens"].astype(int) == 1]
    out = []
    for _, r in one.iterrows():
        q = "tokens_per_s_total" if r["quantity"] == "tokens_per_s" else "ms_per_step"
        if r["quantity"] not in ("tokens_per_s", "ms_per_token"):
            raise ValueError(f"{path}: row {r['id']}: unknown quantity {r['quantity']!r}")
        out.append(_row(r, quantity=q, where=f"{path} row {r['id']}", origin=PUBLISHED_DECODE))
    return out


def read_plain_rows(*, root: str | Path | None = None, every: bool = False) -> list[PlainRow]:
    """The rows of both tables (module docstring): ``plain-decode/decode.csv``'s rows marked
    ``use = fit`` (``every``: all of them) and the single-token rows of
    ``published/decode.csv``. A missing column is a ValueError naming the file."""
    path = _path(root, PLAIN_DECODE)
    data = _read(path)
    missing = [c for c in PLAIN_COLUMNS if c not in data.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    bad = sorted(set(data["use"]) - {"fit", "none"})
    if bad:
        raise ValueError(f"{path}: column 'use' must be 'fit' or 'none', got {bad}")
    if not every:
        data = data[data["use"] == "fit"]
    rows = [
        _row(r, quantity=str(r["quantity"]), where=f"{path} row {r['id']}", origin=PLAIN_DECODE)
        for _, r in data.iterrows()
    ]
    return rows + _published(_path(root, PUBLISHED_DECODE))


def eager_variant(stack: StackProfile) -> StackProfile:
    """``stack`` run without CUDA graphs: every layer pays ``eager_layer_overhead_s`` on top
    of ``layer_overhead_s`` and nothing is padded (no captured sizes)."""
    return dataclasses.replace(
        stack,
        layer_overhead_s=stack.layer_overhead_s + stack.eager_layer_overhead_s,
        graph_sizes=None,
    )


@cache
def _hardware(slug: str) -> HardwareCard:
    return load_hardware(slug)


@cache
def _model(slug: str) -> ModelCard:
    return load_model(slug)


def modelled_step_s(row: PlainRow, stack: StackProfile) -> float:
    """The cost model's time of ``row``'s decode step on ``stack`` (module docstring)."""
    hw = _hardware(row.hardware)
    st = eager_variant(stack) if row.graphs == "off" else stack
    dep = Deployment(
        target=_model(row.model),
        hardware=hw,
        runtime=compose(st, hw),
        weights=row.weights,
        expert_weights=row.expert_weights or None,
        group_size=row.group_size,
        tensor_parallel=row.tensor_parallel,
        expert_parallel=row.expert_parallel,
    )
    shape = PassShape.chain(context=row.context, new=1, batch=row.batch)
    return float(dep.pass_cost(shape).time_s)
