"""A corpus of bad inputs (issue 13): each one a clear error that names the field.

Every case here is something a user may well type. Each must end in an error
that names the field at fault (a flag, a config key, a card field, a trace
column), never in a traceback or a silently wrong answer:

- **CLI** cases run ``specsim.cli.main`` in-process (subprocesses are slow) and
  check exit status 2, a message naming the field, no traceback, and that no
  file was written (the working folder is a fresh temporary one, so a default
  output folder would show up there too);
- **API**, **card**, **trace**, **config** and **sweep** cases check the
  exception type and that its message names the field;
- **sizes** over their limit (issue 25: ``specsim.checks.LIMITS``,
  docs/reference/limits.md) are refused before any work, and one test runs every
  subcommand that takes a size under 3 GiB of address space.

Cases that fail today are marked ``xfail(strict=True)`` with the file that
needs the fix (its owner removes the mark with the fix); a strict xfail that
starts passing fails the suite, so the mark cannot outlive the bug.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from specsim.cli import main, user_message
from specsim.cli.output import OutputError, check_file, check_folder

ROOT = Path(__file__).resolve().parents[1]
A100 = (ROOT / "models" / "hardware" / "a100-80gb.toml").read_text(encoding="utf-8")
H100 = (ROOT / "models" / "hardware" / "h100-sxm.toml").read_text(encoding="utf-8")
L68M = (ROOT / "models" / "lm" / "llama-68m.toml").read_text(encoding="utf-8")


def edit(text: str, key: str, value: str | None) -> str:
    """``text`` (a card) with the first top-level ``key = ...`` line set to ``value`` (or cut)."""
    pattern = re.compile(rf"^{re.escape(key)} = .*$", re.M)
    assert pattern.search(text), key
    return pattern.sub("" if value is None else f"{key} = {value}", text, count=1)


# Files the cases use ----------------------------------------------------------------------
ACCEPT_AND_POLICY = """[acceptance]
kind = "iid"
alpha = 0.7
[policy]
kind = "fixed"
gamma = 4
"""
CARD_COST = """[cost]
kind = "cards"
draft = "llama-68m"
[deployment]
target = "llama-2-7b"
hardware = "a100-80gb"
"""
PLAIN = (
    'mode = "stream"\nseed = 1\ntokens = 2000\n'
    + ACCEPT_AND_POLICY
    + """[cost]
kind = "plain"
c = 0.05
"""
)
CARDS = (
    'mode = "stream"\nseed = 1\ntokens = 200\nprompt = 128\nmax_gamma = 8\n'
    + ACCEPT_AND_POLICY
    + CARD_COST
)
SERVING = (
    """mode = "serving"
