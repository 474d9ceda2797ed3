"""A speculative run and a plain run of the same target, timed in turn block by block
: after each speculative block that emits ``e`` tokens, the plain run decodes
``e`` tokens, so whatever else loads the machine moves both and their speedup can be
paired block by block (:func:`specsim.stats.ratio_interval`). The steps are
:mod:`specsim.measure.decode`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.measure.decode import IntArray, check_prompt, plain_step, spec_blocks, start_state

__all__ = ["Interleaved", "interleaved_decode"]


@dataclass(frozen=True, slots=True)
class Interleaved:
    """A speculative run and its plain twin, timed block by block in turn
    (:func:`interleaved_decode`): ``blocks`` and ``positions`` as :class:`SpecDecoded`'s,
    ``steps`` as :class:`Decoded`'s; the plain steps run right after block ``i`` are the next
    ``blocks.emitted[i]`` rows of ``steps``."""

    blocks: pd.DataFrame
    positions: pd.DataFrame
    steps: pd.DataFrame


def interleaved_decode(
    target: Any,
    draft: Any,
    *,
    prompt: IntArray,
    new_tokens: int,
    gamma: int,
    temperature: float,
    rng: np.random.Generator,
    first_block: int = 0,
    first_step: int = 0,
) -> Interleaved:
    """Speculative decoding and plain decoding of the same target from the same prompt, in
    turn: after each speculative block that emits ``e`` tokens, the plain run decodes ``e``
    tokens. Each block's speculative and plain times are then measured under the same load
    on the machine, so the ratio of their sums (the speedup) is paired block by block.

    The plain run samples its own tokens (from a generator drawn from ``rng``); blocks and
    steps are numbered from ``first_block`` and ``first_step`` (runs made of segments).
    """
    prompt = check_prompt(prompt, new_tokens, gamma)
    t_state, seq = start_state(target, prompt)
    d_state, _ = start_state(draft, prompt)
    p_state, plain = start_state(target, prompt)
    plain_rng = np.random.default_rng(int(rng.integers(0, 2**63 - 1)))
    blocks: list[dict[str, Any]] = []
    positions: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    step = first_step
    for _ in spec_blocks(
        t_state,
        d_state,
        seq,
        new_tokens=new_tokens,
        gamma=gamma,
        temperature=temperature,
        rng=rng,
        blocks=blocks,
        positions=positions,
        first_block=first_block,
    ):
        for _ in range(int(blocks[-1]["emitted"])):
            plain = plain_step(
                p_state, plain, temperature=temperature, rng=plain_rng, step=step, rows=steps
            )
            step += 1
    return Interleaved(
        blocks=pd.DataFrame(blocks), positions=pd.DataFrame(positions), steps=pd.DataFrame(steps)
    )
