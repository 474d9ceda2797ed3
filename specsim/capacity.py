"""Capacity planning: how large a replica must be and how many requests per second it serves.

For a target and draft on an accelerator card, a Poisson workload with prompt
and output lengths uniform on given ranges, and an SLO on the 99th
percentiles of time per output token (TPOT) and time to first token (TTFT):

1. :func:`smallest_tp`: the smallest tensor parallelism in :data:`TP_SIZES`
   for which a condition holds (here: the KV cache of ``max_batch`` requests
   of the longest kind fits beside the weights, :func:`kv_capacity`);
2. :func:`search_capacity`: the largest request rate one replica sustains at
   the SLO, with and without speculation
   (:func:`specsim.sim.simulate_serving` serves each workload both ways in one
   run, with common random numbers across rates): a geometric grid of rates,
   then bisection (on the log scale) inside the first failing interval; then
   the replicas (and accelerators, replicas x tensor parallelism) needed for
   a total rate, assuming a load balancer that splits the Poisson stream
   evenly (a split Poisson stream is Poisson), checked by simulating one
   replica at its share.

Every serving run is reported to a ``progress(done, total, label)`` callback
(passed to :func:`search_capacity`, or set around a study with
:func:`reporting`): ``total`` is an upper bound until the grid of rates has
been served, exact after.

Assumptions: acceptance is i.i.d. with the given alpha; the draft shares the
target's devices; every request's KV cache is reserved on admission (no
preemption).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.acceptance import IIDAcceptance
from specsim.cards import HardwareCard, ModelCard
from specsim.cost import verification_positions
from specsim.policies import LookaheadPolicy
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving

__all__ = [
    "TP_SIZES", "MODES", "SLO", "Progress", "smallest_tp", "kv_capacity", "search_capacity",
    "reporting",
]  # fmt: skip

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``: called after each serving run of a search."""

# Studies call search_capacity with their own arguments; a caller that runs a whole study
# (specsim study capacity) hands its progress callback down through this variable.
_PROGRESS: ContextVar[Progress | None] = ContextVar("capacity_progress", default=None)

TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
"""The tensor-parallel sizes tried, smallest first."""

MODES: tuple[str, ...] = ("speculative", "plain")
"""The two ways every workload is served: with the policy, and plain decoding."""


@dataclass(frozen=True, kw_only=True)
class SLO:
    """A latency objective on the 99th percentiles of TPOT and TTFT, in seconds."""

    tpot_p99_s: float
    ttft_p99_s: float

    def __post_init__(self) -> None:
        for name in ("tpot_p99_s", "ttft_p99_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: expected a finite time > 0, got {v!r}")


def smallest_tp(fits: Callable[[int], bool], *, where: str, what: str, hardware: str) -> int:
    """The smallest size in :data:`TP_SIZES` for which ``fits(tp)`` holds.

    Raises ValueError starting with ``where`` and naming ``what`` (the models and
    whatever else must fit) and the ``hardware`` when not even the largest size fits.
    """
    for tp in TP_SIZES:
        if fits(tp):
            return tp
    raise ValueError(f"{where}: {what} do not fit on {TP_SIZES[-1]} x {hardware}")


def kv_capacity(config: ServingConfig) -> int:
    """The KV-cache budget of a serving config in tokens (0 when the weights leave no room)."""
    try:
        return config.kv_capacity() or 0
    except ValueError:
        return 0


