import json

from specsim.cli import main


def test_simulate_plain_parameters_json(capsys) -> None:
    assert main(["simulate", "--alpha", "0.7", "--gamma", "4", "--c", "0.05", "--tokens", "20000",
                 "--seed", "1", "--json"]) == 0  # fmt: skip
    m = json.loads(capsys.readouterr().out)
    assert m["tokens"] >= 20000 and 2.0 < m["speedup"] < 2.6


def test_simulate_config_with_trace(tmp_path, capsys) -> None:
    trace = tmp_path / "t.json"
    events = tmp_path / "e.csv"
    assert main(["simulate", "studies/configs/stream-cards.toml", "--trace", str(trace),
                 "--events", str(events)]) == 0  # fmt: skip
    assert "speedup" in capsys.readouterr().out
    assert json.loads(trace.read_text())["traceEvents"]
    assert events.read_text().startswith("block,kind")


def test_simulate_bad_input_is_one_clear_line(tmp_path, capsys) -> None:
    assert main(["simulate", "--alpha", "2", "--gamma", "3"]) == 2
    assert "alpha" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('tokens = 5\n[acceptance]\nkind = "iid"\nalpha = 0.5\n')
    assert main(["simulate", str(bad)]) == 2
    assert "missing key(s)" in capsys.readouterr().err


def test_validate_quick_json(capsys) -> None:
    assert main(["validate", "--quick", "--json", "--seed", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == 0 and len(out["checks"]) == 4 * 4 * 3 * 3
    assert out["assumptions_dropped"]
