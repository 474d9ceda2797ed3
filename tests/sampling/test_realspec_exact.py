"""Sampled speculative decoding on the committed tiny pair is exact beyond the first token.

At temperature 1, :func:`specsim.measure.decode.speculative_decode` (the code the
measurements of ``models/measured/real`` ran: :func:`specsim.sampling.verify_batch`
and KV-cache rollback) generates three tokens for many copies of one prompt; the
joint law of tokens 1..3 is compared by a G test with the target's exact
autoregressive law, computed from the target model on a partition of the
triples (the likeliest first tokens, then the likeliest second tokens after each,
then third tokens; everything else pooled). Two drafts: the distilled draft
(most blocks end in a rejection: the correction path and rollback after it) and
the target itself as its own draft (every draft accepted: the accepted-draft
path at positions 2 and 3 and the bonus token). A broken acceptance rule that
accepts every draft must fail the same test. Needs the optional ``measure`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_REASON = "needs the optional extra specsim[measure] (pip install -e '.[measure]')"
torch = pytest.importorskip("torch", reason=_REASON)
pytest.importorskip("transformers", reason=_REASON)
pytest.importorskip("tokenizers", reason=_REASON)
pytest.importorskip("safetensors", reason=_REASON)

from scipy import stats  # noqa: E402

import specsim.measure.decode as decode  # noqa: E402
from specsim.measure.tinylm import load_tiny, load_tokenizer  # noqa: E402
from specsim.sampling import BatchBlockResult  # noqa: E402

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
PROMPT = "    def __init__(self"  # code: a peaked target law, so the partition has mass
ROWS = 600  # copies of the prompt, one batched call (about 3 ms a row here)
pytestmark = pytest.mark.skipif(
    not (TINY / "target.safetensors").is_file(), reason="models/tiny not trained yet"
)


@pytest.fixture(scope="module")
def pair() -> dict[str, Any]:
    torch.set_num_threads(1)
    tok = load_tokenizer(TINY / "tokenizer.json")
    target, _ = load_tiny(TINY / "target.safetensors", tokenizer=tok)
    draft, _ = load_tiny(TINY / "draft-distil.safetensors", tokenizer=tok)
    prompt = np.asarray([tok.encode(PROMPT).ids], dtype=np.int64)
    return {
        "target": target,
        "draft-distil": draft,
        "prompt": prompt,
        "cells": _partition(target, prompt),
    }


def _next_law(model: Any, seqs: list[list[int]]) -> np.ndarray:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor(seqs)).logits[:, -1].double()
    return torch.softmax(logits, dim=-1).numpy()


def _partition(target: Any, prompt: np.ndarray) -> dict[tuple[int, ...], float]:
    """Exact target probabilities of a partition of (x1, x2, x3): a key (i, j, k) is that
    triple, (i, j, -1) the rest after (i, j), (i, -1) the rest after i, (-1,) the rest."""
    base = prompt[0].tolist()
    p1 = _next_law(target, [base])[0]
    cells: dict[tuple[int, ...], float] = {}
    firsts = [int(i) for i in np.argsort(p1)[::-1][:3] if p1[i] >= 0.01]
    cells[(-1,)] = 1.0 - float(p1[firsts].sum())
    p2s = _next_law(target, [base + [i] for i in firsts])
    for i, p2 in zip(firsts, p2s, strict=True):
        seconds = [int(j) for j in np.argsort(p2)[::-1][:4] if p2[j] >= 0.02]
        cells[(i, -1)] = float(p1[i]) * (1.0 - float(p2[seconds].sum()))
        p3s = _next_law(target, [base + [i, j] for j in seconds])
        for j, p3 in zip(seconds, p3s, strict=True):
            thirds = [int(k) for k in np.argsort(p3)[::-1][:4] if p3[k] >= 0.03]
            pij = float(p1[i] * p2[j])
            cells[(i, j, -1)] = pij * (1.0 - float(p3[thirds].sum()))
            for k in thirds:
                cells[(i, j, k)] = pij * float(p3[k])
    assert abs(sum(cells.values()) - 1.0) < 1e-9
    return cells


def _cell_of(x: np.ndarray, cells: dict[tuple[int, ...], float]) -> tuple[int, ...]:
    i, j, k = (int(v) for v in x)
    for key in ((i, j, k), (i, j, -1), (i, -1)):
        if key in cells:
            return key
    return (-1,)


def _g_pvalue(pair: dict[str, Any], draft: str) -> float:
    cells = pair["cells"]
    prompt = np.repeat(pair["prompt"], ROWS, axis=0)
    tokens = decode.speculative_decode(
        pair["target"],
        pair[draft],
        prompt=prompt,
        new_tokens=3,
        gamma=2,
        temperature=1.0,
        rng=np.random.default_rng(21),
    ).tokens
    keys = list(cells)
    index = {key: n for n, key in enumerate(keys)}
    observed = np.bincount([index[_cell_of(x, cells)] for x in tokens], minlength=len(keys))
    expected = np.array([cells[key] for key in keys]) * tokens.shape[0]
    # Pool the cells expected fewer than 5 times into one, as the test needs.
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum()).astype(float)
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert len(exp) >= 8, "the partition is too coarse to test anything"
    result = stats.power_divergence(obs, exp, lambda_="log-likelihood")
    print(f"{draft}: G = {result.statistic:.1f} on {len(exp) - 1} dof, p = {result.pvalue:.3g}")
    return float(result.pvalue)


@pytest.mark.parametrize("draft", ["draft-distil", "target"])
def test_joint_law_of_three_sampled_tokens_is_the_targets(pair: dict[str, Any], draft: str) -> None:
    assert _g_pvalue(pair, draft) > 1e-3


def _accept_everything(orig: Callable[..., BatchBlockResult]) -> Callable[..., BatchBlockResult]:
    def broken(
        xs: np.ndarray,
        qs: np.ndarray,
        p: np.ndarray,
        rng: np.random.Generator,
        *,
        greedy: bool = False,
    ) -> BatchBlockResult:
        res = orig(xs, qs, p, rng, greedy=greedy)
        gamma = xs.shape[1]
        bonus = res.tokens[:, :1]  # any token in the last slot: the drafts are what is wrong
        return BatchBlockResult(
            tokens=np.concatenate([xs, bonus], axis=1),
            accepted=np.full(xs.shape[0], gamma, dtype=np.int64),
        )

    return broken


def test_a_broken_acceptance_rule_fails(
    pair: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode, "verify_batch", _accept_everything(decode.verify_batch))
    assert _g_pvalue(pair, "draft-distil") < 1e-6
