"""The cross-check: the simulator against the closed forms, and where the forms break.

:func:`check_grid` simulates, over a grid of (alpha, gamma, c) with i.i.d.
acceptance, a serialized draft and ``v = 1``, enough blocks that the 99%
confidence interval of tokens per pass is within 0.5% of its value, and
checks three closed forms of :mod:`specsim.theory` against the simulated
values: tokens per pass ``E`` (Leviathan et al. 2023, Eq. 1), the walltime
improvement (Theorem 3.8) and the operations factor (Theorem 3.11, with
``c_hat = c``). A check passes when the formula lies within ``z`` standard
errors of the simulated value; ``z = 4.5`` keeps the chance of any false
alarm over the default 900 checks under 1%.

:func:`assumptions_dropped` then drops the forms' assumptions one at a time
and reports how far the formulas are off.

:mod:`specsim.validate.queueing` checks the serving simulator against queueing
theory (``specsim validate``'s third table).

:func:`predict_runs` (:mod:`specsim.validate.runs`) checks the whole model against
real hardware: each measured speculative run (``specsim measure``) is predicted from a
calibrated card, by replaying its accepted counts through the cost model and by
simulating it end to end, and compared with what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from specsim.acceptance.processes import (
    AcceptanceProcess,
    IIDAcceptance,
    MarkovAcceptance,
)
from specsim.cards import load_hardware, load_model
from specsim.cost import Deployment, cost_coefficient
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, CostSource, PlainCost
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.stream.stream import StreamConfig, simulate_stream
from specsim.sim.workload.workload import TraceWorkload
from specsim.stats import z_quantile
from specsim.theory import expected_tokens, ops_factor, tokens_variance, walltime_speedup
from specsim.validate.runs import predict_runs  # its own module; importable here too

__all__ = [
    "DEFAULT_ALPHAS",
    "DEFAULT_GAMMAS",
    "DEFAULT_CS",
    "check_grid",
    "assumptions_dropped",
    "validation_tables",
    "check_summary",
    "predict_runs",
]

DEFAULT_ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
DEFAULT_GAMMAS = tuple(range(1, 11))
DEFAULT_CS = (0.0, 0.05, 0.2)
QUICK_ALPHAS = (0.2, 0.5, 0.8, 0.95)
QUICK_GAMMAS = (1, 3, 5, 10)
QUICK_RELATIVE = 0.01
Z_CHECK = 4.5
CI_LEVEL = 0.99
CI_RELATIVE = 0.005
_Z_CI = z_quantile(CI_LEVEL)  # the interval's half-width in standard errors


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def blocks_needed(alpha: float, gamma: int, *, relative: float = CI_RELATIVE) -> int:
    """Blocks for a ``CI_LEVEL`` interval of tokens per pass within ``relative`` of its value."""
    relative = _positive(relative, "relative")
    mean = float(expected_tokens(alpha, gamma))
    sd = math.sqrt(float(tokens_variance(alpha, gamma)))
    return max(600, math.ceil((_Z_CI * sd / (relative * mean)) ** 2))


def check_grid(
    rng: np.random.Generator,
    *,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    gammas: Sequence[int] = DEFAULT_GAMMAS,
    cs: Sequence[float] = DEFAULT_CS,
    relative: float = CI_RELATIVE,
    z: float = Z_CHECK,
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """One row per (alpha, gamma, c, quantity): simulated value, intervals, formula, verdict.

    ``ci_low``/``ci_high`` is the ``CI_LEVEL`` (99%) confidence interval of the
    simulated value; ``pass_low``/``pass_high`` is the interval the verdict uses,
    the simulated value plus or minus ``z`` standard errors: ``ok`` says that
    the formula lies inside it (``|z| <= z``).
    """
    z = _positive(z, "z")
    rows = []
    total = len(alphas) * len(gammas)
    for i, (alpha, gamma) in enumerate(((a, g) for a in alphas for g in gammas), start=1):
        n_blocks = blocks_needed(alpha, gamma, relative=relative)
        tokens = math.ceil(n_blocks * float(expected_tokens(alpha, gamma)))
        for c in cs:
            cfg = StreamConfig(
                tokens=tokens,
                acceptance=IIDAcceptance(alpha=alpha),
                policy=FixedGamma(gamma=gamma),
                cost=PlainCost(c=c),
                max_gamma=gamma,
            )
            m = simulate_stream(cfg, rng).metrics()
            checks = (
                ("tokens_per_pass", "tokens_per_target_pass", expected_tokens(alpha, gamma)),
                ("walltime_speedup", "speedup", walltime_speedup(alpha, gamma, c)),
                ("ops_factor", "ops_factor", ops_factor(alpha, gamma, c)),
            )
            for name, key, formula in checks:
                value, se = float(m[key]), float(m[f"{key}_se"])
                rows.append(
                    {
                        "alpha": alpha,
                        "gamma": gamma,
                        "c": c,
                        "quantity": name,
                        "blocks": m["target_passes"],
                        "simulated": value,
                        "se": se,
                        "ci_low": value - _Z_CI * se,
                        "ci_high": value + _Z_CI * se,
                        "pass_low": value - z * se,
                        "pass_high": value + z * se,
                        "formula": float(formula),
                        "z": (value - float(formula)) / se if se > 0 else 0.0,
                        "ok": abs(value - float(formula)) <= z * se + 1e-12,
                    }
                )
        if progress is not None:
            progress(i, total, f"alpha {alpha:g}, gamma {gamma}")
    return pd.DataFrame(rows)


def check_summary(checks: pd.DataFrame) -> pd.DataFrame:
    """Per quantity of :func:`check_grid`: checks, passes, failures, the worst ``|z|`` and where."""
    rows = []
    for quantity, g in checks.groupby("quantity", sort=False):
        worst = g.loc[g["z"].abs().idxmax()]
        rows.append(
            {
                "quantity": quantity,
                "checks": len(g),
                "passed": int(g["ok"].sum()),
                "failed": int((~g["ok"]).sum()),
                "worst_abs_z": float(abs(worst["z"])),
                "worst_at": f"alpha {worst['alpha']:g}, gamma {int(worst['gamma'])}, "
                f"c {worst['c']:g}",
            }
        )
    return pd.DataFrame(rows)


def assumptions_dropped(
    rng: np.random.Generator,
    *,
    alpha: float = 0.7,
    gamma: int = 4,
    c: float = 0.05,
    tokens: int = 200_000,
    target: str = "llama-2-7b",
    draft: str = "llama-68m",
    hardware: str = "a100-80gb",
) -> pd.DataFrame:
    """How far Theorem 3.8 and Eq. 1 are off when one assumption at a time is dropped."""
    rows = _plain_cost_rows(rng, alpha=alpha, gamma=gamma, c=c, tokens=tokens)
    dep = Deployment(target=load_model(target), hardware=load_hardware(hardware))
    d = load_model(draft)
    s_card = float(
        walltime_speedup(alpha, gamma, float(cost_coefficient(d, dep, batch=1, context=512)))
    )
    card = CardCost(deployment=dep, draft=d)
    rows.append(
        _dropped(
            f"v(gamma) from the cost model ({target} + {draft}, {hardware}, batch 1)",
            "v = 1",
            _requests_speedup(rng, card, alpha=alpha, gamma=gamma, tokens=tokens),
            s_card,
            "walltime_speedup",
        )
    )
    rows.append(
        _dropped(
            f"batch {_BATCH} ({target} + {draft}, {hardware})",
            "batch 1",
            _batch_speedup(rng, card, alpha=alpha, gamma=gamma),
            s_card,
            "walltime_speedup",
        )
    )
    return pd.DataFrame(rows)


_BATCH = 64  # sequences decoding together in the dropped "batch 1"


def _plain_cost_rows(
    rng: np.random.Generator, *, alpha: float, gamma: int, c: float, tokens: int
) -> list[dict[str, object]]:
    """The rows priced by plain costs: the baseline, Markov-modulated acceptance with the same
    mean (tokens per pass and speedup) and a draft overlapped with the target."""
    e_form = float(expected_tokens(alpha, gamma))
    s_form = float(walltime_speedup(alpha, gamma, c))
    iid = IIDAcceptance(alpha=alpha)
    m = _stream(rng, iid, PlainCost(c=c), tokens=tokens, gamma=gamma)
    rows = [
        _dropped(
            "baseline (all assumptions hold)", "none", m["speedup"], s_form, "walltime_speedup"
        )
    ]
    markov = MarkovAcceptance.two_state(mean=alpha, spread=0.25, persistence=0.9)
    m = _stream(rng, markov, PlainCost(c=c), tokens=tokens, gamma=gamma)
    case = "Markov-modulated acceptance, same mean"
    rows.append(
        _dropped(case, "i.i.d. acceptance", m["tokens_per_target_pass"], e_form, "tokens_per_pass")
    )
    rows.append(_dropped(case, "i.i.d. acceptance", m["speedup"], s_form, "walltime_speedup"))
    m = _stream(rng, iid, PlainCost(c=c, overlap=True), tokens=tokens, gamma=gamma)
    rows.append(
        _dropped(
            "draft overlapped on its own accelerator",
            "serialized draft",
            m["speedup"],
            s_form,
            "walltime_speedup",
        )
    )
    return rows


def _dropped(
    case: str, assumption: str, simulated: float, formula: float, qty: str
) -> dict[str, object]:
    """One row of :func:`assumptions_dropped`: the formula's error against the simulation."""
    return {
        "case": case,
        "assumption dropped": assumption,
        "quantity": qty,
        "simulated": simulated,
        "formula": formula,
        "error_pct": 100.0 * (formula - simulated) / simulated,
    }


