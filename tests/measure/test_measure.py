"""The measurement harness on real (tiny, random) transformer models, on the CPU."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

_MEASURE = "needs the measure extra: pip install -e .[measure]"
torch = pytest.importorskip("torch", reason=_MEASURE)
pytest.importorskip("transformers", reason=_MEASURE)
pytest.importorskip("tokenizers", reason=_MEASURE)

from specsim.calibrate.profile import paired_runs  # noqa: E402
from specsim.cards import load_model  # noqa: E402
from specsim.measure import (  # noqa: E402
    PRESETS,
    SECTIONS,
    DecodeState,
    Preset,
    autoregressive_decode,
    build_model,
    energy_meter,
    filled_state,
    get_preset,
    hf_config,
    hf_generate,
    int4_supported,
    interleaved_until,
    measure_ceilings,
    next_token_probs,
    quantize_weights,
    resolve_device,
    run_preset,
    sample_rows,
    shrink,
    speculative_decode,
    time_calls,
    time_passes,
)
from specsim.traces.io import read_trace, read_traces  # noqa: E402

pytestmark = pytest.mark.measure
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    # Tiny ops on a shared machine: OpenMP threads waiting on each other cost more
    # than the ops themselves.
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tiny(**over: Any) -> SimpleNamespace:
    """A card-shaped namespace for a model small enough to run in milliseconds."""
    fields: dict[str, Any] = dict(
        slug="tiny",
        family="llama",
        architecture="decoder",
        layers=2,
        encoder_layers=0,
        d_model=32,
        heads=4,
        kv_heads=2,
        head_dim=8,
        d_ff=64,
        gated_mlp=True,
        vocab=61,
        tied_embeddings=False,
        max_position=256,
        norm="rmsnorm",
        qkv_bias=False,
        activation="silu",
    )
    fields.update(over)
    return SimpleNamespace(**fields)


ARCHS = {
    "llama": tiny(),
    "gpt2": tiny(
        family="gpt-like", gated_mlp=False, kv_heads=4, norm="layernorm", activation="gelu"
    ),
    "t5": tiny(family="t5", architecture="encoder-decoder", encoder_layers=2, kv_heads=4),
}


def perturbed(model: Any, scale: float, seed: int) -> Any:
    """A copy of ``model`` with Gaussian noise of ``scale`` times each weight's standard
    deviation added to it: a draft correlated with the target."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale * p.std())
    return other


# Models ---------------------------------------------------------------------------------


def test_hf_config_maps_card_families() -> None:
    import transformers

    expect = {
        "llama-68m": transformers.LlamaConfig,
        "gpt-like-6m": transformers.GPT2Config,
        "qwen2.5-0.5b": transformers.Qwen2Config,
        "t5-small": transformers.T5Config,
    }
    for slug, cls in expect.items():
        card = load_model(slug)
        config = hf_config(card)
        assert type(config) is cls
        assert config.vocab_size == card.vocab
    assert hf_config(load_model("llama-3.2-1b"), vocab=32_000).vocab_size == 32_000
    with pytest.raises(ValueError, match="architecture 'mamba'"):
        hf_config(tiny(architecture="mamba"))
    with pytest.raises(ValueError, match="heads \\* head_dim == d_model"):
        hf_config(tiny(gated_mlp=False, head_dim=16))


@pytest.mark.parametrize("slug", ["gpt-like-6m", "llama-68m", "t5-small"])
def test_built_models_have_the_cards_parameter_count(slug: str) -> None:
    card = load_model(slug)
    model = build_model(card, rng=np.random.default_rng(0))
    # The cards do not count learned position tables, biases or T5's relative
    # position buckets (all tiny); everything else must match the card's shape count.
    skip = ("wpe", "bias", "relative_attention")
    n = sum(
        p.numel()
        for name, p in model.named_parameters(remove_duplicate=True)
        if not any(s in name for s in skip)
    )
    expected = card.shape_params
    if card.architecture == "encoder-decoder" and not card.tied_embeddings:
        expected -= card.vocab * card.d_model  # transformers 5 always ties T5's LM head
    assert abs(n - expected) <= 1e-3 * expected, (n, expected)


