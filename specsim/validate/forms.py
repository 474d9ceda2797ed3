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

:func:`predict_runs` checks the whole model against real hardware: each measured
speculative run (``specsim measure``) is predicted from a calibrated card, by
replaying its accepted counts through the cost model and by simulating it end to
end, and compared with what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from specsim.acceptance.processes import (
    AcceptanceProcess,
    IIDAcceptance,
    MarkovAcceptance,
    TraceAcceptance,
)
from specsim.cards import HardwareCard, load_hardware, load_model
from specsim.cost import cost_coefficient, step_cost_grid
from specsim.policies.lookahead import FixedGamma
from specsim.sim import CardCost, CostSource, PlainCost
from specsim.sim.serving import ServingConfig, simulate_serving
from specsim.sim.stream import StreamConfig, simulate_stream
from specsim.sim.workload import TraceWorkload
from specsim.theory import expected_tokens, ops_factor, tokens_variance, walltime_speedup

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
_Z_CI = float(stats.norm.ppf(0.5 + CI_LEVEL / 2))  # the interval's half-width in standard errors


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
    rows = []

    def add(case: str, assumption: str, simulated: float, formula: float, qty: str) -> None:
        rows.append(
            {
                "case": case,
                "assumption dropped": assumption,
                "quantity": qty,
                "simulated": simulated,
                "formula": formula,
                "error_pct": 100.0 * (formula - simulated) / simulated,
            }
        )

    def stream(acceptance: AcceptanceProcess, cost: CostSource) -> dict[str, float]:
        cfg = StreamConfig(
            tokens=tokens,
            acceptance=acceptance,
            policy=FixedGamma(gamma=gamma),
            cost=cost,
            max_gamma=gamma,
        )
        return simulate_stream(cfg, rng).metrics()

    e_form = float(expected_tokens(alpha, gamma))
    s_form = float(walltime_speedup(alpha, gamma, c))
    m = stream(IIDAcceptance(alpha=alpha), PlainCost(c=c))
    add("baseline (all assumptions hold)", "none", m["speedup"], s_form, "walltime_speedup")
    markov = MarkovAcceptance.two_state(mean=alpha, spread=0.25, persistence=0.9)
    m = stream(markov, PlainCost(c=c))
    add(
        "Markov-modulated acceptance, same mean",
        "i.i.d. acceptance",
        m["tokens_per_target_pass"],
        e_form,
        "tokens_per_pass",
    )
    add(
        "Markov-modulated acceptance, same mean",
        "i.i.d. acceptance",
        m["speedup"],
        s_form,
        "walltime_speedup",
    )
    m = stream(IIDAcceptance(alpha=alpha), PlainCost(c=c, overlap=True))
    add(
        "draft overlapped on its own accelerator",
        "serialized draft",
        m["speedup"],
        s_form,
        "walltime_speedup",
    )
    t, d, hw = load_model(target), load_model(draft), load_hardware(hardware)
    c_card = float(cost_coefficient(d, t, hw, batch=1, context=512))
    card = CardCost(target=t, draft=d, hardware=hw)
    # Requests of 1,024 tokens after a 512-token prompt (the KV cache must fit):
    # the speedup of all of them together.
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
    add(
        f"v(gamma) from the cost model ({target} + {draft}, {hardware}, batch 1)",
        "v = 1",
        base_time / spec_time,
        float(walltime_speedup(alpha, gamma, c_card)),
        "walltime_speedup",
    )
    n = 64
    work = TraceWorkload(arrival_s=(0.0,) * n, prompt_tokens=(512,) * n, output_tokens=(512,) * n)
    serving = ServingConfig(
        workload=work,
        cost=card,
        acceptance=IIDAcceptance(alpha=alpha),
        policy=FixedGamma(gamma=gamma),
        max_batch=n,
        max_gamma=gamma,
    )
    sm = simulate_serving(serving, rng).metrics()
    add(
        f"batch {n} ({target} + {draft}, {hardware})",
        "batch 1",
        sm["tpot_speedup"],
        float(walltime_speedup(alpha, gamma, c_card)),
        "walltime_speedup",
    )
    return pd.DataFrame(rows)


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


# Fidelity: measured runs against the calibrated model ------------------------------------
_RUN_KEYS = ["dtype", "device", "batch", "temperature", "prompt_len"]
"""What a speculative run and its plain (autoregressive) twin must share, besides the model."""


def _run_frames(specdec: pd.DataFrame, autoregressive: pd.DataFrame) -> pd.DataFrame:
    """Measured per-token latency of each speculative run and of its plain twin.

    The twin is the autoregressive run of the same target, dtype, device, batch,
    temperature and prompt length: per-token latency grows with the batch, so
    runs of different batches (or devices) are never pooled.
    """
    spec = specdec[specdec["seq"] == 0].copy()
    spec["wall_s"] = spec["draft_s"] + spec["target_s"] + spec["verify_s"]
    keys = ["run_id", "target", "draft", "gamma", *_RUN_KEYS]
    runs = spec.groupby(keys, as_index=False).agg(
        blocks=("block", "size"),
        tokens=("emitted", "sum"),
        wall_s=("wall_s", "sum"),
        host_s=("verify_s", "sum"),
        accepted=("accepted", "sum"),
    )
    ar = autoregressive.copy()
    ar["wall_s"] = ar["forward_s"] + ar["sample_s"]
    plain = ar.groupby(["model", *_RUN_KEYS], as_index=False).agg(
        ar_steps=("step", "size"), ar_wall_s=("wall_s", "sum")
    )
    plain = plain.rename(columns={"model": "target"})
    out = runs.merge(plain, on=["target", *_RUN_KEYS], how="left")
    if out["ar_wall_s"].isna().any():
        missing = out.loc[out["ar_wall_s"].isna(), "run_id"].tolist()
        raise ValueError(f"no autoregressive run matches speculative run(s) {missing}")
    out["measured_token_s"] = out["wall_s"] / out["tokens"]
    out["measured_ar_token_s"] = out["ar_wall_s"] / out["ar_steps"]
    out["measured_speedup"] = out["measured_ar_token_s"] / out["measured_token_s"]
    return out


