"""The package as a user installs it: the sdist and the wheel build, the wheel installs into a
fresh virtual environment, and its ``specsim`` command runs outside the checkout with the cards
and studies the wheel ships (``specsim/_models``, ``specsim/_studies``).

The fresh environment sees the test environment's third-party packages through one ``.pth``
line (numpy, scipy, pandas, ... are not downloaded again; pip finds them installed and still
checks the wheel's declared dependencies against them), but not specsim itself nor the
checkout: the test runs
from an empty folder, without ``PYTHONPATH``, and checks that ``specsim`` is imported from the
fresh environment. Building needs PyPI (pip fetches ``build`` and ``hatchling``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIST_NAME = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


_NOT_SHARED = ("specsim", "_specsim", "__editable__", "pip", "setuptools", "_distutils_hack")


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECSIM_CARDS")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["MPLBACKEND"] = "Agg"
    return env


def _fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The test environment's third-party packages, seen through a folder of links appended
    # after the fresh site-packages: never its specsim (an editable install of the checkout,
    # which pip would take for this wheel already installed), its pip or its .pth files.
    shadow = path / "test-env-packages"
    shadow.mkdir()
    for folder in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        for entry in sorted(Path(folder).iterdir()):
            name = entry.name.lower().replace("-", "_")
            skip = name.startswith(_NOT_SHARED) or entry.suffix == ".pth"
            if not skip and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
    (Path(site) / "_test_env.pth").write_text(f"{shadow}\n", encoding="utf-8")
    return python


def test_distribution_name_is_not_the_unrelated_pypi_specsim() -> None:
    assert DIST_NAME == "specsim-decoding"


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = _fresh_venv(venv)
    env = _clean_env(venv)
    dist = tmp_path / "dist"
    _run([str(python), "-m", "pip", "install", "--quiet", "build"], cwd=tmp_path, env=env)
    # build: the sdist first, then the wheel from the unpacked sdist (so the sdist is complete).
    _run([str(python), "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=tmp_path, env=env)
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    stem = DIST_NAME.replace("-", "_")
    assert [w.name.split("-")[0] for w in wheels] == [stem]
    assert [s.name.split("-")[0] for s in sdists] == [stem]
    with zipfile.ZipFile(wheels[0]) as z:
        names = set(z.namelist())
    assert any(n.startswith("specsim/_models/hardware/") for n in names)
    assert "specsim/_studies/__init__.py" in names or any(
        n.startswith("specsim/_studies/") for n in names
    )
    with tarfile.open(sdists[0]) as t:
        assert any("/models/hardware/" in n for n in t.getnames())

    _run([str(python), "-m", "pip", "install", "--quiet", str(wheels[0])], cwd=tmp_path, env=env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run(
        [str(python), "-c", "import specsim, specsim.cards.files as f; print(specsim.__file__)"],
        cwd=work,
        env=env,
    )
    assert Path(where.strip()).is_relative_to(venv), where
    specsim = str(venv / "bin" / "specsim")
    listed = _run([specsim, "--help"], cwd=work, env=env)
    cards = _run([specsim, "cards"], cwd=work, env=env)
    assert "h100" in cards.lower(), cards[:2000]
    _run(
        [specsim, "report", "--study", "paper", "--blocks", "2000", "--out", "rep"],
        cwd=work,
        env=env,
        timeout=600,
    )
    page = (work / "rep" / "index.html").read_text(encoding="utf-8")
    assert "<img" in page and "paper" in page
    _run([specsim, "explore", "--out", "ex"], cwd=work, env=env)  # its template is package data
    assert "specsimExplore" in (work / "ex" / "explore.html").read_text(encoding="utf-8")
    assert "plan" in listed, listed
    # A real verdict from the shipped cards (docs/plan.md's 70B question), in text and JSON.
    question = [specsim, "plan", "--model", "llama-2-70b", "--hardware", "h100-sxm"]
    question += ["--tensor-parallel", "4", "--draft", "llama-2-7b", "--alpha", "0.7"]
    question += ["--batch", "16"]
    verdict = _run(question, cwd=work, env=env)
    assert "llama-2-7b" in verdict and "TPOT" in verdict, verdict[:2000]
    answer = json.loads(_run([*question, "--json"], cwd=work, env=env))
    assert answer["verdict"], answer
