"""Where the simulator gets pass times, operations, bytes and energy.

Two cost sources with the same small interface:

- :class:`PlainCost`: the theory's parameters. A target pass verifying
  ``gamma + 1`` positions takes ``v(gamma)`` target-step times, a draft step
  ``c`` of one; a draft token costs ``c_hat`` target-token operations. For
  checking the closed forms and for teaching. It has no power model, so its
  energy is ``None``.
- :class:`CardCost`: the roofline cost model of :mod:`specsim.cost` on model
  and accelerator cards, at the batch and context of each pass.

``verify(new_tokens, context)`` and ``draft_step(context)`` take per-sequence
arrays (one pass covers all of them) and return a :class:`PassCost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim._roofline import time_energy
from specsim.cards import DTYPE_BYTES, HardwareCard, ModelCard

__all__ = ["PassCost", "BlockCosts", "CostSource", "PlainCost", "CardCost"]


class _Kernel(NamedTuple):
    """What a pass of one model on one accelerator needs, computed once per cost source."""

    linear: tuple[float, ...]  # the roofline constants (specsim._roofline)
    encoder: float  # encoder tokens cross-attended per sequence (0 for decoders)
    devices: float  # tensor-parallel devices the pass runs on


@dataclass(frozen=True, slots=True)
class PassCost:
    """Time (s), operations (FLOP, or target-token units for PlainCost), bytes and energy (J)."""

    time_s: float
    flops: float
    bytes: float
    energy_j: float | None


@dataclass(frozen=True, slots=True)
class BlockCosts:
    """Per-block arrays for one stream (batch 1): a verification pass, one draft step.

    ``verify_*`` is the pass verifying ``gamma + 1`` positions at the block's
    context; ``draft_*`` is one draft step there; ``step_*`` is one plain
    autoregressive target step there (the baseline).
    """

    verify_time: NDArray[np.float64]
    verify_flops: NDArray[np.float64]
    verify_energy: NDArray[np.float64] | None
    draft_time: NDArray[np.float64]
    draft_flops: NDArray[np.float64]
    draft_energy: NDArray[np.float64] | None


class CostSource(Protocol):
    """What the simulator asks of a cost source."""

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost: ...

    def draft_step(self, context: NDArray[np.int64]) -> PassCost: ...

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts: ...

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost: ...

    def iteration(
        self, gamma: NDArray[np.int64], context: NDArray[np.int64]
    ) -> tuple[float, float, float]: ...

    def uniform_iteration(
        self, *, batch: int, context_sum: float, gamma: int
    ) -> tuple[float, float, float]: ...

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]: ...

    @property
    def overlapped(self) -> bool: ...


def _positive(value: float, name: str, *, allow_zero: bool = True) -> float:
    v = float(value)
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return v


@dataclass(frozen=True, kw_only=True)
class PlainCost:
    """The closed forms' cost parameters.

    ``c``: draft step time / target step time. ``v``: the verification factor,
    a number (the same for every gamma; 1 is the paper's memory-bound
    assumption) or a sequence ``v[gamma]`` for gamma = 0, 1, ... (the last
    value holds beyond its end). ``c_hat``: draft operations per token / target
    operations per token (defaults to ``c``). ``step_s``: the target step time
    that scales everything to seconds. ``overlap``: the draft runs on its own
    accelerator, overlapped with verification.
    """

    c: float
    v: float | tuple[float, ...] = 1.0
    c_hat: float | None = None
    step_s: float = 1.0
    overlap: bool = False

    def __post_init__(self) -> None:
        _positive(self.c, "c")
        _positive(self.step_s, "step_s", allow_zero=False)
        if self.c_hat is not None:
            _positive(self.c_hat, "c_hat")
        vs = self.v if isinstance(self.v, tuple) else (self.v,)
        if len(vs) == 0:
            raise ValueError("v: expected a number or a non-empty sequence")
        for i, x in enumerate(vs):
            _positive(x, f"v[{i}]" if isinstance(self.v, tuple) else "v", allow_zero=False)

    @property
    def overlapped(self) -> bool:
        return self.overlap

    def v_of(self, gamma: ArrayLike) -> NDArray[np.float64]:
        """v(gamma): a sequence is indexed by gamma (last value beyond its end); a
        number applies to every gamma >= 1. v(0) = 1: one position is one step."""
        g = np.asarray(gamma, dtype=np.int64)
        if isinstance(self.v, tuple):
            vs = np.asarray(self.v, dtype=float)
            return vs[np.minimum(g, vs.shape[0] - 1)]
        return np.where(g == 0, 1.0, float(self.v))

    @property
    def _c_hat(self) -> float:
        return self.c if self.c_hat is None else self.c_hat

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        gamma = int(np.max(new_tokens)) - 1
        return PassCost(
            time_s=float(self.v_of(gamma)) * self.step_s,
            flops=float(np.sum(new_tokens)),
            bytes=0.0,
            energy_j=None,
        )

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        n = int(np.size(context))
        return PassCost(
            time_s=self.c * self.step_s, flops=self._c_hat * n, bytes=0.0, energy_j=None
        )

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        """One target step for the whole prefill (plain parameters know no prompt cost)."""
        return PassCost(time_s=self.step_s, flops=float(np.sum(prompts)), bytes=0.0, energy_j=None)

    def iteration(
        self, gamma: NDArray[np.int64], context: NDArray[np.int64]
    ) -> tuple[float, float, float]:
        """(time, energy, draft time) of a batch iteration: max(gamma) draft steps, one pass."""
        g = int(gamma.max()) if gamma.shape[0] else 0
        return self.uniform_iteration(batch=int(gamma.shape[0]), context_sum=0.0, gamma=g)

    def uniform_iteration(
        self, *, batch: int, context_sum: float, gamma: int
    ) -> tuple[float, float, float]:
        """(time, energy, draft time) of an iteration in which every sequence drafts ``gamma``."""
        if isinstance(self.v, tuple):
            v = self.v[min(gamma, len(self.v) - 1)]
        else:
            v = 1.0 if gamma == 0 else self.v
        d = gamma * self.c * self.step_s
        return d + float(v) * self.step_s, 0.0, d

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]:
        """Iteration time when every sequence uses gamma, for gamma = 0..max_gamma."""
        g = np.arange(max_gamma + 1)
        return (g * self.c + self.v_of(g)) * self.step_s

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts:
        n = gamma.shape[0]
        return BlockCosts(
            verify_time=self.v_of(gamma) * self.step_s,
            verify_flops=(gamma + 1).astype(float),
            verify_energy=None,
            draft_time=np.full(n, self.c * self.step_s),
            draft_flops=np.full(n, self._c_hat),
            draft_energy=None,
        )


@dataclass(frozen=True, kw_only=True)
class CardCost:
    """The roofline cost model on cards: ``target`` and ``draft`` models on ``hardware``.

    ``draft_hardware`` set means the draft has its own accelerator (overlapped
    drafting); otherwise it shares the target's, serialized.
    """

    target: ModelCard
    draft: ModelCard | None
    hardware: HardwareCard
    draft_hardware: HardwareCard | None = None
    tensor_parallel: int = 1
    dtype: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tensor_parallel, bool) or self.tensor_parallel < 1:
            raise ValueError(
                f"tensor_parallel: expected an integer >= 1, got {self.tensor_parallel!r}"
            )

    @property
    def overlapped(self) -> bool:
        return self.draft_hardware is not None

    def _cost(
        self,
        model: ModelCard,
        hardware: HardwareCard,
        new_tokens: Sequence[int] | NDArray[np.int64],
        context: NDArray[np.int64],
        tp: int,
    ) -> PassCost:
        from specsim.cost import step_cost

        new = np.asarray(new_tokens, dtype=np.int64)
        ctx = np.asarray(context, dtype=np.int64)
        sc = step_cost(
            model,
            hardware,
            batch=int(ctx.shape[0]),
            context=ctx,
            new_tokens=new,
            dtype=self.dtype,
            tensor_parallel=tp,
        )
        return PassCost(
            time_s=float(sc.time_s),
            flops=float(sc.flops),
            bytes=float(sc.bytes),
            energy_j=float(sc.energy_j),
        )

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return self._cost(self.target, self.hardware, new_tokens, context, self.tensor_parallel)

    def _draft_model(self) -> tuple[ModelCard, HardwareCard, int]:
        if self.draft is None:
            raise ValueError("this cost source has no draft model")
        if self.draft_hardware is not None:
            return self.draft, self.draft_hardware, 1
        return self.draft, self.hardware, self.tensor_parallel

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        model, hw, tp = self._draft_model()
        ctx = np.asarray(context, dtype=np.int64)
        return self._cost(model, hw, np.ones(ctx.shape[0], dtype=np.int64), ctx, tp)

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        """The prompts through the target and, when drafting, through the draft too.

        From the pass aggregates, like :meth:`uniform_iteration` (tests check it
        equals :func:`specsim.cost.step_cost` at context 0).
        """
        b = float(prompts.shape[0])
        T = float(prompts.sum())
        pairs = float((prompts * (prompts + 1)).sum()) / 2.0
        target, dra = self._kernels
        passes = [target] if not draft or dra is None else [target, dra]
        time = energy = flops = nbytes = 0.0
        for k in passes:
            t, en, _, fl, by = time_energy(k.linear, T, pairs + T * k.encoder, b * k.encoder)
            time, energy = time + t, energy + en
            flops, nbytes = flops + fl * k.devices, nbytes + by * k.devices
        return PassCost(time_s=time, flops=flops, bytes=nbytes, energy_j=energy)

    @cached_property
    def _kernels(self) -> tuple[_Kernel, _Kernel | None]:
        """The roofline constants of the target's and the draft's passes (computed once)."""
        from specsim import _roofline
        from specsim.cost import _dtype, _encoder_length

        def kernel(model: ModelCard, hw: HardwareCard, tp: int) -> _Kernel:
            co = _roofline.coefficients(model, hw, _dtype(model, self.dtype), float(tp))
            return _Kernel(co.linear, _encoder_length(model, None), float(tp))

        target = kernel(self.target, self.hardware, self.tensor_parallel)
        return target, None if self.draft is None else kernel(*self._draft_model())

    def uniform_iteration(
        self, *, batch: int, context_sum: float, gamma: int
    ) -> tuple[float, float, float]:
        """(time, energy, draft time) of an iteration in which every sequence drafts ``gamma``.

        Only the batch and the sum of the contexts matter: the pass aggregates
        are formed here in closed form, and each pass is evaluated on Python
        floats (a speed trick: the serving simulator asks this every
        iteration; tests check it equals :func:`specsim.cost.step_cost`).
        """
        (tl, te, _), draft = self._kernels
        b, sc, n1 = float(batch), float(context_sum), gamma + 1.0
        T = b * n1
        time, energy = time_energy(tl, T, n1 * sc + b * n1 * (n1 + 1.0) / 2.0 + T * te,
                                   sc + b * te)[:2]  # fmt: skip
        d_time = 0.0
        if gamma > 0:
            if draft is None:
                raise ValueError("this cost source has no draft model")
            dl, de, _ = draft
            r0, s0 = sc + b * de, sc + b + b * de
            for j in range(gamma):  # draft step j: one token per sequence after j drafted
                jb = j * b
                t, e, _, _, _ = time_energy(dl, b, s0 + jb, r0 + jb)
                d_time += t
                energy += e
        return time + d_time, energy, d_time

    def iteration(
        self, gamma: NDArray[np.int64], context: NDArray[np.int64]
    ) -> tuple[float, float, float]:
        """(time, energy, draft time) of a batch iteration from pass aggregates.

        Draft step ``j`` batches the sequences with ``gamma_i > j``; the
        verification pass covers ``gamma_i + 1`` positions of every sequence.
        The cost model's terms depend on a pass only through sums over its
        sequences (new tokens, KV tokens read, attention pairs), so the sums
        are formed here and each pass costs one evaluation on Python floats
        (tests check it equals :func:`specsim.cost.step_cost`).
        """
        b = int(gamma.shape[0])
        gmax = int(gamma.max()) if b else 0
        if b == 0 or int(gamma.min()) == gmax:
            return self.uniform_iteration(batch=b, context_sum=int(context.sum()), gamma=gmax)
        (tl, te, _), draft = self._kernels
        if draft is None:
            raise ValueError("this cost source has no draft model")
        dl, de, _ = draft
        # Per gamma value: how many sequences draft it and their context sum (exact in
        # float64 below 2^53); every pass's aggregates follow from these few numbers.
        count = np.bincount(gamma, minlength=gmax + 1).tolist()
        csum = np.bincount(gamma, weights=context, minlength=gmax + 1).tolist()
        T = pairs = 0.0
        for v in range(gmax + 1):
            T += count[v] * (v + 1.0)
            pairs += (v + 1.0) * csum[v] + count[v] * (v + 1.0) * (v + 2.0) / 2.0
        time, energy = time_energy(tl, T, pairs + T * te, sum(csum) + b * te)[:2]
        d_time = 0.0
        nb, s = 0.0, 0.0  # draft step j batches the sequences with gamma > j: suffix sums
        for j in range(gmax - 1, -1, -1):
            nb, s = nb + count[j + 1], s + csum[j + 1]
            sj = s + j * nb  # their contexts after j drafted tokens
            t, e = time_energy(dl, nb, sj + nb + nb * de, sj + nb * de)[:2]
            d_time += t
            energy += e
        return time + d_time, energy, d_time

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]:
        """Iteration time when every sequence uses gamma, for gamma = 0..max_gamma.

        The same sums as :meth:`iteration`, for all gammas in two vectorized calls
        (what a load-adaptive policy asks every iteration).
        """
        from specsim.cost import pass_aggregates_cost

        ctx = context.astype(np.float64)
        b, sc = float(ctx.shape[0]), float(ctx.sum())
        new = np.arange(max_gamma + 1, dtype=np.float64) + 1.0
        ver = pass_aggregates_cost(
            self.target, self.hardware, dtype=self.dtype, tensor_parallel=self.tensor_parallel,
            batch=b, tokens=b * new, context_tokens=sc, pairs=new * sc + b * new * (new + 1) / 2,
        )["time_s"]  # fmt: skip
        times = np.asarray(ver, dtype=np.float64)
        if max_gamma > 0 and self.draft is not None:
            model, hw, tp = self._draft_model()
            s = sc + np.arange(max_gamma, dtype=np.float64) * b
            dra = pass_aggregates_cost(
                model, hw, dtype=self.dtype, tensor_parallel=tp,
                batch=b, tokens=b, context_tokens=s, pairs=s + b,
            )["time_s"]  # fmt: skip
            times = times + np.concatenate([[0.0], np.cumsum(dra)])
        return times

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts:
        from specsim.cost import step_cost_grid

        ver = step_cost_grid(
            self.target,
            self.hardware,
            batch=1,
            context=context,
            new_tokens=gamma + 1,
            tensor_parallel=self.tensor_parallel,
            dtype=self.dtype,
        )
        model, hw, tp = self._draft_model()
        dra = step_cost_grid(
            model, hw, batch=1, context=context, new_tokens=1, tensor_parallel=tp, dtype=self.dtype
        )
        return BlockCosts(
            verify_time=np.asarray(ver.time_s, dtype=float),
            verify_flops=np.asarray(ver.flops, dtype=float),
            verify_energy=np.asarray(ver.energy_j, dtype=float),
            draft_time=np.broadcast_to(np.asarray(dra.time_s, dtype=float), context.shape).copy(),
            draft_flops=np.broadcast_to(np.asarray(dra.flops, dtype=float), context.shape).copy(),
            draft_energy=np.broadcast_to(
                np.asarray(dra.energy_j, dtype=float), context.shape
            ).copy(),
        )

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of one sequence, target and draft together."""
        dt = self.dtype or self.target.dtype
        total = self.target.kv_bytes_per_token(DTYPE_BYTES[dt]) / self.tensor_parallel
        if self.draft is not None and self.draft_hardware is None:
            total += self.draft.kv_bytes_per_token(DTYPE_BYTES[self.dtype or self.draft.dtype])
        return float(total)
