"""specsim calibrate on a real (smoke-sized) measurement: fit, held-out error, end-to-end runs."""

import pytest

from specsim.cards import load_hardware
from specsim.cli import main

pytest.importorskip("torch", reason="needs the measure extra: pip install -e .[measure]")
pytestmark = pytest.mark.measure


def test_measure_then_calibrate_end_to_end(tmp_path, capsys) -> None:
    out = tmp_path / "smoke"
    assert (
        main(["measure", "--device", "cpu", "--preset", "smoke", "--out", str(out), "--quiet"]) == 0
    )
    card_path = tmp_path / "cpu-smoke.toml"
    runs = tmp_path / "runs.csv"
    code = main(
        [
            "calibrate",
            str(out),
            "--out",
            str(card_path),
            "--mem-capacity",
            "8e9",
            "--power",
            "1",
            "2",
            "--power-source",
            "test values",
            "--holdout",
            "context",
            "--runs",
            str(runs),
            "--force",
        ]
    )
    # --force: a smoke-sized measurement is too small for a fit to be trusted (each
    # problem is then listed in the card's [calibration] table as untrusted).
    assert code == 0
    text = capsys.readouterr().out
    assert "held-out by context: median" in text
    assert "End to end" in text and "simulated speedup error" in text
    card = load_hardware(str(card_path))
    assert card.calibration is not None and card.calibration["configurations"] > 0
    assert 0 < card.compute_efficiency <= 1 and 0 < card.memory_efficiency <= 1
    assert runs.read_text().startswith("run_id,")


def test_calibrate_without_passes_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["calibrate", str(tmp_path), "--out", str(tmp_path / "x.toml")]) == 2
    assert "no 'passes' trace" in capsys.readouterr().err
