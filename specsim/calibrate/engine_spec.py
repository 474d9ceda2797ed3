"""Speculative runs read from engine benchmark outputs: each gives a
:class:`~specsim.calibrate.spec_fit.ForcedRun` (``k`` drafts a step, ``accept_len`` tokens
emitted a step, the step's time) for :mod:`specsim.calibrate.spec_fit`.

A ``vllm bench serve`` result that also holds ``num_speculative_tokens`` and
``synthetic_acceptance_length`` (given as ``--metadata``) is a forced-acceptance run
(:class:`~specsim.calibrate.spec_fit.ForcedRun`, its step ``median_tpot_ms`` times the
acceptance length), fitted by :mod:`specsim.calibrate.spec_fit`.

An SGLang ``bench_serving`` result whose ``accept_length`` is not null (the server's
``avg_spec_accept_length`` from ``/get_server_info``, read by ``bench_serving`` after the
run: tokens emitted per verification step, the bonus token included, so at least 1) is a
speculative run, and so is a forced-acceptance one when the server was started with
``SGLANG_SIMULATE_ACC_LEN=L``. Its record does not hold the lookahead, so the caller gives
it (``speculative_steps``: the server's ``--speculative-num-steps``, a chain with
``--speculative-eagle-topk 1``); without it the record is refused rather than read as plain
decoding. Its step is ``median_tpot_ms`` times ``accept_length``. Source:
github:sgl-project/sglang ``python/sglang/bench_serving.py`` at commit
0033168f0f58b2bc05aa0273bd475d9c01bafb1c (``benchmark``: ``accept_length =
server_info_json["internal_states"][0].get("avg_spec_accept_length", None)``, saved in the
result as ``"accept_length"``).

A ``trtllm-bench`` report with ``decoding_stats`` (written when a speculative config is
set) is a speculative run too: ``decoding_stats.acceptance_length_percentiles.average``
is the output tokens per decoding iteration of a request (the bonus token included),
averaged over requests; the lookahead is given as ``speculative_steps`` (the config's
``max_draft_len``) and checked against the report's ``(acceptance length - 1) /
draft_acceptance_rate_percentiles.average``, which is the draft length of each request.
Its step is the TPOT times the acceptance length. No TensorRT-LLM option forcing the
acceptance was found, so these runs carry the measured acceptance, and the product of two
per-request means stands for the mean step, which holds exactly when every request accepts
alike (a forced run) and approximately otherwise. Source: github:NVIDIA/TensorRT-LLM
``tensorrt_llm/bench/dataclasses/reporting.py`` at commit
2787769cae353023784dce105d648bcd4d04f4d4
(``StatsKeeper.generate_statistics_summary``, ``ReportUtility.get_statistics_dict``).
"""

from __future__ import annotations

import math
from typing import Any

from specsim.calibrate.engine_records import DecodeRun, number_field
from specsim.calibrate.spec_fit import ForcedRun

__all__ = ["vllm_forced", "sglang_spec", "trtllm_spec", "spec_run"]


def meta_field(where: str, rec: dict[str, Any], key: str) -> float:
    """A ``--metadata KEY=VALUE`` entry (saved as a string) as a positive number."""
    value = rec.get(key)
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        out = math.nan
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{where}: metadata {key!r} must be a positive number, got {value!r}")
    return out


def vllm_forced(where: str, run: DecodeRun, rec: dict[str, Any]) -> ForcedRun:
    """A forced-acceptance serving run (see :mod:`specsim.calibrate.spec_fit`)."""
    k = meta_field(where, rec, "num_speculative_tokens")
    accept = meta_field(where, rec, "synthetic_acceptance_length")
    return spec_run(
        where, run, k, accept, names=("num_speculative_tokens", "synthetic_acceptance_length")
    )


def sglang_spec(where: str, run: DecodeRun, rec: dict[str, Any], steps: int | None) -> ForcedRun:
    """An SGLang ``bench_serving`` speculative run (module docstring)."""
    accept = number_field(where, rec, "accept_length")
    if steps is None:
        raise ValueError(
            f"{where}: a speculative SGLang run (accept_length {accept:g}) does not record its "
            "lookahead: give it as --speculative-steps K (the server's --speculative-num-steps, "
            "with --speculative-eagle-topk 1)"
        )
    return spec_run(
        where, run, float(steps), accept, names=("--speculative-steps", "accept_length")
    )


def trtllm_spec(where: str, run: DecodeRun, rec: dict[str, Any], steps: int | None) -> ForcedRun:
    """A ``trtllm-bench`` speculative run (module docstring): ``k`` from the caller, checked
    against the report's own ``(acceptance length - 1) / draft acceptance rate``."""
    stats = rec["decoding_stats"]
    w = f"{where} decoding_stats"
    if not isinstance(stats, dict) or not isinstance(
        stats.get("acceptance_length_percentiles"), dict
    ):
        raise ValueError(f"{w}: expected a table with 'acceptance_length_percentiles'")
    accept = number_field(
        f"{w}.acceptance_length_percentiles", stats["acceptance_length_percentiles"], "average"
    )
    if steps is None:
        raise ValueError(
            f"{where}: a speculative trtllm-bench run (acceptance length {accept:g}) needs its "
            "lookahead as --speculative-steps K (the speculative_config's max_draft_len)"
        )
    rate = stats.get("draft_acceptance_rate_percentiles")
    if isinstance(rate, dict) and accept > 1:
        dar = number_field(f"{w}.draft_acceptance_rate_percentiles", rate, "average")
        implied = (accept - 1) / dar
        if abs(implied / steps - 1) > 0.1:
            raise ValueError(
                f"{where}: --speculative-steps {steps} disagrees with the report, whose "
                f"(acceptance length - 1) / draft acceptance rate is {implied:.2f} drafts a step"
            )
    return spec_run(
        where, run, float(steps), accept, names=("--speculative-steps", "acceptance length")
    )


def spec_run(
    where: str, run: DecodeRun, k: float, accept: float, *, names: tuple[str, str]
) -> ForcedRun:
    if k != int(k) or k < 1 or not 1 <= accept <= k + 1:
        raise ValueError(
            f"{where}: {names[0]} {k:g} must be an integer >= 1 and "
            f"{names[1]} {accept:g} within [1, k + 1]"
        )
    return ForcedRun(
        source=where,
        batch=run.batch,
        context=run.context,
        k=int(k),
        accept_len=accept,
        step_s=run.step_s * accept,
    )