@contextlib.contextmanager
def reporting(progress: Progress | None) -> Iterator[None]:
    """Within the block, :func:`search_capacity` calls given no ``progress`` report to
    this one (a study that searches does not need to pass it on)."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def search_capacity(
    *,
    target: ModelCard,
    draft: ModelCard,
    hardware: HardwareCard,
    policy: LookaheadPolicy,
    alpha: float,
    max_gamma: int,
    max_batch: int,
    prompt_tokens: tuple[int, int],
    output_tokens: tuple[int, int],
    slo: SLO,
    rates: Sequence[float],
    bisect: int,
    requests: int,
    rate_per_s: float,
    seed: int,
    tensor_parallel: int = 0,
    where: str = "capacity",
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Tidy rows of one accelerator's capacity search.

    ``kind = "probe"``: one serving run per rate and mode (p99 TPOT and TTFT,
    throughput, whether the SLO holds); ``kind = "answer"``: per mode, the largest
    rate that met the SLO (``max_rate_per_replica``), the first that failed, and for
    ``rate_per_s`` the replicas, accelerators and rate per accelerator; ``kind =
    "check <mode>"``: the probe at each replica's share. ``tensor_parallel = 0``
    picks the smallest size whose KV cache holds ``max_batch`` requests of the
    longest kind. Every serving run draws from ``numpy.random.default_rng(seed)``
    (common random numbers across rates). ``progress`` (default: the one set by
    :func:`reporting`, if any) is called after every serving run.
    """
    report = progress if progress is not None else _PROGRESS.get()
    need = max_batch * (prompt_tokens[1] + output_tokens[1] + verification_positions(max_gamma))

    def replica(tp: int) -> ServingConfig:
        """One replica on ``tp`` devices; each probe changes only the workload's rate."""
        return ServingConfig(
            workload=PoissonWorkload(
                rate_per_s=1.0,
                requests=requests,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
            ),
            cost=CardCost(target=target, draft=draft, hardware=hardware, tensor_parallel=tp),
            acceptance=IIDAcceptance(alpha=alpha),
            policy=policy,
            max_batch=max_batch,
            max_gamma=max_gamma,
        )

    tp = tensor_parallel or smallest_tp(
        lambda tp: kv_capacity(replica(tp)) >= need,
        where=where,
        what=f"{target.slug} + {draft.slug} with the KV cache of {max_batch} "
        f"requests of up to {need // max_batch} tokens",
        hardware=hardware.slug,
    )
    config = replica(tp)
    base = {
        "hardware": hardware.slug,
        "tensor_parallel": tp,
        "kv_capacity_tokens": kv_capacity(config),
    }
    rows: list[dict[str, Any]] = []
    grid = [float(r) for r in rates]
    # An upper bound (every mode bisects and checks) until the grid has been served.
    runs = {"done": 0, "total": len(grid) + len(MODES) * (bisect + 1)}

    def serve(rate: float, kind: str) -> dict[str, bool]:
        poisson: Any = config.workload  # the PoissonWorkload built by replica()
        workload = dataclasses.replace(poisson, rate_per_s=rate)
        sc = dataclasses.replace(config, workload=workload)
        m = simulate_serving(sc, np.random.default_rng(seed)).metrics()
        ok = {}
        for mode, pre in (("speculative", ""), ("plain", "plain_")):
            tpot, ttft = float(m[f"{pre}tpot_p99_s"]), float(m[f"{pre}ttft_p99_s"])
            ok[mode] = tpot <= slo.tpot_p99_s and ttft <= slo.ttft_p99_s
            rows.append(
                {
                    **base,
                    "kind": kind,
                    "mode": mode,
                    "rate_per_s": rate,
                    "tpot_p99_s": tpot,
                    "ttft_p99_s": ttft,
                    "throughput_tokens_per_s": float(m[f"{pre}throughput_tokens_per_s"]),
                    "meets_slo": ok[mode],
                    "requests": requests,
                    "mean_gamma": float(m["mean_gamma"]) if mode == "speculative" else 0.0,
                }
            )
        runs["done"] += 1
        if report is not None:
            report(runs["done"], runs["total"], f"{hardware.slug} {kind} {rate:.3g}/s")
        return ok

    passed = [serve(r, "probe") for r in grid]
    firsts = {}
    for mode in MODES:
        good = [bool(p[mode]) for p in passed]
        firsts[mode] = good.index(False) if False in good else len(good)  # first failing rate
    # Now exact: a mode bisects inside the grid and checks when some rate passed.
    runs["total"] = len(grid) + sum(
        (bisect if 0 < k < len(grid) else 0) + (k > 0) for k in firsts.values()
    )
    for mode in MODES:
        k = firsts[mode]
        lo = grid[k - 1] if k > 0 else 0.0
        hi = grid[k] if k < len(grid) else math.inf
        for _ in range(bisect if 0 < k < len(grid) else 0):
            mid = math.sqrt(lo * hi)
            if serve(mid, "probe")[mode]:
                lo = mid
            else:
                hi = mid
        answer: dict[str, Any] = {
            **base,
            "kind": "answer",
            "mode": mode,
            "max_rate_per_replica": lo,
            "first_failing_rate": hi,
            "rate_per_s": rate_per_s,
        }
        if lo > 0:
            replicas = math.ceil(rate_per_s / lo)
            answer.update(
                replicas=replicas, accelerators=replicas * tp, rate_per_accelerator=lo / tp
            )
            answer["check_meets_slo"] = serve(rate_per_s / replicas, f"check {mode}")[mode]
        rows.append(answer)
    return rows
