"""The published figures the hardware cards were tuned to, predicted by the cards (in sample).

These rows are not checks: each card's efficiencies and overheads were chosen so
that the cost model reproduces them (``tests/test_cost_anchors.py`` holds them
within 15%), so ``fitted_on`` names the figure itself and they stay out of the
out-of-sample :func:`specsim.fidelity.fidelity_table`. They show how well the
fit holds with the cards as they are now.

- Leviathan, Kalman & Matias, ICML 2023 (arXiv:2211.17192), Table 4: c = 0.02,
  0.04, 0.11 for T5-small, -base, -large against T5-XXL on one TPU-v4, batch 1
  (the cost model at 64 decoded tokens and a 512-token encoder input).
- gpt-fast README (https://github.com/pytorch-labs/gpt-fast, Benchmarks):
  Llama-2-7B at 104.9 tokens/s on an A100-80GB, batch 1 (a 5-token prompt and
  200 new tokens: mean context about 105), and its tensor-parallel table.
"""

from __future__ import annotations

import pandas as pd

from specsim.cards import load_hardware, load_model
from specsim.cost import cost_coefficient, step_cost

from .rows import COLUMNS, fidelity_row, rounding_interval

__all__ = ["LEVIATHAN_C", "GPTFAST", "fitted_anchors"]

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
    """The anchors the TPU-v4 and A100-80GB cards were tuned to, predicted by the cards now
    (columns :data:`specsim.fidelity.rows.COLUMNS`; interval: the printed digits)."""
    rows = []
    tpu, xxl = load_hardware("tpu-v4"), load_model("t5-xxl")
    for draft, c in LEVIATHAN_C.items():
        pred = float(cost_coefficient(load_model(draft), xxl, tpu, batch=1, context=_T5_CONTEXT,
                                      encoder_length=_T5_ENCODER))  # fmt: skip
        rows.append(fidelity_row(
            family="in-sample: Leviathan Table 4 c (tpu-v4 card)", anchor=f"c of {draft}",
            source="Leviathan et al. 2023 (arXiv:2211.17192), Table 4",
            quantity="cost coefficient c",
            unit="draft step / target step", measured=c, interval=rounding_interval(c, 2),
            how="rounding: printed to two decimals", predicted=pred,
            fitted_on="itself: the tpu-v4 card's overheads were tuned to these three c values",
        ))  # fmt: skip
    a100 = load_hardware("a100-80gb")
    for slug, tp, tok_s, decimals in GPTFAST:
        cost = step_cost(load_model(slug), a100, batch=1, context=_GPTFAST_CONTEXT, new_tokens=1,
                         dtype="bfloat16", tensor_parallel=tp)  # fmt: skip
        rows.append(fidelity_row(
            family="in-sample: gpt-fast (a100-80gb card)", anchor=f"{slug} on {tp} A100",
            source="gpt-fast README, Benchmarks", quantity="decode tokens per second",
            unit="tokens/s", measured=tok_s, interval=rounding_interval(tok_s, decimals),
            how=f"rounding: printed to {decimals} decimal(s) (one run, no spread published)",
            predicted=1.0 / float(cost.time_s),
            fitted_on="itself: the a100-80gb card's efficiencies and interconnect latency were "
            "tuned to the gpt-fast tables",
        ))  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))
