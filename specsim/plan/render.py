"""A plan's answer as text (the default), a table and an HTML page, in the order the reader
needs it: the verdict, the options, the best tree of each, where each stops paying, what
would change the answer, and the assumptions (weak ones flagged)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable

import pandas as pd

from specsim.plan.answer import PlanAnswer
from specsim.plan.breakeven import BreakEven
from specsim.plan.evaluation import Estimate, Row
from specsim.plan.limits import Limit
from specsim.plan.served_limit import ServedLimit

__all__ = ["COLUMNS", "html_section", "options_table", "render_html", "render_text"]

COLUMNS: dict[str, tuple[str, Callable[[Row], Estimate | float | None], float]] = {
    "TPOT p50 ms": ("tpot_p50_s", lambda r: r.tpot_p50_s, 1e3),
    "TPOT p99 ms": ("tpot_p99_s", lambda r: r.tpot_p99_s, 1e3),
    "TTFT p50 ms": ("ttft_p50_s", lambda r: r.ttft_p50_s, 1e3),
    "TTFT p99 ms": ("ttft_p99_s", lambda r: r.ttft_p99_s, 1e3),
    "tokens/s": ("throughput_tokens_per_s", lambda r: r.throughput_tokens_per_s, 1.0),
    "goodput req/s": ("goodput_requests_per_s", lambda r: r.goodput_requests_per_s, 1.0),
    "mJ/token": ("energy_per_token_j", lambda r: r.energy_per_token_j, 1e3),
    "$/M tokens": ("cost_per_mtok", lambda r: r.cost_per_mtok, 1.0),
    "accepted length": ("accepted_length", lambda r: r.accepted_length, 1.0),
}
"""The table's columns: heading -> (row field, getter, scale to the heading's unit)."""


def _num(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 1e9:  # past a billion, digits are noise: a number, not a digit string
        return f"{x:.3g}"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def cell(value: Estimate | float | None, scale: float) -> str:
    """``3.12 [3.05, 3.20]`` for an estimate with an interval, ``3.12`` for a closed form,
    ``3.12 [n/a]`` for one whose sample is too small for an interval (:data:`NO_INTERVAL`),
    ``-`` for a quantity not defined here."""
    if value is None:
        return "-"
    if not isinstance(value, Estimate):
        return _num(value * scale)
    v, lo, hi = value.scaled(scale)
    if not value.bounded:
        return f"{_num(v)} [n/a]"
    if lo == hi == v:
        return _num(v)
    return f"{_num(v)} [{_num(lo)}, {_num(hi)}]"


NO_INTERVAL = (
    "[n/a]: too few requests finished (or iterations ran) for a 95% interval that holds the "
    "estimate; --requests N serves more"
)
"""The note under a table with a ``[n/a]`` cell."""


OPEN_ABOVE = (
    "inf: the run is too short to bound that percentile from above (distribution-free, at "
    "95% a p99's upper bound needs at least 368 independent requests, more when queued "
    "latencies are correlated); --precise or --requests N serves more"
)
"""The note under a table with an interval open above (``[x, inf]``)."""


def _unbounded(answer: PlanAnswer) -> bool:
    return any(
        isinstance(e := get(r), Estimate) and not e.bounded
        for r in answer.rows
        for _, get, _ in COLUMNS.values()
    )


def _open_above(answer: PlanAnswer) -> bool:
    return any(
        isinstance(e := get(r), Estimate) and e.bounded and e.high == math.inf
        for r in answer.rows
        for _, get, _ in COLUMNS.values()
    )


def notes(answer: PlanAnswer) -> list[str]:
    """The notes under the options table: why a cell has no interval or one open above."""
    return [n for n, on in ((NO_INTERVAL, _unbounded), (OPEN_ABOVE, _open_above)) if on(answer)]


BREAK_EVEN = "break-even acceptance"
"""The column of an option given no acceptance: where it starts to pay."""


def break_even_cell(be: BreakEven) -> str:
    """``0.27 (k = 1, length 1.27)``, ``never`` or ``any``."""
    if be.status == "never":
        return "never (not even at 1)"
    if be.status == "always":
        return f"any (k = {be.k})"
    return f"{be.alpha:.2f} (k = {be.k}, length {be.accepted_length:.3g})"


def options_table(answer: PlanAnswer) -> pd.DataFrame:
    """One row per option, its cells as printed; an option given no acceptance has its
    break-even instead of numbers."""
    rows = []
    for r in answer.rows:
        row = {"option": r.label, "plan": r.plan}
        row |= {head: cell(get(r), scale) for head, (_, get, scale) in COLUMNS.items()}
        row["stable"] = "-" if r.stable is None else ("yes" if r.stable else "NOT STABLE")
        row[BREAK_EVEN] = "-"
        rows.append(row)
    for label, be in answer.break_evens.items():
        blank = dict.fromkeys([*COLUMNS, "stable"], "-")
        rows.append(
            {"option": label, "plan": "no acceptance", **blank, BREAK_EVEN: break_even_cell(be)}
        )
    df = pd.DataFrame(rows)
    return df.loc[:, [c for c in df.columns if not (df[c] == "-").all()]]


def limit_text(lim: Limit) -> str:
    """Where an option pays and stops paying, in words."""
    if not lim.pays:
        return f"does not pay at any batch tried (1 to {lim.largest})"
    span = f"pays at batch {lim.pays[0]}" + (f" to {lim.pays[-1]}" if len(lim.pays) > 1 else "")
    if lim.batch is None:
        text = f"{span}, the largest tried that fits"
    else:
        text = (
            f"{span}, stops paying at batch {lim.batch}: above about "
            f"{_num(lim.rate_per_s or 0)} req/s (Little's law at plain decoding, prefill "
            "ignored: an upper estimate)"
        )
    return text if lim.served is None else f"{text}; {served_text(lim.served)}"


def served_text(served: ServedLimit) -> str:
    """The served search's crossing, in words, with its method."""
    c = served.crossing
    if c.kind == "never":
        where = f"still pays at {_num(served.rates[-1])} req/s, the highest served"
    elif c.kind == "always":
        where = f"does not pay at {_num(served.rates[0])} req/s, the lowest served"
    else:
        high = "beyond the sweep" if math.isinf(c.high) else f"{_num(c.high)}"
        low = "below the sweep" if c.low == 0 else f"{_num(c.low)}"
        where = f"stops paying at about {_num(c.at)} req/s (95% interval {low} to {high})"
    return f"{where} [{served.method}]"


