"""The cost sources that ship: the theory's parameters and the roofline on cards.

- :class:`PlainCost` (in :mod:`specsim.sim.costs.plain`, re-exported here): the
  theory's parameters, ``v(gamma)`` target-step times a pass and ``c`` a draft
  step; no power model, so its energy is ``None``.
- :class:`CardCost`: the roofline cost model of :mod:`specsim.cost` on model
  and accelerator cards, at the batch and context of each pass, with the
  memory footprint serving admission reads (:meth:`CardCost.kv_capacity_tokens`).

Both implement :class:`~specsim.sim.costs.source.BatchedCostSource`, cost many
serving iterations at once (``uniform_iterations``, ``iterations``: what the
serving simulator's drain uses) and take any :class:`~specsim.cost.PassShape` too
(``verify_pass``), so a pass verifying a token tree is one constructor away.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsim.cards import ModelCard
from specsim.cost import (
    PassShape,
    chain_pairs,
    chain_sums,
    time_energy,
    verification_positions,
)
from specsim.cost.checks import card_of, check_draft_pair
from specsim.cost.deployment import Deployment
from specsim.proposers import DraftCost, Proposer, check_proposer, prefill_cost_of

from .card_deployment import (
    NO_DRAFT,
    CardDeployment,
    Kernel,
    check_draft_deployment,
    kernel,
    one_sequence_grid,
    pass_cost_on,
    passes,
    verifies,
    verify_grid,
)
from .plain import PlainCost
from .source import BlockCosts, IterationCost, IterationCosts, PassCost, Remembers, named

__all__ = ["PlainCost", "CardCost"]


@dataclass(frozen=True, kw_only=True)
class CardCost(Remembers, CardDeployment):
    """The roofline cost model on cards: the target on ``deployment``, drafted by ``draft``.

    ``deployment`` (a :class:`~specsim.cost.deployment.Deployment`) says what runs where: the
    target, hardware, stack, weight and KV formats, parallelism and the draft's placement.
    ``draft`` is a model card or its slug (None: no drafting, gamma 0 only). The draft runs
    on ``draft_deployment`` when given (its own hardware, stack, formats and tensor
    parallelism; its placement must be the deployment's); otherwise, placed ``shared``, on
    the target's devices and stack with the target's tensor parallelism (one device when
    that does not split the draft's heads), and placed ``own-device`` or ``overlapped``, on
    one device of the same hardware card and stack; either way in the deployment's
    ``dtype`` when it names one and in its KV format (:meth:`drafting`). ``overlapped``
    drafting runs beside verification; the other two wait for it. Pass times, the memory
    footprint (a ``shared`` draft's weights and KV cache on the target's devices) and the
    KV capacity follow. ``proposer``: the drafter of a run drafted by a proposer
    (:class:`specsim.proposers.ProposerProtocol`); when given, a drafting run's prompts
    are prefilled through its own KV by its ``prefill_cost`` (none for a drafter without
    a KV cache of its own), not by ``draft``. ``target``, ``hardware`` and
    ``tensor_parallel`` read the deployment's.

    >>> from specsim.cost import Deployment
    >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", draft_placement="overlapped")
    >>> cost = CardCost(deployment=dep, draft="llama-68m")
    >>> cost.overlapped, cost.drafting().tensor_parallel, cost.footprints()[1] is None
    (True, 1, True)
    """

    deployment: Deployment
    draft: ModelCard | None = None
    draft_deployment: Deployment | None = None
    proposer: Proposer | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.deployment, Deployment):
            raise TypeError(
                "CardCost deployment: expected a specsim.cost.deployment.Deployment, got "
                f"{type(self.deployment).__name__}"
            )
        object.__setattr__(self, "draft", card_of("draft", self.draft))
        if self.proposer is not None:
            check_proposer(self.proposer, where="CardCost proposer")
        dd = self.draft_deployment
        if dd is not None and not isinstance(dd, Deployment):
            raise TypeError(
                "CardCost draft_deployment: expected a specsim.cost.deployment.Deployment or "
                f"None, got {type(dd).__name__}"
            )
        if self.draft is None:
            if dd is not None:
                raise ValueError("CardCost draft_deployment: given without a draft model (draft)")
            return
        check_draft_pair(self.target, self.draft)
        if dd is not None:
            check_draft_deployment(self.deployment, self.draft, dd)
        self.drafting()  # the draft's own deployment fails here (its tensor parallelism)

    def with_proposer(self, proposer: Proposer) -> CardCost:
        """This cost with ``proposer``'s own KV prefill priced beside a drafting run's
        prompts (the chain engine's, when a proposer drafts)."""
        return dataclasses.replace(self, proposer=proposer)

    def verify_pass(self, shape: PassShape) -> PassCost:
        """The target's pass of any shape (chains or a token tree); a verification (a stack's
        speculative terms) when it verifies drafted tokens
        (:func:`~specsim.sim.costs.card_deployment.verifies`)."""
        return pass_cost_on(self.deployment, shape, verify=verifies(shape))

    def verify(self, new_tokens: NDArray[np.int64], context: NDArray[np.int64]) -> PassCost:
        return self.verify_pass(PassShape.chain(context=context, new=new_tokens))

    def chains_pass(
        self,
        new_tokens: NDArray[np.int64],
        context: NDArray[np.int64],
        *,
        verify: bool,
        verified: int | None = None,
    ) -> PassCost:
        """The target's pass of chains, a verification (the stack's speculative terms) only
        when ``verify`` says so: prefill chunks riding in a pass never make it one, and of its
        new tokens only ``verified`` (None: all) reach the rejection sampler."""
        shape = PassShape.chain(context=context, new=new_tokens)
        return pass_cost_on(self.deployment, shape, verify=verify, verified=verified)

    def draft_step(self, context: NDArray[np.int64]) -> PassCost:
        """One draft step of every sequence, under the stack's drafting profile
        (:meth:`Deployment.drafting <specsim.cost.deployment.Deployment.drafting>`)."""
        return pass_cost_on(
            self.drafting().drafting(), PassShape.chain(context=context, new=1), verify=False
        )

    def prefill(self, prompts: NDArray[np.int64], *, draft: bool) -> PassCost:
        """The prompts through the target and, when drafting, through the draft too (the
        ``proposer``'s own KV prefill when there is one, else the ``draft`` model's).

        From the pass aggregates, like :meth:`uniform_iteration` (tests check it
        equals :func:`specsim.cost.step_cost` at context 0).
        """
        # On Python ints, chains on an empty cache, remembered by the prompts: speed tricks,
        # an admission's prompts are few (numpy's per-call overhead would dominate) and recur.
        ps = prompts.tolist()
        key, memo = (bool(draft), *ps), self._memo_prefills
        if key in memo:
            return memo[key]
        T, S, R = float(sum(ps)), float(sum([chain_pairs(0, p) for p in ps])), 0.0
        b = float(len(ps))
        target, dra = self._kernels
        own = draft and self.proposer is not None
        passes = [target] if not draft or own or dra is None else [target, dra]
        time = energy = flops = nbytes = 0.0
        for k in passes:  # the encoder's tokens: cross-attended and read by every sequence
            t, en, _, fl, by = time_energy(
                k.roofline, T, S + T * k.encoder, R + b * k.encoder, batch=b
            )
            time, energy = time + t, energy + en
            flops, nbytes = flops + fl * k.devices, nbytes + by * k.devices
        if own:
            d = self._proposer_prefill(ps)
            time, energy, flops = time + d.time_s, energy + d.energy_j, flops + d.flops
        cost = PassCost(time_s=time, flops=flops, bytes=nbytes, energy_j=energy)
        return self._remember(key, cost, memo)

    def _proposer_prefill(self, prompts: list[int]) -> DraftCost:
        """The proposer's own KV prefill of ``prompts`` on an empty cache, as floats."""
        assert self.proposer is not None
        d = prefill_cost_of(
            self.proposer, deployment=self.deployment, tokens=prompts, context=[0] * len(prompts)
        )
        return DraftCost(float(d.time_s), float(d.energy_j), float(d.flops))

    @cached_property
    def _kernels(self) -> tuple[Kernel, Kernel | None]:
        """The roofline constants of the target's and the draft's passes (computed once); the
        draft's under its stack's drafting profile, its prompt passes too."""
        target = kernel(self.deployment)
        return target, None if self.draft is None else kernel(self.drafting().drafting())

    def uniform_iteration(self, *, batch: int, context_sum: float, gamma: int) -> IterationCost:
        """An iteration in which every sequence drafts ``gamma``.

        Only the batch and the sum of the contexts matter: the pass aggregates are formed
        here in closed form, each pass evaluated on Python floats and the result remembered
        (speed tricks: the serving simulator asks this every iteration; tests check it
        equals :func:`specsim.cost.step_cost`; :class:`~specsim.sim.costs.source.Remembers`).
        """
        out = self._memo.get((batch, context_sum, gamma))
        if out is None:
            out = self._remember(
                (batch, context_sum, gamma),
                named(IterationCost, self._uniform(float(batch), float(context_sum), gamma)),
            )
        return out

    def uniform_iterations(
        self, *, batch: NDArray[np.int64], context_sum: NDArray[np.int64], gamma: int
    ) -> IterationCosts:
        """Many iterations at once, element ``i`` as :meth:`uniform_iteration` gives it for
        ``batch[i]`` sequences whose contexts sum to ``context_sum[i]``, all drafting
        ``gamma``: the same operations in the same order on arrays, so the same floats (a
        speed trick: the serving simulator costs whole runs of iterations in one call)."""
        time, energy, d_time = self._uniform(
            batch.astype(np.float64), context_sum.astype(np.float64), gamma
        )
        return IterationCosts(time, energy, np.broadcast_to(d_time, time.shape))

    def iteration(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> IterationCost:
        """A batch iteration from pass aggregates.

        Draft step ``j`` batches the sequences with ``gamma_i > j``; the
        verification pass covers ``gamma_i + 1`` positions of every sequence.
        The cost model's terms depend on a pass only through sums over its
        sequences, so the sums are formed here and each pass costs one
        evaluation on Python floats (tests check it equals
        :func:`specsim.cost.step_cost` and :func:`iteration_cost`).
        """
        b = int(gamma.shape[0])
        gmax = int(gamma.max()) if b else 0
        if b == 0 or int(gamma.min()) == gmax:
            return self.uniform_iteration(batch=b, context_sum=int(context.sum()), gamma=gmax)
        (tl, te, _), draft = self._kernels
        if draft is None:
            raise ValueError(NO_DRAFT)
        dl, de, _ = draft
        # Per gamma value: how many sequences draft it and their context sum (exact in
        # float64 below 2^53); every pass's aggregates follow from these few numbers.
        count = np.bincount(gamma, minlength=gmax + 1).tolist()
        csum = np.bincount(gamma, weights=context, minlength=gmax + 1).tolist()
        T = pairs = 0.0
        for v in range(gmax + 1):
            n = verification_positions(float(v))
            T += count[v] * n
            pairs += chain_pairs(csum[v], n, count[v])
        # Not all sequences draft the same gamma, so some draft: a verification pass.
        time, energy = time_energy(
            tl, T, pairs + T * te, sum(csum) + b * te, batch=float(b), verify=True
        )[:2]
        d_time = 0.0
        nb, s = 0.0, 0.0  # draft step j batches the sequences with gamma > j: suffix sums
        for j in range(gmax - 1, -1, -1):
            nb, s = nb + count[j + 1], s + csum[j + 1]
            t, e = time_energy(dl, *chain_sums(nb, s + j * nb, 1.0, de), batch=nb)[:2]
            d_time += t
            energy += e
        return named(IterationCost, (time + d_time, energy, d_time))

    def iterations(self, count: NDArray[np.int64], csum: NDArray[np.float64]) -> IterationCosts:
        """Many mixed iterations at once: row ``i`` has ``count[i, v]`` sequences drafting
        ``v`` with context sum ``csum[i, v]`` (not all drafting the same gamma).

        Element for element what :meth:`iteration` gives (a speed trick for the serving
        simulator, which costs the iterations near the requests' ends in bulk): the same
        operations in the same order, the columns past a row's largest gamma adding exact
        zeros (the pass sums are integers, exact in float64 below 2^53).
        """
        (tl, te, _), draft = self._kernels
        if draft is None:
            raise ValueError(NO_DRAFT)
        dl, de, _ = draft
        k, top = count.shape[0], count.shape[1] - 1
        cnt = count.astype(np.float64)
        T, pairs = np.zeros(k), np.zeros(k)
        for v in range(top + 1):
            n = verification_positions(float(v))
            T = T + cnt[:, v] * n
            pairs = pairs + chain_pairs(csum[:, v], n, cnt[:, v])
        b = cnt.sum(axis=1)
        time, energy = passes(
            tl, T, pairs + T * te, csum.sum(axis=1) + b * te, batch=b, verify=T > b
        )
        d_time, nb, s = np.zeros(k), np.zeros(k), np.zeros(k)
        for j in range(top - 1, -1, -1):  # draft step j batches the sequences with gamma > j
            nb, s = nb + cnt[:, j + 1], s + csum[:, j + 1]
            t, e = passes(dl, *chain_sums(nb, s + j * nb, 1.0, de), batch=nb, verify=False)
            some = nb > 0  # a row whose largest gamma is <= j has no step j
            d_time = d_time + np.where(some, t, 0.0)
            energy = energy + np.where(some, e, 0.0)
        return IterationCosts(time + d_time, energy, d_time)

    def chunk_costs(
        self,
        decode: tuple[Any, Any, Any, Any],
        chunks: tuple[Any, Any, Any, Any, Any],
        *,
        draft: bool,
    ) -> tuple[Any, Any]:
        """Time and energy prefill chunks add to serving iterations (chunked prefill), in
        closed form: the target's verification pass with the chunks less the pass without
        them (the pass alone where no sequence decodes), plus the draft's prefill of the
        chunks when drafting, as :func:`specsim.sim.serving.chunk_drain.chunk_cost` composes them
        from :meth:`verify` and :meth:`prefill`. ``decode``: the pass's positions, causal pairs,
        context sum and sequences; ``chunks``: the chunks' tokens, pairs at their offsets,
        offset sum, count and pairs at offset 0. Whole numbers as floats (exact below 2^53),
        so the pass sums, and the floats, are those of the composed passes (tests check
        it); numbers or arrays, element for element the same."""
        (tl, te, _), dra = self._kernels
        T, P, C, n = decode
        tc, pc, cc, nc, q = chunks
        tb = T + tc
        ver = T > n  # the pass verifies when a decoding sequence drafted
        S_b, R_b = (P + pc) + tb * te, (C + cc) + (n + nc) * te
        # verified=T: the chunks' tokens never reach the stack's rejection sampler
        both_t, both_e = passes(tl, tb, S_b, R_b, batch=n + nc, verify=ver, verified=T)
        alone_t, alone_e = passes(tl, T, P + T * te, C + n * te, batch=n, verify=ver)
        t = np.where(n > 0, both_t - alone_t, both_t)
        e = np.where(n > 0, both_e - alone_e, both_e)
        if draft and dra is not None:  # prefill(draft=True) less prefill(draft=False)
            tt, et = time_energy(tl, tc, q + tc * te, 0.0 + nc * te, batch=nc)[:2]
            td, ed = time_energy(
                dra.roofline, tc, q + tc * dra.encoder, 0.0 + nc * dra.encoder, batch=nc
            )[:2]
            t, e = t + ((tt + td) - tt), e + ((et + ed) - et)
        return np.maximum(t, 0.0), e

    def uniform_iteration_times(
        self, context: NDArray[np.int64], max_gamma: int
    ) -> NDArray[np.float64]:
        """Iteration time when every sequence uses gamma, for gamma = 0..max_gamma."""
        return self._times(float(context.shape[0]), float(context.sum()), max_gamma)

    monotone_times = True  # uniform_times never falls as the context sum grows (below)

    def uniform_times(self, *, batch: int, context_sum: int, max_gamma: int) -> NDArray[np.float64]:
        """:meth:`uniform_iteration_times` from all it depends on, the batch and its context sum
        (remembered by them). Non-decreasing in the context sum at a fixed batch: the pass sums
        grow with it, the roofline time is sums and maxima of non-negative multiples of them,
        each rounded operation monotone (``BatchWide`` relies on it; tests check it)."""
        key = (batch, context_sum, -1 - max_gamma)  # apart from uniform_iteration's
        out = self._memo.get(key)
        if out is None:
            out = self._remember(key, self._times(float(batch), float(context_sum), max_gamma))
            out.flags.writeable = False
        return out

    def blocks(self, gamma: NDArray[np.int64], context: NDArray[np.int64]) -> BlockCosts:
        ver_t, ver_f, ver_e = verify_grid(self.deployment, gamma, context)
        dra = one_sequence_grid(self.drafting().drafting(), new_tokens=1, context=context)

        def per_block(x: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.broadcast_to(np.asarray(x, dtype=float), context.shape).copy()

        return BlockCosts(
            verify_time=ver_t,
            verify_flops=ver_f,
            verify_energy=ver_e,
            draft_time=per_block(dra.time_s),
            draft_flops=per_block(dra.flops),
            draft_energy=per_block(dra.energy_j),
        )


_DATACLASS_INIT = CardCost.__init__
_DEPLOYMENT_FIELDS = ("target", "hardware", "tensor_parallel", "runtime", "dtype", "weights")


def _card_cost_init(self: CardCost, *args: Any, **kwargs: Any) -> None:
    """The dataclass's ``__init__``, after naming a deployment field given to CardCost itself
    (Python's own words, "unexpected keyword argument 'target'", say nothing of the fix)."""
    stray = [k for k in _DEPLOYMENT_FIELDS if k in kwargs]
    if stray:
        raise TypeError(
            f"CardCost: {', '.join(stray)} belong to the deployment: CardCost(deployment="
            "Deployment(target=..., hardware=...), draft=...) (specsim.cost.Deployment)"
        )
    _DATACLASS_INIT(self, *args, **kwargs)


setattr(CardCost, "__init__", _card_cost_init)  # noqa: B010  (a method set on the class)
