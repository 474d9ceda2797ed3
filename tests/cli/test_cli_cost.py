"""``specsim cost`` and ``specsim cards``: output, JSON, plots, user cards, clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cli import main
from specsim.cost import step_cost

ROOT = Path(__file__).resolve().parents[2]


def test_cost_prints_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "cost",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80gb",
        "--batch",
        "1",
        "--context",
        "512",
        "--new-tokens",
        "1",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = step_cost(
        load_model("llama-2-7b"), load_hardware("a100-80gb"), batch=1, context=512, new_tokens=1
    )
    assert f"{expected.time_s * 1e3:.3f} ms" in out
    for label in ("bound", "memory", "flops", "bytes", "weights", "KV", "energy", "v(gamma=7)"):
        assert label in out


def test_cost_json_matches_step_cost(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "cost",
        "--model",
        "llama-2-70b",
        "--hardware",
        "h100-sxm",
        "--batch",
        "4",
        "--context",
        "1000",
        "--new-tokens",
        "5",
        "--dtype",
        "bfloat16",
        "--tensor-parallel",
        "4",
        "--json",
    ]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    want = step_cost(
        load_model("llama-2-70b"),
        load_hardware("h100-sxm"),
        batch=4,
        context=1000,
        new_tokens=5,
        dtype="bfloat16",
        tensor_parallel=4,
    )
    for key in ("time_s", "flops", "bytes", "energy_j", "allreduce_time_s"):
        assert got[key] == pytest.approx(getattr(want, key), rel=1e-12)
    assert got["bound"] == want.bound and got["tokens"] == 20 and got["tensor_parallel"] == 4


def test_cost_plot_v_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.png"
    argv = [
        "cost",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80gb",
        "--context",
        "128",
        "--plot-v",
        str(out),
    ]
    assert main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_cost_t5_on_tpu(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--model", "t5-xxl", "--hardware", "tpu-v4", "--encoder-length", "256"]
    assert main(argv) == 0
    assert "t5-xxl on tpu-v4" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--model", "llama-2-70b", "--hardware", "a100-80gb"], "does not fit"),
        (["--model", "llama-2-7b", "--hardware", "a100-80gb", "--context", "-3"], "context"),
        (["--model", "llama-2-7b", "--hardware", "tpu-v4"], "float16"),
        (["--model", "llama-9", "--hardware", "a100-80gb"], "no model card 'llama-9'"),
        (["--model", "llama-2-7b", "--hardware", "a100-80gb", "--dtype", "fp64"], "fp64"),
    ],
)
def test_cost_errors_are_one_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim cost: error:") and fragment in err


def test_cards_lists_every_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cards"]) == 0
    out = capsys.readouterr().out
    for slug in ("t5-xxl", "gpt-like-6m", "llama-68m", "qwen2.5-72b", "tpu-v4", "mi300x", "l4"):
        assert slug in out
    assert "6.740B" in out  # llama-2-7b stated size


def test_cards_json_and_user_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "models" / "hardware" / "l4.toml").read_text()
    (tmp_path / "my-l4.toml").write_text(text.replace('slug = "l4"', 'slug = "my-l4"'))
    assert main(["cards", "--json", "--cards", str(tmp_path)]) == 0
    got = json.loads(capsys.readouterr().out)
    hw = {h["slug"]: h for h in got["hardware"]}
    assert hw["my-l4"]["mem_bandwidth"] == 300e9 and not hw["my-l4"]["calibrated"]
    models = {m["slug"]: m for m in got["models"]}
    assert models["llama-2-7b"]["shape_params"] == 6_738_415_616
    assert (
        main(["cost", "--model", "llama-3.2-1b", "--hardware", "my-l4", "--cards", str(tmp_path)])
        == 0
    )


@pytest.mark.parametrize(("new_tokens", "gamma"), [(5, 4), (2, 1), (9, 8), (1, 7)])
def test_cost_shows_v_of_the_gamma_its_pass_verifies(
    new_tokens: int, gamma: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13: v(gamma=7) was printed whatever --new-tokens was."""
    from specsim.cost import verification_factor

    base = ["cost", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--batch", "4"]
    assert main([*base, "--new-tokens", str(new_tokens)]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("v(gamma="))
    want = float(
        verification_factor(
            load_model("llama-2-7b"), load_hardware("a100-80gb"), gamma, batch=4, context=512
        )
    )
    assert line.startswith(f"v(gamma={gamma})") and f"{want:.3f}" in line
    assert f"time of {gamma + 1} new tokens" in line
    assert ("verifies no draft" in line) == (new_tokens == 1)
    assert main([*base, "--new-tokens", str(new_tokens), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["verification_gamma"] == gamma
    assert got["verification_factor"] == pytest.approx(want, rel=1e-12)


def test_cost_plot_v_overwrites_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v.png"
    out.write_bytes(b"earlier")
    argv = ["cost", "--model", "llama-68m", "--hardware", "a100-80gb", "--plot-v", str(out)]
    assert main(argv) == 2
    assert "--plot-v" in capsys.readouterr().err and out.read_bytes() == b"earlier"
    assert main([*argv, "--force"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