def _limits(answer: PlanAnswer) -> list[str]:
    return [f"{label}: {limit_text(lim)}" for label, lim in answer.limits.items()]


def break_even_lines(answer: PlanAnswer) -> list[str]:
    """Each option given no acceptance: its break-even at every k, and the similar pairs'
    published acceptances with their sources (:mod:`specsim.plan.breakeven`)."""
    out = []
    for label, be in answer.break_evens.items():
        ks = ", ".join(
            f"k = {k}: {'never' if a is None else f'{a:.2f}'}" for k, a in be.per_k.items()
        )
        out.append(f"{label} at batch {be.batch}, context {be.context}: {ks}")
        if not be.published:
            out.append(f"  published for {be.family} targets: none in the shipped cards")
        for p in be.published:
            out.append(
                f"  published, {p.card} ({p.kind} for {p.target}): {p.alpha:.2f} (mean accepted "
                f"length {p.accepted_length:.3g} on a chain of k = {p.k}), {p.source}"
            )
    return out


def _whatifs(answer: PlanAnswer) -> list[str]:
    out = []
    for w in answer.whatifs:
        tree = "no speculation" if not w["tree"] else f"{len(w['tree'])}-node tree"
        line = f"{w['what']}: {w['speedup']:.2f}x tokens/s over no speculation ({tree})"
        if w.get("changes_answer"):
            line += " <- changes the answer"
        out.append(line)
    return out


