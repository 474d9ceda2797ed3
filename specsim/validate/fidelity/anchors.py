"""The published figures the hardware cards were tuned to, predicted by the cards (in sample).

These rows are not checks: each card's efficiencies and overheads were chosen so
that the cost model reproduces them (``tests/cost/test_cost_anchors.py`` holds them
within 15%), so ``fitted_on`` names the figure itself and they stay out of the
out-of-sample :func:`specsim.validate.fidelity.fidelity_table`. They show how well the
fit holds with the cards as they are now.

- Leviathan, Kalman & Matias, ICML 2023 (arXiv:2211.17192), Table 4: c = 0.02,
  0.04, 0.11 for T5-small, -base, -large against T5-XXL on one TPU-v4, batch 1
  (the cost model at 64 decoded tokens and a 512-token encoder input).
- gpt-fast README (https://github.com/pytorch-labs/gpt-fast, Benchmarks):
  Llama-2-7B at 104.9 tokens/s on an A100-80GB, batch 1 (a 5-token prompt and
  200 new tokens: mean context about 105), and its tensor-parallel table.

The runtime profile ``models/runtime/vllm-h100.toml`` has its own two functions:
:func:`vllm_anchors`, the two numbers it was fitted on (in sample), and
:func:`vllm_checks`, figures of the same source it did not see (out of sample).
Source: vLLM blog, "The State of FP8 KV-Cache and Attention Quantization in vLLM"
(2026-04-22, https://blog.vllm.ai/2026/04/22/fp8-kvcache.html), Llama-3.1-8B on one
H100, vLLM v0.19.1: the fitted line of inter-token latency (ITL) against input length at
concurrency 1 (BF16 and FP8 KV cache) and the median ITL at concurrency 8 (Table 4).
"""

from __future__ import annotations

import pandas as pd

from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient, step_cost

from .published import stack_fit_rows
from .rows import COLUMNS, fidelity_row, rounding_interval

__all__ = [
    "LEVIATHAN_C",
    "GPTFAST",
    "VLLM_LINES",
    "VLLM_LOADED",
    "fitted_anchors",
    "vllm_anchors",
    "vllm_checks",
]

LEVIATHAN_C: dict[str, float] = {"t5-small": 0.02, "t5-base": 0.04, "t5-large": 0.11}
"""Leviathan et al. 2023, Table 4: the cost coefficient c of each draft against T5-XXL."""
GPTFAST: tuple[tuple[str, int, float, int], ...] = (
    ("llama-2-7b", 1, 104.9, 1),
    ("llama-2-7b", 2, 168.84, 2),
    ("llama-2-7b", 4, 254.02, 2),
    ("llama-2-7b", 8, 328.43, 2),
    ("llama-2-70b", 2, 21.32, 2),
    ("llama-2-70b", 4, 38.01, 2),
    ("llama-2-70b", 8, 62.50, 2),
)
"""gpt-fast README, Benchmarks: (model, tensor-parallel devices, tokens/s, decimals printed)
on A100-80GB."""
_GPTFAST_CONTEXT = 105
_T5_CONTEXT = 64
_T5_ENCODER = 512


