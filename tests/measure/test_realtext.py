"""The real-text pipeline on the committed tiny sample: corpus, tokenizer, training, alpha.

Everything runs in seconds on models of a few thousand parameters; the
committed models under ``models/tiny`` are checked too when they are there.
Needs the optional ``measure`` extra (torch, transformers, tokenizers, safetensors).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

_REASON = "needs the optional extra specsim[measure] (pip install -e '.[measure]')"
torch = pytest.importorskip("torch", reason=_REASON)
pytest.importorskip("transformers", reason=_REASON)
pytest.importorskip("tokenizers", reason=_REASON)
pytest.importorskip("safetensors", reason=_REASON)

from safetensors.torch import load_file, save_file  # noqa: E402

from specsim.measure.corpus import (  # noqa: E402
    CORPORA,
    MissingPackageError,
    Source,
    atomic_write_bytes,
    build_corpora,
    read_split,
    split_fortunes,
    split_of,
)
from specsim.measure.decode import autoregressive_decode, speculative_decode  # noqa: E402
from specsim.measure.realalpha import (  # noqa: E402
    TEMPERATURES,
    alpha_direct,
    autocorrelation,
    measure_alpha,
    model_logits,
    position_stats,
    summarize,
)
from specsim.measure.tinylm import (  # noqa: E402
    TinySpec,
    build_tiny,
    load_tiny,
    load_tokenizer,
    save_tiny,
    train_tokenizer,
)
from specsim.measure.train import (  # noqa: E402
    TRAIN_CORPORA,
    TrainConfig,
    encode_corpora,
    eval_windows,
)
from specsim.measure.trainloop import train_model  # noqa: E402

pytestmark = pytest.mark.measure

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "models" / "corpora" / "sample"
TINY = ROOT / "models" / "tiny"
TARGET = TinySpec(family="llama", layers=1, d_model=32, heads=2, d_ff=64, context=32)
DRAFT = TinySpec(family="gpt-like", layers=1, d_model=16, heads=2, d_ff=32, context=32)
ALL = {c: 1.0 for c in TRAIN_CORPORA}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Corpora from the sample, a 400-token tokenizer, a target and a draft trained 12 steps."""
    root = tmp_path_factory.mktemp("real")
    manifest = build_corpora(out=root / "corpora", sample=SAMPLE)
    texts = [d for c in TRAIN_CORPORA for d in read_split(root / "corpora", c, "train")]
    train_tokenizer(texts, vocab_size=400, path=root / "tokenizer.json")
    tok = load_tokenizer(root / "tokenizer.json")
    data = encode_corpora(
        corpora_dir=root / "corpora", tokenizer=tok, corpora=CORPORA, cache_dir=root / "tokens"
    )
    models = root / "models"
    common = dict(steps=12, warmup=2, eval_every=6, eval_windows=2, checkpoint_every=4)
    sides = {}
    for cfg in (
        TrainConfig(name="target", spec=TARGET, mixture=ALL, seed=1, **common),
        TrainConfig(name="draft", spec=DRAFT, mixture=ALL, seed=2, **common),
        TrainConfig(name="distil", spec=DRAFT, mixture=ALL, seed=3, teacher="target", **common),
    ):
        sides[cfg.name] = train_model(
            cfg, tokenizer=tok, data=data, out_dir=models, checkpoint_dir=root / "ckpt"
        )
    return {
        "root": root,
        "manifest": manifest,
        "tok": tok,
        "data": data,
        "models": models,
        "sides": sides,
    }


def test_sample_corpus_splits_by_hash_and_records_sources(built: dict) -> None:
    manifest = built["manifest"]
    assert set(manifest["corpora"]) == set(CORPORA)
    for corpus in CORPORA:
        entry = manifest["corpora"][corpus]
        for split in ("train", "validation", "test"):
            docs = read_split(built["root"] / "corpora", corpus, split)
            assert entry["splits"][split]["documents"] == len(docs)
            assert all(split_of(d, test_only=entry["test_only"]) == split for d in docs)
    # The sample was cut so that every training corpus has every split.
    assert all(
        manifest["corpora"][c]["splits"][s]["documents"] > 0
        for c in TRAIN_CORPORA
        for s in ("train", "validation", "test")
    )
    assert manifest["corpora"]["licences"]["splits"]["train"]["documents"] == 0