def _stream(
    rng: np.random.Generator,
    acceptance: AcceptanceProcess,
    cost: CostSource,
    *,
    tokens: int,
    gamma: int,
) -> dict[str, float]:
    """The metrics of one stream of ``tokens`` tokens at fixed ``gamma``."""
    cfg = StreamConfig(
        tokens=tokens,
        acceptance=acceptance,
        policy=FixedGamma(gamma=gamma),
        cost=cost,
        max_gamma=gamma,
    )
    return simulate_stream(cfg, rng).metrics()


def _requests_speedup(
    rng: np.random.Generator, card: CardCost, *, alpha: float, gamma: int, tokens: int
) -> float:
    """The speedup of requests of 1,024 tokens after a 512-token prompt (the KV cache must
    fit), all of them together, priced on the cards."""
    spec_time = base_time = 0.0
    for _ in range(max(1, tokens // 1024)):
        cfg = StreamConfig(
            tokens=1024,
            prompt=512,
            acceptance=IIDAcceptance(alpha=alpha),
            policy=FixedGamma(gamma=gamma),
            cost=card,
            max_gamma=gamma,
        )
        r = simulate_stream(cfg, rng).metrics()
        spec_time += r["time_s"] / r["tokens"]
        base_time += r["baseline_time_s"] / r["tokens"]
    return base_time / spec_time


def _batch_speedup(rng: np.random.Generator, card: CardCost, *, alpha: float, gamma: int) -> float:
    """The time-per-output-token speedup of :data:`_BATCH` requests served together (512
    prompt and 512 output tokens each), priced on the cards."""
    n = _BATCH
    work = TraceWorkload(arrival_s=(0.0,) * n, prompt_tokens=(512,) * n, output_tokens=(512,) * n)
    serving = ServingConfig(
        workload=work,
        cost=card,
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
        max_batch=n,
        max_gamma=gamma,
    )
    return simulate_serving(serving, rng).metrics()["tpot_speedup"]


def validation_tables(
    rng: np.random.Generator,
    *,
    quick: bool,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`check_grid` and :func:`assumptions_dropped`, as ``specsim validate`` runs them.

    ``quick``: a 4 x 4 grid of alpha and gamma with intervals within 1%, and
    50,000 tokens per dropped assumption (the report's fast form).
    """
    if quick:
        checks = check_grid(
            rng,
            alphas=QUICK_ALPHAS,
            gammas=QUICK_GAMMAS,
            relative=QUICK_RELATIVE,
            progress=progress,
        )
    else:
        checks = check_grid(rng, progress=progress)
    return checks, assumptions_dropped(rng, tokens=50_000 if quick else 200_000)