def test_build_model_is_seeded_by_the_generator_and_leaves_torch_alone() -> None:
    state = torch.random.get_rng_state()
    a = build_model(tiny(), rng=np.random.default_rng(5))
    b = build_model(tiny(), rng=np.random.default_rng(5))
    c = build_model(tiny(), rng=np.random.default_rng(6), dtype="float64")
    assert torch.equal(state, torch.random.get_rng_state())
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["lm_head.weight"], sc["lm_head.weight"].float())
    assert sc["lm_head.weight"].dtype == torch.float64
    assert not any(p.requires_grad for p in a.parameters()) and not a.training
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        build_model(tiny(), rng=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype: 'int4'"):
        build_model(tiny(), rng=np.random.default_rng(), dtype="int4")


def test_resolve_device() -> None:
    assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


# KV cache and decoding ------------------------------------------------------------------


@pytest.mark.parametrize("arch", list(ARCHS))
def test_kv_rollback_matches_a_fresh_computation(arch: str, rng: np.random.Generator) -> None:
    model = build_model(ARCHS[arch], rng=rng, dtype="float64")
    source = torch.from_numpy(rng.integers(0, 61, (2, 5)))
    seq = rng.integers(0, 61, (2, 12))
    state = DecodeState(model, batch=2, source=source)
    state.forward(torch.from_numpy(seq[:, :5]))
    state.forward(torch.from_numpy(rng.integers(0, 61, (2, 4))))  # rejected later
    assert state.length == 9
    state.rollback(5)
    assert state.length == 5
    state.rollback(7)  # nothing beyond the cache: a no-op
    assert state.length == 5
    cached = state.forward(torch.from_numpy(seq[:, 5:]))
    fresh = DecodeState(model, batch=2, source=source).forward(torch.from_numpy(seq))[:, 5:]
    assert torch.allclose(cached, fresh, rtol=0, atol=1e-10)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_speculative_greedy_equals_target_greedy(arch: str, rng: np.random.Generator) -> None:
    """The exactness check on real models: token for token, batch of 3, float64."""
    target = build_model(ARCHS[arch], rng=rng, dtype="float64")
    draft = perturbed(target, 0.2, seed=1)
    prompt = rng.integers(0, 61, (3, 6))
    ar = autoregressive_decode(target, prompt=prompt, new_tokens=40, temperature=0, rng=rng)
    sd = speculative_decode(
        target, draft, prompt=prompt, new_tokens=40, gamma=4, temperature=0, rng=rng
    )
    np.testing.assert_array_equal(sd.tokens, ar.tokens)
    accepted = sd.blocks.accepted
    # Both rollback paths ran: partial acceptance and fully accepted blocks.
    assert (accepted < 4).any() and (accepted == 4).any()
    assert (sd.blocks.emitted == sd.blocks.groupby("block").accepted.transform("min") + 1).all()
    if arch != "t5":
        generate: Any = target.generate
        hf = generate(
            torch.from_numpy(prompt),
            attention_mask=torch.ones(3, 6),
            max_new_tokens=40,
            min_new_tokens=40,
            do_sample=False,
        )
        np.testing.assert_array_equal(hf[:, 6:].numpy(), ar.tokens)


def test_batched_speculative_sampling_has_the_targets_law(rng: np.random.Generator) -> None:
    """Joint law of the first two tokens of 4000 sequences against p(x1) p(x2 | x1).

    With 4000 rows, almost every block is cut to one token (the fewest accepted
    in the batch is 0), so rows that accepted more keep an accepted draft token:
    the truncation whose exactness the module claims.
    """
    card = tiny(vocab=7)
    target = build_model(card, rng=rng, dtype="float64")
    draft = build_model(card, rng=rng, dtype="float64")
    temperature, rows = 0.05, 4000
    prompt = np.tile(rng.integers(0, 7, (1, 5)), (rows, 1))
    sd = speculative_decode(
        target, draft, prompt=prompt, new_tokens=2, gamma=2, temperature=temperature, rng=rng
    )
    p1 = next_token_probs(
        DecodeState(target, batch=1).forward(torch.from_numpy(prompt[:1]))[:, -1], temperature
    )[0]
    ext = np.concatenate([np.tile(prompt[:1], (7, 1)), np.arange(7)[:, None]], axis=1)
    p2 = next_token_probs(
        DecodeState(target, batch=7).forward(torch.from_numpy(ext))[:, -1], temperature
    )
    expected = (p1[:, None] * p2).ravel() * rows
    observed = np.bincount(sd.tokens[:, 0] * 7 + sd.tokens[:, 1], minlength=49)
    alpha = sd.positions.query("block == 0 and position == 1").alpha.mean()
    assert 0.1 < alpha < 0.9, alpha  # the draft really differs from the target
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    assert stats.chi2.sf(chi2, len(obs) - 1) > 1e-4, (chi2, len(obs))


def test_acceptance_follows_alpha_position_by_position(rng: np.random.Generator) -> None:
    """Each reached position accepts with probability alpha: a martingale z-test."""
    target = build_model(tiny(), rng=rng)
    draft = build_model(tiny(layers=1), rng=rng)
    sd = speculative_decode(
        target,
        draft,
        prompt=rng.integers(0, 61, (2, 4)),
        new_tokens=150,
        gamma=3,
        temperature=0.1,
        rng=rng,
    )
    reached = sd.positions[sd.positions.reached]
    a = reached.alpha.to_numpy()
    z = (reached.accepted.to_numpy() - a).sum() / np.sqrt((a * (1 - a)).sum())
    assert 0.1 < a.mean() < 0.9 and abs(z) < 4.5, (a.mean(), z)
    assert not (sd.positions.accepted & ~sd.positions.reached).any()
    assert ((sd.blocks.accepted >= 0) & (sd.blocks.accepted <= 3)).all()


def test_decoding_argument_checks(rng: np.random.Generator) -> None:
    m = build_model(tiny(), rng=rng)
    other = build_model(tiny(vocab=62), rng=rng)
    prompt = rng.integers(0, 61, (1, 3))
    with pytest.raises(ValueError, match="vocabulary 62"):
        speculative_decode(m, other, prompt=prompt, new_tokens=2, gamma=2, temperature=1, rng=rng)
    with pytest.raises(ValueError, match="gamma"):
        speculative_decode(m, m, prompt=prompt, new_tokens=2, gamma=0, temperature=1, rng=rng)
    with pytest.raises(ValueError, match="prompt"):
        autoregressive_decode(m, prompt=prompt[0], new_tokens=2, temperature=1, rng=rng)
    with pytest.raises(ValueError, match="temperature"):
        autoregressive_decode(m, prompt=prompt, new_tokens=2, temperature=-1, rng=rng)


def test_next_token_probs_and_sampling(rng: np.random.Generator) -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])
    np.testing.assert_array_equal(next_token_probs(logits, 0), [[0, 1, 0], [0, 0, 1]])
    p = next_token_probs(logits, 2.0)
    np.testing.assert_allclose(p, torch.softmax(logits.double() / 2, -1).numpy(), rtol=1e-12)
    probs = np.tile([0.5, 0.3, 0.15, 0.05], (20_000, 1))
    counts = np.bincount(sample_rows(probs, rng), minlength=4)
    assert stats.chisquare(counts, probs[0] * 20_000).pvalue > 1e-4


