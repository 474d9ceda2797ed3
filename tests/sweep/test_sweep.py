"""Sweeps: the same rows on 1 process, 2 processes and a Dask LocalCluster; kill and resume;
the spec format and its errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance.processes import IIDAcceptance
from specsim.cli import main
from specsim.policies.lookahead import FixedGamma
from specsim.sweep.run import (
    point_config,
    point_key,
    point_seed,
    read_spec,
    run_point,
    run_sweep,
    spec_from_dict,
    sweep_points,
)

SMALL = """
[sweep]
mode = "grid"
seed = 7
seeds = 2

[config]
mode = "stream"
tokens = 2000
acceptance = {kind = "iid", alpha = 0.7}
policy = {kind = "fixed", gamma = 4}
cost = {kind = "plain", c = 0.05}

[grid]
"acceptance.alpha" = [0.6, 0.8]
policy.gamma = [1, 3, 5]
"""

# Slow enough per point (a per-block policy over many tokens) to kill the run part-way.
SLOW = """
[sweep]
seed = 3
seeds = 2

[config]
tokens = 12000
acceptance = {kind = "iid", alpha = 0.7}
policy = {kind = "heuristic"}
cost = {kind = "plain", c = 0.05}

[grid]
"acceptance.alpha" = [0.5, 0.6, 0.7, 0.8, 0.9]
"cost.c" = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3]
"""

BASE = {
    "tokens": 500,
    "acceptance": {"kind": "iid", "alpha": 0.7},
    "policy": {"kind": "fixed", "gamma": 4},
    "cost": {"kind": "plain", "c": 0.05},
}


def _spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_grid_points_and_seeds_are_deterministic(tmp_path: Path) -> None:
    spec = read_spec(_spec(tmp_path, SMALL))
    pts = sweep_points(spec)
    assert pts == [
        {"acceptance.alpha": a, "policy.gamma": g} for a in (0.6, 0.8) for g in (1, 3, 5)
    ]
    key = point_key(pts[0])
    assert key == '{"acceptance.alpha":0.6,"policy.gamma":1}'
    cfg = point_config(spec.config, pts[0]).config
    assert cfg.acceptance == IIDAcceptance(alpha=0.6) and cfg.policy == FixedGamma(gamma=1)
    assert spec.config.config.acceptance.alpha == 0.7  # type: ignore[attr-defined]  # unchanged
    a = np.random.default_rng(point_seed(7, key, 0)).random(3)
    b = np.random.default_rng(point_seed(7, key, 0)).random(3)
    c = np.random.default_rng(point_seed(7, key, 1)).random(3)
    d = np.random.default_rng(point_seed(8, key, 0)).random(3)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(a, d)


def test_random_mode_draws_the_same_points_every_time() -> None:
    data = {
        "sweep": {"mode": "random", "samples": 20, "seed": 4},
        "config": BASE,
        "random": {
            "acceptance": {"alpha": {"uniform": [0.5, 0.9]}},
            "policy.gamma": {"integers": [1, 4]},
            "cost.c": {"loguniform": [0.01, 0.2]},
            "cost.overlap": {"choice": [True, False]},
        },
    }
    first, second = sweep_points(spec_from_dict(data)), sweep_points(spec_from_dict(data))
    assert first == second and len(first) == 20
    assert all(0.5 <= p["acceptance.alpha"] <= 0.9 and 1 <= p["policy.gamma"] <= 4 for p in first)
    assert all(0.01 <= p["cost.c"] <= 0.2 and p["cost.overlap"] in (True, False) for p in first)
    assert {p["policy.gamma"] for p in first} == {1, 2, 3, 4}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"sweep": {"mode": "batch"}, "config": BASE}, "sweep.mode"),
        ({"sweep": {"seeds": 0}, "config": BASE}, "sweep.seeds"),
        ({"grid": {"policy.gamma": [1]}}, "[config]"),
        ({"config": BASE, "grid": {"accept.alpha": [0.5]}}, "has no field 'accept'"),
        ({"config": BASE, "grid": {"acceptance.alhpa": [0.5]}}, "has no field 'alhpa'"),
        ({"config": {**BASE, "tokns": 3}}, "[config]: unknown key(s) ['tokns']"),
        ({"config": BASE, "grid": {"acceptance.alpha": []}}, "acceptance.alpha"),
        ({"config": BASE, "grid": {"acceptance.alpha": 0.5}}, "expected a list of values"),
        (
            {
                "sweep": {"mode": "random"},
                "config": BASE,
                "random": {"cost.c": {"uniform": [0, 1]}},
            },
            "samples",
        ),
        (
            {
                "sweep": {"mode": "random", "samples": 2},
                "config": BASE,
                "random": {"cost.c": {"normal": [0, 1]}},
            },
            "cost.c",
        ),
        ({"sweep": {"colour": 1}, "config": BASE}, "[sweep]: unknown key"),
        *[
            (
                {
                    "sweep": {"mode": "random", "samples": 2},
                    "config": BASE,
                    "random": {"cost.c": dist},
                },
                f"[random] cost.c: {next(iter(dist))} needs",
            )
            for dist in (
                {"integers": [8, 1]},
                {"uniform": [0.5]},
                {"choice": []},
                {"loguniform": [0, 1]},
                {"integers": [1, 2.5]},
                {"uniform": ["a", 1]},
            )
        ],
        ({"params": {}, "config": BASE}, "unknown table"),
        ({"sweep": {"config": "x.toml"}, "config": BASE}, "keep one"),
    ],
)
def test_bad_specs_raise_naming_the_problem(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        spec_from_dict(data)  # type: ignore[arg-type]


def test_bad_values_fail_before_anything_runs(tmp_path: Path) -> None:
    spec = spec_from_dict({"config": BASE, "grid": {"acceptance.alpha": [0.5, 1.5]}})
    with pytest.raises(ValueError, match=r"point 1 .*acceptance.*alpha"):
        run_sweep(spec, tmp_path / "out.csv")
    bad_type = spec_from_dict({"config": BASE, "grid": {"policy.gamma": [2, "many"]}})
    with pytest.raises(ValueError, match=r"point 1 .*policy.gamma: expected int, got 'many'"):
        run_sweep(bad_type, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(ValueError, match="expected a .csv or .parquet"):
        run_sweep(spec_from_dict({"config": BASE, "grid": {"cost.c": [0.1]}}), tmp_path / "o.txt")


@pytest.mark.slow
def test_one_process_two_processes_and_a_local_cluster_agree(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="needs the sweep extra: pip install -e .[sweep]")
    spec = read_spec(_spec(tmp_path, SMALL))
    one = run_sweep(spec, tmp_path / "one.csv", workers=1)
    two = run_sweep(spec, tmp_path / "two.csv", workers=2)
    dask = run_sweep(spec, tmp_path / "dask.csv", workers=2, dask=True)
    assert one.rows == two.rows == dask.rows == 12 and one.computed == 6
    text = (tmp_path / "one.csv").read_bytes()
    assert (tmp_path / "two.csv").read_bytes() == text
    assert (tmp_path / "dask.csv").read_bytes() == text
    df = pd.read_csv(tmp_path / "one.csv")  # exact floats: pandas reads round-trip by default
    # A point's rows do not depend on the sweep around it: recompute one alone.
    values = {"acceptance.alpha": 0.8, "policy.gamma": 3}
    alone = run_point(spec.config, values, spec.seed, spec.seeds, (), 4)
    got = df[df["point"] == 4].reset_index(drop=True)
    for r, row in enumerate(alone):
        assert got.loc[r, "speedup"] == row["speedup"] and got.loc[r, "key"] == row["key"]
    assert (got["acceptance.alpha"] == 0.8).all() and (got["policy.gamma"] == 3).all()
    # Replicates differ: different seeds.
    assert df.groupby("point")["speedup"].nunique().min() == 2
    assert (df["tokens"] >= 2000).all()


@pytest.mark.slow
def test_local_cluster_binds_loopback_only_and_serves_a_scheduler_address(
    tmp_path: Path,
) -> None:
    pytest.importorskip("distributed", reason="needs the sweep extra: pip install -e .[sweep]")
    psutil = pytest.importorskip("psutil", reason="needs psutil (installed with the sweep extra)")
    from specsim.sweep.run import local_cluster

    spec = read_spec(_spec(tmp_path, SMALL))
    run_sweep(spec, tmp_path / "here.csv")
    cluster = local_cluster(1)
    try:
        pids = {os.getpid()} | {w.process.pid for w in cluster.workers.values() if w.process}
        procs = [psutil.Process(p) for p in pids]
        procs += [c for p in list(procs) for c in p.children(recursive=True)]
        listening = [
            conn.laddr.ip
            for p in procs
            for conn in p.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        ]
        assert listening, "the cluster listens somewhere"
        assert set(listening) == {"127.0.0.1"}, listening
        # --scheduler ADDRESS: an existing cluster gives the same rows.
        run_sweep(spec, tmp_path / "there.csv", scheduler=cluster.scheduler_address)
        assert (tmp_path / "there.csv").read_bytes() == (tmp_path / "here.csv").read_bytes()
    finally:
        cluster.close()


def _rows(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_kill_part_way_then_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = _spec(tmp_path, SLOW)
    out = tmp_path / "res.csv"
    total = len(sweep_points(read_spec(spec_path)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsim", "sweep", str(spec_path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and len(_rows(out)) >= 1 + 2 * 4:  # header + 4 points x 2 seeds
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before = _rows(out)
    kept = {line.split(",")[0] for line in before[1:]}
    assert 4 <= len(kept) < total, "the run was not stopped part-way"
    # A torn line, as a kill during a write leaves it.
    with out.open("a", encoding="utf-8") as fh:
        fh.write("999,0,torn")
    assert main(["sweep", str(spec_path), "--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    complete = {p for p in kept if sum(ln.startswith(p + ",") for ln in before[1:]) == 2}
    assert f"computed {total - len(complete)} points, skipped {len(complete)}" in printed
    after = _rows(out)
    for line in before[1:]:  # finished rows kept verbatim, not recomputed
        if line.split(",")[0] in complete:
            assert line in after
    assert len(after) == 1 + 2 * total and not any("torn" in ln for ln in after)
    # The resumed file equals an uninterrupted run of the same spec.
    fresh = tmp_path / "fresh.csv"
    assert main(["sweep", str(spec_path), "--out", str(fresh)]) == 0
    assert fresh.read_bytes() == out.read_bytes()
    # Resuming a finished sweep computes nothing; another spec cannot resume this file.
    assert main(["sweep", str(spec_path), "--out", str(out), "--resume"]) == 0
    assert f"computed 0 points, skipped {total}" in capsys.readouterr().out
    other = _spec(tmp_path, SLOW.replace("seed = 3", "seed = 4"), "other.toml")
    assert main(["sweep", str(other), "--out", str(out), "--resume"]) == 2
    assert "different sweep spec" in capsys.readouterr().err
    assert main(["sweep", str(spec_path), "--out", str(out)]) == 2  # exists, no --resume
    assert "pass --resume" in capsys.readouterr().err


def test_parquet_output_streams_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="needs the sweep extra: pip install -e .[sweep]")
    spec = read_spec(_spec(tmp_path, SMALL))
    out = tmp_path / "res.parquet"
    first = run_sweep(spec, out, progress=None)
    df = pd.read_parquet(out)
    assert first.rows == len(df) == 12 and not (tmp_path / "res.parquet.parts").exists()
    csv = run_sweep(spec, tmp_path / "res.csv")
    assert csv.rows == 12
    back = pd.read_csv(tmp_path / "res.csv")  # exact floats: round-trip by default
    assert np.array_equal(df["speedup"].to_numpy(), back["speedup"].to_numpy())
    again = run_sweep(spec, out, resume=True)
    assert again.computed == 0 and again.skipped == 6


def test_serving_sweep_and_a_config_file(tmp_path: Path) -> None:
    serving = {k: v for k, v in BASE.items() if k != "tokens"}
    serving |= {
        "mode": "serving",
        "max_gamma": 8,
        "workload": {
            "kind": "poisson",
            "rate_per_s": 50.0,
            "requests": 20,
            "prompt_tokens": 64,
            "output_tokens": [16, 32],
        },
    }
    spec = spec_from_dict({"config": serving, "grid": {"policy.gamma": [0, 3]}})
    res = run_sweep(spec, tmp_path / "serve.csv")
    df = pd.read_csv(tmp_path / "serve.csv")
    assert res.rows == 2 and {"tpot_p99_s", "speedup", "policy.gamma"} <= set(df.columns)
    assert df.loc[df["policy.gamma"] == 0, "speedup"].iloc[0] == pytest.approx(1.0)
    # The base config from a `specsim simulate` file; whole tables as grid values.
    (tmp_path / "sim.toml").write_text(
        'tokens = 3000\nacceptance = {kind = "iid", alpha = 0.8}\n'
        'policy = {kind = "fixed", gamma = 4}\ncost = {kind = "plain", c = 0.05}\n',
        encoding="utf-8",
    )
    spec_path = _spec(
        tmp_path,
        '[sweep]\nconfig = "sim.toml"\nmetrics = ["speedup", "mean_gamma"]\n[grid]\n'
        'policy = [{kind = "fixed", gamma = 2}, {kind = "oracle", max_gamma = 8}]\n',
    )
    run_sweep(read_spec(spec_path), tmp_path / "tables.csv")
    df = pd.read_csv(tmp_path / "tables.csv")
    assert list(df.columns) == ["point", "replicate", "key", "policy", "speedup", "mean_gamma"]
    assert json.loads(df["policy"].iloc[1]) == {"kind": "oracle", "max_gamma": 8}
    assert df["speedup"].iloc[1] > df["speedup"].iloc[0]  # the oracle beats gamma = 2 here


@pytest.mark.parametrize("name", ["alpha-gamma.toml", "cards-random.toml"])
def test_example_specs_build_every_point(name: str) -> None:
    spec = read_spec(Path(__file__).resolve().parents[2] / "studies" / "sweeps" / name)
    points = sweep_points(spec)
    assert len(points) > 10
    for p in points:
        point_config(spec.config, p, base_dir=spec.base_dir)


TINY = """
[sweep]
seed = 5
[config]
tokens = 300
acceptance = {kind = "iid", alpha = 0.7}
policy = {kind = "fixed", gamma = 3}
cost = {kind = "plain", c = 0.05}
[grid]
"acceptance.alpha" = [0.6, 0.7, 0.8]
"""


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_dask_sweep_shuts_down_without_a_traceback(tmp_path: Path, attempt: int) -> None:
    """`specsim sweep --dask` ends quietly: no CommClosedError traceback at shutdown."""
    pytest.importorskip("distributed", reason="needs the sweep extra: pip install -e .[sweep]")
    spec = _spec(tmp_path, TINY)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specsim",
            "sweep",
            str(spec),
            "--dask",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "out.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "CommClosedError" not in done.stderr, done.stderr
    assert len(_rows(tmp_path / "out.csv")) == 1 + 3


def test_scheduler_refuses_flags_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(tmp_path, TINY)
    for flags in (["--workers", "4"], ["--dask"]):
        args = ["sweep", str(spec), "--scheduler", "tcp://127.0.0.1:1", *flags]
        assert main(args) == 2
        assert f"{flags[0]}: not with --scheduler" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_identity_is_the_same_in_every_process(tmp_path: Path) -> None:
    """Resuming compares identities across processes: no set or hash order may leak in."""
    spec = _spec(tmp_path, TINY.replace('{kind = "fixed", gamma = 3}', '{kind = "optimal"}'))
    code = f"from specsim.sweep.run import read_spec; print(read_spec({str(spec)!r}).identity())"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(h)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for h in (1, 2, 3)
    }
    assert seen == {read_spec(spec).identity()}


def test_unknown_metric_is_refused_before_the_output_exists(tmp_path: Path) -> None:
    spec = read_spec(_spec(tmp_path, SMALL.replace("seeds = 2", 'seeds = 2\nmetrics = ["speedy"]')))
    with pytest.raises(ValueError, match=r"sweep\.metrics: unknown metric\(s\) \['speedy'\]"):
        run_sweep(spec, tmp_path / "o.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_a_failed_first_point_leaves_no_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specsim.sweep.run as sweep

    def fail(*args: object) -> list[dict[str, object]]:
        raise RuntimeError("worker lost")

    monkeypatch.setattr(sweep, "run_point", fail)
    with pytest.raises(RuntimeError, match="worker lost"):
        run_sweep(read_spec(_spec(tmp_path, SMALL)), tmp_path / "o.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


@pytest.mark.slow
def test_a_scheduler_that_does_not_answer_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed", reason="needs the sweep extra: pip install -e .[sweep]")
    spec = _spec(tmp_path, TINY)
    out = tmp_path / "o.csv"
    args = ["sweep", str(spec), "--out", str(out), "--scheduler", "tcp://127.0.0.1:1"]
    start = time.monotonic()
    assert main([*args, "--connect-timeout", "0.5"]) == 2
    assert time.monotonic() - start < 20
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "--scheduler: no Dask scheduler answered at tcp://127.0.0.1:1 within 0.5 s" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]  # no CSV, no sidecar
    assert main([*args, "--connect-timeout", "0"]) == 2
    assert "--connect-timeout: expected a finite number of seconds > 0" in capsys.readouterr().err


def test_sweep_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, TINY)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["points"] == summary["computed"] == 3 and summary["skipped"] == 0
    assert summary["rows"] == 3 and summary["output"] == str((tmp_path / "o.csv").resolve())
    # An existing --out is still run_sweep's to judge: refused without --resume.
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o.csv")]) == 2
    assert "pass --resume" in capsys.readouterr().err


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (Linux /proc; zombies count as ended)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_end_with_a_killed_sweep(tmp_path: Path) -> None:
    """kill -9 of a local sweep takes its workers and the resource tracker with it."""
    spec_path = _spec(tmp_path, SLOW)
    out = tmp_path / "res.csv"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specsim",
            "sweep",
            str(spec_path),
            "--out",
            str(out),
            "--workers",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # workers running: the first points are written
            if out.exists() and len(_rows(out)) >= 1 + 2:
                break
            time.sleep(0.02)
        children = _children(proc.pid)
        assert len(children) >= 2, "the pool's workers were not found"
        os.kill(proc.pid, signal.SIGKILL)  # the sweep alone, not its process group
    finally:
        proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in children):
        time.sleep(0.05)
    left = [p for p in children if _alive(p)]
    try:
        assert not left, f"still running 10 s after the sweep was killed: {left}"
    finally:
        for p in left:
            os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_dask_scratch_space_is_removed(tmp_path: Path) -> None:
    """Dask's scratch (scheduler and workers) goes to a temporary folder removed at the end,
    not to the dask-scratch-space that Dask leaves in the system temp folder."""
    pytest.importorskip("distributed", reason="needs the sweep extra: pip install -e .[sweep]")
    spec = _spec(tmp_path, TINY)
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specsim",
            "sweep",
            str(spec),
            "--dask",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "out.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert done.returncode == 0, done.stderr
    assert list(temp.iterdir()) == []


def test_the_spec_reference_lists_every_key_and_distribution() -> None:
    from specsim.sweep.spec import DISTRIBUTIONS, MODES, SWEEP_KEYS

    page = Path(__file__).resolve().parents[2] / "docs" / "reference" / "sweep-spec.md"
    text = page.read_text(encoding="utf-8")
    for key in SWEEP_KEYS:
        assert f"| `{key}` |" in text, key
    for name in DISTRIBUTIONS:
        assert f"| `{name} = [" in text, name
    for mode in MODES:
        assert f'"{mode}"' in text, mode
