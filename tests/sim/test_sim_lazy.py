"""specsim.sim loads its names on first use, and a stream (plain parameters or a config) needs no
pandas and no serving engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import specsim.sim as sim

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_has_a_home_and_loads() -> None:
    assert set(sim.__all__) == set(sim._HOME)
    for name in sim.__all__:
        assert getattr(sim, name).__name__ == name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        sim.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


@pytest.mark.parametrize(
    "args",
    [
        "simulate --alpha 0.7 --gamma 4 --c 0.05 --tokens 1000 --json",
        "simulate studies/configs/stream-plain.toml --set tokens=1000 --json",
    ],
)
def test_a_stream_imports_neither_pandas_nor_the_serving_engine(args: str) -> None:
    """On plain parameters or from a stream config: the config loader composes a serving
    engine only for a serving config."""
    code = (
        "import sys, io, contextlib\n"
        "from specsim.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        f"    main({args.split()!r})\n"
        "print(buf.getvalue())\n"
        "print('pandas' in sys.modules, 'specsim.sim.serving' in sys.modules)\n"
    )
    out = (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
        .stdout.strip()
        .splitlines()
    )
    assert out[-1] == "False False"
    assert json.loads("\n".join(out[:-1]))["tokens"] >= 1000