def test_hf_generate_plain_and_assisted(rng: np.random.Generator) -> None:
    target = build_model(tiny(), rng=rng)
    draft = perturbed(target, 0.2, seed=2)
    prompt = rng.integers(0, 61, (1, 5))
    plain = hf_generate(target, None, prompt=prompt, new_tokens=12, temperature=0, rng=rng)
    assisted = hf_generate(
        target,
        draft,
        prompt=prompt,
        new_tokens=12,
        temperature=0,
        rng=rng,
        num_assistant_tokens=3,
        schedule="constant",
    )
    np.testing.assert_array_equal(assisted["tokens"], plain["tokens"])
    assert plain["target_passes"] == 12 and plain["draft_passes"] == 0
    assert 1 <= assisted["target_passes"] < 12 and assisted["draft_passes"] > 0
    sampled = hf_generate(
        target,
        draft,
        prompt=prompt,
        new_tokens=12,
        temperature=1.0,
        rng=rng,
        num_assistant_tokens=3,
        schedule="heuristic",
    )
    assert sampled["tokens"].shape == (1, 12) and sampled["time_s"] > 0
    with pytest.raises(ValueError, match="shape \\(1, P\\)"):
        hf_generate(
            target, None, prompt=np.zeros((2, 3), int), new_tokens=2, temperature=0, rng=rng
        )


# Timing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "gpt2", "t5"])
def test_time_passes_grid_rows(arch: str, rng: np.random.Generator) -> None:
    model = build_model(ARCHS[arch], rng=rng)
    source = 6 if arch == "t5" else 0
    state = filled_state(model, batch=3, context=17, rng=rng, source_len=source)
    assert state.length == 17
    rows = time_passes(
        model,
        batch=3,
        context=17,
        new_tokens=(1, 4),
        repeats=3,
        warmup=1,
        rng=rng,
        source_len=source,
    )
    assert len(rows) == 6 and rows.new_tokens.tolist() == [1, 1, 1, 4, 4, 4]
    assert (rows.time_s > 0).all() and rows.peak_mem_bytes.isna().all()
    assert rows.energy_j.isna().all() and (rows.source_len == source).all()


