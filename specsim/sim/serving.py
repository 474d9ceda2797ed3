"""Serving many requests: arrivals, continuous batching, a KV-memory limit.

One accelerator (or tensor-parallel group, as one simpy resource, which the
engine process holds while it has work) serves a stream of requests. Each
batch iteration:

1. admits waiting requests first-come first-served while the batch has room
   (``max_batch``) and their KV cache fits (prompt + output + lookahead
   reserved up front, so an admitted request never has to be evicted); the
   admitted prompts are prefilled in one pass of the target (and the draft),
   which also yields each request's first token (TTFT); a one-token request
   is then done and never joins the decoding batch;
2. asks the lookahead policy for each running sequence's ``gamma_i``;
3. runs the draft steps, step ``j`` batching every sequence with ``gamma_i > j``;
4. runs one verification pass over every sequence's ``gamma_i + 1`` positions
   (its cost from the cost model at that batch and those contexts);
5. emits each sequence's accepted tokens plus one and retires finished ones.

The same workload is then served without speculation (``gamma = 0``) in the
same run, for the speedup. The draft shares the target's accelerator
(serialized); overlapped drafting is modelled for single streams only.
Workloads are in :mod:`specsim.sim.workload`; the result, its metrics record
and Chrome trace in :mod:`specsim.sim.records`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy
from numpy.typing import NDArray

from specsim.acceptance import AcceptanceProcess
from specsim.policies import (
    FixedGamma,
    LoadAdaptive,
    LookaheadPolicy,
    PolicyContext,
    fixed_gamma,
)
from specsim.sim.costs import CardCost, CostSource
from specsim.sim.records import ServingResult
from specsim.sim.stream import _run_lengths
from specsim.sim.workload import Workload

__all__ = ["ServingConfig", "simulate_serving"]


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    """A serving run. ``kv_capacity_tokens``: KV-cache budget in tokens (None: from the
    accelerator's memory left after the weights, for a CardCost)."""

    workload: Workload
    cost: CostSource
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    max_batch: int = 64
    kv_capacity_tokens: int | None = None
    max_gamma: int = 16

    def __post_init__(self) -> None:
        if isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise ValueError(f"max_batch: expected an integer >= 1, got {self.max_batch!r}")
        if isinstance(self.max_gamma, bool) or self.max_gamma < 0:
            raise ValueError(f"max_gamma: expected an integer >= 0, got {self.max_gamma!r}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise ValueError(
                f"kv_capacity_tokens: expected a positive integer, got {self.kv_capacity_tokens!r}"
            )
        if self.cost.overlapped:
            raise ValueError(
                "cost: overlapped drafting (a draft accelerator) is modelled for single streams "
                "only; serve with the draft on the target's accelerator"
            )

    def kv_capacity(self) -> int | None:
        if self.kv_capacity_tokens is not None:
            return int(self.kv_capacity_tokens)
        if isinstance(self.cost, CardCost):
            from specsim.cards import DTYPE_BYTES

            c = self.cost
            weights = c.target.shape_params * DTYPE_BYTES[c.dtype or c.target.dtype]
            weights /= c.tensor_parallel
            if c.draft is not None:
                weights += c.draft.shape_params * DTYPE_BYTES[c.dtype or c.draft.dtype]
            free = c.hardware.mem_capacity - weights
            if free <= 0:
                raise ValueError(
                    f"cost: the weights ({weights / 1e9:.1f} GB per device) leave no room for a "
                    f"KV cache on {c.hardware.slug} ({c.hardware.mem_capacity / 1e9:.1f} GB)"
                )
            return int(free / c.kv_bytes_per_token())
        return None


def _serve(
    config: ServingConfig,
    reqs: pd.DataFrame,
    run_flat: NDArray[np.int64],
    base: NDArray[np.int64],
    policy: LookaheadPolicy,
    draws: list[Any] | None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    env = simpy.Environment()
    accel = simpy.Resource(env, capacity=1)
    cost = config.cost
    n = len(reqs)
    arrival = reqs["arrival_s"].to_numpy()
    prompt = reqs["prompt_tokens"].to_numpy().astype(np.int64)
    out_len = reqs["output_tokens"].to_numpy().astype(np.int64)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    capacity = config.kv_capacity()
    reserve = prompt + out_len + config.max_gamma + 1
    if capacity is not None and reserve.max() > capacity:
        i = int(np.argmax(reserve))
        raise ValueError(
            f"kv_capacity_tokens: {capacity} tokens cannot hold request {i} "
            f"(prompt {prompt[i]} + output {out_len[i]} + lookahead {config.max_gamma + 1})"
        )
    waiting: deque[int] = deque()
    wake = [env.event()]
    rows: list[tuple[float, ...]] = []
    max_gamma = config.max_gamma
    fixed = fixed_gamma(policy)
    if fixed is not None and fixed > max_gamma:
        raise ValueError(f"policy: gamma {fixed} exceeds max_gamma {max_gamma}")
    with_energy = isinstance(cost, CardCost)
    nan = float("nan")
    run_flat1 = run_flat + 1  # tokens a block emits when not capped by gamma

    def arrivals() -> simpy.events.ProcessGenerator:
        for i in range(n):
            yield env.timeout(max(0.0, arrival[i] - env.now))
            waiting.append(i)
            if not wake[0].triggered:
                wake[0].succeed()

    def engine() -> simpy.events.ProcessGenerator:
        # Struct of arrays over the running sequences, updated in place: few numpy
        # calls per batch iteration, and the batch's context sum and a lower bound
        # on its tokens still to emit kept as numbers (a speed trick: the serving
        # benchmark runs thousands of iterations).
        rid = np.zeros(0, dtype=np.int64)  # request of each running sequence
        ptr = np.zeros(0, dtype=np.int64)  # index of its next position in run_flat
        end = np.zeros(0, dtype=np.int64)  # ptr at its last token: tokens to emit = end - ptr
        off = np.zeros(0, dtype=np.int64)  # its context is off + ptr
        ones = np.ones(config.max_batch, dtype=np.int64)
        caps = np.zeros(config.max_batch, dtype=np.int64)  # gamma + 1, for a fast minimum
        ctx_sum = 0  # sum of the running sequences' contexts
        low = 0  # a lower bound on min(end - ptr); exact after a refresh
        used = 0  # KV tokens reserved
        done = 0
        hold: Any = None  # the accelerator, held while there is work
        while done < n:
            if not waiting and rid.shape[0] == 0:
                if hold is not None:
                    accel.release(hold)
                    hold = None
                wake[0] = env.event()
                yield wake[0]
            if hold is None:
                hold = accel.request()
                yield hold
            start = env.now
            admitted: list[int] = []
            while waiting and rid.shape[0] + len(admitted) < config.max_batch:
                i = waiting[0]
                if capacity is not None and used + reserve[i] > capacity:
                    break
                waiting.popleft()
                admitted.append(i)
                used += int(reserve[i])
            prefill_s = 0.0
            energy = 0.0
            if admitted:
                adm = np.asarray(admitted, dtype=np.int64)
                pc = cost.prefill(prompt[adm], draft=fixed != 0)
                prefill_s = pc.time_s
                energy += pc.energy_j or 0.0
                first_tok[adm] = start + prefill_s
                # The prefill emits each request's first token; one-token requests are done.
                one = out_len[adm] == 1
                if one.any():
                    finish[adm[one]] = start + prefill_s
                    used -= int(reserve[adm[one]].sum())
                    done += int(one.sum())
                    adm = adm[~one]
                if adm.shape[0]:
                    rid = np.concatenate([rid, adm])
                    ptr = np.concatenate([ptr, base[adm] + 1])
                    end = np.concatenate([end, base[adm] + out_len[adm]])
                    off = np.concatenate([off, prompt[adm] - base[adm]])
                    ctx_sum += int(prompt[adm].sum()) + adm.shape[0]
                    low = int((end - ptr).min())
            b = rid.shape[0]
            if b == 0:  # only one-token requests were admitted: a prefill-only iteration
                yield env.timeout(prefill_s)
                rows.append((start, env.now, prefill_s, 0.0, 0, len(admitted), 0, 0, 0, 0, 0,
                             energy if with_energy else nan))  # fmt: skip
                continue
            # The lookahead: one gamma for all (fixed, load-adaptive) or one per sequence.
            if fixed is not None:
                gam = fixed
            elif isinstance(policy, LoadAdaptive):
                table = cost.uniform_iteration_times(off + ptr, policy.max_gamma)
                gam = policy.choose(
                    PolicyContext(position=0, draw=None, last_gamma=None, last_accepted=None,
                                  batch=b, pass_time=lambda x: float(table[x]))  # noqa: B023
                )  # fmt: skip
                gam = min(gam, max_gamma)  # the KV reservation covers max_gamma, as per token
            else:
                gam = -1
            if draws is None and 0 <= gam < low:
                # Every sequence drafts gam (none is within gam of its end): the fast path.
                if gam == 0:  # plain decoding: one token each
                    acc = ones[:b]
                    ptr += acc
                    emitted = b
                else:
                    caps[:b] = gam + 1
                    acc = run_flat1[ptr]
                    np.minimum(acc, caps[:b], out=acc)
                    ptr += acc
                    emitted = sum(acc.tolist())
                drafted = gam * b
                low -= gam + 1
                t_iter, e_iter, d_time = cost.uniform_iteration(
                    batch=b, context_sum=ctx_sum, gamma=gam
                )
            else:
                rem = end - ptr
                if draws is not None:
                    pos = ptr - base[rid]  # tokens each sequence has emitted
                if gam >= 0:
                    g = np.minimum(rem - 1, gam)
                else:
                    assert draws is not None
                    g = np.array(
                        [policy.choose(PolicyContext(position=int(pos[k]), draw=draws[rid[k]],
                                                     last_gamma=None, last_accepted=None,
                                                     batch=b))
                         for k in range(b)], dtype=np.int64)  # fmt: skip
                    g = np.clip(np.minimum(g, rem - 1), 0, max_gamma)
                if draws is None:
                    acc = np.minimum(run_flat1[ptr], g + 1)
                else:
                    from specsim.acceptance import accepted_in_block

                    acc = 1 + np.array([accepted_in_block(draws[rid[k]], int(pos[k]), int(g[k]))
                                        for k in range(b)], dtype=np.int64)  # fmt: skip
                drafted = int(g.sum())
                t_iter, e_iter, d_time = cost.iteration(g, off + ptr)
                ptr += acc
                emitted = int(acc.sum())
                low = int((rem - acc).min())
            ctx_sum += emitted
            yield env.timeout(prefill_s + t_iter)
            now = env.now
            wasted = drafted + b - emitted
            rows.append(
                (start, now, prefill_s, d_time, b, len(admitted), drafted, drafted + b,
                 wasted, wasted, emitted, energy + e_iter if with_energy else nan)
            )  # fmt: skip
            if low <= 0 and (low := int((end - ptr).min())) <= 0:
                fin = ptr >= end  # finished sequences: retire them
                finished = rid[fin]
                finish[finished] = now
                used -= int(reserve[finished].sum())
                done += finished.shape[0]
                ctx_sum -= int((off[fin] + end[fin]).sum())
                keep = ~fin
                rid, ptr, end, off = rid[keep], ptr[keep], end[keep], off[keep]
                low = int((end - ptr).min()) if rid.shape[0] else 0
            elif low <= gam:  # a sequence may be within gam of its end: make the bound exact
                low = int((end - ptr).min())

    env.process(arrivals())
    env.process(engine())
    env.run()
    req = reqs.copy()
    req["first_token_s"] = first_tok
    req["finish_s"] = finish
    it = pd.DataFrame(
        rows,
        columns=["start_s", "end_s", "prefill_s", "draft_s", "batch", "admitted", "draft_tokens",
                 "positions", "positions_wasted", "draft_wasted", "emitted", "energy_j"],
    )  # fmt: skip
    return req, it


def simulate_serving(config: ServingConfig, rng: np.random.Generator) -> ServingResult:
    """Serve the workload with speculation and, in the same run, without it."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    reqs = config.workload.sample(rng)
    lengths = reqs["output_tokens"].to_numpy() + config.max_gamma + 1
    draws = [config.acceptance.sample(rng, int(m)) for m in lengths]
    ends = np.cumsum(lengths).astype(np.int64)
    base = ends - lengths
    weights = np.concatenate([d.position_weights for d in draws])
    one_gamma = fixed_gamma(config.policy) is not None or isinstance(config.policy, LoadAdaptive)
    vector_ok = one_gamma and bool(np.all(weights == 1))
    # Run lengths of accepted positions, request by request: one pass over all the
    # requests' positions, each run cut at the end of its request's draw.
    run_flat = _run_lengths(np.concatenate([d.u < d.prob for d in draws]))
    np.minimum(run_flat, np.repeat(ends, lengths) - np.arange(ends[-1]), out=run_flat)
    spec = _serve(config, reqs, run_flat, base, config.policy, None if vector_ok else draws)
    plain = _serve(config, reqs, run_flat, base, FixedGamma(gamma=0), None)
    return ServingResult(
        requests_spec=spec[0], iterations_spec=spec[1],
        requests_plain=plain[0], iterations_plain=plain[1],
    )  # fmt: skip