def _assumed(answer: PlanAnswer) -> list[str]:
    a = answer.assumed
    d = a["deployment"]
    stack = d["runtime"] or "none"
    if answer.assumed.get("card_stack"):
        own = "default profile" if d["runtime"] else "own numbers, no profile"
        stack = f"{stack} (the hardware card's {own})"
    out = [
        f"deployment: {d['model']} on {d['hardware']} x{d['tensor_parallel']} (weights "
        f"{d['weights']}, KV {d['kv']}), stack {stack}",
        f"load: {a['load']}",
        f"method: {a['method']}",
    ]
    out += [f"acceptance of {k}: {v}" for k, v in a["acceptance"].items()]
    out += [f"lookahead of {k}: {v}" for k, v in a.get("lookahead", {}).items()]
    out += [f"{k} runs as: {v}" for k, v in a.get("drafts", {}).items()]
    # the fidelity page's checks on the same model pair (the others are weak assumptions)
    out += [f["line"] for f in a.get("fidelity", {}).values() if f["status"] == "same pair"]
    return out


def _section(title: str, lines: list[str]) -> list[str]:
    return ["", title, *[f"  {line}" for line in lines]] if lines else []


def render_text(answer: PlanAnswer) -> str:
    """The answer as plain text, verdict first."""
    table = options_table(answer).to_string(index=False)
    fixed = answer.assumed.get("lookahead", {})
    trees = [
        f"{r.label}: {r.plan} {list(r.tree)}{' (fixed)' if r.label in fixed else ''}"
        for r in answer.rows[1:]
    ]
    title = "Best tree per option (parents, -1 the root):"
    if fixed:
        title = "Tree per option (parents, -1 the root; fixed: as given, not searched):"
    parts = [
        answer.verdict.sentence,
        "",
        "Options (95% intervals in brackets; a bare number is a closed form):",
        table,
        *notes(answer),
        *_section(title, trees),
        *_section("Where each option stops paying:", _limits(answer)),
        *_section(BREAK_EVEN_TITLE, break_even_lines(answer)),
        *_section(
            f"What would change the answer (closed forms at batch {answer.batch}):",
            _whatifs(answer),
        ),
        *_section("Assumed:", _assumed(answer)),
    ]
    if answer.weak:
        parts += ["", "Weak assumptions:", *[f"  ! {w}" for w in answer.weak]]
    parts.append(f"\n({answer.seconds:.1f} s)")
    return "\n".join(parts) + "\n"


BREAK_EVEN_TITLE = (
    "Break-even acceptance of each option given none (i.i.d. per-token acceptance at which "
    "a chain of k gives the tokens/s of no speculation; closed forms) and what shipped "
    "cards publish for targets of the same family (the i.i.d. acceptance of the same mean "
    "accepted length):"
)


def _ul(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def html_section(answer: PlanAnswer, *, title: str, figure: str = "") -> str:
    """The answer as an HTML section: the verdict as its first paragraph, then ``figure``
    (an HTML fragment, e.g. an embedded image), the table and the rest."""
    esc = html.escape
    table = options_table(answer).to_html(index=False, classes="data", border=0)
    return "".join(
        [
            f"<section class='plan'><h2>{esc(title)}</h2>",
            f"<p class='verdict'><strong>{esc(answer.verdict.sentence)}</strong></p>",
            figure,
            table,
            "".join(f"<p>{esc(n)}</p>" for n in notes(answer)),
            "<h3>Where each option stops paying</h3>",
            _ul(_limits(answer)),
            ("<h3>Break-even acceptance</h3>" + _ul(break_even_lines(answer)))
            if answer.break_evens
            else "",
            "<h3>What would change the answer</h3>",
            _ul(_whatifs(answer)),
            "<h3>Assumed</h3>",
            _ul(_assumed(answer)),
            ("<h3>Weak assumptions</h3>" + _ul(answer.weak)) if answer.weak else "",
            "</section>",
        ]
    )


def render_html(answer: PlanAnswer) -> str:
    """A self-contained page of the answer (``--html FILE``)."""
    css = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table.data{border-collapse:collapse;font-size:0.85em}"
        "table.data th,table.data td{border:1px solid #ddd;padding:2px 6px}"
        ".verdict{font-size:1.2em}"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>specsim plan</title>"
        f"<style>{css}</style></head><body>"
        f"{html_section(answer, title='specsim plan')}</body></html>\n"
    )