def test_energy_per_pass_from_a_counter(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NVML path's arithmetic with a fake 50 W counter (the CPU has none).

    The energy window is 40 median passes long, so it holds many passes whatever the
    machine's speed. Each of its passes also includes its rollback and a synchronization,
    which the timed passes leave out, so energy per pass over 50 W times the median pass
    is at least about 1 and grows with host overhead (3.4 seen on a loaded machine); a
    window not divided by its passes would give about 40."""
    import time

    import specsim.measure.timing as timing

    model = build_model(tiny(), rng=rng)
    kw: dict[str, Any] = dict(batch=2, context=16, new_tokens=(3,), repeats=3, warmup=1, rng=rng)
    step = float(time_passes(model, **kw).time_s.median())
    monkeypatch.setattr(timing, "energy_meter", lambda device: lambda: 50.0 * time.perf_counter())
    rows = time_passes(model, **kw, energy_window_s=40 * step)
    ratio = rows.energy_j / (50.0 * rows.time_s.median())
    assert ratio.between(0.3, 12.0).all(), ratio.tolist()


def test_time_calls_and_ceilings(rng: np.random.Generator) -> None:
    calls: list[str] = []
    times = time_calls(
        lambda: calls.append("f"), device=CPU, repeats=3, warmup=2, after=lambda: calls.append("a")
    )
    assert len(times) == 3 and calls == ["f", "a"] * 5
    with pytest.raises(ValueError, match="repeats"):
        time_calls(lambda: None, device=CPU, repeats=0, warmup=0)
    assert energy_meter(CPU) is None
    rows = measure_ceilings(
        device="cpu",
        dtype="float32",
        matmul_sizes=(32,),
        copy_bytes=(4096,),
        repeats=2,
        warmup=1,
        rng=rng,
    )
    assert rows.op.tolist() == ["matmul"] * 2 + ["gemv"] * 2 + ["copy"] * 2
    mm = rows[rows.op == "matmul"]
    assert (mm.flops == 2 * 32**3).all()
    np.testing.assert_allclose(mm.rate, mm.flops / mm.time_s)
    cp = rows[rows.op == "copy"]
    np.testing.assert_allclose(cp.rate, 2 * 4096 / cp.time_s)


# Presets, traces, resume, CLI -----------------------------------------------------------


def test_presets_are_defined_as_the_issue_asks() -> None:
    assert get_preset("gpu") is PRESETS["h200"]
    gpu = PRESETS["h200"]
    assert gpu.dtype == "bfloat16" and gpu.batches[0] == 1 and gpu.batches[-1] == 64
    assert (gpu.contexts[0], gpu.contexts[-1]) == (128, 4096)
    assert {d for _, d in gpu.pairs} == {"llama-68m", "llama-160m", "llama-3.2-1b"}
    assert {t for t, _ in gpu.pairs} == {"llama-2-7b"}
    cpu = PRESETS["cpu"]
    assert cpu.threads == 2 and ("gpt-like-97m", "gpt-like-6m") in cpu.pairs
    assert max(cpu.new_tokens) == 8 and (cpu.contexts[0], cpu.contexts[-1]) == (64, 512)
    for preset in PRESETS.values():
        for slug in {*preset.timing_models, *(s for pair in preset.pairs for s in pair)}:
            load_model(slug)
    with pytest.raises(ValueError, match="unknown preset 'tpu'"):
        get_preset("tpu")
    with pytest.raises(ValueError, match="Preset.batches"):
        Preset(**{**_fields(PRESETS["smoke"]), "batches": (0,)})


def _fields(preset: Preset) -> dict[str, Any]:
    return {name: getattr(preset, name) for name in Preset.__dataclass_fields__}


@pytest.mark.slow
def test_smoke_preset_writes_valid_traces_and_resumes(tmp_path: Path) -> None:
    preset = PRESETS["smoke"]
    lines: list[str] = []
    written = run_preset(preset, device="cpu", out=tmp_path, seed=3, log=lines.append)
    all_traces = read_traces(tmp_path)
    assert set(all_traces) == {
        "passes",
        "specdec",
        "positions",
        "autoregressive",
        "assisted",
        "ceilings",
    }
    for name, trace in all_traces.items():
        assert len(trace.data) == written[name] > 0
        assert trace.meta["preset"] == "smoke" and trace.meta["seed"] == 3
    sd = all_traces["specdec"].data
    n_runs = len(preset.pairs) * len(preset.temperatures) * len(preset.gammas)
    assert sd.run_id.nunique() == n_runs * len(preset.decode_batches)
    for _, run in sd[sd.seq == 0].groupby("run_id"):
        total = int(run.emitted.sum())
        # Enough tokens, and the last block was needed.
        assert total >= preset.decode_tokens > total - int(run.emitted.iloc[-1])
    pos = all_traces["positions"].data
    assert len(pos) == len(sd) * preset.gammas[0]
    passes = all_traces["passes"].data
    assert len(passes) == (
        len(preset.batches) * len(preset.contexts) * len(preset.new_tokens) * preset.repeats
    )
    ar = all_traces["autoregressive"].data
    assert (ar.groupby("run_id").step.max() == preset.decode_tokens - 1).all()
    again = run_preset(preset, device="cpu", out=tmp_path, seed=3)
    assert sum(again.values()) == 0
    assert len(read_trace(tmp_path / "specdec.csv").meta["sessions"]) == 2


def test_gpu_preset_path_on_cpu(tmp_path: Path) -> None:
    """The h200 preset's settings (bfloat16, KV budget, a draft of another vocabulary and
    model class) through run_preset, shrunk to CPU size."""
    import dataclasses

    small = dataclasses.replace(
        PRESETS["h200"],
        timing_models=("gpt-like-6m",),
        batches=(1, 64),
        contexts=(8,),
        new_tokens=(1, 2),
        repeats=1,
        warmup=1,
        max_cache_bytes=100 * 1024,
        pairs=(("gpt-like-6m", "llama-68m"),),
        temperatures=(1.0,),
        gammas=(2,),
        decode_batches=(1, 2),
        prompt_len=4,
        decode_tokens=4,
        assisted_temperatures=(1.0,),
        matmul_sizes=(32,),
        copy_bytes=(4096,),
        ceiling_repeats=1,
        # The formats and interleaved runs: test_h200_preset_shrunk_runs_every_path_on_cpu.
        weight_formats=(),
        interleave=False,
        allreduce_bytes=(),
    )
    lines: list[str] = []
    run_preset(small, device="cpu", out=tmp_path, log=lines.append)
    got = read_traces(tmp_path)
    passes = got["passes"].data
    assert set(passes.batch) == {1} and (passes.dtype == "bfloat16").all()
    assert any("b64 c8: skipped" in line for line in lines)
    sd = got["specdec"].data
    assert set(sd.draft) == {"llama-68m"} and set(sd.vocab) == {8192}
    assert any("built draft llama-68m (vocab 8192)" in line for line in lines)
    assert set(got["assisted"].data.schedule) == {"none", "constant", "heuristic"}


class _Stop(Exception):
    pass


def test_bfloat16_path_runs(rng: np.random.Generator) -> None:
    """The GPU presets' dtype, exercised on the CPU: build, time, decode."""
    target = build_model(tiny(), rng=rng, dtype="bfloat16")
    draft = build_model(tiny(layers=1), rng=rng, dtype="bfloat16")
    assert next(target.parameters()).dtype == torch.bfloat16
    rows = time_passes(target, batch=2, context=9, new_tokens=(2,), repeats=2, warmup=1, rng=rng)
    assert (rows.time_s > 0).all()
    sd = speculative_decode(
        target,
        draft,
        prompt=rng.integers(0, 61, (2, 3)),
        new_tokens=8,
        gamma=3,
        temperature=0.5,
        rng=rng,
    )
    assert sd.tokens.shape == (2, 8) and sd.positions.alpha.between(0, 1 + 1e-12).all()
    ceil = measure_ceilings(
        device="cpu",
        dtype="bfloat16",
        matmul_sizes=(16,),
        copy_bytes=(64,),
        repeats=1,
        warmup=0,
        rng=rng,
    )
    assert (ceil[ceil.op == "matmul"].bytes == 3 * 16 * 16 * 2).all()


