"""``specsim measure --engine llama.cpp``: its flags checked before any work, a clear
error when llama.cpp is not built, and (when built) a run into a fresh folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / ".venv" / "llama.cpp" / "build-info.json"


def test_without_engine_device_and_preset_are_required(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["measure", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--device and --preset: required (or --engine llama.cpp" in err


def test_the_torch_presets_flags_are_refused_with_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", "--engine", "llama.cpp", "--preset", "smoke", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--preset: not read with --engine llama.cpp" in capsys.readouterr().err
    argv = ["measure", "--engine", "llama.cpp", "--work", str(tmp_path), "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--work: not read with --engine llama.cpp" in capsys.readouterr().err


def test_an_unbuilt_llama_cpp_is_named_with_the_command_to_build_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch", reason="needs the optional extra specsim[measure]")
    argv = ["measure", "--engine", "llama.cpp", "--out", str(tmp_path / "out")]
    assert main([*argv, "--llama-root", str(tmp_path / "none")]) == 2
    assert "llama.cpp is not built (run `make llama-cpp`)" in capsys.readouterr().err


@pytest.mark.skipif(not BUILT.is_file(), reason="llama.cpp not built (make llama-cpp)")
def test_llama_cpp_decodes_the_tiny_pair_as_torch_does(tmp_path: Path) -> None:
    """End to end on the built tools: the GGUF files written from the committed tiny pair,
    decoded greedily by llama-speculative-simple at two draft lengths, give the text torch's
    greedy decoding of the target gives, and the engine's counts add up."""
    torch = pytest.importorskip("torch", reason="needs the optional extra specsim[measure]")
    pytest.importorskip("gguf", reason="needs the optional extra specsim[measure]")
    from specsim.calibrate.engine_llamacpp import read_speculative_log
    from specsim.measure import llamacpp_run as lr
    from specsim.measure.tinylm import load_tiny, load_tokenizer

    tiny, root = ROOT / "models" / "tiny", ROOT / ".venv" / "llama.cpp"
    tok = load_tokenizer(tiny / "tokenizer.json")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    lr.write_tiny_gguf(tiny / "target.safetensors", tiny / "tokenizer.json", target)
    lr.write_tiny_gguf(tiny / "draft-all.safetensors", tiny / "tokenizer.json", draft)
    model, _ = load_tiny(tiny / "target.safetensors", tokenizer=tok)
    ids = torch.tensor([tok.encode(lr.PROMPTS["en"]).ids])
    n_prompt = ids.shape[1]
    with torch.no_grad():
        for _ in range(24):
            ids = torch.cat([ids, model(ids).logits[0, -1].argmax().view(1, 1)], 1)
    want = tok.decode(ids[0, n_prompt:].tolist())
    for k in (1, 4):
        log, tmp = tmp_path / f"k{k}.log", tmp_path / f"k{k}.tmp"
        cmd = lr.spec_command(root, target, draft, k=k, threads=1, prompt=lr.PROMPTS["en"],
                              n=32, log=tmp)  # fmt: skip
        lr.run_logged(cmd, tmp, log)
        got = read_speculative_log(log)
        assert got.n_draft == k and got.n_prompt == n_prompt and got.n_predict >= 32
        assert want[:40] in log.read_text(encoding="utf-8")