def test_corpus_build_is_deterministic(built: dict, tmp_path: Path) -> None:
    again = build_corpora(out=tmp_path, sample=SAMPLE)
    assert again == built["manifest"]


def test_split_fortunes_on_percent_lines() -> None:
    assert split_fortunes("one\n%\n\n%\ntwo\nlines\n%\n") == ["one", "two\nlines"]
    assert split_fortunes("50% off\n") == ["50% off"]


def test_missing_package_names_the_apt_package(tmp_path: Path) -> None:
    bad = {"xx": Source(corpus="xx", kind="fortunes", packages=("specsim-no-such-package",))}
    if shutil.which("dpkg-query") is None:
        match = "dpkg-query"
    else:
        match = "apt-get install -y specsim-no-such-package"
    with pytest.raises(MissingPackageError, match=match):
        build_corpora(out=tmp_path / "out", corpora=["xx"], sources=bad)
    assert not (tmp_path / "out").exists()


def test_tokenizer_training_is_deterministic(built: dict, tmp_path: Path) -> None:
    texts = [d for c in TRAIN_CORPORA for d in read_split(built["root"] / "corpora", c, "train")]
    a = train_tokenizer(texts, vocab_size=400, path=tmp_path / "a.json")
    b = train_tokenizer(texts, vocab_size=400, path=tmp_path / "b.json")
    assert a == b == hashlib.sha256((built["root"] / "tokenizer.json").read_bytes()).hexdigest()