def predict_runs(
    specdec: pd.DataFrame,
    autoregressive: pd.DataFrame,
    positions: pd.DataFrame,
    card: HardwareCard,
    rng: np.random.Generator,
    *,
    seeds: int = 8,
) -> pd.DataFrame:
    """Predict each measured speculative run's per-token latency and speedup from a card.

    Two predictions per run, both on the calibrated ``card``:

    - ``replay``: the run's own accepted counts, block by block, timed by the
      cost model at the run's ``batch`` (``gamma`` draft passes plus one
      verification pass, each over ``batch`` sequences at the block's
      context); this isolates the cost model.
    - ``simulated``: :func:`specsim.sim.simulate_stream` with the run's
      measured per-position acceptance ``sum min(p, q)`` replayed as a
      :class:`~specsim.acceptance.processes.TraceAcceptance`, averaged over ``seeds``
      streams; this tests the simulator end to end. The stream simulator runs
      one sequence, while a batch of the harness emits the batch's smallest
      accepted count plus one to every row, so runs with ``batch > 1`` get
      NaN ``simulated_*`` columns rather than a batch-1 answer.

    Each run is compared with the plain (autoregressive) run of the same target,
    dtype, device, batch, temperature and prompt length, predicted as one target
    pass over ``batch`` sequences per token; a run without such a twin raises
    ValueError. Host-side work of the harness (softmax, sampling, verification,
    cache rollback) is not in the cost model; ``host_share`` reports how much of
    the measured time it was.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int | np.integer) or seeds < 1:
        raise ValueError(f"seeds: expected an integer >= 1, got {seeds!r}")
    runs = _run_frames(specdec, autoregressive)
    rows = []
    for r in runs.itertuples(index=False):
        target, draft = load_model(str(r.target)), load_model(str(r.draft))
        dtype, batch = str(r.dtype), int(r.batch)
        blocks = specdec[(specdec["run_id"] == r.run_id) & (specdec["seq"] == 0)]
        gam = blocks["gamma"].to_numpy(dtype=np.int64)
        ctx = blocks["context"].to_numpy(dtype=np.int64)
        verify = step_cost_grid(
            target, card, batch=batch, context=ctx, new_tokens=gam + 1, dtype=dtype
        ).time_s
        draft_s = step_cost_grid(
            draft, card, batch=batch, context=ctx, new_tokens=1, dtype=dtype
        ).time_s
        replay = float((gam * draft_s + verify).sum()) / float(r.tokens)
        steps = int(r.ar_steps)
        ar_ctx = int(r.prompt_len) + np.arange(steps, dtype=np.int64)
        ar = (
            step_cost_grid(
                target, card, batch=batch, context=ar_ctx, new_tokens=1, dtype=dtype
            ).time_s.sum()
            / steps
        )
        pos = positions[(positions["run_id"] == r.run_id) & (positions["seq"] == 0)]
        alphas = pos.loc[pos["reached"].astype(bool), "alpha"].to_numpy(dtype=float)
        sim = float("nan")
        if batch == 1:
            cfg = StreamConfig(
                tokens=int(r.tokens),
                prompt=int(r.prompt_len),
                acceptance=TraceAcceptance.from_values(np.clip(alphas, 0.0, 1.0)),
                policy=FixedGamma(gamma=int(r.gamma)),
                cost=CardCost(target=target, draft=draft, hardware=card, dtype=dtype),
                max_gamma=int(r.gamma),
            )
            sim_token_s = []
            for _ in range(seeds):
                m = simulate_stream(cfg, rng).metrics()
                sim_token_s.append(m["time_s"] / m["tokens"])
            sim = float(np.mean(sim_token_s))
        rows.append(
            {
                "run_id": r.run_id,
                "target": r.target,
                "draft": r.draft,
                "temperature": r.temperature,
                "gamma": r.gamma,
                "batch": batch,
                "tokens": r.tokens,
                "acceptance": float(np.mean(alphas)) if alphas.size else float("nan"),
                "measured_token_s": r.measured_token_s,
                "replay_token_s": replay,
                "simulated_token_s": sim,
                "measured_speedup": r.measured_speedup,
                "replay_speedup": float(ar) / replay,
                "simulated_speedup": float(ar) / sim,
                "host_share": float(r.host_s) / float(r.wall_s),
            }
        )
    out = pd.DataFrame(rows)
    for kind in ("replay", "simulated"):
        out[f"{kind}_latency_error"] = out[f"{kind}_token_s"] / out["measured_token_s"] - 1
        out[f"{kind}_speedup_error"] = out[f"{kind}_speedup"] / out["measured_speedup"] - 1
    return out