@pytest.mark.slow
def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    preset = PRESETS["smoke"]
    fresh = tmp_path / "fresh"
    run_preset(preset, device="cpu", out=fresh, seed=1, sections=("specdec",))

    cut = tmp_path / "cut"
    finished: list[str] = []

    def log(line: str) -> None:
        if line.startswith("sd/"):
            finished.append(line)
            if len(finished) == 2:
                raise _Stop

    with pytest.raises(_Stop):
        run_preset(preset, device="cpu", out=cut, seed=1, sections=("specdec",), log=log)
    before = read_trace(cut / "specdec.csv").data
    assert before.run_id.nunique() == 2
    # Simulate a cut between a run's two appends and inside a write.
    orphan = read_trace(cut / "positions.csv").data.head(2).assign(run_id="sd/orphan")
    with open(cut / "positions.csv", "a") as fh:
        fh.write(orphan.to_csv(index=False, header=False) + "sd/torn,0,0")
    run_preset(preset, device="cpu", out=cut, seed=1, sections=("specdec",))
    after = read_traces(cut)
    sd, pos = after["specdec"].data, after["positions"].data
    pd.testing.assert_frame_equal(sd.head(len(before)), before)
    assert not sd.duplicated(["run_id", "block", "seq"]).any()
    assert not pos.duplicated(["run_id", "block", "seq", "position"]).any()
    assert set(pos.run_id) == set(sd.run_id)
    # Same seed, same choices: accepted counts match an uninterrupted run exactly.
    ref = read_trace(fresh / "specdec.csv").data
    key = ["run_id", "block", "seq"]
    merged = sd.merge(ref, on=key, suffixes=("", "_ref"))
    assert len(merged) == len(ref) == len(sd)
    assert (merged.accepted == merged.accepted_ref).all()


