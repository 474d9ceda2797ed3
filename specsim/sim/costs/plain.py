"""The theory's cost parameters as a cost source: :class:`PlainCost`.

A target pass verifying ``gamma + 1`` positions takes ``v(gamma)`` target-step
times, a draft step ``c`` of one; a draft token costs ``c_hat`` target-token
operations. For checking the closed forms and for teaching. It has no power
model, so its energy is ``None``. The roofline on cards is
:class:`specsim.sim.costs.costs.CardCost`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cost import PassShape, verification_positions
from specsim.sim.costs.source import BlockCosts, IterationCost, IterationCosts, PassCost, named

__all__ = ["PlainCost"]


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
        if isinstance(self.v, list):  # a list from TOML or a caller: stored as the tuple it means
            object.__setattr__(self, "v", tuple(self.v))
        _positive(self.c, "c")
        _positive(self.step_s, "step_s", allow_zero=False)
        if self.c_hat is not None:
            _positive(self.c_hat, "c_hat")
        vs = self.v if isinstance(self.v, tuple) else (self.v,)
        if len(vs) == 0:
            raise ValueError("v: expected a number or a non-empty sequence")
        for i, x in enumerate(vs):
            name = f"v[{i}]" if isinstance(self.v, tuple) else "v"
            if _positive(x, name, allow_zero=False) < 1:  # more positions are never faster
                raise ValueError(
                    f"{name}: expected v >= 1 (verifying gamma + 1 positions takes at least as "
                    f"long as verifying one), got {x!r}"
                )

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

    def verify_pass(self, shape: PassShape) -> PassCost:
        """A pass of any shape: ``v`` at its longest sequence's positions less one (for a
        tree, its node count less one); one target-token operation per position."""
        gamma = int(np.max(shape.new)) - 1
        return PassCost(
            time_s=float(self.v_of(gamma)) * self.step_s,
            flops=float(shape.tokens),
            bytes=0.0,
            energy_j=None,
        )

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return self.verify_pass(PassShape.chain(context=context, new=new_tokens))

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        n = int(np.size(context))
        return PassCost(
            time_s=self.c * self.step_s, flops=self._c_hat * n, bytes=0.0, energy_j=None
        )

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        """One target step for the whole prefill (plain parameters know no prompt cost)."""
        return PassCost(time_s=self.step_s, flops=float(np.sum(prompts)), bytes=0.0, energy_j=None)

    def iteration(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> IterationCost:
        """A batch iteration: max(gamma) draft steps, one pass."""
        g = int(gamma.max()) if gamma.shape[0] else 0
        return self.uniform_iteration(batch=int(gamma.shape[0]), context_sum=0.0, gamma=g)

    def uniform_iteration(self, *, batch: int, context_sum: float, gamma: int) -> IterationCost:
        """An iteration in which every sequence drafts ``gamma`` (no energy model: 0 J)."""
        if isinstance(self.v, tuple):
            v = self.v[min(gamma, len(self.v) - 1)]
        else:
            v = 1.0 if gamma == 0 else self.v
        d = gamma * self.c * self.step_s
        return named(IterationCost, (d + float(v) * self.step_s, 0.0, d))

    def uniform_iterations(
        self, *, batch: NDArray[np.int64], context_sum: NDArray[np.int64], gamma: int
    ) -> IterationCosts:
        """Many uniform iterations at once (the same time for all): see
        :meth:`specsim.sim.CardCost.uniform_iterations`."""
        t, e, d = self.uniform_iteration(batch=1, context_sum=0.0, gamma=gamma)
        n = batch.shape[0]
        return IterationCosts(np.full(n, t), np.full(n, e), np.full(n, d))

    def iterations(self, count: NDArray[np.int64], csum: NDArray[np.float64]) -> IterationCosts:
        """Many iterations at once, row ``i`` as :meth:`iteration` gives it for
        ``count[i, v]`` sequences drafting ``v`` (``csum``, their context sums, unused):
        ``max(gamma)`` draft steps and one pass, the same floats."""
        gmax = count.shape[1] - 1 - np.argmax(count[:, ::-1] > 0, axis=1)
        d = gmax * self.c * self.step_s
        return IterationCosts(d + self.v_of(gmax) * self.step_s, np.zeros(gmax.shape[0]), d)

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
            verify_flops=verification_positions(gamma).astype(float),
            verify_energy=None,
            draft_time=np.full(n, self.c * self.step_s),
            draft_flops=np.full(n, self._c_hat),
            draft_energy=None,
        )
