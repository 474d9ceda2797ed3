"""``specsim theory``: print the closed forms and evaluate them for one (alpha, gamma, c).

For teaching and quick what-ifs::

    specsim theory --alpha 0.2 --gamma 5 --c 0
    specsim theory --alpha 0.8 --gamma 5 --c 0.05 --v 1.3 --json
    specsim theory --write-derivations docs/derivations.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specsim import theory
from specsim.cli import jsonout
from specsim.cli.output import check_file

HELP = "print the closed forms of speculative decoding and evaluate them for given alpha, gamma, c"

# name in theory.CLOSED_FORMS -> (label, where it is published in Leviathan et al. 2023)
_FORMULAS = (
    ("tokens_pmf", "P(T = k), tokens per pass", "Sec. 3.1"),
    ("expected_tokens", "E, expected tokens per pass", "Sec. 3.1, Eq. (1)"),
    ("tokens_variance", "Var[T]", "derived here"),
    ("walltime_speedup", "W, walltime improvement", "Sec. 3.3, Thm 3.8 (v = 1)"),
    ("gamma1_lower_bound", "W at gamma = 1", "Sec. 3.3, Cor. 3.9"),
    ("optimal_gamma", "marginal gain of gamma + 1", "Sec. 3.5"),
    ("oracle_speedup_bound", "oracle bound on E", "Sec. 3.5"),
    ("ops_factor", "operations factor", "Sec. 3.4, Thm 3.11"),
    ("target_calls_per_token", "target calls per token", "Sec. 3.1"),
    ("draft_calls_per_token", "draft calls per token", "Sec. 3.3"),
)
_PMF_ROWS = 12  # the text output lists the pmf only for short blocks
PMF_MAX = 10_000
"""Longest pmf ``evaluate`` lists (``gamma + 1`` values): beyond it ``tokens_pmf`` is None,
so that memory does not grow with ``--gamma`` (each value is alpha^(k-1) (1 - alpha),
and alpha^gamma at k = gamma + 1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alpha", type=float, help="mean acceptance probability, in [0, 1]")
    parser.add_argument("--gamma", type=int, help="draft tokens per pass, >= 0")
    parser.add_argument("--c", type=float, help="draft step time / target step time, >= 0")
    parser.add_argument(
        "--c-hat",
        type=float,
        default=None,
        help="draft ops per token / target ops per token (default: the value of --c)",
    )
    parser.add_argument(
        "--v",
        type=float,
        default=1.0,
        help="target time to verify gamma+1 tokens / time for one, >= 1 (default 1: memory-bound)",
    )
    parser.add_argument(
        "--max-gamma",
        type=int,
        default=64,
        help="largest gamma the optimum search tries (any size: the search bisects)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (strict JSON: an infinite number is null, such as the "
        "oracle bound at alpha = 1; optimal_gamma_unbounded says when no gamma is best; "
        f"tokens_pmf is null for gamma >= {PMF_MAX})",
    )
    parser.add_argument(
        "--write-derivations",
        type=Path,
        metavar="PATH",
        default=None,
        help="regenerate the derivations document (docs/derivations.md) at PATH and exit",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite an existing --write-derivations PATH"
    )


_FLOAT_MAX = float(np.finfo(np.float64).max)


def check_inputs(*, gamma: int, c: float, c_hat: float, v: float, max_gamma: int) -> None:
    """The checks the closed forms leave to the command line, made before evaluating.

    ``v`` is the time to verify ``gamma + 1`` positions over the time to verify one:
    verifying more positions cannot be faster than verifying one, so ``v >= 1`` (with
    ``v < 1``, W = E / (gamma c + v) could exceed E, the tokens a pass emits). ``c`` and
    ``c_hat`` must leave ``gamma c + gamma + 1`` (for every gamma searched) finite in
    float64; beyond, the forms overflow to inf and 0 instead of their values.
    """
    if not v >= 1:  # also NaN
        raise ValueError(
            f"--v: expected v >= 1 (verifying gamma + 1 positions takes at least as long as "
            f"verifying one, so W = E / (gamma c + v) never exceeds E), got {v:g}"
        )
    most = _FLOAT_MAX / (8.0 * (max(gamma, max_gamma) + 2))
    for flag, x in (("--c", c), ("--c-hat", c_hat)):
        if x > most:
            raise ValueError(
                f"{flag}: {x:g} is too large: gamma x {flag[2:]} for gamma up to "
                f"{max(gamma, max_gamma)} overflows float64 (at most {most:.3g}; c > 1 already "
                "means a draft step costs more than a target step)"
            )


def _show(x: object) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def evaluate(
    *, alpha: float, gamma: int, c: float, c_hat: float, v: float, max_gamma: int
) -> dict[str, object]:
    """Every closed form at one point, as plain Python values (the CLI's whole computation).

    ``optimal_gamma`` is the best gamma in ``0..max_gamma`` (v = 1); when
    ``optimal_gamma_unbounded`` is true no finite gamma is best (W rises at every
    gamma, towards ``speedup_supremum``) and ``optimal_gamma`` is where a larger
    gamma stops gaining more than rounding. ``tokens_pmf`` is None for ``gamma + 1 >
    PMF_MAX`` (memory that does not grow with gamma). Infinite values stay ``inf`` here;
    ``--json`` writes them as null (:mod:`specsim.cli.jsonout`).
    """
    check_inputs(gamma=gamma, c=c, c_hat=c_hat, v=v, max_gamma=max_gamma)
    best = theory.best_gamma(alpha, c, max_gamma=max_gamma)
    return {
        "expected_tokens": float(theory.expected_tokens(alpha, gamma)),
        "tokens_variance": float(theory.tokens_variance(alpha, gamma)),
        "tokens_pmf": (
            np.asarray(theory.tokens_pmf(alpha, gamma, np.arange(1, gamma + 2)), float).tolist()
            if gamma + 1 <= PMF_MAX
            else None
        ),
        "walltime_speedup": float(theory.walltime_speedup(alpha, gamma, c, v)),
        "walltime_speedup_v1": float(theory.walltime_speedup(alpha, gamma, c)),
        "ops_factor": float(theory.ops_factor(alpha, gamma, c_hat)),
        "target_calls_per_token": float(theory.target_calls_per_token(alpha, gamma)),
        "draft_calls_per_token": float(theory.draft_calls_per_token(alpha, gamma)),
        "gamma1_lower_bound": float(theory.gamma1_lower_bound(alpha, c)),
        "speculation_pays": bool(alpha > c),
        "optimal_gamma": best.gamma,
        "optimal_gamma_unbounded": best.unbounded,
        "optimal_walltime_speedup": best.speedup,
        "speedup_supremum": best.supremum,
        "oracle_speedup_bound": float(theory.oracle_speedup_bound(alpha)),
    }


def _best_line(inputs: dict[str, float | int], values: dict[str, object]) -> str:
    head = f"  best gamma in 0..{inputs['max_gamma']} (v = 1): "
    if not values["optimal_gamma_unbounded"]:
        return f"{head}{values['optimal_gamma']}, W = {values['optimal_walltime_speedup']:.6g}"
    gamma = values["optimal_gamma"]
    more = "more, past --max-gamma" if gamma == inputs["max_gamma"] else "less than rounding"
    return (
        f"{head}unbounded, W rises at every gamma towards {_show(values['speedup_supremum'])}\n"
        f"      (no finite gamma is best; gamma = {gamma} gives "
        f"W = {values['optimal_walltime_speedup']:.6g}, a larger one gains {more})"
    )


def _text(inputs: dict[str, float | int], values: dict[str, object]) -> str:
    forms = theory.CLOSED_FORMS  # sympy's own rendering, stored: printing needs no sympy
    lines = ["Closed forms (Leviathan, Kalman & Matias 2023, arXiv:2211.17192):"]
    for name, label, where in _FORMULAS:
        lines.append(f"  {label} [{where}]")
        lines.append(f"      {forms[name].text}")
    lines.append("  (derivations and proofs: docs/derivations.md)")
    a, g, c = inputs["alpha"], inputs["gamma"], inputs["c"]
    lines += [
        "",
        "At " + ", ".join(f"{k} = {val:g}" for k, val in inputs.items()) + ":",
        f"  expected tokens per pass E    {values['expected_tokens']:.6g}",
        f"  variance of tokens per pass   {values['tokens_variance']:.6g}",
        f"  walltime improvement W        {values['walltime_speedup']:.6g}"
        f"   (v = 1: {values['walltime_speedup_v1']:.6g})",
        f"  operations factor             {values['ops_factor']:.6g}",
        f"  target calls per token 1/E    {values['target_calls_per_token']:.6g}",
        f"  draft calls per token gamma/E {values['draft_calls_per_token']:.6g}",
        f"  oracle bound 1/(1 - alpha)    {_show(values['oracle_speedup_bound'])}",
    ]
    pmf = values["tokens_pmf"]
    if isinstance(pmf, list) and len(pmf) <= _PMF_ROWS:
        lines.append("  P(T = k)                      " + ", ".join(f"{p:.4g}" for p in pmf))
    verdict = "speculation pays" if values["speculation_pays"] else "no gamma improves (v = 1)"
    lines += [
        f"  Corollary 3.9: alpha {'>' if a > c else '<='} c, {verdict}; "
        f"gamma = 1 gives {values['gamma1_lower_bound']:.6g}",
        _best_line(inputs, values),
    ]
    if g == 0:
        lines.append("  (gamma = 0 is plain decoding)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.write_derivations is not None:
        # Before sympy starts: a path that cannot be written is an error at once.
        check_file(args.write_derivations, option="--write-derivations", force=args.force)
        from specsim.theory import derivations  # start-up: sympy only for --write-derivations

        path = derivations.write(args.write_derivations)
        print(f"wrote {path}")
        return 0
    missing = [f"--{n}" for n in ("alpha", "gamma", "c") if getattr(args, n) is None]
    if missing:
        raise ValueError(f"give {', '.join(missing)} (or --write-derivations PATH)")
    c_hat = args.c if args.c_hat is None else args.c_hat
    inputs: dict[str, float | int] = {
        "alpha": args.alpha,
        "gamma": args.gamma,
        "c": args.c,
        "c_hat": c_hat,
        "v": args.v,
        "max_gamma": args.max_gamma,
    }
    values = evaluate(
        alpha=args.alpha,
        gamma=args.gamma,
        c=args.c,
        c_hat=c_hat,
        v=args.v,
        max_gamma=args.max_gamma,
    )
    if args.json:
        forms = theory.CLOSED_FORMS
        formulas = {
            name: {"label": label, "sympy": forms[name].text, "latex": forms[name].latex}
            for name, label, _ in _FORMULAS
        }
        payload = {"inputs": inputs, "values": values, "formulas": formulas}
        print(jsonout.dumps(payload))
    else:
        print(_text(inputs, values))
    return 0