def test_resume_refuses_a_folder_of_another_run(tmp_path: Path) -> None:
    """Units are skipped by run_id alone, so resuming with another device, dtype, preset
    or seed would silently keep the old traces: it must raise instead."""
    import dataclasses
    import json

    smoke = PRESETS["smoke"]
    out = tmp_path / "run"
    first = run_preset(smoke, device="cpu", out=out, seed=1, sections=("ceilings",))
    assert first["ceilings"] > 0
    sidecar = out / "ceilings.json"
    recorded = sidecar.read_text()
    others = {
        "seed": dict(preset=smoke, seed=2),
        "preset": dict(preset=dataclasses.replace(smoke, name="smoke-copy"), seed=1),
        "dtype": dict(preset=dataclasses.replace(smoke, dtype="bfloat16"), seed=1),
    }
    for key, kw in others.items():
        for sections in (("ceilings",), ("specdec",)):  # whichever sections are asked for
            with pytest.raises(ValueError, match=rf"out: {re.escape(str(out))}.* {key}=") as info:
                run_preset(device="cpu", out=out, sections=sections, **kw)  # type: ignore[arg-type]
            assert "ceilings traces" in str(info.value)
    # Nothing was measured or recorded by the refused runs.
    assert sidecar.read_text() == recorded
    assert not (out / "specdec.csv").exists()
    # A session of another device recorded later in the sidecar is caught too.
    meta = json.loads(recorded)
    meta["sessions"].append({**meta["sessions"][0], "device": "cuda"})
    sidecar.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"device='cuda'.*device='cpu'"):
        run_preset(smoke, device="cpu", out=out, seed=1, sections=("ceilings",))
    # The same run resumes as before: nothing left to do, one more session recorded.
    sidecar.write_text(recorded)
    again = run_preset(smoke, device="cpu", out=out, seed=1, sections=("ceilings",))
    assert sum(again.values()) == 0
    assert len(read_trace(out / "ceilings.csv").meta["sessions"]) == 2


