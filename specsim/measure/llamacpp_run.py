"""Measure llama.cpp on this CPU: plain decoding (``llama-bench``) and speculative decoding
(``llama-speculative-simple``), raw outputs into one folder.

:func:`measure_llamacpp` (``specsim measure --engine llama.cpp --out DIR``)

1. writes the GGUF files under ``<root>/models`` (:mod:`specsim.measure.gguf_write`): the
   committed tiny target and drafts (f32), and random-weight Llamas of
   :data:`RANDOM_SHAPES` (f16 and Q8_0, weights from the given ``Generator``);
2. runs ``llama-bench -o json`` at every thread count: plain decoding at three context
   depths (``llama-bench/<model>.json``), and the 2- to 9-token passes a verification makes
   (``llama-bench/<model>-verify.json``) of the models the pairs use;
3. runs ``llama-speculative-simple`` greedy at draft lengths :data:`DRAFT_LENGTHS` on the
   tiny target with ``draft-all`` (pair ``tiny``) and with ``draft-distil`` (pair
   ``tiny-distil``) for every prompt of :data:`PROMPTS`, and on the random pair
   :data:`REPEATS` times (``speculative/<pair>-t<threads>-k<k>-<prompt>-r<rep>.log``,
   written by ``--log-file``; a log whose summary the exit cut short is run again);
4. writes ``manifest.json`` (build, CPU, every command, every model's sha256, seconds),
   ``lscpu.txt`` and ``README.md`` (:mod:`specsim.measure.llamacpp_report`).

Each output is rewritten only when missing, so a rerun after an interruption resumes.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specsim.calibrate.engine_llamacpp import read_speculative_log
from specsim.measure.gguf_write import RandomLlama, write_random_llama, write_tiny_gguf
from specsim.measure.llamacpp_build import DEFAULT_ROOT, LlamaCppMissing, load_build_info
from specsim.measure.llamacpp_build import tool_path as _tool
from specsim.measure.llamacpp_report import write_readme
from specsim.measure.tinylm import file_sha256

__all__ = [
    "RANDOM_SHAPES",
    "DRAFT_LENGTHS",
    "PROMPTS",
    "TINY",
    "bench_command",
    "spec_command",
    "run_logged",
    "measure_llamacpp",
]

TINY = ("target", "draft-all", "draft-distil")
RANDOM_SHAPES = (
    RandomLlama(name="rand-93m", layers=12, d_model=768, heads=12, kv_heads=4, d_ff=2560),
    RandomLlama(name="rand-9m", layers=6, d_model=320, heads=5, kv_heads=5, d_ff=960),
)
DRAFT_LENGTHS = (1, 2, 3, 4, 5, 6, 7, 8)
RANDOM_DRAFT_LENGTHS = (1, 2, 4, 8)
PROMPTS: dict[str, str] = {
    "en": "A man who has never gone to school may steal from a freight car; but if he has",
    "de": "Wer nicht wagt, der nicht gewinnt. Und wer",
    "code": "def __init__(self, name, value=None):\n        self.name = name\n        self.",
}
REPEATS = 3  # each speculative run three times: the counts repeat (greedy), the times spread
SPEC_TRIES = 5
TINY_PREDICT = 96  # prompt + emitted + drafts stay under the drafts' 128 learned positions
Log = Callable[[str], None]


def _run(cmd: list[str], stdout: Path | None, stderr: Path) -> float:
    """Run ``cmd``, its output into the files; the wall seconds. A failure names the log."""
    t0 = time.perf_counter()
    with stderr.open("w") as err:
        if stdout is None:
            done = subprocess.run(cmd, stdout=err, stderr=subprocess.STDOUT, check=False)
        else:
            with stdout.open("w") as out:
                done = subprocess.run(cmd, stdout=out, stderr=err, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {done.returncode}: see {stderr}")
    return time.perf_counter() - t0


def write_models(root: Path, rng: np.random.Generator, tiny_dir: Path) -> dict[str, Path]:
    """The GGUF files of the measurement (module docstring), written when missing."""
    models = root / "models"
    tok = tiny_dir / "tokenizer.json"
    out: dict[str, Path] = {}
    # one child generator per random file, so a file rewritten alone gets the same weights
    children = iter(rng.spawn(2 * len(RANDOM_SHAPES)))
    for name in TINY:
        path = models / f"{name}-f32.gguf"
        if not path.is_file():
            write_tiny_gguf(tiny_dir / f"{name}.safetensors", tok, path)
        out[path.stem] = path
    for shape in RANDOM_SHAPES:
        for dtype in ("f16", "q8_0"):
            path = models / f"{shape.name}-{dtype}.gguf"
            child = next(children)
            if not path.is_file():
                write_random_llama(shape, tok, path, child, dtype=dtype)
            out[path.stem] = path
    return out


def bench_command(
    root: Path, model: Path, threads: Sequence[int], *, prompt: str, gen: str, depths: str
) -> list[str]:
    """``llama-bench -o json`` on ``model``: ``-p prompt -n gen -d depths`` at ``threads``."""
    return [
        str(_tool("llama-bench", root)),
        "-m", str(model), "-t", ",".join(map(str, threads)), "-p", prompt, "-n", gen,
        "-d", depths, "-r", "3", "-o", "json",
    ]  # fmt: skip


def _bench_plan(models: dict[str, Path]) -> list[tuple[str, Path, dict[str, str]]]:
    """(output stem, model, -p/-n/-d) of every llama-bench run: plain decoding (``tg``) of
    each model a pair uses and of the random targets in both formats; the ``k + 1``-token
    passes a verification makes (``pp`` 2 to 9, ``-verify``) of each model in a pair."""
    paired = ("target-f32", "draft-all-f32", "draft-distil-f32", "rand-93m-f16", "rand-9m-f16")
    plan = []
    for stem, path in models.items():
        tiny = stem.removesuffix("-f32") in TINY
        if tiny and stem not in paired:
            continue
        depths = "0,32,64" if tiny else "0,512,1024"
        plan.append((stem, path, {"prompt": "0", "gen": "32", "depths": depths}))
        if stem in paired:
            verify = {"prompt": ",".join(map(str, range(2, 10))), "gen": "0"}
            plan.append((f"{stem}-verify", path, {**verify, "depths": "0,64" if tiny else "0"}))
    return plan


def spec_command(
    root: Path, target: Path, draft: Path, *, k: int, threads: int, prompt: str, n: int, log: Path
) -> list[str]:
    return [
        str(_tool("llama-speculative-simple", root)),
        "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
        "-c", "256" if n <= TINY_PREDICT else "2048", "-n", str(n), "-t", str(threads),
        "--temp", "0", "--top-k", "1", "--seed", "0", "-p", prompt, "--log-file", str(log),
    ]  # fmt: skip


def _benches(
    root: Path, out: Path, models: dict[str, Path], threads: Sequence[int]
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for stem, path, flags in _bench_plan(models):
        cmd = bench_command(root, path, threads, **flags)
        dest = out / "llama-bench" / f"{stem}.json"
        runs.append({"output": str(dest.relative_to(out)), "command": cmd})
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            err = dest.with_suffix(".stderr.txt")
            runs[-1]["seconds"] = round(_run(cmd, tmp, err), 3)
            os.replace(tmp, dest)
            if err.stat().st_size == 0:
                err.unlink()
    return runs


def _spec_plan(models: dict[str, Path], threads: Sequence[int]) -> list[dict[str, Any]]:
    plan = []
    tiny = {"pair": "tiny", "target": models["target-f32"], "draft": models["draft-all-f32"]}
    distil = {**tiny, "pair": "tiny-distil", "draft": models["draft-distil-f32"]}
    rand = {"pair": "rand-f16", "target": models["rand-93m-f16"], "draft": models["rand-9m-f16"]}
    for t, rep in itertools.product(threads, range(REPEATS)):
        for pair, k, (key, prompt) in itertools.product(
            (tiny, distil), DRAFT_LENGTHS, PROMPTS.items()
        ):
            plan.append({**pair, "k": k, "threads": t, "prompt_key": key, "prompt": prompt,
                         "n": TINY_PREDICT, "rep": rep})  # fmt: skip
        for k in RANDOM_DRAFT_LENGTHS:
            plan.append({**rand, "k": k, "threads": t, "prompt_key": "en",
                         "prompt": PROMPTS["en"], "n": 64, "rep": rep})  # fmt: skip
    return plan


def run_logged(cmd: list[str], tmp: Path, dest: Path) -> tuple[float, int]:
    """Run until the log holds its summary: llama.cpp's logger writes from a thread that the
    exit may cut short, losing the last lines; the seconds of the last run and the tries."""
    for attempt in range(1, SPEC_TRIES + 1):
        seconds = _run(cmd, None, dest.with_suffix(".stdout.txt"))
        try:
            read_speculative_log(tmp)
        except ValueError:
            continue
        dest.with_suffix(".stdout.txt").unlink()
        os.replace(tmp, dest)
        return seconds, attempt
    raise RuntimeError(f"{dest}: no summary in the log after {SPEC_TRIES} runs")


def _speculative(
    root: Path, out: Path, models: dict[str, Path], threads: Sequence[int], say: Log
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for unit in _spec_plan(models, threads):
        name = f"{unit['pair']}-t{unit['threads']}-k{unit['k']}-{unit['prompt_key']}"
        dest = out / "speculative" / f"{name}-r{unit['rep']}.log"
        tmp = dest.with_suffix(".tmp")
        kw = {key: unit[key] for key in ("k", "threads", "prompt", "n")}
        cmd = spec_command(root, unit["target"], unit["draft"], log=tmp, **kw)
        shown = [*cmd[:-1], str(dest.relative_to(out))]
        runs.append({"output": str(dest.relative_to(out)), "command": shown})
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            seconds, tries = run_logged(cmd, tmp, dest)
            runs[-1].update(seconds=round(seconds, 3), tries=tries)
            say(f"speculative {dest.name}: {seconds:.1f} s")
    return runs


def _cpu(out: Path) -> dict[str, str]:
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    if text:
        (out / "lscpu.txt").write_text(text, encoding="utf-8")
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "L3")
    cpu = {k: v.strip() for k, v in fields.items() if k.strip() in keep}
    cpu["machine"] = platform.machine()
    return cpu


def _earlier(path: Path) -> dict[str, dict[str, Any]]:
    """The units of an earlier manifest by output, to keep the times of reused outputs."""
    if not path.is_file():
        return {}
    old = json.loads(path.read_text(encoding="utf-8"))
    return {u["output"]: u for u in [*old.get("llama_bench", []), *old.get("speculative", [])]}


def measure_llamacpp(
    out: str | os.PathLike[str],
    *,
    rng: np.random.Generator,
    root: str | os.PathLike[str] = DEFAULT_ROOT,
    tiny_dir: str | os.PathLike[str] = Path("models") / "tiny",
    threads: Sequence[int] = (1, 2),
    log: Log | None = None,
) -> dict[str, Any]:
    """Run the whole measurement (module docstring) into ``out``; return its manifest."""
    say = log if log is not None else (lambda line: None)
    base, dest = Path(root), Path(out)
    build = load_build_info(base)
    for tool in ("llama-bench", "llama-speculative-simple"):
        if not _tool(tool, base).is_file():
            raise LlamaCppMissing(f"{_tool(tool, base)}: not built (run `make llama-cpp`)")
    if shutil.which("lscpu") is None:
        say("lscpu not found: the CPU is described by platform.machine() only")
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    models = write_models(base, rng, Path(tiny_dir))
    say(f"models ready under {base / 'models'}")
    benches = _benches(base, dest, models, threads)
    say(f"llama-bench: {len(benches)} files")
    spec = _speculative(base, dest, models, threads, say)
    earlier = _earlier(dest / "manifest.json")
    for unit in [*benches, *spec]:
        for key in ("seconds", "tries"):
            if key not in unit and key in earlier.get(unit["output"], {}):
                unit[key] = earlier[unit["output"]][key]
    manifest = {
        "build": build,
        "cpu": _cpu(dest),
        "threads": list(threads),
        "models": {k: {"file": p.name, "sha256": file_sha256(p)} for k, p in models.items()},
        "llama_bench": benches,
        "speculative": spec,
        "seconds_this_run": round(time.perf_counter() - t0, 1),
    }
    text = json.dumps(manifest, indent=2, default=str) + "\n"
    text = text.replace(str(base) + "/", "$LLAMA_CPP/")
    (dest / "manifest.json").write_text(text, encoding="utf-8")
    write_readme(dest, manifest)
    return manifest
