"""Hugging Face's own generation, plain and assisted, as a peer measurement.

``model.generate(..., assistant_model=draft)`` is transformers' speculative
decoding ("assisted generation"; speculative sampling at temperature > 0):
the same pair of models as :func:`specsim.measure.decode.speculative_decode`,
run by someone else's loop. With the ``constant`` schedule and no confidence
threshold the assistant drafts exactly ``num_assistant_tokens`` tokens per
block, like a fixed gamma; the default ``heuristic`` schedule adapts it (+2
after a fully accepted block, -1 otherwise). The number of tokens HF actually
drafts is not exposed, so forward calls of both models are counted with
forward pre-hooks: target passes per generated token measures how many tokens
each verification emitted, prefill included.

Sampling uses torch's global generator: it is seeded from the caller's numpy
generator inside :func:`torch.random.fork_rng`, which restores it afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig

from specsim.cards import load_model
from specsim.measure.models import synchronize

__all__ = ["SCHEDULES", "hf_generate", "assisted_runs"]

SCHEDULES = ("constant", "heuristic")
"""The ``num_assistant_tokens_schedule`` values this harness measures."""


class _Counter:
    """Counts forward calls of a module through a pre-hook."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, module: Any, args: Any) -> None:
        self.calls += 1


def hf_generate(
    target: Any,
    draft: Any | None,
    *,
    prompt: np.ndarray,
    new_tokens: int,
    temperature: float,
    rng: np.random.Generator,
    num_assistant_tokens: int = 0,
    schedule: str = "constant",
) -> dict[str, Any]:
    """Run ``target.generate`` on ``prompt`` (shape (1, P)), assisted by ``draft`` if given.

    Returns ``time_s`` (wall time of the call, prefill included),
    ``target_passes``, ``draft_passes`` and ``tokens`` (the ``new_tokens``
    generated ids). HF assisted generation supports one sequence at a time.
    """
    p = np.asarray(prompt)
    if p.ndim != 2 or p.shape[0] != 1:
        raise ValueError(f"prompt: HF assisted generation takes shape (1, P), got {p.shape}")
    if draft is not None and (schedule not in SCHEDULES or num_assistant_tokens < 1):
        raise ValueError(
            f"schedule {schedule!r} must be one of {SCHEDULES} and num_assistant_tokens >= 1 "
            f"(got {num_assistant_tokens}) when a draft is given"
        )
    if temperature < 0:
        raise ValueError(f"temperature: expected >= 0, got {temperature!r}")
    device = next(target.parameters()).device
    ids = torch.from_numpy(p.astype(np.int64)).to(device)
    config = _generation_config(
        draft,
        new_tokens=new_tokens,
        temperature=temperature,
        num_assistant_tokens=num_assistant_tokens,
        schedule=schedule,
    )
    counters = {"target": _Counter(), "draft": _Counter()}
    hooks = [target.register_forward_pre_hook(counters["target"])]
    if draft is not None:
        hooks.append(draft.register_forward_pre_hook(counters["draft"]))
    seed = int(rng.integers(0, 2**63 - 1))
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            synchronize(device)
            t0 = time.perf_counter()
            out = target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                generation_config=config,
                assistant_model=draft,
            )
            synchronize(device)
            elapsed = time.perf_counter() - t0
    finally:
        for hook in hooks:
            hook.remove()
    tokens = out[:, p.shape[1] :].cpu().numpy()
    return {
        "time_s": elapsed,
        "target_passes": counters["target"].calls,
        "draft_passes": counters["draft"].calls,
        "tokens": tokens,
    }


def _generation_config(
    draft: Any | None,
    *,
    new_tokens: int,
    temperature: float,
    num_assistant_tokens: int,
    schedule: str,
) -> Any:
    """Exactly ``new_tokens`` tokens, greedy or pure temperature sampling, and the draft's
    assistant settings (written into its own generation config too, where it reads them)."""
    settings: dict[str, Any] = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=temperature > 0,
        pad_token_id=0,
        eos_token_id=None,
    )
    if temperature > 0:
        # Pure temperature sampling, as in the harness's own loop: no top-k/top-p filter.
        settings.update(temperature=temperature, top_k=0, top_p=1.0)
    if draft is not None:
        assist = dict(
            num_assistant_tokens=num_assistant_tokens,
            num_assistant_tokens_schedule=schedule,
            assistant_confidence_threshold=0.0,
        )
        settings.update(assist)
        # The assistant reads its drafting settings from its own generation config.
        for key, value in assist.items():
            setattr(draft.generation_config, key, value)
    return GenerationConfig(**settings)


def assisted_runs(
    *,
    pairs: tuple[tuple[str, str], ...],
    gammas: tuple[int, ...],
    temperatures: tuple[float, ...],
    repeats: int,
    new_tokens: int,
    done: set[tuple[Any, ...]],
    model: Callable[..., Any],
    prompt: Callable[[Any], np.ndarray],
    rng: Callable[[str], np.random.Generator],
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``(run_id, rows)`` of each Hugging Face generation run not in ``done``: plain per
    target, constant schedule at each gamma and the heuristic one from the largest gamma per
    pair, at each temperature; ``repeats`` rows each (columns of the ``assisted`` trace but
    ``prompt_len``, ``dtype``, ``device``). ``model(role, slug, vocab=None)`` builds or
    returns a model, ``prompt(target card)`` the prompt, ``rng(run_id)`` the generator."""
    configs: list[tuple[str, str | None, str, int]] = []
    for t_slug in dict.fromkeys(t for t, _ in pairs):
        configs.append((t_slug, None, "none", 0))
    for t_slug, d_slug in pairs:
        configs += [(t_slug, d_slug, "constant", g) for g in gammas]
        configs.append((t_slug, d_slug, "heuristic", max(gammas)))
    for t_name, d_name, schedule, n in configs:
        target = load_model(t_name)
        for temp in temperatures:
            run_id = f"hf/{t_name}+{d_name or '-'}/T{temp:g}/{schedule}{n}"
            if (run_id,) in done:
                continue
            gen = rng(run_id)
            tmodel = model("target", t_name)
            dmodel = None if d_name is None else model("draft", d_name, vocab=target.vocab)
            rows = []
            for r in range(repeats):
                res = hf_generate(
                    tmodel,
                    dmodel,
                    prompt=prompt(target),
                    new_tokens=new_tokens,
                    temperature=temp,
                    rng=gen,
                    num_assistant_tokens=n,
                    schedule=schedule,
                )
                rows.append(
                    {
                        "run_id": run_id,
                        "target": t_name,
                        "draft": d_name or "",
                        "temperature": float(temp),
                        "batch": 1,
                        "vocab": target.vocab,
                        "schedule": schedule,
                        "num_assistant_tokens": n,
                        "repeat": r,
                        "new_tokens": new_tokens,
                        "time_s": res["time_s"],
                        "target_passes": res["target_passes"],
                        "draft_passes": res["draft_passes"],
                    }
                )
            yield run_id, rows