def fitted_anchors() -> pd.DataFrame:
    """The anchors the TPU-v4 and A100-80GB cards, the vllm-h100 profile and the stack
    profiles with their device parts (:func:`specsim.validate.fidelity.published.stack_fit_rows`)
    were tuned to, predicted by them now (columns :data:`specsim.validate.fidelity.rows.COLUMNS`;
    interval: the printed digits)."""
    rows = []
    tpu, xxl = load_hardware("tpu-v4"), load_model("t5-xxl")
    for draft, c in LEVIATHAN_C.items():
        pred = float(
            cost_coefficient(
                load_model(draft),
                Deployment(target=xxl, hardware=tpu),
                batch=1,
                context=_T5_CONTEXT,
                encoder_length=_T5_ENCODER,
            )
        )
        rows.append(
            fidelity_row(
                family="in-sample: Leviathan Table 4 c (tpu-v4 card)",
                anchor=f"c of {draft}",
                source="Leviathan et al. 2023 (arXiv:2211.17192), Table 4",
                quantity="cost coefficient c",
                unit="draft step / target step",
                measured=c,
                interval=rounding_interval(c, 2),
                how="rounding: printed to two decimals",
                predicted=pred,
                fitted_on="itself: the tpu-v4 card's overheads were tuned to these three c values",
            )
        )
    a100 = load_hardware("a100-80gb")
    for slug, tp, tok_s, decimals in GPTFAST:
        cost = step_cost(
            load_model(slug),
            a100,
            batch=1,
            context=_GPTFAST_CONTEXT,
            new_tokens=1,
            dtype="bfloat16",
            tensor_parallel=tp,
        )
        rows.append(
            fidelity_row(
                family="in-sample: gpt-fast (a100-80gb card)",
                anchor=f"{slug} on {tp} A100",
                source="gpt-fast README, Benchmarks",
                quantity="decode tokens per second",
                unit="tokens/s",
                measured=tok_s,
                interval=rounding_interval(tok_s, decimals),
                how=f"rounding: printed to {decimals} decimal(s) (one run, no spread published)",
                predicted=1.0 / float(cost.time_s),
                fitted_on="itself: the a100-80gb card's efficiencies and interconnect latency were "
                "tuned to the gpt-fast tables",
            )
        )
    rows += vllm_anchors().to_dict("records")
    rows += vllm_anchors(VLLM_STACK).to_dict("records")
    rows += stack_fit_rows().to_dict("records")
    # The kernel sweeps the weight-only formats are fitted on are in sample too, with a row
    # per GEMM call: their own table, specsim.validate.fidelity.kernels (issue 23, item 2).
    return pd.DataFrame(rows, columns=list(COLUMNS))


VLLM_LINES: dict[str, tuple[float, float]] = {"bfloat16": (4.37e-05, 6.44), "fp8": (2.37e-05, 6.58)}
"""vLLM fp8-kvcache blog, Single Request Benchmarking (Llama-3.1-8B, one H100, v0.19.1, 128
output tokens): KV-cache format -> (ITL slope in ms per input token, ITL intercept in ms)."""
VLLM_LOADED: dict[str, float] = {"bfloat16": 15.18, "fp8": 12.93}
"""The same blog's Table 4 (150 requests at concurrency 8, ~20k input and ~2k output tokens
each): KV-cache format -> median ITL in ms."""
VLLM_PROFILE = "vllm-h100"
VLLM_STACK = "vllm-v1"
_VLLM_SOURCE = "vLLM blog 2026-04-22 'The State of FP8 KV-Cache ...' (blog.vllm.ai)"
_VLLM_SPAN = (256, 125_000)  # the blog's sweep of input lengths
_VLLM_DECODE = 64  # 128 output tokens: the mean decode step sees input + 64 tokens
_VLLM_LOADED_CONTEXT = 21_000  # 20k input + half of 2k output, the mean context mid-decode


def _vllm_itl_ms(kv: str, *, batch: int, context: int, runtime: str = VLLM_PROFILE) -> float:
    cost = step_cost(
        load_model("llama-3.1-8b"),
        load_hardware("h100-sxm"),
        batch=batch,
        context=context,
        new_tokens=1,
        kv=kv,
        runtime=runtime,
    )
    return 1e3 * float(cost.time_s)


def _vllm_line(kv: str, runtime: str) -> tuple[float, float]:
    """The profile's (slope ms/token, intercept ms) over the blog's sweep: specsim's batch-1
    decode time is linear in the context, so two points give the line exactly."""
    lo, hi = (
        _vllm_itl_ms(kv, batch=1, context=n + _VLLM_DECODE, runtime=runtime) for n in _VLLM_SPAN
    )
    slope = (hi - lo) / (_VLLM_SPAN[1] - _VLLM_SPAN[0])
    return slope, lo - slope * _VLLM_SPAN[0]


VLLM_QUANTITY = "inter-token latency (vLLM)"
_PER = 100_000  # the slope as the ITL that 100k tokens of context add, in ms like the rest


