"""llama.cpp's ``llama-speculative-simple`` log, read as one speculative run.

The tool prints, at the end of a run (``examples/speculative-simple/speculative-simple.cpp``
of llama.cpp 0c1e570, vendored by llama-cpp-python 0.3.36; the log file is the one
written by ``--log-file FILE``)::

    encoded    8 tokens in    0.001 seconds, speed: 6220.840 t/s
    decoded   98 tokens in    0.086 seconds, speed: 1139.032 t/s
    n_draft   = 4
    n_predict = 98
    n_drafted = 260
    n_accept  = 32
    accept    = 12.308%

``n_draft`` is the most drafts a step (``--spec-draft-n-max``), ``n_predict`` the tokens
emitted, ``n_accept`` the drafts accepted. Every verification step emits its accepted
drafts and one token of the target's, so the run took ``n_predict - n_accept`` steps and
emitted ``n_predict / steps`` tokens a step; its step time is the ``decoded`` seconds
(drafting and verification together) over the steps. The context is the prompt
(``encoded``) plus half the emitted tokens. Read as a
:class:`~specsim.calibrate.spec_fit.ForcedRun` at batch 1 whose acceptance is the measured
one (the run is greedy, so the tokens are those of plain decoding). ``n_drafted`` is below
``steps * n_draft`` by the last drafts, cut to what ``-n`` leaves; it is kept in
:class:`SpecLog` and checked to be at most ``steps * n_draft``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specsim.calibrate.spec_fit import ForcedRun

__all__ = [
    "SpecLog",
    "VERSION",
    "is_speculative_log",
    "refuse_llama_bench_text",
    "read_speculative_log",
    "forced_run",
]

VERSION = "llama.cpp 0c1e570 (llama-cpp-python 0.3.36)"
"""The build whose log lines this reader was written against."""

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_LINES: dict[str, str] = {
    "encoded": rf"encoded\s+([0-9]+) tokens in\s+{_NUM} seconds",
    "decoded": rf"decoded\s+([0-9]+) tokens in\s+{_NUM} seconds",
    "n_draft": r"n_draft\s+=\s+([0-9]+)",
    "n_predict": r"n_predict\s+=\s+([0-9]+)",
    "n_drafted": r"n_drafted\s+=\s+([0-9]+)",
    "n_accept": r"n_accept\s+=\s+([0-9]+)",
    "accept": rf"accept\s+=\s+{_NUM}%",
}


@dataclass(frozen=True, kw_only=True)
class SpecLog:
    """The counts and times of one ``llama-speculative-simple`` run (module docstring)."""

    source: str
    n_prompt: int
    prompt_s: float
    n_predict: int
    decode_s: float
    n_draft: int
    n_drafted: int
    n_accept: int
    accept_pct: float

    @property
    def steps(self) -> int:
        """Verification steps: each emits its accepted drafts and one target token."""
        return self.n_predict - self.n_accept

    @property
    def accept_len(self) -> float:
        """Tokens emitted a step, the target's own token included."""
        return self.n_predict / self.steps

    @property
    def step_s(self) -> float:
        return self.decode_s / self.steps


def is_speculative_log(text: str) -> bool:
    """Whether ``text`` looks like a speculative-decoding log of llama.cpp (not JSON)."""
    return not text.lstrip().startswith(("{", "[")) and "n_drafted" in text


def refuse_llama_bench_text(path: Path, text: str) -> None:
    """A ValueError naming ``path`` when it is llama-bench's markdown, CSV or SQL output
    (``-o md``, ``-o csv``, ``-o sql``): only ``-o json`` and ``-o jsonl`` hold the fields."""
    head = text.lstrip()[:400]
    kinds = {"md": head.startswith("| model"), "csv": head.startswith("build_commit,")}
    kinds["sql"] = head.startswith("CREATE TABLE") and "avg_ts" in text
    for kind, hit in kinds.items():
        if hit:
            raise ValueError(
                f"{path}: llama-bench's -o {kind} output; rerun llama-bench with -o json "
                "(or -o jsonl), which the calibration reads"
            )


def _last(pattern: str, text: str) -> tuple[str, ...] | None:
    found = re.findall(rf"(?m)(?:^|\s){pattern}(?![0-9.])", text)
    if not found:
        return None
    last = found[-1]
    return last if isinstance(last, tuple) else (last,)


def read_speculative_log(path: str | Path) -> SpecLog:
    """One run's :class:`SpecLog`; a ValueError naming the file for a log of another format or
    version (a summary line missing) or counts that do not add up."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read it ({exc})") from None
    got = {key: _last(pat, text) for key, pat in _LINES.items()}
    missing = [key for key, v in got.items() if v is None]
    if missing:
        raise ValueError(
            f"{p}: not a llama-speculative-simple log of {VERSION}: no "
            f"{', '.join(repr(m) for m in missing)} line (run it with --log-file FILE)"
        )
    v = {key: val for key, val in got.items() if val is not None}
    log = SpecLog(
        source=str(p),
        n_prompt=int(v["encoded"][0]),
        prompt_s=float(v["encoded"][1]),
        n_predict=int(v["n_predict"][0]),
        decode_s=float(v["decoded"][1]),
        n_draft=int(v["n_draft"][0]),
        n_drafted=int(v["n_drafted"][0]),
        n_accept=int(v["n_accept"][0]),
        accept_pct=float(v["accept"][0]),
    )
    _check(p, log, int(v["decoded"][0]))
    return log


def _check(p: Path, log: SpecLog, decoded: int) -> None:
    if decoded != log.n_predict:
        raise ValueError(f"{p}: decoded {decoded} tokens but n_predict = {log.n_predict}")
    if log.n_draft < 1:
        raise ValueError(f"{p}: n_draft = {log.n_draft}: not a speculative run (drafts >= 1)")
    if not 0 <= log.n_accept <= log.n_drafted or log.n_accept >= log.n_predict:
        raise ValueError(
            f"{p}: n_accept = {log.n_accept} must lie within [0, n_drafted = {log.n_drafted}] "
            f"and below n_predict = {log.n_predict}"
        )
    if log.n_drafted > log.steps * log.n_draft:
        raise ValueError(
            f"{p}: n_drafted = {log.n_drafted} exceeds {log.steps} steps x n_draft "
            f"{log.n_draft}: not the one-draft-chain run of llama-speculative-simple"
        )
    if log.decode_s <= 0:
        raise ValueError(f"{p}: decoded in {log.decode_s} seconds: no time measured")


def forced_run(log: SpecLog) -> ForcedRun:
    """The run as :mod:`specsim.calibrate.spec_fit` reads it: batch 1, ``k = n_draft``."""
    return ForcedRun(
        source=log.source,
        batch=1,
        context=log.n_prompt + log.n_predict / 2,
        k=log.n_draft,
        accept_len=log.accept_len,
        step_s=log.step_s,
    )
