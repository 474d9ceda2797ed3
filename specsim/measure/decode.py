"""Real decoding on real models: autoregressive and speculative, with KV-cache rollback.

:func:`speculative_decode` runs Leviathan et al.'s Algorithm 1 (ICML 2023,
arXiv:2211.17192, Section 2.3) end to end: the draft proposes ``gamma`` tokens
one pass at a time, the target scores all of them in one pass over
``gamma + 1`` positions, and :func:`specsim.sampling.verify_batch` accepts or
corrects them exactly. Rejected positions are rolled back by cropping each
model's KV cache to the committed prefix, so nothing is ever recomputed.

Bookkeeping: each model's cache holds the committed sequence except its last
token (and, for the draft, the drafted tokens after a block). A pass feeds
``sequence[cache_length:]``; after a block both caches are cropped to at most
``len(sequence) - 1``. A draft whose cache lacks the last accepted draft token
(every draft accepted) feeds two tokens in its next first pass.

Batches: every sequence of a batch must keep the same length for one batched
cache, so a block emits ``k + 1`` tokens to every row with ``k`` the smallest
number accepted in the batch; a row that accepted more keeps its first ``k + 1``
verified tokens (its ``k + 1``-th is an accepted draft token). Each emitted
token is still distributed exactly as the target's conditional: the block
boundary is a stopping time that does not change any token's law.

Temperature ``T`` divides the logits; ``T = 0`` is greedy (argmax, and
verification accepts a draft token iff it is the target's argmax). Random-weight
models have near-uniform next-token distributions, so T sets the acceptance
rate: a low T sharpens two unrelated models into disagreement, a high T
flattens both towards uniform and agreement (see ``docs/traces.md``).

:func:`specsim.measure.interleave.interleaved_decode` runs the same steps
(:func:`spec_block`, :func:`plain_step`) for a speculative run and a plain run of the
same target in turn.

Wall times synchronise the device before each clock read; they include the
host work of a Python decoding loop (sampling in numpy), as a real
implementation would. The prompt prefill is not timed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray

from specsim.checks import check_int
from specsim.measure.kvcache import DecodeState
from specsim.measure.models import synchronize
from specsim.sampling import acceptance_rate, verify_batch

__all__ = [
    "DecodeState",
    "next_token_probs",
    "sample_rows",
    "Decoded",
    "SpecDecoded",
    "autoregressive_decode",
    "speculative_decode",
    "check_prompt",
    "start_state",
    "plain_step",
    "spec_block",
]

IntArray = NDArray[np.int64]


def next_token_probs(logits: torch.Tensor, temperature: float) -> NDArray[np.float64]:
    """Host float64 probabilities ``softmax(logits / T)`` over the last axis; one-hot at T = 0."""
    if temperature < 0 or not np.isfinite(temperature):
        raise ValueError(f"temperature: expected a finite value >= 0, got {temperature!r}")
    if temperature == 0:
        top = logits.argmax(dim=-1).cpu().numpy()
        out = np.zeros(tuple(logits.shape), dtype=np.float64)
        np.put_along_axis(out, top[..., None], 1.0, axis=-1)
        return out
    probs = torch.softmax(logits.double() / temperature, dim=-1).cpu().numpy()
    # Renormalise on the host so rows sum to 1 within float64 rounding.
    return np.asarray(probs / probs.sum(axis=-1, keepdims=True), dtype=np.float64)


def sample_rows(probs: NDArray[np.float64], rng: np.random.Generator) -> IntArray:
    """One token per row of ``probs`` (batch, vocab) by inverse CDF, one uniform per row."""
    u = np.asarray(rng.random(size=(int(probs.shape[0]),)), dtype=np.float64)
    cdf = np.cumsum(probs, axis=-1)
    # searchsorted(cdf, u * total, side="right") written as a count to vectorise over rows.
    idx = np.count_nonzero(cdf <= (u * cdf[:, -1])[:, None], axis=-1)
    return np.minimum(idx, probs.shape[-1] - 1).astype(np.int64)


def _choose(probs: NDArray[np.float64], temperature: float, rng: np.random.Generator) -> IntArray:
    if temperature == 0:
        return np.argmax(probs, axis=-1).astype(np.int64)
    return sample_rows(probs, rng)


def _clock(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()


def check_prompt(prompt: IntArray, new_tokens: int, gamma: int | None = None) -> IntArray:
    p = np.asarray(prompt)
    if p.ndim != 2 or p.shape[1] < 1 or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"prompt: expected integer tokens of shape (batch, >=1), got {p.shape}")
    check_int(new_tokens, name="new_tokens", minimum=1)
    if gamma is not None:
        check_int(gamma, name="gamma", minimum=1)
    return p.astype(np.int64)


def start_state(model: Any, prompt: IntArray) -> tuple[DecodeState, IntArray]:
    """A state with the prompt prefilled (all but the last token) and the sequence."""
    batch = prompt.shape[0]
    t = torch.from_numpy(prompt)
    if model.config.is_encoder_decoder:
        state = DecodeState(model, batch=batch, source=t)
        start = int(model.config.decoder_start_token_id)
        return state, np.full((batch, 1), start, dtype=np.int64)
    state = DecodeState(model, batch=batch)
    if prompt.shape[1] > 1:
        state.forward(t[:, :-1], last_only=True)
    return state, prompt.copy()


def _pending(state: DecodeState, seq: IntArray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(seq[:, state.length :]))


@dataclass(frozen=True, slots=True)
class Decoded:
    """Tokens generated by :func:`autoregressive_decode` and one timing row per step.

    ``tokens`` is (batch, new_tokens); ``steps`` has columns ``step, context,
    forward_s, sample_s`` (see the ``autoregressive`` trace kind).
    """

    tokens: IntArray
    steps: pd.DataFrame


@dataclass(frozen=True, slots=True)
class SpecDecoded:
    """Tokens generated by :func:`speculative_decode`, one row per block and sequence,
    and one row per drafted position (the ``specdec`` and ``positions`` trace kinds)."""

    tokens: IntArray
    blocks: pd.DataFrame
    positions: pd.DataFrame


def autoregressive_decode(
    model: Any,
    *,
    prompt: IntArray,
    new_tokens: int,
    temperature: float,
    rng: np.random.Generator,
) -> Decoded:
    """Generate ``new_tokens`` tokens per row one pass at a time, sampling at ``temperature``."""
    prompt = check_prompt(prompt, new_tokens)
    state, seq = start_state(model, prompt)
    rows: list[dict[str, Any]] = []
    for step in range(new_tokens):
        seq = plain_step(state, seq, temperature=temperature, rng=rng, step=step, rows=rows)
    return Decoded(tokens=seq[:, -new_tokens:], steps=pd.DataFrame(rows))


def plain_step(
    state: DecodeState,
    seq: IntArray,
    *,
    temperature: float,
    rng: np.random.Generator,
    step: int,
    rows: list[dict[str, Any]],
) -> IntArray:
    """One plain decoding step after ``seq``; its timing row is appended to ``rows``."""
    context = seq.shape[1]
    t0 = _clock(state.device)
    logits = state.forward(_pending(state, seq), last_only=True)[:, -1]
    t1 = _clock(state.device)
    token = _choose(next_token_probs(logits, temperature), temperature, rng)
    t2 = time.perf_counter()
    rows.append({"step": step, "context": context, "forward_s": t1 - t0, "sample_s": t2 - t1})
    return np.concatenate([seq, token[:, None]], axis=1)


def speculative_decode(
    target: Any,
    draft: Any,
    *,
    prompt: IntArray,
    new_tokens: int,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
) -> SpecDecoded:
    """Generate at least ``new_tokens`` tokens per row by speculative decoding.

    Each block drafts ``gamma`` tokens; the result keeps the first
    ``new_tokens`` of what was generated (a last block may produce more).
    ``positions.alpha`` is ``sum_x min(p(x), q(x))`` at each drafted position,
    computed after the timed phases so that it costs the loop nothing.
    """
    prompt = check_prompt(prompt, new_tokens, gamma)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(
            f"draft: vocabulary {draft.config.vocab_size} differs from the target's "
            f"{target.config.vocab_size}"
        )
    t_state, seq = start_state(target, prompt)
    d_state, _ = start_state(draft, prompt)
    blocks: list[dict[str, Any]] = []
    positions: list[dict[str, Any]] = []
    runs = spec_blocks(
        t_state,
        d_state,
        seq,
        new_tokens=new_tokens,
        gamma=gamma,
        temperature=temperature,
        rng=rng,
        blocks=blocks,
        positions=positions,
    )
    # new_tokens >= 1, so there is at least one block; each run is a view of the sequence.
    tokens = list(runs)[-1][:, :new_tokens]
    return SpecDecoded(
        tokens=tokens, blocks=pd.DataFrame(blocks), positions=pd.DataFrame(positions)
    )


def spec_blocks(
    t_state: DecodeState,
    d_state: DecodeState,
    seq: IntArray,
    *,
    new_tokens: int,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
    blocks: list[dict[str, Any]],
    positions: list[dict[str, Any]],
    first_block: int = 0,
) -> Iterator[IntArray]:
    """Speculative blocks after ``seq`` (:func:`spec_block`, numbered from ``first_block``)
    until at least ``new_tokens`` tokens follow it; after each block, yields every token
    generated so far (a generator: the caller may work between blocks)."""
    start_len = seq.shape[1]
    block = first_block
    while seq.shape[1] - start_len < new_tokens:
        seq = spec_block(
            t_state,
            d_state,
            seq,
            gamma=gamma,
            temperature=temperature,
            rng=rng,
            block=block,
            blocks=blocks,
            positions=positions,
        )
        block += 1
        yield seq[:, start_len:]


def spec_block(
    t_state: DecodeState,
    d_state: DecodeState,
    seq: IntArray,
    *,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
    block: int,
    blocks: list[dict[str, Any]],
    positions: list[dict[str, Any]],
) -> IntArray:
    """One speculative block after ``seq``: draft, verify, roll back; its rows are appended
    to ``blocks`` and ``positions``; returns the longer sequence."""
    greedy = temperature == 0
    context = seq.shape[1]
    t0 = _clock(d_state.device)
    drafted, q_rows, pass_s = _draft(d_state, seq, gamma=gamma, temperature=temperature, rng=rng)
    t1 = _clock(t_state.device)
    xs = np.stack(drafted, axis=1)
    feed_t = torch.cat([_pending(t_state, seq), torch.from_numpy(xs)], dim=1)
    logits = t_state.forward(feed_t)[:, -(gamma + 1) :]
    t2 = _clock(t_state.device)
    p = next_token_probs(logits, temperature)
    qs = np.stack(q_rows, axis=1)
    result = verify_batch(xs, qs, p, rng, greedy=greedy)
    k = int(result.accepted.min())
    seq = np.concatenate([seq, result.tokens[:, : k + 1]], axis=1)
    t_state.rollback(seq.shape[1] - 1)
    d_state.rollback(min(d_state.length, seq.shape[1] - 1))
    t3 = time.perf_counter()
    alpha = np.asarray(acceptance_rate(p[:, :gamma], qs)).reshape(len(seq), gamma)
    _append_rows(
        blocks,
        positions,
        block=block,
        context=context,
        accepted=result.accepted,
        emitted=k + 1,
        alpha=alpha,
        times=(t1 - t0, t2 - t1, t3 - t2),
        pass_s=pass_s,
    )
    return seq


def _draft(
    d_state: DecodeState,
    seq: IntArray,
    *,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
) -> tuple[list[IntArray], list[NDArray[np.float64]], list[float]]:
    """``gamma`` draft passes after ``seq``, one token each: the tokens, the draft's
    distributions and each pass's wall time."""
    drafted, q_rows, pass_s = [], [], []
    feed = _pending(d_state, seq)
    for _ in range(gamma):
        tp = time.perf_counter()
        q = next_token_probs(d_state.forward(feed, last_only=True)[:, -1], temperature)
        x = _choose(q, temperature, rng)
        drafted.append(x)
        q_rows.append(q)
        feed = torch.from_numpy(x[:, None])
        pass_s.append(time.perf_counter() - tp)
    return drafted, q_rows, pass_s


def _append_rows(
    blocks: list[dict[str, Any]],
    positions: list[dict[str, Any]],
    *,
    block: int,
    context: int,
    accepted: IntArray,
    emitted: int,
    alpha: NDArray[np.float64],
    times: tuple[float, float, float],
    pass_s: list[float],
) -> None:
    """A block's rows: one a sequence in ``blocks`` (draft, target and verify times), one a
    drafted position in ``positions``."""
    draft_s, target_s, verify_s = times
    for b in range(len(accepted)):
        n = int(accepted[b])
        blocks.append(
            {
                "block": block,
                "seq": b,
                "context": context,
                "accepted": n,
                "emitted": emitted,
                "draft_s": draft_s,
                "target_s": target_s,
                "verify_s": verify_s,
            }
        )
        for i, draft_pass_s in enumerate(pass_s):
            positions.append(
                {
                    "block": block,
                    "seq": b,
                    "position": i + 1,
                    "alpha": float(alpha[b, i]),
                    "accepted": i < n,
                    "reached": i <= n,
                    "draft_pass_s": draft_pass_s,
                }
            )