def test_cli_measure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specsim.cli import main
    from specsim.cli.measure import _SECTIONS

    assert _SECTIONS == SECTIONS
    out = tmp_path / "cli"
    code = main(
        [
            "measure",
            "--device",
            "cpu",
            "--preset",
            "smoke",
            "--out",
            str(out),
            "--only",
            "ceilings",
            "--seed",
            "4",
            "--threads",
            "1",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0 and "ceilings matmul 64" in text and "rows written: ceilings 6" in text
    meta = read_trace(out / "ceilings.csv").meta
    assert meta["command"].startswith("specsim measure --device cpu --preset smoke")
    assert meta["threads"] == 1 and "--threads 1" in meta["command"]
    assert main(["measure", "--device", "cpu", "--preset", "nope", "--out", str(out)]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert main(["measure", "--device", "tpu", "--preset", "smoke", "--out", str(out)]) == 2
    assert "device" in capsys.readouterr().err
    assert (
        main(
            ["measure", "--device", "cpu", "--preset", "smoke", "--out", str(out), "--threads", "0"]
        )
        == 2
    )
    assert "--threads" in capsys.readouterr().err


def test_cli_measure_shows_every_unit_with_the_time_left_and_a_json_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from specsim.cli import main
    from specsim.cli.measure import _plan

    out = tmp_path / "m"
    base = ["measure", "--device", "cpu", "--preset", "smoke", "--out", str(out), "--threads", "1"]
    assert main(base) == 0
    text = capsys.readouterr().out
    plan = _plan(PRESETS["smoke"], SECTIONS)
    # One line per planned unit, in the plan's order: the plan is the harness's own.
    units = re.findall(
        r"^\[ *[\d.]+ s\] (.+?): .*  \[(\d+)/(\d+)(, about .+ left)?\]$", text, flags=re.M
    )
    assert [u[0] for u in units] == plan
    assert [int(u[1]) for u in units] == list(range(1, len(plan) + 1))
    assert {int(u[2]) for u in units} == {len(plan)}
    assert all(u[3] for u in units[:-1]) and not units[-1][3]  # the last has nothing left
    # A resumed run measures nothing; --json says so, and where the traces are.
    assert main([*base, "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["preset"] == "smoke" and summary["sections"] == list(SECTIONS)
    assert set(summary["rows_written"].values()) == {0}
    assert summary["output_folder"] == str(out.resolve())
    for kind, path in summary["traces"].items():
        assert Path(path) == out / f"{kind}.csv" and Path(path).is_file()
    # With --json, stdout holds the JSON only: the unit lines go to stderr.
    assert main([*base[:-4], "--out", str(tmp_path / "c"), "--only", "ceilings", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows_written"]["ceilings"] == 6
    assert "ceilings matmul 64: " in captured.err and "[2/2]" in captured.err


def test_cli_measure_only_sections_are_planned_in_order() -> None:
    import dataclasses

    from specsim.cli.measure import _plan

    smoke = PRESETS["smoke"]
    assert _plan(smoke, ("ceilings",)) == ["ceilings matmul 64", "ceilings copy 1048576"]
    assert _plan(smoke, ("passes", "ceilings"))[:2] == _plan(smoke, ("ceilings",))
    assert _plan(dataclasses.replace(smoke, assisted_repeats=0), ("assisted",)) == []


@pytest.mark.parametrize(
    ("preset", "extra", "named"),
    [
        ("real", ["--only", "passes"], "--only"),
        ("smoke", ["--stage", "train"], "--stage"),
        ("smoke", ["--work", "w", "--models", "m"], "--work, --models"),
        (
            "cpu",
            ["--sample", "s", "--train-only", "a", "--vocab", "64"],
            "--sample, --train-only, --vocab",
        ),
    ],
)
def test_cli_measure_refuses_flags_its_preset_ignores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], preset: str, extra: list[str], named: str
) -> None:
    from specsim.cli import main

    out = tmp_path / "never"
    argv = ["measure", "--device", "cpu", "--preset", preset, "--out", str(out), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim measure: error: {named}: ") and "Traceback" not in err
    assert err.count("\n") == 1 and not out.exists()  # one line, nothing run or written


# Weight formats, interleaved runs, shrunk presets (issue 14) -------------------------------


def test_quantized_weights_compute_nearly_the_same_logits(rng: np.random.Generator) -> None:
    assert int4_supported() == ""  # torch 2.13's CPU build packs and multiplies int4
    for arch in ("llama", "gpt2"):
        model = build_model(ARCHS[arch], rng=rng)
        x = torch.from_numpy(rng.integers(0, 61, (2, 5)))
        ref = model(x).logits
        for fmt, how, tol in (("int8", "dynamic", 0.05), ("int4", "weight-only", 0.35)):
            q, method = quantize_weights(model, fmt, group_size=32)
            assert method == how and q is not model
            err = float((q(x).logits - ref).abs().max() / ref.abs().max())
            assert err < tol, (arch, fmt, err)
        assert quantize_weights(model, "fp32") == (model, "none")
    with pytest.raises(ValueError, match="unknown format 'int3'"):
        quantize_weights(model, "int3")
    with pytest.raises(ValueError, match="group_size"):
        quantize_weights(model, "int4", group_size=48)
    bf16 = build_model(tiny(), rng=rng, dtype="bfloat16")
    assert quantize_weights(bf16, "int8")[1] == "weight-only"  # dynamic int8 is float32 only


def test_interleaved_runs_stop_by_the_interval_or_the_block_cap(rng: np.random.Generator) -> None:
    target, draft = build_model(tiny(), rng=rng), build_model(tiny(layers=1), rng=rng)

    def prompt(segment: int) -> np.ndarray:
        return np.random.default_rng(segment).integers(0, 61, (1, 4))

    kw: dict[str, Any] = dict(prompt=prompt, new_tokens=6, gamma=2, temperature=1.0)
    run, why, (s, lo, hi) = interleaved_until(
        target, draft, rng=rng, halfwidth=0.99, min_blocks=3, max_blocks=100, **kw
    )
    assert why == "interval" and lo <= s <= hi and (hi - lo) / 2 <= 0.99 * s
    run, why, _ = interleaved_until(
        target, draft, rng=rng, halfwidth=1e-9, min_blocks=3, max_blocks=5, **kw
    )
    assert why == "blocks" and run.blocks.block.tolist() == list(range(len(run.blocks)))
    # Each block is followed by as many plain steps as it emitted, numbered on.
    assert len(run.steps) == run.blocks.emitted.sum()
    assert run.steps.step.tolist() == list(range(len(run.steps)))


def test_cpu_rows_preset_shrunk_times_formats_and_interleaved_runs(tmp_path: Path) -> None:
    preset = dataclasses.replace(shrink(PRESETS["cpu-rows"]), batches=(1,))
    run_preset(preset, device="cpu", out=tmp_path, sections=("passes", "specdec"))
    got = read_traces(tmp_path)
    passes = got["passes"].data
    assert set(passes.weights) == {"fp32", "int8", "int4"}
    assert dict(zip(passes.weights, passes.quant, strict=True)) == {
        "fp32": "none",
        "int8": "dynamic",
        "int4": "weight-only",
    }
    assert set(passes.loc[passes.weights == "int4", "group_size"].astype(int)) == {128}
    runs = paired_runs(got["specdec"].data, got["autoregressive"].data)
    assert runs.paired.all() and (runs.twin_steps == runs.tokens).all()
    assert (runs.speedup_low <= runs.speedup).all() and (runs.speedup <= runs.speedup_high).all()
    assert (
        sum(run_preset(preset, device="cpu", out=tmp_path, sections=("passes", "specdec")).values())
        == 0
    )


def test_h200_preset_shrunk_runs_every_path_on_cpu(tmp_path: Path) -> None:
    """The GPU preset's bfloat16 weight formats (weight-only int8 and int4) and interleaved
    runs, end to end on the CPU; collectives are skipped without two GPUs."""
    preset = shrink(PRESETS["h200"])
    assert preset.dtype == "bfloat16" and preset.interleave and preset.allreduce_bytes
    run_preset(
        dataclasses.replace(preset, batches=(1,)),
        device="cpu",
        out=tmp_path,
        sections=("ceilings", "passes", "specdec"),
    )
    got = read_traces(tmp_path)
    assert set(got["passes"].data.weights) == {"bf16", "int8", "int4"}
    assert set(got["passes"].data.quant) == {"none", "weight-only"}
    assert len(got["specdec"].data) and len(got["autoregressive"].data)
    assert set(got["ceilings"].data.op) == {"matmul", "gemv", "copy"}


def test_cli_measure_shrink_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specsim.cli import main

    out = tmp_path / "m"
    assert (
        main(
            [
                "measure",
                "--device",
                "cpu",
                "--preset",
                "cpu-rows",
                "--shrink",
                "--out",
                str(out),
                "--only",
                "ceilings",
                "--quiet",
            ]
        )
        == 0
    )
    meta = read_trace(out / "ceilings.csv").meta
    assert meta["preset"] == "cpu-rows-shrunk" and "--shrink" in meta["command"]
    assert (
        main(["measure", "--device", "cpu", "--preset", "real", "--shrink", "--out", str(out)]) == 2
    )
    assert "--shrink" in capsys.readouterr().err


def test_cli_measure_real_checks_its_folders_and_corpora_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: an unwritable --work is refused before any work, naming the flag; an alpha
    stage without corpora says which stage to run first; the committed sample is too small
    for the full alpha stage, and the error says so (and what to do) before measuring."""
    from specsim.cli import main

    real = ["measure", "--device", "cpu", "--preset", "real", "--quiet"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = [*real, "--stage", "alpha", "--work", str(blocker / "w"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "--work:" in capsys.readouterr().err
    work = tmp_path / "work"
    assert main([*real, "--stage", "alpha", "--work", str(work), "--out", str(tmp_path)]) == 2
    assert "no corpora in the --work folder" in capsys.readouterr().err
    sample = ["--sample", "models/corpora/sample", "--out", str(tmp_path / "o")]
    root = Path(__file__).resolve().parents[2]
    sample[1] = str(root / sample[1])
    assert main([*real, "--stage", "corpus", "--work", str(work), *sample]) == 0
    capsys.readouterr()
    models = str(root / "models" / "tiny")
    alpha = [*real, "--stage", "alpha", "--work", str(work), "--models", models]
    assert main([*alpha, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "need more than 128" in err and "--shrink" in err
    assert not (tmp_path / "o" / "alpha-summary.csv").exists()