seed = 1
max_gamma = 4
max_batch = 8
[workload]
kind = "poisson"
rate_per_s = 4.0
requests = 10
prompt_tokens = [128, 256]
output_tokens = [16, 32]
"""
    + ACCEPT_AND_POLICY
    + CARD_COST
)
SWEEP = """[sweep]
mode = "grid"
seed = 1
seeds = 1
metrics = ["speedup"]
[config]
mode = "stream"
tokens = 200
acceptance = {kind = "iid", alpha = 0.7}
policy = {kind = "fixed", gamma = 4}
cost = {kind = "plain", c = 0.05}
[grid]
"acceptance.alpha" = [0.5, 0.7]
"""


def cfg(text: str, old: str, new: str) -> str:
    """A config text with one line replaced (the line must be there)."""
    assert old in text, old
    return text.replace(old, new, 1)


def passes_frame(*, devices: tuple[str, ...] = ("cpu",), **change: Any) -> pd.DataFrame:
    """A small valid ``passes`` trace (times made up), with columns changed as given."""
    rows = []
    for i, (b, ctx, n) in enumerate(
        [(b, ctx, n) for b in (1, 2) for ctx in (64, 128) for n in (1, 4)]
    ):
        rows.append(
            {
                "model": "llama-68m",
                "dtype": "float32",
                "device": devices[i % len(devices)],
                "batch": b,
                "context": ctx,
                "source_len": 0,
                "new_tokens": n,
                "repeat": 0,
                "time_s": 0.01 * b * n + 0.001 * ctx / 64,
                "peak_mem_bytes": "",
                "energy_j": "",
            }
        )
    frame = pd.DataFrame(rows)
    for k, v in change.items():
        frame[k] = v
    return frame


def trace_files(name: str, frame: pd.DataFrame, meta: dict[str, Any] | None = None) -> dict:
    """The CSV and JSON sidecar of a ``passes`` trace, as {relative path: text}."""
    sidecar = {
        "schema_version": 1,
        "kind": "passes",
        "device_name": "AMD EPYC",
        "device": "cpu",
        "date": "2026-11-29T09:18:41+00:00",
        **(meta or {}),
    }
    return {f"{name}.csv": frame.to_csv(index=False), f"{name}.json": json.dumps(sidecar)}


# CLI cases --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cli:
    """``specsim ARGV`` must exit 2 with one error line containing ``field``."""

    id: str
    argv: tuple[str, ...]
    field: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    needs_fix_in: str = ""  # the file to fix where this fails today (marked xfail strict)
    env: dict[str, str] = field(default_factory=dict)  # environment variables set for the run


def c(
    id: str,
    argv: str | list[str],
    field: str,
    files: dict | None = None,
    fix: str = "",
    env: dict[str, str] | None = None,
) -> Cli:
    words = argv.split() if isinstance(argv, str) else argv
    return Cli(
        id=id, argv=tuple(words), field=field, files=files or {}, needs_fix_in=fix, env=env or {}
    )


COST = "cost --model llama-2-7b --hardware a100-80gb"
THEORY = "theory --alpha 0.7 --gamma 4 --c 0.05"
SIM = "simulate --alpha 0.7 --gamma 4 --tokens 2000"
CALIB = "calibrate {tmp}/tr --out {tmp}/card.toml --base a100-80gb --holdout none"

TREE = "tree --model llama-2-7b --ngram --hardware a100-80gb --acceptance " + str(
    ROOT / "models" / "measured" / "ngram" / "accept-sample.toml"
)
BINARY = bytes(range(128, 256)) * 3  # no UTF-8 text: each byte >= 0x80 starts no character
# 1000 x 1000 x 1000 = 10^9 grid points (issue 25: a grid this size ran out of memory)
GRID_1E9 = cfg(
    SWEEP,
    '"acceptance.alpha" = [0.5, 0.7]',
    f'"acceptance.alpha" = {[i / 1000 for i in range(1000)]}\n'
    f'"policy.gamma" = {list(range(1000))}\n'
    f'"cost.c" = {[i / 1000 for i in range(1000)]}',
)
RANDOM_1E12 = (
    cfg(SWEEP, 'mode = "grid"', 'mode = "random"\nsamples = 1000000000000')
    .replace("[grid]", "[random]")
    .replace("[0.5, 0.7]", "{uniform = [0.5, 0.7]}")
)

# Sizes over their limit (issue 25, section 3). Run only in a subprocess under a memory limit
# (test_every_size_is_refused_in_bounded_memory_and_time): were a check lost, these would ask
# for gigabytes or run for hours in the test process itself.
SIZE_CASES = [
    c("cost-batch-over-limit", f"{COST} --batch 1000000000", "--batch: 1,000,000,000 sequences"),
    c("tree-budget-over-limit", f"{TREE} --budget 100000", "--budget: 100,000 nodes is over"),
    c("tree-batch-over-limit", f"{TREE} --batch 100000000", "--batch: 100,000,000 sequences"),
    c(
        "simulate-tokens-over-limit",
        "simulate --alpha 0.7 --gamma 4 --tokens 99999999999999999999",
        "--tokens: 99,999,999,999,999,999,999 tokens is over the limit",
    ),
    c(
        "simulate-config-tokens-over-limit",
        "simulate {tmp}/c.toml",
        "tokens: 10,000,000,000 tokens is over the limit",
        {"c.toml": cfg(PLAIN, "tokens = 2000", "tokens = 10000000000")},
    ),
    c(
        "simulate-serving-requests-over-limit",
        "simulate {tmp}/c.toml",
        "requests: 1,000,000,000 requests is over the limit",
        {"c.toml": cfg(SERVING, "requests = 10", "requests = 1000000000")},
    ),
    c(
        "simulate-serving-max-batch-over-limit",
        "simulate {tmp}/c.toml",
        "max_batch: 1,000,000,000 sequences is over the limit",
        {"c.toml": cfg(SERVING, "max_batch = 8", "max_batch = 1000000000")},
    ),
    c(
        "sweep-grid-over-limit",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "[grid] points x sweep.seeds: 1,000,000,000 runs is over the limit",
        {"s.toml": GRID_1E9},
    ),
    c(
        "sweep-random-over-limit",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "sweep.samples x sweep.seeds: 1,000,000,000,000 runs is over the limit",
        {"s.toml": RANDOM_1E12},
    ),
    c("report-blocks-over-limit", "report --out {tmp}/r --blocks 10000000000", "--blocks: 10,000"),
    c(
        "study-set-requests-over-limit",
        "study capacity --out {tmp}/s --set requests=1000000000",
        "--set requests: 1,000,000,000 requests is over the limit",
    ),
]


CLI_CASES = [
    # cost ----------------------------------------------------------------------------------
    c("cost-batch-0", f"{COST} --batch 0", "--batch"),
    c("cost-batch-word", f"{COST} --batch two", "--batch"),
    c("cost-batch-negative", f"{COST} --batch -4", "--batch"),
    c("cost-context-negative", f"{COST} --context -3", "--context"),
    c("cost-context-float", f"{COST} --context 1.5", "--context"),
    c("cost-new-tokens-0", f"{COST} --new-tokens 0", "--new-tokens"),
    c("cost-tp-0", f"{COST} --tensor-parallel 0", "--tensor-parallel"),
    c("cost-tp-3-of-32-heads", f"{COST} --tensor-parallel 3", "tensor"),
    c("cost-tp-64-of-32-heads", f"{COST} --tensor-parallel 64", "tensor"),
    c("cost-tp-1000", f"{COST} --tensor-parallel 1000", "tensor"),
    c(
        "cost-tp-8-of-12-heads",
        "cost --model llama-68m --hardware a100-80gb --tensor-parallel 8",
        "tensor",
    ),
    c("cost-context-over-max-position", f"{COST} --context 100000", "max_position"),
    c("cost-dtype-unknown", f"{COST} --dtype fp64", "fp64"),
    c("cost-dtype-not-on-card", "cost --model llama-2-7b --hardware tpu-v4", "float16"),
    c("cost-model-unknown", "cost --model llama-9 --hardware a100-80gb", "--model"),
    c("cost-model-empty", ["cost", "--model", "", "--hardware", "a100-80gb"], "--model"),
    c("cost-hardware-unknown", "cost --model llama-2-7b --hardware a100-90gb", "--hardware"),
    c(
        "cost-hardware-missing-file",
        "cost --model llama-2-7b --hardware {tmp}/none.toml",
        "--hardware",
    ),
    c(
        "cost-model-not-toml",
        "cost --model {tmp}/m.toml --hardware a100-80gb",
        "--model",
        {"m.toml": "slug = [unclosed"},
    ),
    c(
        "cost-model-is-hardware-card",
        "cost --model {tmp}/a.toml --hardware a100-80gb",
        "--model",
        {"a.toml": A100},
    ),
    c("cost-does-not-fit", "cost --model llama-2-70b --hardware a100-80gb", "does not fit"),
    c(
        "cost-encoder-length-negative",
        "cost --model t5-xxl --hardware tpu-v4 --encoder-length -1",
        "encoder",
    ),
    c("cost-plot-v-folder", f"{COST} --plot-v {{tmp}}", "--plot-v"),
    c("cost-plot-v-exists", f"{COST} --plot-v {{tmp}}/v.png", "--plot-v", {"v.png": b"old"}),
    c("cost-plot-v-under-a-file", f"{COST} --plot-v {{tmp}}/f/v.png", "--plot-v", {"f": "x"}),
    c("cost-plot-v-empty", [*COST.split(), "--plot-v", ""], "--plot-v"),
    c("cost-unknown-flag", f"{COST} --batchsize 3", "--batchsize"),
    # theory --------------------------------------------------------------------------------
    c("theory-alpha-above-1", "theory --alpha 1.5 --gamma 4 --c 0.05", "--alpha"),
    c("theory-alpha-negative", "theory --alpha -0.1 --gamma 4 --c 0.05", "--alpha"),
    c("theory-alpha-nan", "theory --alpha nan --gamma 4 --c 0.05", "--alpha"),
    c("theory-alpha-word", "theory --alpha high --gamma 4 --c 0.05", "--alpha"),
    c("theory-gamma-negative", "theory --alpha 0.7 --gamma -1 --c 0.05", "--gamma"),
    c("theory-gamma-float", "theory --alpha 0.7 --gamma 2.5 --c 0.05", "--gamma"),
    c("theory-c-negative", "theory --alpha 0.7 --gamma 4 --c -0.5", "--c"),
    c("theory-c-inf", "theory --alpha 0.7 --gamma 4 --c inf", "--c"),
    c("theory-missing-c", "theory --alpha 0.7 --gamma 4", "--c"),
    c("theory-derivations-into-folder", "theory --write-derivations {tmp}", "--write-derivations"),
    # simulate ------------------------------------------------------------------------------
    c("simulate-alpha-above-1", "simulate --alpha 1.5 --gamma 4 --tokens 2000", "alpha"),
    c("simulate-gamma-negative", "simulate --alpha 0.7 --gamma -1 --tokens 2000", "gamma"),
    c("simulate-tokens-0", "simulate --alpha 0.7 --gamma 4 --tokens 0", "tokens"),
    c("simulate-c-negative", f"{SIM} --c -1", "c"),
    c("simulate-seed-negative", f"{SIM} --seed -1", "--seed"),
    c("simulate-seed-word", f"{SIM} --seed one", "--seed"),
    c("simulate-config-missing", "simulate {tmp}/nope.toml", "nope.toml"),
    c("simulate-config-bad-toml", "simulate {tmp}/c.toml", "c.toml", {"c.toml": "mode = "}),
    c(
        "simulate-config-unknown-key",
        "simulate {tmp}/c.toml",
        "tokenz",
        {"c.toml": cfg(PLAIN, "tokens = 2000", "tokenz = 2000")},
    ),
    c(
        "simulate-config-mode",
        "simulate {tmp}/c.toml",
        "mode",
        {"c.toml": cfg(PLAIN, 'mode = "stream"', 'mode = "batch"')},
    ),
    c(
        "simulate-config-seed-negative",
        "simulate {tmp}/c.toml",
        "seed",
        {"c.toml": cfg(PLAIN, "seed = 1", "seed = -1")},
    ),
    c(
        "simulate-config-tokens-0",
        "simulate {tmp}/c.toml",
        "tokens",
        {"c.toml": cfg(PLAIN, "tokens = 2000", "tokens = 0")},
    ),
    c(
        "simulate-config-tokens-string",
        "simulate {tmp}/c.toml",
        "tokens",
        {"c.toml": cfg(PLAIN, "tokens = 2000", 'tokens = "many"')},
    ),
    c(
        "simulate-config-alpha",
        "simulate {tmp}/c.toml",
        "alpha",
        {"c.toml": cfg(PLAIN, "alpha = 0.7", "alpha = 1.7")},
    ),
    c(
        "simulate-config-acceptance-kind",
        "simulate {tmp}/c.toml",
        "kind",
        {"c.toml": cfg(PLAIN, 'kind = "iid"', 'kind = "bursty"')},
    ),
    c(
        "simulate-config-policy-kind",
        "simulate {tmp}/c.toml",
        "kind",
        {"c.toml": cfg(PLAIN, 'kind = "fixed"', 'kind = "greedy"')},
    ),
    c(
        "simulate-config-cost-kind",
        "simulate {tmp}/c.toml",
        "kind",
        {"c.toml": cfg(PLAIN, 'kind = "plain"', 'kind = "free"')},
    ),
    c(
        "simulate-config-gamma-huge",
        "simulate {tmp}/c.toml",
        "gamma",
        {"c.toml": cfg(PLAIN, "gamma = 4", "gamma = 1000000000000000000000000000000")},
    ),
    c(
        "simulate-config-c-negative",
        "simulate {tmp}/c.toml",
        "c",
        {"c.toml": cfg(PLAIN, "c = 0.05", "c = -0.05")},
    ),
    c(
        "simulate-config-target-unknown",
        "simulate {tmp}/c.toml",
        "llama-9",
        {"c.toml": cfg(CARDS, 'target = "llama-2-7b"', 'target = "llama-9"')},
    ),
    c(
        "simulate-set-unknown-path",
        "simulate {tmp}/c.toml --set acceptance.beta=1",
        "beta",
        {"c.toml": PLAIN},
    ),
    c(
        "simulate-set-bad-value",
        "simulate {tmp}/c.toml --set acceptance.alpha=abc",
        "alpha",
        {"c.toml": PLAIN},
    ),
    c(
        "simulate-set-without-equals",
        "simulate {tmp}/c.toml --set acceptance.alpha",
        "--set",
        {"c.toml": PLAIN},
    ),
    c("simulate-events-folder", f"{SIM} --events {{tmp}}", "--events"),
    c("simulate-trace-exists", f"{SIM} --trace {{tmp}}/t.json", "--trace", {"t.json": "{}"}),
    c(
        "simulate-prompt-over-max-position",
        "simulate {tmp}/c.toml",
        "max_position",
        {"c.toml": cfg(CARDS, "prompt = 128", "prompt = 8000")},
    ),
    # prompt + tokens fits llama-68m's 2048 positions, but the last block drafts 3 past it
    c(
        "simulate-last-block-over-max-position",
        "simulate {tmp}/c.toml",
        "max_position",
        {
            "c.toml": cfg(
                cfg(CARDS, "prompt = 128", "prompt = 1800"), "tokens = 200", "tokens = 247"
            )
        },
    ),
    c(
        "simulate-draft-other-vocabulary",
        "simulate {tmp}/c.toml",
        "vocab",
        {"c.toml": cfg(CARDS, 'draft = "llama-68m"', 'draft = "llama-3.1-8b"')},
    ),
    c(
        "simulate-draft-other-architecture",
        "simulate {tmp}/c.toml",
        "architecture",
        {"c.toml": cfg(CARDS, 'target = "llama-2-7b"', 'target = "t5-xxl"')},
    ),
    c(
        "simulate-draft-larger-than-target",
        "simulate {tmp}/c.toml",
        "draft",
        {
            "c.toml": cfg(
                cfg(CARDS, 'target = "llama-2-7b"', 'target = "llama-68m"'),
                'draft = "llama-68m"',
                'draft = "llama-2-7b"',
            )
        },
    ),
    c(
        "simulate-serving-kv-capacity-too-large",
        "simulate {tmp}/c.toml",
        "kv_capacity_tokens",
        {"c.toml": cfg(SERVING, "max_batch = 8", "max_batch = 8\nkv_capacity_tokens = 100000000")},
    ),
    c(
        "simulate-serving-prompt-over-max-position",
        "simulate {tmp}/c.toml",
        "max_position",
        {"c.toml": cfg(SERVING, "prompt_tokens = [128, 256]", "prompt_tokens = [5000, 5001]")},
    ),
    c(
        "simulate-config-tp-3-of-32-heads",
        "simulate {tmp}/c.toml",
        "tensor_parallel",
        {"c.toml": CARDS + "tensor_parallel = 3\n"},
    ),
    c(
        "simulate-serving-max-batch-0",
        "simulate {tmp}/c.toml",
        "max_batch",
        {"c.toml": cfg(SERVING, "max_batch = 8", "max_batch = 0")},
    ),
    c(
        "simulate-serving-rate-negative",
        "simulate {tmp}/c.toml",
        "rate_per_s",
        {"c.toml": cfg(SERVING, "rate_per_s = 4.0", "rate_per_s = -4.0")},
    ),
    # validate, problems --------------------------------------------------------------------
    c("validate-seed-negative", "validate --quick --seed -3", "--seed"),
    c("validate-csv-folder", "validate --quick --csv {tmp}", "--csv"),
    c("validate-csv-exists", "validate --quick --csv {tmp}/v.csv", "--csv", {"v.csv": "x\n"}),
    c("problems-seed-negative", "problems --seed -5", "--seed"),
    c("problems-seed-word", "problems --seed five", "--seed"),
    c("problems-level-4", "problems --level 4", "--level"),
    c("problems-format", "problems --format html", "--format"),
    # report, study, sweep ------------------------------------------------------------------
    c("report-out-is-a-file", "report --out {tmp}/r --study bill", "--out", {"r": "x"}),
    c("report-out-not-empty", "report --out {tmp}/r --study bill", "--out", {"r/old.csv": "x"}),
    c("report-out-under-a-file", "report --out {tmp}/f/r --study bill", "--out", {"f": "x"}),
    c("report-blocks-1", "report --out {tmp}/r --blocks 1", "--blocks"),
    c("report-study-unknown", "report --out {tmp}/r --study nope", "--study"),
    c("study-unknown", "study nope", "nope"),
    c("study-set-unknown-key", "study bill --set nonsense=1", "nonsense"),
    c("study-set-bad-value", "study capacity --set rate_per_s=fast", "rate_per_s"),
    c("study-out-is-a-file", "study bill --out {tmp}/s", "--out", {"s": "x"}),
    c("study-out-not-empty", "study bill --out {tmp}/s", "--out", {"s/old.csv": "x"}),
    c("sweep-spec-missing", "sweep {tmp}/nope.toml --out {tmp}/o.csv", "nope.toml"),
    c(
        "sweep-spec-bad-toml",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "s.toml",
        {"s.toml": "[sweep"},
    ),
    c(
        "sweep-grid-unknown-path",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "acceptance.beta",
        {"s.toml": cfg(SWEEP, '"acceptance.alpha"', '"acceptance.beta"')},
    ),
    c(
        "sweep-grid-empty",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "acceptance.alpha",
        {"s.toml": cfg(SWEEP, "[0.5, 0.7]", "[]")},
    ),
    c(
        "sweep-grid-bad-alpha",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "alpha",
        {"s.toml": cfg(SWEEP, "[0.5, 0.7]", "[0.5, 1.7]")},
    ),
    c(
        "sweep-mode-unknown",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "mode",
        {"s.toml": cfg(SWEEP, 'mode = "grid"', 'mode = "spiral"')},
    ),
    c(
        "sweep-metric-unknown",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "speedy",
        {"s.toml": cfg(SWEEP, '["speedup"]', '["speedy"]')},
    ),
    c(
        "sweep-seeds-0",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "seeds",
        {"s.toml": cfg(SWEEP, "seeds = 1", "seeds = 0")},
    ),
    c(
        "sweep-workers-0",
        "sweep {tmp}/s.toml --out {tmp}/o.csv --workers 0",
        "--workers",
        {"s.toml": SWEEP},
    ),
    c(
        "sweep-out-folder",
        "sweep {tmp}/s.toml --out {tmp}/o",
        "--out",
        {"s.toml": SWEEP, "o/x": "x"},
    ),
    c(
        "sweep-out-under-a-file",
        "sweep {tmp}/s.toml --out {tmp}/f/o.csv",
        "--out",
        {"s.toml": SWEEP, "f": "x"},
    ),
    c(
        "sweep-scheduler-no-answer",
        "sweep {tmp}/s.toml --out {tmp}/o.csv --scheduler tcp://127.0.0.1:1 --connect-timeout 0.5",
        "--scheduler",
        {"s.toml": SWEEP},
    ),
    c(
        "sweep-connect-timeout-negative",
        "sweep {tmp}/s.toml --out {tmp}/o.csv --scheduler tcp://127.0.0.1:1 --connect-timeout -1",
        "--connect-timeout",
        {"s.toml": SWEEP},
    ),
    c("study-out-under-a-file", "study bill --out {tmp}/f/s", "--out", {"f": "x"}),
    c("study-cards-folder-missing", "study bill --out {tmp}/s --cards {tmp}/nope", "--cards"),
    c("simulate-cards-folder-missing", f"{SIM} --cards {{tmp}}/nope", "--cards"),
    c(
        "simulate-set-seed-negative",
        "simulate {tmp}/c.toml --set seed=-1",
        "seed",
        {"c.toml": PLAIN},
    ),
    c(
        "simulate-config-seed-float",
        "simulate {tmp}/c.toml",
        "seed",
        {"c.toml": cfg(PLAIN, "seed = 1", "seed = 1.5")},
    ),
    c(
        "simulate-config-draft-file-not-slug",
        "simulate {tmp}/c.toml --cards {tmp}/cards",
        "llama-68m.toml",
        {
            "c.toml": CARDS,
            "cards/llama-68m.toml": L68M.replace('slug = "llama-68m"', 'slug = "my-68m"'),
        },
    ),
    # cards ---------------------------------------------------------------------------------
    c("cards-folder-missing", "cards --cards {tmp}/nope", "nope"),
    c("cards-duplicate-slug", "cards --cards {tmp}/hw", "h100-sxm", {"hw/h100-copy.toml": H100}),
    c(
        "cards-filename-not-slug",
        "cards --cards {tmp}/hw",
        "a100-80gb.toml",
        {"hw/a100-80gb.toml": H100},
    ),
    c(
        "cost-card-filename-not-slug",
        "cost --model llama-2-7b --hardware a100-80gb --cards {tmp}",
        "a100-80gb",
        {"a100-80gb.toml": H100},
    ),
    c(
        "cost-card-slug-twice",
        "cost --model llama-2-7b --hardware h100-sxm --cards {tmp}/a --cards {tmp}/b",
        "found twice",
        {"a/h100-sxm.toml": H100, "b/h100-sxm.toml": H100},
    ),
    # calibrate -----------------------------------------------------------------------------
    c("calibrate-no-passes", "calibrate {tmp} --out {tmp}/card.toml", "passes"),
    c(
        "calibrate-trace-missing",
        "calibrate {tmp}/nope.csv --out {tmp}/card.toml",
        "nope.csv: no such trace file",
    ),
    c(
        "calibrate-trace-missing-no-suffix",
        "calibrate {tmp}/nope --out {tmp}/card.toml",
        "nope: no such trace file",
    ),
    c(
        "calibrate-out-exists",
        CALIB,
        "--out",
        {**trace_files("tr/passes", passes_frame()), "card.toml": "x"},
    ),
    c(
        "calibrate-out-folder",
        "calibrate {tmp}/tr --out {tmp}/tr --base a100-80gb",
        "--out",
        trace_files("tr/passes", passes_frame()),
    ),
    c(
        "calibrate-residuals-folder",
        CALIB + " --residuals {tmp}/tr",
        "--residuals",
        trace_files("tr/passes", passes_frame()),
    ),
    c(
        "calibrate-base-unknown",
        "calibrate {tmp}/tr --out {tmp}/card.toml --base h300",
        "--base",
        trace_files("tr/passes", passes_frame()),
    ),
    c(
        "calibrate-power-without-source",
        CALIB + " --power 1 2",
        "--power-source",
        trace_files("tr/passes", passes_frame()),
    ),
    c(
        "calibrate-ceilings-missing",
        "calibrate {tmp}/tr --out {tmp}/card.toml",
        "ceilings",
        trace_files("tr/passes", passes_frame()),
    ),
    c(
        "calibrate-device-column-mixed",
        CALIB,
        "device",
        trace_files("tr/passes", passes_frame(devices=("cpu", "cuda"))),
    ),
    c(
        "calibrate-traces-from-two-devices",
        CALIB,
        "devices",
        {
            **trace_files("tr/passes", passes_frame()),
            **trace_files("tr/passes-b", passes_frame(), {"device_name": "NVIDIA H100"}),
        },
    ),
    c(
        "calibrate-trace-missing-column",
        CALIB,
        "time_s",
        trace_files("tr/passes", passes_frame().drop(columns=["time_s"])),
    ),
    c(
        "calibrate-trace-negative-time",
        CALIB,
        "time_s",
        trace_files("tr/passes", passes_frame(time_s=-1.0)),
    ),
    c(
        "calibrate-trace-time-word",
        CALIB,
        "time_s",
        trace_files("tr/passes", passes_frame(time_s="fast")),
    ),
    c("calibrate-trace-batch-0", CALIB, "batch", trace_files("tr/passes", passes_frame(batch=0))),
    c(
        "calibrate-trace-sidecar-missing",
        "calibrate {tmp}/p.csv --out {tmp}/card.toml",
        "p.json",
        {"p.csv": passes_frame().to_csv(index=False)},
    ),
    c(
        "calibrate-trace-sidecar-not-json",
        "calibrate {tmp}/p.csv --out {tmp}/card.toml",
        "p.json",
        {"p.csv": passes_frame().to_csv(index=False), "p.json": "{nope"},
    ),
    c(
        "calibrate-trace-unknown-kind",
        "calibrate {tmp}/p.csv --out {tmp}/card.toml",
        "kind",
        {
            "p.csv": "a\n1\n",
            "p.json": json.dumps(
                {"schema_version": 1, "kind": "nope", "device_name": "x", "date": "2026"}
            ),
        },
    ),
    c(
        "calibrate-trace-file-named-missing",
        "calibrate {tmp}/p.csv --out {tmp}/card.toml",
        "trace file",
        {"p.json": trace_files("p", passes_frame())["p.json"]},
    ),
    # issue 25, section 4: messages in the user's words ---------------------------------------
    c(
        "study-set-hardware-unknown",
        "study capacity --out {tmp}/s --set hardware=nope",
        "--set hardware=nope: no hardware card 'nope' (known: ",
    ),
    c(
        "study-set-draft-unknown",
        "study bill --out {tmp}/s --set draft=nope",
        "--set draft=nope: no model card 'nope' (known: ",
    ),
    c(
        "cost-cards-a-file",
        f"{COST} --cards {{tmp}}/f",
        "--cards {tmp}/f: not a folder",
        {"f": "x"},
    ),
    c("cards-cards-missing", "cards --cards {tmp}/nope", "--cards {tmp}/nope: no such folder"),
    c(
        "cost-env-cards-a-file",
        COST,
        "SPECSIM_CARDS={tmp}/f: not a folder",
        {"f": "x"},
        env={"SPECSIM_CARDS": "{tmp}/f"},
    ),
    c(
        "simulate-env-cards-missing",
        "simulate {tmp}/c.toml",
        "SPECSIM_CARDS={tmp}/nope: no such folder",
        {"c.toml": CARDS},
        env={"SPECSIM_CARDS": "{tmp}/nope"},
    ),
    c(
        "cost-hardware-binary",
        "cost --model llama-2-7b --hardware {tmp}/b.toml",
        "--hardware: {tmp}/b.toml: not a UTF-8 TOML file",
        {"b.toml": BINARY},
    ),
    c(
        "cost-model-binary",
        "cost --model {tmp}/b.toml --hardware a100-80gb",
        "--model: {tmp}/b.toml: not a UTF-8 TOML file",
        {"b.toml": BINARY},
    ),
    c(
        "cost-hardware-a-folder",
        "cost --model llama-2-7b --hardware {tmp}/d.toml",
        "--hardware: {tmp}/d.toml: a folder, not a card file",
        {"d.toml/x": "x"},
    ),
    c(
        "simulate-config-binary",
        "simulate {tmp}/c.toml",
        "{tmp}/c.toml: not a UTF-8 TOML file",
        {"c.toml": BINARY},
    ),
    c(
        "simulate-config-a-folder",
        "simulate {tmp}/c.toml",
        "{tmp}/c.toml: a folder, not a TOML file",
        {"c.toml/x": "x"},
    ),
    c(
        "sweep-spec-binary",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "{tmp}/s.toml: not a UTF-8 TOML file",
        {"s.toml": BINARY},
    ),
    c(
        "sweep-spec-a-folder",
        "sweep {tmp}/s.toml --out {tmp}/o.csv",
        "{tmp}/s.toml: a folder, not a TOML file",
        {"s.toml/x": "x"},
    ),
    c(
        "simulate-config-card-binary",
        "simulate {tmp}/c.toml --cards {tmp}/cards",
        "not a UTF-8 TOML file",
        {"c.toml": CARDS, "cards/llama-68m.toml": BINARY},
    ),
    c(
        "calibrate-trace-binary",
        CALIB,
        "{tmp}/tr/passes.csv: not a UTF-8 CSV file",
        {**trace_files("tr/passes", passes_frame()), "tr/passes.csv": BINARY},
    ),
    c(
        "calibrate-sidecar-binary",
        CALIB,
        "{tmp}/tr/passes.json: not a UTF-8 JSON file",
        {**trace_files("tr/passes", passes_frame()), "tr/passes.json": BINARY},
    ),
    c(
        "calibrate-trace-model-unknown",
        CALIB,
        "model 'llama-9', named in the 'model' column of trace",
        trace_files("tr/passes", passes_frame(model="llama-9")),
    ),
    c(
        "simulate-config-gamma-over-max-gamma",
        "simulate {tmp}/c.toml",
        "c.toml: policy: gamma 4 exceeds max_gamma 0",
        {"c.toml": cfg(SERVING, "max_gamma = 4", "max_gamma = 0")},
    ),
    c("theory-c-overflows", "theory --alpha 0.7 --gamma 4 --c 1e308", "--c: 1e+308 is too large"),
    c(
        "theory-c-hat-overflows",
        "theory --alpha 0.7 --gamma 4 --c 0.05 --c-hat 1e308",
        "--c-hat: 1e+308 is too large",
    ),
    c("theory-v-below-1", "theory --alpha 0.7 --gamma 4 --c 0.05 --v 0.5", "--v: expected v >= 1"),
    c("simulate-v-below-1", f"{SIM} --c 0.05 --v 0.5", "--v: expected v >= 1"),
    c(
        "simulate-config-v-below-1",
        "simulate {tmp}/c.toml",
        "v: expected v >= 1",
        {"c.toml": cfg(PLAIN, "c = 0.05", "c = 0.05\nv = 0.5")},
    ),
    # output paths that cannot be written: the flag is named, before any work
    c("simulate-trace-under-a-file", f"{SIM} --trace {{tmp}}/f/t.json", "--trace", {"f": "x"}),
    c("simulate-events-under-a-file", f"{SIM} --events {{tmp}}/f/e.csv", "--events", {"f": "x"}),
    c("simulate-trace-folder", f"{SIM} --trace {{tmp}}", "--trace"),
    c(
        "theory-derivations-under-a-file",
        "theory --write-derivations {tmp}/f/d.md",
        "--write-derivations",
        {"f": "x"},
    ),
    c("validate-csv-under-a-file", "validate --quick --csv {tmp}/f/v.csv", "--csv", {"f": "x"}),
    c("report-out-empty", ["report", "--out", "", "--study", "bill"], "--out"),
    c("study-out-empty", ["study", "bill", "--out", ""], "--out"),
    c(
        "sweep-out-is-a-folder",
        "sweep {tmp}/s.toml --out {tmp}/o",
        "--out",
        {"s.toml": SWEEP, "o/x": "x"},
    ),
    c(
        "calibrate-residuals-under-a-file",
        CALIB + " --residuals {tmp}/f/r.csv",
        "--residuals",
        {**trace_files("tr/passes", passes_frame()), "f": "x"},
    ),
    c(
        "calibrate-out-under-a-file",
        "calibrate {tmp}/tr --out {tmp}/f/card.toml --base a100-80gb --holdout none",
        "--out",
        {**trace_files("tr/passes", passes_frame()), "f": "x"},
    ),
]


def _cli_param(case: Cli) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=f"needs fix in {case.needs_fix_in}")]
    return pytest.param(case, id=case.id, marks=marks if case.needs_fix_in else ())


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def _make_ret(folder: Path, files: dict[str, str | bytes]) -> Path:
    """``_make``, returning the folder."""
    _make(folder, files)
    return folder


def _make(folder: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")


@pytest.mark.parametrize("case", [_cli_param(k) for k in CLI_CASES])
def test_cli_bad_input(
    case: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a default output folder would land here, and be seen
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    _make(tmp_path, case.files)
    before = _snapshot(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error:" in last, err
    named = case.field.replace("{tmp}", str(tmp_path))
    assert named in last, f"{named!r} not named in: {last}"
    assert not re.search(r"\bnp\.\w+\(", last), f"a numpy repr in: {last}"
    assert _snapshot(tmp_path) == before, "a file was written"


# Python API, cards, traces ----------------------------------------------------------------
@dataclass(frozen=True)
class Api:
    """``call(tmp_path)`` must raise ``exc`` with ``match`` (a regex) in its message."""

    id: str
    call: Callable[[Path], object]
    exc: type[BaseException] | tuple[type[BaseException], ...]
    match: str
    needs_fix_in: str = ""


def _hw() -> Any:
    from specsim.cards import load_hardware

    return load_hardware("a100-80gb")


def _model(slug: str = "llama-2-7b") -> Any:
    from specsim.cards import load_model

    return load_model(slug)


def _step(**kw: Any) -> Callable[[Path], object]:
    def call(_: Path) -> object:
        from specsim.cost import step_cost

        args: dict[str, Any] = {"batch": 1, "context": 512, "new_tokens": 1, **kw}
        model, hw = args.pop("model", _model()), args.pop("hardware", _hw())
        return step_cost(model, hw, **args)

    return call


def _card_file(loader: str, text: str) -> Callable[[Path], object]:
    """Write ``text`` as a card file and read it with ``specsim.cards.<loader>``."""

    def call(tmp: Path) -> object:
        p = tmp / "card.toml"
        p.write_text(text, encoding="utf-8")
        return _lazy(f"specsim.cards:{loader}", str(p))(tmp)

    return call


def _hw_text(text: str) -> Callable[[Path], object]:
    return _card_file("load_hardware", text)


def _model_text(text: str) -> Callable[[Path], object]:
    return _card_file("load_model", text)


def _lazy(path: str, *args: Any, **kw: Any) -> Callable[[Path], object]:
    """Call ``module:name(*args, **kw)``, importing it only when the case runs."""

    def call(_: Path) -> object:
        import importlib

        module, name = path.split(":")
        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        return target(*args, **kw)

    return call


def _with_line(card: str, line: str) -> str:
    """``card`` with ``line`` added before its ``[peak_flops]`` table (a top-level key)."""
    return card.replace("[peak_flops]", f"{line}\n[peak_flops]")


def _card_cost(target: str, draft: str, hardware: str = "a100-80gb") -> Callable[[Path], object]:
    def call(_: Path) -> object:
        from specsim.cards import load_hardware, load_model
        from specsim.cost import Deployment
        from specsim.sim import CardCost

        return CardCost(
            deployment=Deployment(target=load_model(target), hardware=load_hardware(hardware)),
            draft=load_model(draft),
        )

    return call


def _read_passes(frame: pd.DataFrame, meta: dict[str, Any] | None = None) -> Callable:
    def call(tmp: Path) -> object:
        from specsim.traces.io import read_trace

        _make(tmp, trace_files("passes", frame, meta))
        return read_trace(tmp / "passes.csv")

    return call


def _one_device(*frames: tuple[str, dict[str, Any], pd.DataFrame]) -> Callable[[Path], object]:
    return _lazy("specsim.calibrate.cards:one_device", list(frames))


def _fit_with(**params: float) -> Callable[[Path], object]:
    """trust_problems of a fit whose parameters and standard errors are made up, as a raise."""

    def call(_: Path) -> object:
        from specsim.calibrate.cards import PARAMETERS, Fit, trust_problems

        values = {
            "compute_efficiency": 0.5,
            "memory_efficiency": 0.8,
            "layer_overhead_s": 4e-5,
            "pass_overhead_s": 3e-4,
        }
        se = {k: 0.01 * v for k, v in values.items()}
        for k, v in params.items():
            (se if k.endswith("_se") else values)[k.removesuffix("_se")] = v
        fit = Fit(card=_hw(), params=values, stderr=se, residuals=pd.DataFrame(), rms_log_error=0.1)
        problems = trust_problems(fit)
        assert set(values) == set(PARAMETERS)
        if problems:
            raise ValueError("; ".join(problems))
        return None

    return call


API_CASES = [
    # the cost model
    Api("step-cost-none-for-model", _step(model=None), TypeError, "model"),
    Api("step-cost-none-for-hardware", _step(hardware=None), TypeError, "hardware"),
    Api("step-cost-unknown-slug", _step(model="llama-9"), ValueError, "model"),
    Api("step-cost-batch-0", _step(batch=0), ValueError, "batch"),
    Api("step-cost-batch-float", _step(batch=1.5), (ValueError, TypeError), "batch"),
    Api("step-cost-context-negative", _step(context=-1), ValueError, "context"),
    Api("step-cost-context-nan", _step(context=float("nan")), ValueError, "context"),
    Api("step-cost-new-tokens-0", _step(new_tokens=0), ValueError, "new_tokens"),
    Api("step-cost-dtype", _step(dtype="fp64"), ValueError, "fp64"),
    Api("step-cost-tp-0", _step(tensor_parallel=0), ValueError, "tensor_parallel"),
    Api("step-cost-tp-3", _step(tensor_parallel=3), ValueError, "tensor_parallel"),
    Api("step-cost-context-over-max-position", _step(context=100_000), ValueError, "max_position"),
    Api("step-cost-does-not-fit", _step(batch=10_000, context=4000), ValueError, "GB"),
    # cost sources of the simulator
    Api("plain-cost-v-empty", _lazy("specsim.sim:PlainCost", c=0.05, v=[]), ValueError, "v"),
    Api("plain-cost-c-negative", _lazy("specsim.sim:PlainCost", c=-0.1), ValueError, "c"),
    Api("plain-cost-c-nan", _lazy("specsim.sim:PlainCost", c=float("nan")), ValueError, "c"),
    Api(
        "plain-cost-step-0", _lazy("specsim.sim:PlainCost", c=0.1, step_s=0.0), ValueError, "step_s"
    ),
    Api(
        "card-cost-draft-other-vocabulary",
        _card_cost("llama-2-7b", "llama-3.1-8b"),
        ValueError,
        "vocab",
    ),
    Api(
        "card-cost-draft-other-architecture",
        _card_cost("t5-xxl", "llama-68m"),
        ValueError,
        "architecture",
    ),
    Api(
        "card-cost-tp-3-of-32-heads",
        _lazy("specsim.cost:Deployment", target=_model(), hardware=_hw(), tensor_parallel=3),
        ValueError,
        "tensor_parallel",
    ),
    Api("card-cost-draft-larger", _card_cost("llama-68m", "llama-2-7b"), ValueError, "draft"),
    Api(
        "card-cost-target-keyword",
        _lazy("specsim.sim:CardCost", target="llama-2-7b", hardware="a100-80gb"),
        TypeError,
        r"target, hardware belong to the deployment: CardCost\(deployment=Deployment",
    ),
    Api(
        "plan-request-option-as-a-string",
        lambda tmp: _lazy(
            "specsim.plan:PlanRequest",
            deployment=_lazy("specsim.cost:Deployment", target=_model(), hardware=_hw())(tmp),
            load=_lazy("specsim.plan:Load", batch=4)(tmp),
            options=("ngram",),
        )(tmp),
        TypeError,
        r"options\[0\]: expected an OptionSpec .* got 'ngram'",
    ),
    Api(
        "option-spec-alpha-as-a-string",
        _lazy("specsim.plan:OptionSpec", kind="draft", card="llama-68m", alpha="0.7"),
        ValueError,
        r"alpha: expected a probability in \[0, 1\], got '0.7'",
    ),
    # card loading
    Api(
        "load-hardware-none", _lazy("specsim.cards:load_hardware", None), TypeError, "hardware|card"
    ),
    Api("load-model-none", _lazy("specsim.cards:load_model", None), TypeError, "model|card"),
    Api("load-model-number", _lazy("specsim.cards:load_model", 7), TypeError, "7"),
    Api("load-model-unknown", _lazy("specsim.cards:load_model", "llama-9"), ValueError, "llama-9"),
    Api(
        "load-hardware-file-named-for-another-card",
        lambda tmp: _lazy(
            "specsim.cards:load_hardware",
            "a100-80gb",
            search_path=_make_ret(tmp, {"a100-80gb.toml": H100}),
        )(tmp),
        ValueError,
        r"a100-80gb\.toml holds .*'h100-sxm'",
    ),
    Api(
        "load-model-slug-twice",
        lambda tmp: _lazy(
            "specsim.cards:load_model",
            "llama-68m",
            search_path=[
                _make_ret(tmp / "a", {"llama-68m.toml": L68M}),
                _make_ret(tmp / "b", {"llama-68m.toml": L68M}),
            ],
        )(tmp),
        ValueError,
        "found twice",
    ),
    Api(
        "hw-sources-empty-string",
        _hw_text(A100 + 'blank = ""\n'),
        ValueError,
        r"\[sources\] `blank` must be a non-empty string",
    ),
    Api(
        "read-trace-missing",
        lambda tmp: _lazy("specsim.traces.io:read_trace", tmp / "nope")(tmp),
        FileNotFoundError,
        r"no such trace file: .*nope\.csv",
    ),
    Api(
        "run-sweep-connect-timeout-0",
        lambda tmp: _lazy(
            "specsim.sweep.run:run_sweep",
            _lazy("specsim.sweep.run:read_spec", _make_ret(tmp, {"s.toml": SWEEP}) / "s.toml")(tmp),
            tmp / "o.csv",
            connect_timeout=0,
        )(tmp),
        ValueError,
        "connect_timeout",
    ),
    Api("load-hardware-unknown", _lazy("specsim.cards:load_hardware", "h300"), ValueError, "h300"),
    # acceptance processes, policies, closed forms
    Api(
        "iid-alpha-above-1",
        _lazy("specsim.acceptance.processes:IIDAcceptance", alpha=1.5),
        ValueError,
        "alpha",
    ),
    Api(
        "iid-alpha-nan",
        _lazy("specsim.acceptance.processes:IIDAcceptance", alpha=float("nan")),
        ValueError,
        "alpha",
    ),
    Api(
        "iid-alpha-string",
        _lazy("specsim.acceptance.processes:IIDAcceptance", alpha="0.7"),
        (ValueError, TypeError),
        "alpha",
    ),
    Api(
        "markov-spread-too-wide",
        _lazy(
            "specsim.acceptance.processes:MarkovAcceptance.two_state",
            mean=0.7,
            spread=0.5,
            persistence=0.9,
        ),
        ValueError,
        "spread",
    ),
    Api(
        "markov-persistence-above-1",
        _lazy(
            "specsim.acceptance.processes:MarkovAcceptance.two_state",
            mean=0.7,
            spread=0.1,
            persistence=1.5,
        ),
        ValueError,
        "persistence",
    ),
    Api(
        "trace-acceptance-empty",
        _lazy("specsim.acceptance.processes:TraceAcceptance.from_values", []),
        ValueError,
        "values|empty",
    ),
    Api(
        "trace-acceptance-above-1",
        _lazy("specsim.acceptance.processes:TraceAcceptance.from_values", [0.5, 1.5]),
        ValueError,
        "1.5|alpha|values",
    ),
    Api(
        "fixed-gamma-negative",
        _lazy("specsim.policies.lookahead:FixedGamma", gamma=-1),
        ValueError,
        "gamma",
    ),
    Api(
        "fixed-gamma-float",
        _lazy("specsim.policies.lookahead:FixedGamma", gamma=2.5),
        (ValueError, TypeError),
        "gamma",
    ),
    Api(
        "theory-expected-tokens-alpha",
        _lazy("specsim.theory:expected_tokens", 1.5, 4),
        ValueError,
        "alpha",
    ),
    Api(
        "theory-walltime-gamma",
        _lazy("specsim.theory:walltime_speedup", 0.7, -1, 0.05),
        ValueError,
        "gamma",
    ),
    Api(
        "theory-walltime-c",
        _lazy("specsim.theory:walltime_speedup", 0.7, 4, -0.05),
        ValueError,
        "c",
    ),
    # validation, calibration, traces, problems
    Api(
        "check-grid-z-0",
        lambda _: _lazy(
            "specsim.validate.forms:check_grid",
            np.random.default_rng(0),
            alphas=(0.5,),
            gammas=(1,),
            cs=(0.0,),
            z=0,
        )(_),
        ValueError,
        "z",
    ),
    Api(
        "blocks-needed-relative-0",
        _lazy("specsim.validate.forms:blocks_needed", 0.5, 3, relative=0),
        ValueError,
        "relative",
    ),
    Api(
        "summarize-passes-missing-column",
        _lazy("specsim.calibrate.cards:summarize_passes", pd.DataFrame({"model": ["x"]})),
        ValueError,
        "missing column",
    ),
    Api(
        "summarize-passes-empty",
        _lazy("specsim.calibrate.cards:summarize_passes", passes_frame().iloc[:0]),
        ValueError,
        "no rows",
    ),
    Api(
        "summarize-passes-zero-time",
        _lazy("specsim.calibrate.cards:summarize_passes", passes_frame(time_s=0.0)),
        ValueError,
        "time",
    ),
    Api(
        "holdout-by-unknown",
        lambda _: _lazy(
            "specsim.calibrate.cards:holdout_errors", pd.DataFrame({"batch": [1]}), _hw(), by="nope"
        )(_),
        ValueError,
        "by",
    ),
    Api(
        "ceilings-missing-copy",
        _lazy(
            "specsim.calibrate.cards:card_from_ceilings",
            pd.DataFrame({"op": ["matmul"], "dtype": ["float32"], "rate": [1e11]}),
            slug="x",
            name="x",
            kind="cpu",
            mem_capacity=1e9,
            idle_power_w=1,
            max_power_w=2,
            sources={"a": "b"},
        ),
        ValueError,
        "copy",
    ),
    Api(
        "one-device-column-mixed",
        _one_device(("p.csv", {"device_name": "x"}, passes_frame(devices=("cpu", "cuda")))),
        ValueError,
        "column 'device' mixes",
    ),
    Api(
        "one-device-two-devices",
        _one_device(
            ("a.csv", {"device_name": "EPYC"}, passes_frame()),
            ("b.csv", {"device_name": "H100"}, passes_frame()),
        ),
        ValueError,
        "different devices",
    ),
    Api(
        "fit-stderr-above-estimate",
        _fit_with(pass_overhead_s=1e-4, pass_overhead_s_se=2e-3),
        ValueError,
        "pass_overhead_s",
    ),
    Api(
        "fit-overhead-at-bound",
        _fit_with(pass_overhead_s=1.4e-14, pass_overhead_s_se=1e-16),
        ValueError,
        "pass_overhead_s = 1.4e-14 sits at the fit's lower bound",
    ),
    Api(
        "fit-efficiency-at-upper-bound",
        _fit_with(memory_efficiency=1.0),
        ValueError,
        "memory_efficiency",
    ),
    Api(
        "read-trace-missing-column",
        _read_passes(passes_frame().drop(columns=["batch"])),
        ValueError,
        "'batch'",
    ),
    Api(
        "read-trace-negative-context",
        _read_passes(passes_frame(context=-5)),
        ValueError,
        "'context'",
    ),
    Api(
        "read-trace-fraction-batch",
        _read_passes(passes_frame(batch=1.5)),
        ValueError,
        "'batch'.*not an integer",
    ),
    Api("read-trace-inf-time", _read_passes(passes_frame(time_s=math.inf)), ValueError, "'time_s'"),
    Api(
        "read-trace-bad-schema-version",
        _read_passes(passes_frame(), {"schema_version": 99}),
        ValueError,
        "schema_version",
    ),
    Api(
        "read-trace-wrong-kind",
        _read_passes(passes_frame(), {"kind": "specdec"}),
        ValueError,
        "'draft'|column",
    ),
    Api("problems-seed-negative", _lazy("specsim.problems:generate", -1), ValueError, "seed"),
    Api(
        "problems-key-unknown",
        _lazy("specsim.problems:build", "nope", {}),
        (ValueError, KeyError),
        "nope",
    ),
    Api(
        "predict-runs-seeds-0",
        lambda _: _lazy(
            "specsim.validate.forms:predict_runs",
            None,
            None,
            None,
            _hw(),
            np.random.default_rng(0),
            seeds=0,
        )(_),
        ValueError,
        "seeds",
    ),
    # hardware cards
    Api(
        "hw-mem-bandwidth-negative",
        _hw_text(edit(A100, "mem_bandwidth", "-1")),
        ValueError,
        "mem_bandwidth",
    ),
    Api(
        "hw-mem-bandwidth-string",
        _hw_text(edit(A100, "mem_bandwidth", '"fast"')),
        (ValueError, TypeError),
        "mem_bandwidth",
    ),
    Api("hw-mem-capacity-0", _hw_text(edit(A100, "mem_capacity", "0")), ValueError, "mem_capacity"),
    Api(
        "hw-compute-efficiency-above-1",
        _hw_text(_with_line(A100, "compute_efficiency = 1.5")),
        ValueError,
        "compute_efficiency",
    ),
    Api(
        "hw-memory-efficiency-0",
        _hw_text(_with_line(A100, "memory_efficiency = 0")),
        ValueError,
        "memory_efficiency",
    ),
    Api(
        "hw-idle-above-max", _hw_text(edit(A100, "idle_power_w", "500")), ValueError, "idle_power_w"
    ),
    Api("hw-kind-unknown", _hw_text(edit(A100, "kind", '"fpga"')), ValueError, "kind"),
    Api("hw-slug-missing", _hw_text(edit(A100, "slug", None)), (ValueError, TypeError), "slug"),
    Api(
        "hw-pass-overhead-negative",
        _hw_text(_with_line(A100, "pass_overhead_s = -1")),
        ValueError,
        "pass_overhead_s",
    ),
    Api(
        "hw-latency-nan",
        _hw_text(edit(A100, "interconnect_latency_s", "nan")),
        ValueError,
        "interconnect_latency_s",
    ),
    Api(
        "hw-peak-unknown-dtype",
        _hw_text(A100.replace("[peak_flops]", "[peak_flops]\nfp5 = 1e12")),
        ValueError,
        "fp5",
    ),
    Api(
        "hw-peak-negative",
        _hw_text(A100.replace("float32 = 1.95e13", "float32 = -1")),
        ValueError,
        "peak_flops.float32",
    ),
    Api(
        "hw-misspelt-key",
        _hw_text("mem_bandwith = 1e12\n" + A100),
        (ValueError, TypeError),
        "mem_bandwith",
    ),
    Api(
        "hw-number-in-sources",
        _hw_text(A100 + "extra = 3\n"),
        (ValueError, TypeError),
        "`extra` = 3 in \\[sources\\]: a number here is probably a misplaced key",
    ),
    Api("hw-not-toml", _hw_text("slug = "), ValueError, "card.toml"),
    Api(
        "hw-binary",
        lambda tmp: _lazy(
            "specsim.cards:load_hardware", _make_ret(tmp, {"b.toml": BINARY}) / "b.toml"
        )(tmp),
        ValueError,
        r"b\.toml: not a UTF-8 TOML file \(byte 0 is 0x80\)",
    ),
    Api(
        "read-toml-folder",
        lambda tmp: _lazy("specsim.cards:read_toml", tmp)(tmp),
        ValueError,
        "a folder, not a TOML file",
    ),
    Api(
        "load-model-search-path-a-file",
        lambda tmp: _lazy(
            "specsim.cards:load_model", "llama-68m", search_path=_make_ret(tmp, {"f": "x"}) / "f"
        )(tmp),
        ValueError,
        r"^search_path: '.*f': not a folder$",
    ),
    Api(
        "load-model-unknown-known-list",
        _lazy("specsim.cards:load_model", "llama-9"),
        ValueError,
        r"^no model card 'llama-9' \(known: .*llama-2-7b.*; searched: ",
    ),
    Api(
        "plain-cost-v-below-1",
        _lazy("specsim.sim:PlainCost", c=0.05, v=0.5),
        ValueError,
        r"^v: expected v >= 1",
    ),
    Api(
        "stream-tokens-over-limit",
        lambda tmp: _lazy(
            "specsim.sim:StreamConfig",
            tokens=10**10,
            acceptance=_lazy("specsim.acceptance.processes:IIDAcceptance", alpha=0.7)(tmp),
            policy=_lazy("specsim.policies.lookahead:FixedGamma", gamma=4)(tmp),
            cost=_lazy("specsim.sim:PlainCost", c=0.05)(tmp),
        )(tmp),
        ValueError,
        r"^tokens: 10,000,000,000 tokens is over the limit of 1,000,000,000",
    ),
    Api(
        "demo-blocks-over-limit",
        _lazy("specsim.report.demo:two_token_demo", np.random.default_rng(0), blocks=10**9),
        ValueError,
        r"^blocks: 1,000,000,000 blocks is over the limit",
    ),
    # model cards
    Api("model-layers-0", _model_text(edit(L68M, "layers", "0")), ValueError, "layers"),
    Api("model-heads-0", _model_text(edit(L68M, "heads", "0")), ValueError, "heads"),
    Api(
        "model-d-model-negative", _model_text(edit(L68M, "d_model", "-768")), ValueError, "d_model"
    ),
    Api(
        "model-kv-heads-above-heads",
        _model_text(edit(L68M, "kv_heads", "24")),
        ValueError,
        "kv_heads",
    ),
    Api("model-vocab-0", _model_text(edit(L68M, "vocab", "0")), ValueError, "vocab"),
    Api(
        "model-dtype-unknown", _model_text(edit(L68M, "dtype", '"fp64"')), ValueError, "fp64|dtype"
    ),
    Api(
        "model-architecture-unknown",
        _model_text(edit(L68M, "architecture", '"rnn"')),
        ValueError,
        "architecture",
    ),
    Api(
        "model-max-position-0",
        _model_text(edit(L68M, "max_position", "0")),
        ValueError,
        "max_position",
    ),
    Api("model-params-negative", _model_text(edit(L68M, "params", "-1")), ValueError, "params"),
    Api(
        "model-gated-mlp-string",
        _model_text(edit(L68M, "gated_mlp", '"yes"')),
        (ValueError, TypeError),
        "gated_mlp",
    ),
    Api(
        "model-layers-float",
        _model_text(edit(L68M, "layers", "2.5")),
        (ValueError, TypeError),
        "layers",
    ),
    Api(
        "model-misspelt-key",
        _model_text(L68M.replace("d_ff =", "dff =")),
        (ValueError, TypeError),
        "dff|d_ff",
    ),
]


def _api_param(case: Api) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=f"needs fix in {case.needs_fix_in}")]
    return pytest.param(case, id=case.id, marks=marks if case.needs_fix_in else ())


@pytest.mark.parametrize("case", [_api_param(k) for k in API_CASES])
def test_api_bad_input(case: Api, tmp_path: Path) -> None:
    with pytest.raises(case.exc) as info:
        case.call(tmp_path)
    message = str(info.value)
    assert re.search(case.match, message), f"{case.match!r} not in: {message}"
    assert not re.search(r"\bnp\.\w+\(", message), f"a numpy repr in: {message}"


# The output checks themselves -------------------------------------------------------------
def test_output_checks_accept_new_and_empty_paths(tmp_path: Path) -> None:
    assert check_file(tmp_path / "new" / "deeper" / "f.png", option="--x") == (
        tmp_path / "new" / "deeper" / "f.png"
    )
    assert check_folder(tmp_path, option="--out") == tmp_path  # empty: fine
    (tmp_path / "f.png").write_bytes(b"x")
    assert check_file(tmp_path / "f.png", option="--x", force=True) == tmp_path / "f.png"
    assert check_folder(tmp_path, option="--out", force=True) == tmp_path
    assert not (tmp_path / "new").exists(), "a check creates nothing"


def test_output_checks_refuse_a_read_only_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specsim.cli.output as output

    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(output, "_writable", lambda folder: Path(folder) != ro)
    with pytest.raises(OutputError, match=r"--out: cannot write into .*ro \(the folder is read"):
        check_file(ro / "card.toml", option="--out")
    with pytest.raises(OutputError, match="--out: cannot write into"):
        check_folder(ro / "sub", option="--out")
    with pytest.raises(OutputError, match="--out: cannot write into"):
        check_folder(ro, option="--out")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_output_checks_see_a_read_only_folder_for_real(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="read-only"):
            check_file(ro / "x.png", option="--plot-v")
    finally:
        ro.chmod(0o700)


def test_cli_refuses_a_read_only_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import specsim.cli.output as output

    monkeypatch.setattr(output, "_writable", lambda folder: False)
    argv = ["cost", "--model", "llama-2-7b", "--hardware", "a100-80gb"]
    assert main([*argv, "--plot-v", str(tmp_path / "v.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim cost: error: --plot-v: cannot write into") and "\n" == err[-1]
    assert not any(tmp_path.iterdir())


# How the error line is formed ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("exc", "options", "line"),
    [
        (
            ValueError("batch: expected finite integer(s) >= 1, got np.int64(0)"),
            {"batch": "--batch"},
            "--batch: expected finite integer(s) >= 1, got 0",
        ),
        (
            ValueError("best_gamma: alpha must be in [0, 1], got np.float64(1.5)"),
            {"alpha": "--alpha"},
            "--alpha must be in [0, 1], got 1.5",
        ),
        (ValueError("x: got np.True_ and np.str_('a')"), {}, "x: got True and 'a'"),
        (KeyError("no such study 'nope'"), {}, "no such study 'nope'"),
        (PermissionError(13, "Permission denied", "/ro/x.csv"), {}, "/ro/x.csv: Permission denied"),
        (ValueError("two\nlines"), {}, "two lines"),
    ],
)
def test_user_message(exc: BaseException, options: dict[str, str], line: str) -> None:
    assert user_message(exc, options) == line


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        ("study bill --out {tmp}/s", "--out"),
        (f"{SIM} --trace {{tmp}}/t.json", "--trace"),
        (f"{SIM} --events {{tmp}}/e.csv", "--events"),
        ("sweep {tmp}/s.toml --out {tmp}/o.csv", "--out"),
        ("theory --write-derivations {tmp}/d.md", "--write-derivations"),
    ],
)
def test_a_read_only_output_folder_is_refused_before_any_work(
    argv: str,
    option: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import specsim.cli.output as output

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SWEEP, encoding="utf-8")
    monkeypatch.setattr(output, "_writable", lambda folder: False)
    command = argv.split()[0]
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim {command}: error: {option}: cannot write into"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


# Memory and time are bounded whatever the sizes (issue 25, section 3) ------------------------
_UNDER_A_LIMIT = """
import contextlib, io, json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from specsim.cli import main
out = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    out.append([code, (err.getvalue().strip().splitlines() or [""])[-1]])
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as on Linux")
def test_every_size_is_refused_in_bounded_memory_and_time(tmp_path: Path) -> None:
    """Each subcommand that takes a size, given one far over its limit, under 3 GiB of address
    space: without the checks these asked for 7.45 GiB (cost), 74.5 GiB (tree), more for the
    sweeps and workloads, or ran until killed (simulate --tokens); with them each is a one-line
    error naming the argument, in seconds (the subprocess has 300 s for all of them)."""
    for case in SIZE_CASES:  # a folder each: their files share names (c.toml, s.toml)
        (tmp_path / case.id).mkdir()
        _make(tmp_path / case.id, case.files)
    before = _snapshot(tmp_path)
    argvs = [[a.replace("{tmp}", str(tmp_path / k.id)) for a in k.argv] for k in SIZE_CASES]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _UNDER_A_LIMIT,
            str(3 * 2**30),
            json.dumps(argvs),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # a default output folder would land here, and be seen
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),  # this tree's specsim, installed or not
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for case, (code, line) in zip(SIZE_CASES, results, strict=True):
        assert code == 2 and "error:" in line, (case.id, code, line)
        assert case.field in line and "over the limit" in line, (case.id, line)
    assert _snapshot(tmp_path) == before, "a command wrote a file"


def test_a_cards_folder_of_the_environment_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specsim.cards import load_model

    monkeypatch.setenv("SPECSIM_CARDS", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=rf"^SPECSIM_CARDS={re.escape(str(tmp_path))}/nope: no "):
        load_model("llama-68m")


def test_the_closed_forms_print_no_warning_near_the_largest_c(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Warnings are errors in the test run: an overflow inside numpy would fail here.
    assert main(["theory", "--alpha", "0.7", "--gamma", "4", "--c", "3e305", "--json"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and json.loads(out.out)["values"]["walltime_speedup"] > 0