def _line_rows(
    kv: str, *, family: str, fitted_on: str, runtime: str = VLLM_PROFILE
) -> list[dict[str, object]]:
    """The blog's ITL line as two rows in ms: the ITL at no context (the intercept) and the ITL
    that 100,000 tokens of context add (the slope times 1e5), so that every vLLM row shares
    one quantity and unit."""
    (slope, intercept), pred = VLLM_LINES[kv], _vllm_line(kv, runtime)
    lo, hi = rounding_interval(slope, 7)
    rows = []
    for what, value, interval, printed, p in (
        (
            "ITL added by 100k tokens of context (slope x 1e5)",
            slope * _PER,
            (lo * _PER, hi * _PER),
            "3 significant digits",
            pred[0] * _PER,
        ),
        (
            "ITL at no context (intercept)",
            intercept,
            rounding_interval(intercept, 2),
            "2 decimals",
            pred[1],
        ),
    ):
        rows.append(
            fidelity_row(
                family=family,
                anchor=f"Llama-3.1-8B {kv} KV, concurrency 1: {what}",
                source=f"{_VLLM_SOURCE}, Single Request Benchmarking",
                quantity=VLLM_QUANTITY,
                unit="ms",
                measured=value,
                interval=interval,
                how=f"rounding: printed to {printed} (a fitted line; its points are not published)",
                predicted=p,
                fitted_on=fitted_on,
            )
        )
    return rows


def vllm_anchors(runtime: str = VLLM_PROFILE) -> pd.DataFrame:
    """The two numbers ``vllm-h100`` was fitted on (in sample: ``fitted_on`` names them),
    predicted now by ``runtime``: the profile, or the ``vllm-v1`` stack on the H100 SXM
    (:data:`VLLM_STACK`), whose host cost per pass and device part were fitted on them too
    (columns :data:`specsim.validate.fidelity.rows.COLUMNS`)."""
    if runtime == VLLM_STACK:
        rows = _line_rows(
            "bfloat16",
            family="in-sample: vllm-v1 stack on h100-sxm (device part h100-sxm)",
            fitted_on="itself: pass_overhead_s of models/stacks/vllm-v1.toml and "
            "memory_efficiency of models/stacks/devices/h100-sxm.toml were fitted to this "
            "slope and intercept",
            runtime=VLLM_STACK,
        )
    else:
        rows = _line_rows(
            "bfloat16",
            family=f"in-sample: vLLM v0.19.1 ({runtime} profile)",
            fitted_on=f"itself: memory_efficiency and pass_overhead_s of {runtime} "
            "were fitted to this slope and intercept",
            runtime=runtime,
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def vllm_checks(runtime: str = VLLM_PROFILE) -> list[dict[str, object]]:
    """Out-of-sample rows for ``vllm-h100``: the blog's FP8 KV-cache line (the profile halves
    the KV bytes and changes nothing else) and the median ITL of Table 4 at concurrency 8,
    predicted as one decode step of 8 sequences at the mean context of 21000 tokens (no
    prefill in the step; the median step of a decode-heavy run), by ``runtime``: the
    ``vllm-h100`` profile or the ``vllm-v1`` stack (:data:`VLLM_STACK`), both fitted on the
    BF16 line only."""
    fitted = (
        f"{runtime}: fitted on the BF16 concurrency-1 ITL line of the same blog only "
        "(slope and intercept)"
    )
    kind = "stack" if runtime == VLLM_STACK else "profile"
    family = f"vLLM v0.19.1 on H100 ({runtime} {kind})"
    rows = _line_rows("fp8", family=family, fitted_on=fitted, runtime=runtime)
    for kv, itl in VLLM_LOADED.items():
        rows.append(
            fidelity_row(
                family=family,
                anchor=f"Llama-3.1-8B {kv} KV, concurrency 8, ~20k in / ~2k out: median ITL",
                source=f"{_VLLM_SOURCE}, Table 4",
                quantity=VLLM_QUANTITY,
                unit="ms",
                measured=itl,
                interval=rounding_interval(itl, 2),
                how="rounding: printed to 2 decimals (one run, no spread published)",
                predicted=_vllm_itl_ms(kv, batch=8, context=_VLLM_LOADED_CONTEXT, runtime=runtime),
                fitted_on=fitted,
            )
        )
    return rows