def test_training_resumes_exactly(built: dict, tmp_path: Path) -> None:
    cfg = TrainConfig(
        name="resume",
        spec=DRAFT,
        mixture=ALL,
        seed=9,
        steps=8,
        warmup=2,
        eval_every=8,
        eval_windows=2,
        checkpoint_every=3,
    )
    whole = train_model(
        cfg,
        tokenizer=built["tok"],
        data=built["data"],
        out_dir=tmp_path / "a",
        checkpoint_dir=tmp_path / "ck",
    )

    class Stop(Exception):
        pass

    def stop_at_the_end(line: str) -> None:
        # Progress is logged every 25 steps and at the last one: stop there, before saving.
        if "step 8/" in line:
            raise Stop

    with pytest.raises(Stop):
        train_model(
            cfg,
            tokenizer=built["tok"],
            data=built["data"],
            out_dir=tmp_path / "b",
            checkpoint_dir=tmp_path / "ck",
            log=stop_at_the_end,
        )
    assert (tmp_path / "ck" / "resume.ckpt.pt").is_file()
    assert not (tmp_path / "b" / "resume.safetensors").exists()
    lines: list[str] = []
    resumed = train_model(
        cfg,
        tokenizer=built["tok"],
        data=built["data"],
        out_dir=tmp_path / "b",
        checkpoint_dir=tmp_path / "ck",
        log=lines.append,
    )
    assert any("resumed at step 6" in line for line in lines)
    assert resumed["final_validation_loss"] == whole["final_validation_loss"]
    # The tensors are bit-identical (the header's key order may differ between saves).
    a = load_file(tmp_path / "a" / "resume.safetensors")
    b = load_file(tmp_path / "b" / "resume.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "ck" / "resume.ckpt.pt").exists()


def test_trained_models_learn_and_reload(built: dict) -> None:
    side = built["sides"]["target"]
    history = side["history"]
    assert history[-1]["validation"]["en"] < history[0]["validation"]["en"] + 0.5
    model, loaded = load_tiny(
        built["models"] / "target.safetensors", tokenizer=built["tok"], family="llama"
    )
    assert loaded["weights_sha256"] == side["weights_sha256"]
    assert loaded["params"] > 0 and set(loaded["final_validation_loss"]) == set(TRAIN_CORPORA)
    again, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    x = torch.arange(10)[None, :]
    assert torch.equal(model(input_ids=x).logits, again(input_ids=x).logits)


def test_mismatched_tokenizer_is_refused(built: dict, tmp_path: Path) -> None:
    texts = [d for d in read_split(built["root"] / "corpora", "en", "train")]
    train_tokenizer(texts, vocab_size=300, path=tmp_path / "other.json")
    other = load_tokenizer(tmp_path / "other.json")
    with pytest.raises(ValueError, match="tokenizer"):
        load_tiny(built["models"] / "draft.safetensors", tokenizer=other)


def test_weights_of_another_architecture_are_refused(built: dict, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="architecture 'llama', expected 'gpt2'"):
        load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"], family="gpt-like")
    # Tensors of a GPT-like draft under a header claiming a Llama config.
    src = built["models"] / "draft.safetensors"
    with open(src, "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    meta = dict(header["__metadata__"])
    llama = json.loads(
        (built["models"] / "target.safetensors").read_bytes()[
            8 : 8
            + int.from_bytes((built["models"] / "target.safetensors").read_bytes()[:8], "little")
        ]
    )["__metadata__"]
    meta.update(model_type="llama", config=llama["config"])
    save_file(load_file(src), str(tmp_path / "fake.safetensors"), metadata=meta)
    with pytest.raises(ValueError, match="do not fit a 'llama' model"):
        load_tiny(tmp_path / "fake.safetensors", tokenizer=built["tok"])


def test_corrupted_weights_are_refused(built: dict, tmp_path: Path) -> None:
    for name in ("draft.safetensors", "draft.json"):
        shutil.copy(built["models"] / name, tmp_path / name)
    path = tmp_path / "draft.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        load_tiny(path, tokenizer=built["tok"])
    (tmp_path / "draft.json").unlink()
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_tiny(path, tokenizer=built["tok"])


def test_atomic_write_leaves_nothing_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_a_wrong_suffix(built: dict, tmp_path: Path) -> None:
    model = build_tiny(DRAFT, tokenizer=built["tok"], seed=0)
    with pytest.raises(ValueError, match="safetensors"):
        save_tiny(model, path=tmp_path / "m.bin", tokenizer=built["tok"], spec=DRAFT, info={})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_alpha_equals_direct_sum_min(built: dict, temperature: float) -> None:
    target, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    draft, _ = load_tiny(built["models"] / "draft.safetensors", tokenizer=built["tok"])
    win = eval_windows(built["data"], corpus="en", split="test", count=3, length=20)
    zt, zd = model_logits(target, win[:, :-1]), model_logits(draft, win[:, :-1])
    st = position_stats(
        zt,
        zd,
        next_tokens=torch.from_numpy(win[:, 1:]),
        temperature=temperature,
        rng=np.random.default_rng(0),
    )
    np.testing.assert_allclose(st.alpha, alpha_direct(zt, zd, temperature=temperature), atol=1e-12)
    same = position_stats(
        zt,
        zt,
        next_tokens=torch.from_numpy(win[:, 1:]),
        temperature=temperature,
        rng=np.random.default_rng(0),
    )
    np.testing.assert_allclose(same.alpha, 1.0, atol=1e-12)
    assert same.accepted.all()


def test_accepted_flags_match_alpha_in_expectation() -> None:
    gen = torch.Generator().manual_seed(0)
    zt = torch.randn(40, 50, 12, generator=gen) * 2
    zd = torch.randn(40, 50, 12, generator=gen) * 2
    st = position_stats(
        zt,
        zd,
        next_tokens=torch.zeros(40, 50, dtype=torch.long),
        temperature=1.0,
        rng=np.random.default_rng(1),
    )
    se = np.sqrt(st.alpha.mean() * (1 - st.alpha.mean()) / st.alpha.size)
    assert abs(st.accepted.mean() - st.alpha.mean()) < 4 * se
    assert np.all((st.draft_prob > 0) & (st.draft_prob <= 1))
    assert np.all((st.draft_entropy >= 0) & (st.draft_entropy <= np.log(12) + 1e-9))


def test_summary_interval_and_autocorrelation() -> None:
    rng = np.random.default_rng(3)
    iid = rng.random((50, 200))
    row = summarize(iid, rng=np.random.default_rng(4))
    assert row["ci_low"] < row["alpha_mean"] < row["ci_high"]
    assert row["boot_low"] < row["alpha_mean"] < row["boot_high"]
    assert abs(row["alpha_mean"] - 0.5) < 4 * (row["ci_high"] - row["ci_low"])
    assert all(abs(row[f"acf_{k}"]) < 0.03 for k in range(1, 6))
    bursty = np.repeat(rng.random((50, 20)), 10, axis=1)
    assert autocorrelation(bursty, lags=1)[0] > 0.8
    with pytest.raises(ValueError, match="alpha"):
        summarize(iid[:1], rng=rng)


def test_measure_alpha_on_sample(built: dict) -> None:
    target, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    draft, _ = load_tiny(built["models"] / "distil.safetensors", tokenizer=built["tok"])
    windows = {
        c: eval_windows(built["data"], corpus=c, split="test", count=3, length=24)
        for c in ("en", "licences")
    }
    summary, positions = measure_alpha(
        target=target,
        drafts={"distil": draft},
        windows=windows,
        context=8,
        temperatures=(0.0, 1.0),
        seed=5,
        keep=2,
    )
    assert len(summary) == 2 * 2 * 2
    assert summary["alpha_mean"].between(0, 1).all()
    assert len(positions) == len(summary) * 2 * 16
    again, _ = measure_alpha(
        target=target,
        drafts={"distil": draft},
        windows=windows,
        context=8,
        temperatures=(0.0, 1.0),
        seed=5,
        keep=2,
    )
    assert again.equals(summary)


def test_greedy_speculative_decoding_equals_target_greedy(built: dict) -> None:
    target, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    draft, _ = load_tiny(built["models"] / "distil.safetensors", tokenizer=built["tok"])
    prompt = eval_windows(built["data"], corpus="en", split="test", count=2, length=6)
    plain = autoregressive_decode(
        target, prompt=prompt, new_tokens=20, temperature=0, rng=np.random.default_rng(0)
    )
    for gamma in (1, 3, 5):
        spec = speculative_decode(
            target,
            draft,
            prompt=prompt,
            new_tokens=20,
            gamma=gamma,
            temperature=0,
            rng=np.random.default_rng(0),
        )
        np.testing.assert_array_equal(spec.tokens, plain.tokens)


@pytest.mark.skipif(
    not (TINY / "target.safetensors").is_file(), reason="models/tiny not trained yet"
)
def test_committed_pair_greedy_speculative_equals_target() -> None:
    tok = load_tokenizer(TINY / "tokenizer.json")
    target, _ = load_tiny(TINY / "target.safetensors", tokenizer=tok, family="llama")
    drafts = sorted(p for p in TINY.glob("draft-*.safetensors"))
    assert drafts
    draft, _ = load_tiny(drafts[0], tokenizer=tok, family="gpt-like")
    text = split_fortunes((SAMPLE / "en.fortunes").read_text(encoding="utf-8"))[-1]
    prompt = np.asarray([tok.encode(text).ids[:8]], dtype=np.int64)
    plain = autoregressive_decode(
        target, prompt=prompt, new_tokens=40, temperature=0, rng=np.random.default_rng(0)
    )
    spec = speculative_decode(
        target,
        draft,
        prompt=prompt,
        new_tokens=40,
        gamma=4,
        temperature=0,
        rng=np.random.default_rng(0),
    )
    np.testing.assert_array_equal(spec.tokens, plain.tokens)


def test_cli_builds_the_sample_corpus(tmp_path: Path) -> None:
    from specsim.cli import main

    rc = main(
        [
            "measure",
            "--device",
            "cpu",
            "--preset",
            "real",
            "--stage",
            "corpus",
            "--sample",
            str(SAMPLE),
            "--work",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ]
    )
    assert rc == 0
    manifest = json.loads((tmp_path / "corpora" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["sample"] is True


def test_committed_positions_file_is_plain_gzip() -> None:
    path = ROOT / "models" / "measured" / "real" / "alpha-positions.csv.gz"
    if not path.is_file():
        pytest.skip("measurements not committed yet")
    head = gzip.decompress(path.read_bytes())[:200].decode("utf-8")
    assert head.startswith("draft,temperature,corpus,text,seq,position,alpha")


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="TinySpec.heads"):
        TinySpec(family="llama", layers=1, d_model=30, heads=4, d_ff=8)
    with pytest.raises(ValueError, match="TinySpec.family"):
        TinySpec(family="t5", layers=1, d_model=32, heads=4, d_ff=8)
    with pytest.raises(ValueError, match="TrainConfig.steps"):
        dataclasses.replace(TrainConfig(name="x", spec=DRAFT, mixture=ALL, steps=1), steps=0)


def test_sampled_speculative_first_token_follows_the_target(built: dict) -> None:
    """At T = 1 the first emitted token's law is the target's: a chi-square test on 4000 rows."""
    from scipy import stats

    target, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    draft, _ = load_tiny(built["models"] / "draft.safetensors", tokenizer=built["tok"])
    prompt = eval_windows(built["data"], corpus="de", split="test", count=1, length=5)
    rows = 4000
    spec = speculative_decode(
        target,
        draft,
        prompt=np.repeat(prompt, rows, axis=0),
        new_tokens=1,
        gamma=2,
        temperature=1.0,
        rng=np.random.default_rng(11),
    )
    with torch.inference_mode():
        p = torch.softmax(target(input_ids=torch.from_numpy(prompt)).logits[0, -1].double(), -1)
    expected = p.numpy() * rows
    observed = np.bincount(spec.tokens[:, 0], minlength=len(expected)).astype(float)
    # Pool the tokens expected fewer than 5 times into one cell, as the test requires.
    small = expected < 5
    obs, exp = observed[~small], expected[~small]
    if small.any():
        obs = np.append(obs, observed[small].sum())
        exp = np.append(exp, expected[small].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_the_whole_pipeline_on_the_sample(built: dict) -> None:
    """Corpora, tokenizer and models from the committed sample (the fixture: train a few
    steps), then measure alpha and fit the three acceptance processes to what was measured."""
    from specsim.acceptance.fit import fit_cell, fit_table, sequences_by_cell

    target, _ = load_tiny(built["models"] / "target.safetensors", tokenizer=built["tok"])
    draft, _ = load_tiny(built["models"] / "draft.safetensors", tokenizer=built["tok"])
    windows = {"en": eval_windows(built["data"], corpus="en", split="test", count=4, length=24)}
    _, positions = measure_alpha(
        target=target,
        drafts={"draft": draft},
        windows=windows,
        context=8,
        temperatures=(1.0,),
        seed=2,
        keep=4,
    )
    cells = sequences_by_cell(positions, text="test")
    assert list(cells) == [("draft", 1.0, "en")] and len(cells["draft", 1.0, "en"]) == 4
    fits = {key: fit_cell(seqs, fit_gamma=2) for key, seqs in cells.items()}
    table = fit_table(fits)
    assert list(table["process"]) == ["iid", "positional", "markov"]
    assert np.isfinite(table["loglik"]).all() and (table["loglik"] <= 0).all()
    # The i.i.d. alpha is a probability fitted on the 4 x 16 measured flags.
    flags = np.concatenate(cells["draft", 1.0, "en"])
    assert 0.0 <= fits["draft", 1.0, "en"].iid.params[0] <= 1.0 and flags.size == 4 * 16
