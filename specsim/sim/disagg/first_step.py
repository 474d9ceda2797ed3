"""The decode pool's admission pass: the first decode step after a KV hand-over.

A request reaches a decode replica with its prompt's target KV cache already built (the
prefill pool's work, :mod:`specsim.sim.disagg.link`). What the decode replica still does
before the request decodes with the rest of its batch, in the engine's prefill slot
(:meth:`specsim.sim.serving.router.Replica.prefill`, which stamps the first token at its end):

- the **first decode step**: one target position at the prompt's context, the pass
  that emits the token the client receives first. The engines stream every token from
  the decode worker (Dynamo: "streams the response from decode"; vLLM's proxy sends the
  prefill instance ``max_tokens=1`` and streams the decode instance's reply), so the
  client's time to first token ends with a decode-side step, not at the prefill;
  SGLang's decode server runs a bootstrap step after a transfer (sgl-project/sglang
  PR 31139's discussion: with a dummy bootstrap tree, the first decode step "mainly serves
  as a bootstrap step");
- the **draft's prefill** over the prompt, when the decode pool drafts with a model that
  keeps its own KV cache: the prefill pool runs no speculation (SGLang serves a prefill
  server without speculative flags feeding a decode server with them, PR 17212), so the
  draft's cache is built where the draft runs. Priced as the cost source's prefill with
  the draft less the one without (its draft part alone).

Both are one pass over the admitted requests, as the engine prices an admission: an
engine that folds the new requests into the running batch's pass would save one read of
the target's weights per admission (an upper bound here, by that much).

**A request preempted on the decode pool** (paged KV, ``preemption = "recompute"``,
:mod:`specsim.sim.serving.paged`) rebuilds its cache *on the decode replica*, from its prompt
and the tokens it has emitted (``context - 1`` tokens): it is not prefilled again on the
prefill pool nor sent again. vLLM's NixlConnector triggers one transfer per request
(``NixlConnectorScheduler.update_state_after_alloc`` sets ``do_remote_prefill = False``
after the first, "Only trigger 1 KV transfer per request",
``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``), so a request the
decode instance's scheduler preempts and reschedules is computed there like any
recompute-preempted request of vLLM's scheduler. When it is readmitted its rebuild rides
in the admission pass beside the fresh requests' first steps (:meth:`AfterTransfer.
prefill_resumed`): one target pass of one position after each fresh prompt and a chain of
the rebuilt tokens from an empty cache for each returning request (a prefill's shape, not
a verification), plus the draft model's prefill of the fresh prompts and the rebuilt
tokens together. It emits no token: a returning request goes on decoding where it left
off.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.sim.costs.source import CostSource, PassCost

__all__ = ["AfterTransfer", "first_step_cost"]


def _plus(a: PassCost, b: PassCost, sign: float = 1.0) -> PassCost:
    energy = None if a.energy_j is None or b.energy_j is None else a.energy_j + sign * b.energy_j
    return PassCost(
        time_s=a.time_s + sign * b.time_s,
        flops=a.flops + sign * b.flops,
        bytes=a.bytes + sign * b.bytes,
        energy_j=energy,
    )


def first_step_cost(
    cost: CostSource,
    prompts: NDArray[np.int64],
    *,
    draft: bool,
    rebuilt: NDArray[np.int64] | None = None,
) -> PassCost:
    """The admitted requests' first decode step (one target position each after its
    prompt) and, with ``draft``, the draft's prefill of their prompts (module docstring).
    ``rebuilt``: the tokens each returning preempted request recomputes in the same pass
    (a chain from an empty cache each; the draft's prefill covers them too)."""
    fresh = np.ones(prompts.shape[0], dtype=np.int64)
    if rebuilt is None or rebuilt.shape[0] == 0:
        step = cost.verify(fresh, prompts)
        drafted = prompts
    else:
        new = np.concatenate([fresh, rebuilt])
        ctx = np.concatenate([prompts, np.zeros(rebuilt.shape[0], dtype=np.int64)])
        chains = getattr(cost, "chains_pass", None)  # a card cost: never a verification
        step = cost.verify(new, ctx) if chains is None else chains(new, ctx, verify=False)
        drafted = np.concatenate([prompts, rebuilt])
    if not draft:
        return step
    own = _plus(cost.prefill(drafted, draft=True), cost.prefill(drafted, draft=False), -1.0)
    return _plus(step, own)


class AfterTransfer:
    """``cost`` as the decode pool sees it: its ``prefill`` is :func:`first_step_cost` (the
    prompt's target KV arrived over the link); every other pass and attribute is
    ``cost``'s own, and a preempted request's recompute is priced by
    :meth:`prefill_resumed`."""

    def __init__(self, cost: CostSource) -> None:
        self.inner = cost

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        return first_step_cost(self.inner, prompts, draft=draft)

    def prefill_resumed(
        self, prompts: NDArray[np.int64], rebuilt: NDArray[np.int64], *, draft: bool
    ) -> PassCost:
        """The admission pass of fresh requests (``prompts``) beside preempted ones coming
        back, which recompute ``rebuilt`` tokens each here (module docstring); the serving
        engine asks for it instead of ``prefill`` when a readmission rebuilds a cache."""
        return first_step_cost(self.inner, prompts, draft=draft, rebuilt=rebuilt)

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return self.inner.verify(new_tokens, context)

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        return self.inner.draft_step(context)

    @property
    def overlapped(self) -> bool:
        return bool(self.inner.overlapped)

    def __getattr__(self, name: str) -> Any:
        # The speed paths (uniform_iteration, blocks, ...) and memory queries: the decode
        # pool's passes are the cost source's own; only the admission pass differs.
        if name == "inner":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
