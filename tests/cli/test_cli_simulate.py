import json
import sys

from specsim.cli import main


def test_simulate_plain_parameters_json(capsys) -> None:
    assert (
        main(
            [
                "simulate",
                "--alpha",
                "0.7",
                "--gamma",
                "4",
                "--c",
                "0.05",
                "--tokens",
                "20000",
                "--seed",
                "1",
                "--json",
            ]
        )
        == 0
    )
    m = json.loads(capsys.readouterr().out)
    assert m["tokens"] >= 20000 and 2.0 < m["speedup"] < 2.6


def test_simulate_config_with_trace(tmp_path, capsys) -> None:
    trace = tmp_path / "t.json"
    events = tmp_path / "e.csv"
    assert (
        main(
            [
                "simulate",
                "studies/configs/stream-cards.toml",
                "--trace",
                str(trace),
                "--events",
                str(events),
            ]
        )
        == 0
    )
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


def test_simulate_refuses_plain_flags_with_a_config(capsys) -> None:
    """Defect 3: `simulate CONFIG.toml --gamma 9 --alpha 0.1` used to ignore the flags."""
    config = "studies/configs/stream-plain.toml"
    assert main(["simulate", config, "--gamma", "9", "--alpha", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "--alpha, --gamma" in err and "--set" in err
    for flag, value in (("--c", "0.2"), ("--v", "1.1"), ("--tokens", "50")):
        assert main(["simulate", config, flag, value]) == 2
        assert flag in capsys.readouterr().err
    # --set overrides a config value by its dotted path; --set without a config is refused.
    assert main(["simulate", "--alpha", "0.5", "--gamma", "2", "--set", "cost.c=0.1"]) == 2
    assert "--set" in capsys.readouterr().err


def test_simulate_set_overrides_the_config(tmp_path, capsys) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'seed = 4\ntokens = 3000\n[acceptance]\nkind = "iid"\nalpha = 0.7\n[policy]\n'
        'kind = "fixed"\ngamma = 4\n[cost]\nkind = "plain"\nc = 0.05\n'
    )
    runs = {}
    for name, extra in (
        ("base", []),
        ("set", ["--set", "acceptance.alpha=0.1", "--set", "policy.gamma=9"]),
        ("same", ["--set", "acceptance.alpha=0.7"]),
        ("table", ["--set", 'policy={kind = "oracle"}']),
        ("events", ["--set", "method=events"]),  # simpy processes: the same timeline
    ):
        assert main(["simulate", str(config), "--json", *extra]) == 0
        runs[name] = json.loads(capsys.readouterr().out)
    assert runs["same"] == runs["base"]
    assert runs["events"]["tokens"] == runs["base"]["tokens"]
    assert abs(runs["events"]["time_s"] - runs["base"]["time_s"]) <= 1e-9 * runs["base"]["time_s"]
    assert main(["simulate", str(config), "--set", "method=slow"]) == 2
    assert "--set method: method: expected one of ['fast', 'events'], got 'slow'" in (
        capsys.readouterr().err
    )
    assert runs["set"]["mean_gamma"] == 9 and runs["set"]["speedup"] < runs["base"]["speedup"]
    assert runs["table"]["speedup"] > runs["base"]["speedup"]
    assert main(["simulate", str(config), "--set", "acceptance.alpha=high"]) == 2
    assert "acceptance.alpha='high'" in capsys.readouterr().err
    assert main(["simulate", str(config), "--set", "acceptance.beta=0.5"]) == 2
    assert "no field 'beta'" in capsys.readouterr().err


def test_simulate_checks_its_outputs_before_running(tmp_path, capsys) -> None:
    plain = ["simulate", "--alpha", "0.7", "--gamma", "4", "--tokens", "2000"]
    trace = tmp_path / "t.json"
    trace.write_text("old")
    assert main([*plain, "--trace", str(trace)]) == 2
    assert "--trace: " in capsys.readouterr().err and trace.read_text() == "old"
    assert main([*plain, "--trace", str(trace), "--force"]) == 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert main([*plain, "--events", str(tmp_path)]) == 2
    assert "--events: " in capsys.readouterr().err


def test_simulate_json_is_strict(capsys) -> None:
    # A plain cost has no power model: energy is None, written as null, never NaN.
    assert main(["simulate", "--alpha", "0.7", "--gamma", "4", "--tokens", "2000", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["energy_j"] is None


def test_simulate_takes_cards_from_a_folder(tmp_path, capsys) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    card = (root / "models" / "lm" / "llama-68m.toml").read_text()
    (tmp_path / "my-68m.toml").write_text(card.replace('slug = "llama-68m"', 'slug = "my-68m"'))
    config = tmp_path / "c.toml"
    config.write_text(
        'tokens = 200\nprompt = 128\nmax_gamma = 8\n[acceptance]\nkind = "iid"\nalpha = 0.7\n'
        '[policy]\nkind = "fixed"\ngamma = 4\n[cost]\nkind = "cards"\ndraft = "my-68m"\n'
        '[deployment]\ntarget = "llama-2-7b"\nhardware = "a100-80gb"\n'
    )
    assert main(["simulate", str(config)]) == 2
    assert "my-68m" in capsys.readouterr().err
    assert main(["simulate", str(config), "--cards", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] >= 200
    assert main(["simulate", str(config), "--cards", str(tmp_path / "nope")]) == 2
    assert f"--cards {tmp_path / 'nope'}: no such folder" in capsys.readouterr().err


def test_plain_parameters_say_their_units_and_a_free_draft(capsys) -> None:
    plain = ["simulate", "--alpha", "0.7", "--gamma", "4", "--tokens", "2000", "--seed", "3"]
    assert main(plain) == 0
    out, err = capsys.readouterr()
    assert "times are in target steps" in out.splitlines()[0]
    assert "--c not given, so the draft is free (c = 0)" in err
    assert main([*plain, "--c", "0.05", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert main([*plain, "--c", "0.05", "--json", "--step-s", "0.02"]) == 0
    seconds = json.loads(capsys.readouterr().out)
    assert abs(seconds["time_s"] - 0.02 * steps["time_s"]) < 1e-9 * steps["time_s"]
    assert abs(seconds["speedup"] - steps["speedup"]) < 1e-12
    assert main(["simulate", "studies/configs/stream-cards.toml", "--step-s", "1"]) == 2
    assert "--step-s: plain-parameter flags do not apply to a CONFIG" in capsys.readouterr().err


def test_simulate_text_defines_speedup_and_reports_the_overshoot(capsys) -> None:
    """Issue 13: the ratio is defined where it is printed; the requested tokens beside the
    emitted ones (the last block is not cut)."""
    assert (
        main(["simulate", "--alpha", "0.7", "--gamma", "4", "--c", "0.05", "--tokens", "20000"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("speedup: plain decoding's time")
    rows = dict(line.split(None, 1) for line in out.splitlines() if line and line[0] != "(")
    assert rows["tokens_requested"].strip() == "20000"
    assert 20000 <= int(rows["tokens"]) <= 20004


def test_simulate_serving_text_defines_both_speedups(capsys) -> None:
    assert main(["simulate", "studies/configs/serving.toml"]) == 0
    out = capsys.readouterr().out
    assert "\nspeedup: this run's throughput" in out and "\ntpot_speedup: the plain twin's" in out


def test_simulate_refuses_a_trace_of_a_huge_stream_before_running(tmp_path, capsys) -> None:
    trace = tmp_path / "t.json"
    assert (
        main(
            [
                "simulate",
                "--alpha",
                "0.7",
                "--gamma",
                "4",
                "--c",
                "0.05",
                "--tokens",
                "100000000",
                "--trace",
                str(trace),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--trace" in err and "2,000,000" in err and "Traceback" not in err
    assert not trace.exists()


def test_simulate_progress_only_on_a_terminal(capsys, monkeypatch) -> None:
    argv = [
        "simulate",
        "--alpha",
        "0.7",
        "--gamma",
        "4",
        "--c",
        "0.05",
        "--tokens",
        "1100000",
        "--json",
    ]
    assert main(argv) == 0
    assert "tokens (" not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "\rspecsim simulate: 1,100,00" in captured.err and captured.err.endswith("(100%)\n")
    assert json.loads(captured.out)["tokens_requested"] == 1_100_000
