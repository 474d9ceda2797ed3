"""Model and accelerator cards: shapes, parameter counts, validation, and where cards are found."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

import specsim.cards as cards
from specsim.cards import (
    DTYPE_BYTES,
    HardwareCard,
    ModelCard,
    list_hardware,
    list_models,
    load_hardware,
    load_model,
    read_toml,
    write_card,
    write_hardware_card,
)
from specsim.cards import files as card_files
from specsim.cards import root as card_root

MODELS = (
    "t5-small",
    "t5-base",
    "t5-large",
    "t5-xxl",
    "gpt-like-97m",
    "gpt-like-6m",
    "llama-68m",
    "llama-160m",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3.2-1b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen2.5-0.5b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "vicuna-7b-v1.3",
    "mimo-7b",
    # issue 24, section 1 (tests/cards/test_moe_cards.py)
    "mixtral-8x7b",
    "deepseek-v3",
    "kimi-k2",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    # issue 33, item 5 (tests/cards/test_attention_cards.py)
    "deepseek-v3.2",
    "llama-4-scout",
    "llama-4-maverick",
    "gemma-3-4b",
    "gemma-3-12b",
    "gemma-3-27b",
    "qwen3-8b",
    "qwen3-32b",
    "peagle-gpt-oss-120b-draft",
    "dflash-qwen3-8b-b16-draft",
)
HARDWARE = (
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "l4",
    "rtx-3090",
    "rtx-4090",
    "tpu-v4",
    "mi300x",
    # the accelerator cards with datasheet sources (tests/cards/test_hardware_cards.py)
    "a40",
    "l40s",
    "b200",
    "b300",
    "gb200",
    "mi325x",
    "mi355x",
    "rtx-5090",
    "gaudi-3",
    "a10g",
    "h20",
)
ROOT = Path(__file__).resolve().parents[2]


def test_every_required_card_loads_and_is_listed() -> None:
    assert {m.slug for m in list_models()} >= set(MODELS)
    assert {h.slug for h in list_hardware()} >= set(HARDWARE)
    for slug in MODELS:
        card = load_model(slug)
        assert card.slug == slug and card.sources
        assert Path(card.source_path or "").name == f"{slug}.toml"
    for slug in HARDWARE:
        hw = load_hardware(slug)
        assert hw.slug == slug and hw.sources and hw.peak_flops


# Known answers: total parameter counts that Hugging Face reports for these checkpoints
# (safetensors metadata / model pages); the shape count must reproduce them exactly.
# T5's count adds its relative-position buckets (32 per head, encoder and decoder), which
# the card's shape count leaves out by design.
@pytest.mark.parametrize(
    ("slug", "hf_total", "uncounted"),
    [
        ("llama-2-7b", 6_738_415_616, 0),
        ("llama-2-70b", 68_976_648_192, 0),
        ("llama-3.1-8b", 8_030_261_248, 0),
        ("qwen2.5-0.5b", 494_032_768, 0),
        ("qwen2.5-7b", 7_615_616_512, 0),
        ("t5-small", 76_961_152, 2 * 32 * 6),
    ],
)
def test_shape_count_reproduces_published_totals(slug: str, hf_total: int, uncounted: int) -> None:
    assert load_model(slug).shape_params + uncounted == hf_total


def test_stated_params_agree_with_shape_for_every_card() -> None:
    for m in list_models():
        assert abs(m.shape_params / m.params - 1) <= m.params_tolerance


def test_t5_decode_params_are_the_decoder_and_head() -> None:
    m = load_model("t5-xxl")
    d, inner, ff, L = m.d_model, m.q_dim, m.d_ff, m.layers
    per_layer = 4 * d * inner + 2 * d * inner + 3 * d * ff + 3 * d  # self, cross q/o, MLP, norms
    assert m.decode_params == L * per_layer + d + m.vocab * d
    # Encoder, shared embedding and cross K/V projections are resident but not read per step.
    assert m.decode_params < 0.55 * m.shape_params


def test_decoder_only_decode_params_skip_the_untied_input_table() -> None:
    m = load_model("llama-2-7b")
    assert m.shape_params - m.decode_params == m.vocab * m.d_model
    tied = load_model("llama-3.2-1b")
    assert tied.decode_params == tied.shape_params  # the tied table is the LM head


def test_kv_bytes_per_token_uses_kv_heads() -> None:
    m = load_model("llama-3.1-8b")  # 32 layers, 8 KV heads of 128
    assert m.kv_bytes_per_token(2.0) == 32 * 2 * 8 * 128 * 2


def _model_kwargs(**over: object) -> dict[str, object]:
    base = dataclasses.asdict(load_model("llama-68m"))
    base.pop("source_path")
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("field", "value", "exc", "fragment"),
    [
        ("params", 90_000_000, ValueError, "'params'"),
        ("layers", 0, ValueError, "'layers'"),
        ("layers", 2.0, TypeError, "'layers'"),
        ("kv_heads", 5, ValueError, "'kv_heads'"),
        ("architecture", "encoder", ValueError, "'architecture'"),
        ("dtype", "float64", ValueError, "'dtype'"),
        ("norm", "batchnorm", ValueError, "'norm'"),
        ("encoder_layers", 2, ValueError, "'encoder_layers'"),
        ("gated_mlp", 1, TypeError, "'gated_mlp'"),
        ("sources", {}, ValueError, "'sources'"),
    ],
)
def test_model_card_validation_names_field_and_value(
    field: str, value: object, exc: type[Exception], fragment: str
) -> None:
    with pytest.raises(exc, match=fragment):
        ModelCard(**_model_kwargs(**{field: value}))  # type: ignore[arg-type]


def _hw_kwargs(**over: object) -> dict[str, object]:
    base = dataclasses.asdict(load_hardware("a100-80gb"))
    base.pop("source_path")
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("memory_efficiency", 1.2, "'memory_efficiency'"),
        ("compute_efficiency", 0.0, "'compute_efficiency'"),
        ("mem_bandwidth", -1.0, "'mem_bandwidth'"),
        ("layer_overhead_s", float("nan"), "'layer_overhead_s'"),
        ("idle_power_w", 500.0, "'idle_power_w'"),
        ("kind", "fpga", "'kind'"),
        ("peak_flops", {"float64": 1e12}, "'peak_flops'"),
        ("energy_per_flop_j", 1e-12, "energy_per_byte_j"),
    ],
)
def test_hardware_card_validation_names_field_and_value(
    field: str, value: object, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        HardwareCard(**_hw_kwargs(**{field: value}))  # type: ignore[arg-type]


def test_peak_for_a_dtype_the_card_lacks_names_what_it_has() -> None:
    tpu = load_hardware("tpu-v4")
    with pytest.raises(ValueError, match=r"tpu-v4.*float32.*bfloat16"):
        tpu.peak("float32")
    with pytest.raises(ValueError, match="unknown dtype 'fp64'"):
        tpu.peak("fp64")
    assert set(DTYPE_BYTES) >= set(tpu.peak_flops)


def _copy_card(src_slug: str, kind: str, dest: Path, slug: str, edits: dict[str, str]) -> Path:
    text = (ROOT / "models" / kind / f"{src_slug}.toml").read_text()
    text = text.replace(f'slug = "{src_slug}"', f'slug = "{slug}"')
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{slug}.toml"
    path.write_text(text)
    return path


def test_a_card_file_error_names_the_file(tmp_path: Path) -> None:
    bad = _copy_card("llama-68m", "lm", tmp_path, "bad", {"layers = 2 ": "layers = 4 "})
    with pytest.raises(ValueError, match=r"bad\.toml: field 'params'"):
        load_model(bad)
    typo = _copy_card("llama-68m", "lm", tmp_path, "typo", {"d_ff =": "dff ="})
    with pytest.raises(ValueError, match=r"typo\.toml: unknown field\(s\) \['dff'\]"):
        load_model(typo)
    (tmp_path / "broken.toml").write_text("slug = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_model(tmp_path / "broken.toml")


def test_user_cards_by_path_folder_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    path = _copy_card("llama-2-7b", "lm", mine / "lm", "my-7b", {})
    assert load_model(path).slug == "my-7b"
    assert load_model("my-7b", search_path=mine).slug == "my-7b"
    with pytest.raises(ValueError, match="no model card 'my-7b'"):
        load_model("my-7b")
    monkeypatch.setenv(cards.ENV_VAR, str(mine))
    assert load_model("my-7b").slug == "my-7b"
    assert "my-7b" in {m.slug for m in list_models()}
    # A user folder comes first: its card shadows a shipped card of the same slug.
    _copy_card(
        "a100-80gb", "hardware", mine, "a100-80gb", {"max_power_w = 400 ": "max_power_w = 330 "}
    )
    assert load_hardware("a100-80gb").max_power_w == 330.0
    monkeypatch.delenv(cards.ENV_VAR)
    assert load_hardware("a100-80gb").max_power_w == 400.0
    with pytest.raises(ValueError, match=r"^search_path: '.*nowhere': no such folder$"):
        load_model("llama-2-7b", search_path=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "absent.toml")


def test_calibrated_cards_keep_their_calibration_table(tmp_path: Path) -> None:
    path = _copy_card("a100-80gb", "hardware", tmp_path / "calibrated", "a100-80gb-hf", {})
    path.write_text(
        path.read_text()
        + '\n[calibration]\ntrace = "measured/a100.jsonl"\nrmse_ms = 0.21\n'
        + 'fitted = ["layer_overhead_s"]\n'
    )
    hw = load_hardware("a100-80gb-hf", search_path=tmp_path)
    assert hw.calibration == {
        "trace": "measured/a100.jsonl",
        "rmse_ms": 0.21,
        "fitted": ["layer_overhead_s"],
    }
    assert "a100-80gb-hf" in {h.slug for h in list_hardware(search_path=tmp_path)}
    # A model search does not pick up hardware cards of the same folder, nor the reverse.
    with pytest.raises(ValueError, match="no model card"):
        load_model("a100-80gb-hf", search_path=tmp_path)


def test_cards_are_found_in_the_installed_package_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wheel maps models/ to specsim/_models (pyproject force-include); imitate that layout.
    pkg = tmp_path / "specsim"
    shutil.copytree(ROOT / "models" / "lm", pkg / "_models" / "lm")
    _copy_card("llama-68m", "lm", pkg / "_models" / "lm", "only-in-wheel", {})
    monkeypatch.setattr(card_root.resources, "files", lambda name: pkg)
    assert card_files.packaged_root() == pkg / "_models"
    assert load_model("only-in-wheel").slug == "only-in-wheel"
    assert 'models" = "specsim/_models"' in (ROOT / "pyproject.toml").read_text()


# Writing cards back ---------------------------------------------------------------------------
COMMITTED = sorted(
    p.relative_to(ROOT / "models").as_posix()
    for p in (ROOT / "models").glob("**/*.toml")
    if {"architecture", "peak_flops"} & set(read_toml(p))
)


def test_every_card_folder_is_round_tripped() -> None:
    assert {p.split("/")[0] for p in COMMITTED} == {"lm", "hardware", "calibrated"}
    assert len(COMMITTED) == len(MODELS) + len(HARDWARE) + 2  # the EPYC and Xeon CPU cards


@pytest.mark.parametrize("rel", COMMITTED)
def test_every_committed_card_reads_back_equal(rel: str, tmp_path: Path) -> None:
    path = ROOT / "models" / rel
    load = load_model if "architecture" in read_toml(path) else load_hardware
    card = load(path)
    out = write_card(card, tmp_path / path.name, header="written by a test\n\nagain")
    back = load(out)
    assert back == card and back.source_path == str(out)
    assert out.read_text().startswith("# written by a test\n#\n# again\n")
    assert (
        write_card(back, tmp_path / "twice.toml").read_text() == out.read_text().split("\n", 3)[3]
    )  # the same text without the header: writing is stable


def test_a_list_of_sources_and_nested_calibration_tables_read_back_equal(
    tmp_path: Path,
) -> None:
    # Both failed before: the list came back as a table, the nested table raised TypeError.
    card = dataclasses.replace(
        load_hardware("cpu-epyc-2vcpu"),
        sources=['the "datasheet", p. 3', "line one\nline two \\ \x01 \u00e9"],
        calibration={
            "trace": "models/measured/cpu",
            "fit": {"rms": 0.25, "fitted": ["layer_overhead_s"], "held out": {"median": 0.16}},
            "runs": [{"batch": 1, "error": 0.1}, {"batch": 8, "error": -0.2}],
        },
    )
    back = load_hardware(write_hardware_card(card, tmp_path / "cal.toml"))
    assert back == card and isinstance(back.sources, list)
    model = dataclasses.replace(load_model("llama-68m"), sources=["a paper", "a config"])
    assert load_model(write_card(model, tmp_path / "m.toml")) == model


def test_what_toml_cannot_hold_is_a_type_error_naming_where(tmp_path: Path) -> None:
    card = dataclasses.replace(load_hardware("a100-80gb"), calibration={"fit": {"rms": None}})
    with pytest.raises(TypeError, match=r"a100-80gb\.calibration\.fit\.rms: TOML has no null"):
        write_hardware_card(card, tmp_path / "x.toml")
    card = dataclasses.replace(card, calibration={"when": object()})
    with pytest.raises(TypeError, match=r"a100-80gb\.calibration\.when: cannot write"):
        write_hardware_card(card, tmp_path / "x.toml")
    with pytest.raises(TypeError, match="expected a HardwareCard"):
        write_hardware_card(load_model("llama-68m"), tmp_path / "x.toml")  # type: ignore[arg-type]


def test_the_calibrated_card_is_written_as_committed(tmp_path: Path) -> None:
    # specsim calibrate writes cards through write_hardware_card: the same text, header aside.
    committed = ROOT / "models" / "calibrated" / "cpu-epyc-2vcpu.toml"
    text = committed.read_text(encoding="utf-8")
    header = "\n".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    out = write_hardware_card(load_hardware(committed), tmp_path / "cal.toml", header=header)
    assert out.read_text(encoding="utf-8") == text


def test_a_card_is_a_slug_or_a_path_not_none_or_a_number() -> None:
    for value in (None, 7):
        with pytest.raises(
            TypeError,
            match=f"card: expected a card slug or a path to a "
            rf"\.toml file, got {value}",
        ):
            load_model(value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="card: expected a card slug .* got None"):
        load_hardware(None)  # type: ignore[arg-type]


def test_a_slug_finds_no_file_named_for_another_card(tmp_path: Path) -> None:
    # A file named a100-80gb.toml holding the H100 card must not answer for a100-80gb.
    text = (ROOT / "models" / "hardware" / "h100-sxm.toml").read_text()
    (tmp_path / "a100-80gb.toml").write_text(text)
    with pytest.raises(ValueError, match=r"a100-80gb\.toml holds the hardware card 'h100-sxm'"):
        load_hardware("a100-80gb", search_path=tmp_path)
    # Nor does a file of another name that holds the slug asked for.
    with pytest.raises(ValueError, match="name the file h100-sxm.toml"):
        load_hardware("h100-sxm", search_path=tmp_path)


def test_a_slug_found_twice_on_the_search_path_names_both_files(tmp_path: Path) -> None:
    one = _copy_card("llama-68m", "lm", tmp_path / "one", "my-68m", {})
    two = _copy_card("llama-68m", "lm", tmp_path / "two", "my-68m", {})
    with pytest.raises(ValueError, match="found twice") as info:
        load_model("my-68m", search_path=[tmp_path / "one", tmp_path / "two"])
    assert str(one) in str(info.value) and str(two) in str(info.value)
    # The same folder given twice is one card, and a user card may stand in for a shipped one.
    assert load_model("my-68m", search_path=[one.parent, one.parent]).slug == "my-68m"
    _copy_card("llama-68m", "lm", tmp_path / "mine", "llama-68m", {})
    assert load_model("llama-68m", search_path=tmp_path / "mine").source_path == str(
        tmp_path / "mine" / "llama-68m.toml"
    )


def test_searched_first_puts_folders_ahead_for_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cards.ENV_VAR, raising=False)
    _copy_card("llama-68m", "lm", tmp_path, "my-68m", {})
    with cards.searched_first([tmp_path]):
        assert load_model("my-68m").slug == "my-68m"
    assert cards.ENV_VAR not in os.environ
    with pytest.raises(ValueError, match="cards: .*nope.*: no such folder"):
        with cards.searched_first([tmp_path / "nope"]):
            pass


def test_a_number_in_sources_is_reported_as_a_misplaced_key(tmp_path: Path) -> None:
    path = tmp_path / "a100-80gb.toml"
    path.write_text((ROOT / "models" / "hardware" / "a100-80gb.toml").read_text() + "extra = 3\n")
    with pytest.raises(ValueError, match=r"`extra` = 3 in \[sources\]: a number here is probably"):
        load_hardware(path)


def test_runtime_format_tables_are_validated_naming_the_field() -> None:
    from specsim.cards import RuntimeProfile

    kw: dict[str, object] = dict(
        slug="p",
        name="p",
        stack="s",
        compute_efficiency=0.5,
        memory_efficiency=0.5,
        layer_overhead_s=0.0,
        pass_overhead_s=0.0,
        sources={"s": "test"},
    )
    ok = RuntimeProfile(
        **kw,
        format_compute_factor={"int8": 4.0},  # type: ignore[arg-type]
        format_dequant_ops={"int8": 0.0, "int4": 320.0},
    )
    assert ok.dequant_ops("int4", 2.64) == 320.0 and ok.dequant_ops("q4_0", 2.64) == 2.64
    assert RuntimeProfile(**kw).dequant_ops("int4", 2.64) == 2.64  # type: ignore[arg-type]
    for field, table, match in (
        ("format_compute_factor", {"int8": 0.0}, "format_compute_factor.int8"),
        ("format_compute_factor", {"int8": float("inf")}, "format_compute_factor.int8"),
        ("format_dequant_ops", {"int4": -1.0}, "format_dequant_ops.int4"),
    ):
        with pytest.raises(ValueError, match=match):
            RuntimeProfile(**kw, **{field: table})  # type: ignore[arg-type]
    for field in ("format_compute_factor", "format_dequant_ops"):
        with pytest.raises(TypeError, match=field):
            RuntimeProfile(**kw, **{field: {}})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=field):
            RuntimeProfile(**kw, **{field: {"int8": "fast"}})  # type: ignore[arg-type]
