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
from specsim.policies import FixedGamma, LoadAdaptive, LookaheadPolicy, PolicyContext
from specsim.sim.costs import CardCost, CostSource
from specsim.sim.stream import _run_lengths

__all__ = [
    "PoissonWorkload",
    "TraceWorkload",
    "ServingConfig",
    "ServingResult",
    "simulate_serving",
]

IntRange = int | tuple[int, int]


def _draw_lengths(rng: np.random.Generator, spec: IntRange, n: int) -> NDArray[np.int64]:
    if isinstance(spec, tuple):
        return rng.integers(spec[0], spec[1] + 1, size=n)
    return np.full(n, int(spec), dtype=np.int64)


def _check_range(spec: IntRange, name: str, minimum: int) -> None:
    lo, hi = spec if isinstance(spec, tuple) else (spec, spec)
    if not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in (lo, hi)):
        raise ValueError(f"{name}: expected an integer or a (low, high) pair, got {spec!r}")
    if lo < minimum or hi < lo:
        raise ValueError(f"{name}: expected {minimum} <= low <= high, got {spec!r}")


@dataclass(frozen=True, kw_only=True)
class PoissonWorkload:
    """``requests`` arrivals at ``rate_per_s``; lengths fixed or uniform on ``(low, high)``."""

    rate_per_s: float
    requests: int
    prompt_tokens: IntRange
    output_tokens: IntRange

    def __post_init__(self) -> None:
        if not (np.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise ValueError(f"rate_per_s: expected a finite rate > 0, got {self.rate_per_s!r}")
        if isinstance(self.requests, bool) or self.requests < 1:
            raise ValueError(f"requests: expected an integer >= 1, got {self.requests!r}")
        _check_range(self.prompt_tokens, "prompt_tokens", 1)
        _check_range(self.output_tokens, "output_tokens", 1)

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        n = self.requests
        return pd.DataFrame(
            {
                "arrival_s": np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n)),
                "prompt_tokens": _draw_lengths(rng, self.prompt_tokens, n),
                "output_tokens": _draw_lengths(rng, self.output_tokens, n),
            }
        )


@dataclass(frozen=True, kw_only=True)
class TraceWorkload:
    """A recorded trace: arrival time, prompt length and output length per request."""

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0 or len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError(
                "trace: arrival_s, prompt_tokens and output_tokens must be non-empty and of equal "
                f"length, got {n}, {len(self.prompt_tokens)}, {len(self.output_tokens)}"
            )
        arr = np.asarray(self.arrival_s, dtype=float)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(np.diff(arr) < 0):
            raise ValueError("trace: arrival_s must be finite, >= 0 and non-decreasing")
        for name in ("prompt_tokens", "output_tokens"):
            if min(getattr(self, name)) < 1:
                raise ValueError(f"trace: every {name} must be >= 1")

    def sample(self, rng: np.random.Generator) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "arrival_s": np.asarray(self.arrival_s, dtype=float),
                "prompt_tokens": np.asarray(self.prompt_tokens, dtype=np.int64),
                "output_tokens": np.asarray(self.output_tokens, dtype=np.int64),
            }
        )


Workload = PoissonWorkload | TraceWorkload


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


@dataclass(frozen=True)
class ServingResult:
    """Per-request table and per-iteration table of a speculative run and its plain twin."""

    requests_spec: pd.DataFrame
    iterations_spec: pd.DataFrame
    requests_plain: pd.DataFrame
    iterations_plain: pd.DataFrame

    def requests(self) -> pd.DataFrame:
        return self.requests_spec

    def events(self) -> pd.DataFrame:
        return self.iterations_spec

    def metrics(self) -> dict[str, Any]:
        spec = _summary(self.requests_spec, self.iterations_spec)
        plain = _summary(self.requests_plain, self.iterations_plain)
        out = dict(spec)
        for key in ("throughput_tokens_per_s", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99",
                    "ttft_p99", "energy_j_per_token"):  # fmt: skip
            out[f"plain_{key}"] = plain[key]
        out["speedup"] = spec["throughput_tokens_per_s"] / plain["throughput_tokens_per_s"]
        out["tpot_speedup"] = plain["tpot_p50"] / spec["tpot_p50"]
        return out

    def chrome_trace(self) -> dict[str, Any]:
        from specsim.sim.records import chrome_trace

        it = self.iterations_spec
        rows = []
        for r in it.itertuples(index=False):
            if r.prefill_s > 0:
                rows.append(("prefill", "target", r.start_s, r.start_s + r.prefill_s, r.admitted))
            t0 = r.start_s + r.prefill_s
            if r.draft_s > 0:
                rows.append(("draft", "draft", t0, t0 + r.draft_s, r.draft_tokens))
            if r.positions > 0:  # not a prefill-only iteration
                rows.append(("verify", "target", t0 + r.draft_s, r.end_s, r.positions))
            if r.positions_wasted > 0:
                rows.append(("discard", "discarded", r.end_s, r.end_s, r.positions_wasted))
        ev = pd.DataFrame(rows, columns=["kind", "track", "start_s", "end_s", "tokens"])
        ev.insert(0, "block", np.arange(len(ev)))
        return chrome_trace(ev)


def _pct(x: NDArray[np.float64], q: float) -> float:
    return float(np.percentile(x, q)) if x.shape[0] else float("inf")


def _summary(req: pd.DataFrame, it: pd.DataFrame) -> dict[str, Any]:
    ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy()
    e2e = (req["finish_s"] - req["arrival_s"]).to_numpy()
    n_out = req["output_tokens"].to_numpy()
    multi = n_out > 1
    tpot = (req["finish_s"] - req["first_token_s"]).to_numpy()[multi] / (n_out[multi] - 1)
    span = float(req["finish_s"].max() - req["arrival_s"].min())
    busy = float((it["end_s"] - it["start_s"]).sum())
    tokens = int(n_out.sum())
    energy = it["energy_j"].to_numpy()
    out: dict[str, Any] = {"requests": len(req), "tokens": tokens}
    for name, arr in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = _pct(arr, q)
    out.update(
        throughput_tokens_per_s=tokens / span,
        utilization=busy / span,
        iterations=len(it),
        mean_batch=float(it["batch"].mean()),
        mean_gamma=float((it["draft_tokens"].sum()) / max(int(it["batch"].sum()), 1)),
        target_positions_verified=int(it["positions"].sum()),
        target_positions_wasted=int(it["positions_wasted"].sum()),
        draft_tokens_wasted=int(it["draft_wasted"].sum()),
        tokens_per_target_pass=float(it["emitted"].sum() / max(int(it["batch"].sum()), 1)),
        time_s=span,
        energy_j=None if np.isnan(energy).all() else float(np.nansum(energy)),
    )
    out["energy_j_per_token"] = None if out["energy_j"] is None else out["energy_j"] / tokens
    return out


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
    fixed = policy.gamma if isinstance(policy, FixedGamma) else None
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
                if gam >= 0:
                    g = np.minimum(rem - 1, gam)
                else:
                    assert draws is not None
                    pos = ptr - base[rid]
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

                    pos = ptr - base[rid]
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
    vector_ok = isinstance(config.policy, FixedGamma | LoadAdaptive) and bool(np.all(weights == 1))
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
