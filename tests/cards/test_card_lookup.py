"""Where cards come from (issue 33 item 5, issue 35 item 6): one rule for every kind of card,
in ``--cards`` folders, in ``SPECSIM_CARDS`` and shipped, for every command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specsim.cards import list_stacks, load_hardware, load_head, load_model
from specsim.cards.files import card_kind, card_paths, find_card, read_toml, searched_first
from specsim.cards.stack_files import compose, is_stack, load_stack
from specsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def _copy(src: Path, dest: Path, old: str, new: str, *, drop: str | None = None) -> Path:
    text = src.read_text(encoding="utf-8").replace(f'slug = "{old}"', f'slug = "{new}"')
    if drop is not None:
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(f"{drop} ="))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")
    return dest


def _head(folder: Path, slug: str = "my-head", sub: str = "") -> Path:
    src = MODELS / "heads" / "eagle3-llama-3.1-8b.toml"
    return _copy(src, folder / sub / f"{slug}.toml", "eagle3-llama-3.1-8b", slug)


def _stack(folder: Path, slug: str = "my-stack", *, drop: str | None = None) -> Path:
    return _copy(
        MODELS / "stacks" / "vllm-v1.toml", folder / f"{slug}.toml", "vllm-v1", slug, drop=drop
    )


# The kind of a file ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("folder", "kind"),
    [
        ("lm", "lm"),
        ("hardware", "hardware"),
        ("runtime", "runtime"),
        ("heads", "heads"),
        ("proposers", "proposers"),
        ("stacks", "stacks"),
    ],
)
def test_every_shipped_card_has_the_kind_of_its_folder(folder: str, kind: str) -> None:
    for path in sorted((MODELS / folder).glob("*.toml")):
        assert card_kind(read_toml(path)) == kind, path


def test_a_stack_without_verify_is_still_a_stack(tmp_path: Path) -> None:
    path = _stack(tmp_path, "no-verify", drop="verify")
    assert card_kind(read_toml(path)) == "stacks"
    assert is_stack(str(path))
    with pytest.raises(
        ValueError, match=r"no-verify.toml: missing field\(s\) \['verify'\] of a stack profile"
    ):
        load_stack(str(path))


# Found in a user's folder, directly or in the kind's subfolder --------------------------------
@pytest.mark.parametrize("sub", ["", "heads"])
def test_a_head_card_in_a_cards_folder_is_found(tmp_path: Path, sub: str) -> None:
    _head(tmp_path, sub=sub)
    assert load_head("my-head", search_path=[tmp_path]).slug == "my-head"
    with searched_first([tmp_path]):
        assert load_head("my-head").slug == "my-head"
    assert "my-head" in {p.stem for p in card_paths("heads", [tmp_path])}
    assert "my-head" not in {p.stem for p in card_paths("lm", [tmp_path])}


def test_a_stack_in_a_cards_folder_is_found_as_a_stack(tmp_path: Path) -> None:
    _stack(tmp_path)
    (tmp_path / "stacks").mkdir()
    _stack(tmp_path / "stacks", "other-stack")
    assert is_stack("my-stack", search_path=[tmp_path])
    assert {"my-stack", "other-stack"} <= {s.slug for s in list_stacks(search_path=[tmp_path])}
    stack = load_stack("other-stack", search_path=[tmp_path])
    assert compose(stack, load_hardware("a40")).stack_profile == stack
    assert not is_stack("my-stack")  # outside the folder the name means nothing


def test_a_user_card_stands_in_for_a_shipped_one_but_two_user_cards_are_an_error(
    tmp_path: Path,
) -> None:
    mine = _head(tmp_path, "eagle3-llama-3.1-8b")
    assert find_card("heads", "eagle3-llama-3.1-8b", [tmp_path]) == mine
    _head(tmp_path, "eagle3-llama-3.1-8b", sub="heads")
    with pytest.raises(ValueError, match=r"the head card 'eagle3-llama-3.1-8b' is found twice"):
        load_head("eagle3-llama-3.1-8b", search_path=[tmp_path])


def test_a_file_named_for_another_card_is_refused(tmp_path: Path) -> None:
    path = _head(tmp_path, "my-head")
    path.rename(tmp_path / "wrong-name.toml")
    with pytest.raises(
        ValueError, match=r"holds the head card 'my-head'.*name the file my-head.toml"
    ):
        load_head("my-head", search_path=[tmp_path])


def test_a_runtime_profile_named_like_a_shipped_stack_is_refused_wherever_it_lies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 6: through --cards it was silently replaced by the shipped stack, through
    SPECSIM_CARDS refused; now both refuse it, naming both files."""
    _copy(MODELS / "runtime" / "gpt-fast.toml", tmp_path / "vllm-v1.toml", "gpt-fast", "vllm-v1")
    with pytest.raises(
        ValueError, match=r"'vllm-v1' names both the runtime profile .*vllm-v1.toml and the stack"
    ):
        is_stack("vllm-v1", search_path=[tmp_path])
    monkeypatch.setenv("SPECSIM_CARDS", str(tmp_path))
    with pytest.raises(ValueError, match=r"names both the runtime profile"):
        is_stack("vllm-v1")


def test_a_folder_in_both_cards_and_the_variable_is_searched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _head(tmp_path)
    monkeypatch.setenv("SPECSIM_CARDS", os.fspath(tmp_path))
    assert load_head("my-head", search_path=[tmp_path]).slug == "my-head"  # not "found twice"


# Vendors --------------------------------------------------------------------------------------
def test_every_stack_names_its_vendors_with_a_source() -> None:
    for stack in list_stacks():
        assert stack.vendors, stack.slug
        assert isinstance(stack.sources, dict) and "vendors" in stack.sources, stack.slug


@pytest.mark.parametrize("slug", ["llama.cpp", "gpt-fast-stack", "hf-transformers", "tensorrt-llm"])
def test_stacks_without_a_gaudi_backend_are_not_priced_on_gaudi(slug: str) -> None:
    with pytest.raises(ValueError, match=r"hardware 'gaudi-3' is intel"):
        compose(load_stack(slug), load_hardware("gaudi-3"))


@pytest.mark.parametrize("slug", ["vllm-v1", "vllm-v0", "sglang"])
def test_stacks_with_a_gaudi_backend_are(slug: str) -> None:
    assert compose(load_stack(slug), load_hardware("gaudi-3")).stack_profile is not None


def test_a_stack_without_vendors_is_refused(tmp_path: Path) -> None:
    path = _stack(tmp_path, "anywhere", drop="vendors")
    with pytest.raises(ValueError, match=r"missing field 'vendors'"):
        load_stack(str(path))


# Every command, every kind ------------------------------------------------------------------
def test_plan_finds_head_and_proposer_cards_in_cards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _head(tmp_path)
    _copy(
        MODELS / "proposers" / "pard-llama-3.2-1b-llama-3.1-8b.toml",
        tmp_path / "proposers" / "my-pard.toml",
        "pard-llama-3.2-1b-llama-3.1-8b",
        "my-pard",
    )
    base = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "4"]
    assert (
        main([*base, "--heads", "my-head", "--parallel", "my-pard", "--cards", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "heads my-head" in out and "parallel my-pard" in out
    assert main([*base, "--heads", "my-head"]) == 2  # not found without the folder
    assert "no head card 'my-head'" in capsys.readouterr().err


def test_cost_finds_a_stack_in_cards_and_refuses_a_shadowing_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stack(tmp_path)
    base = ["cost", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    assert main([*base, "--runtime", "my-stack", "--cards", str(tmp_path)]) == 0
    assert "runtime       my-stack" in capsys.readouterr().out
    _copy(MODELS / "runtime" / "gpt-fast.toml", tmp_path / "sglang.toml", "gpt-fast", "sglang")
    assert main([*base, "--runtime", "sglang", "--cards", str(tmp_path)]) == 2
    assert "names both the runtime profile" in capsys.readouterr().err


def test_cards_lists_every_kind_with_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _head(tmp_path)
    _stack(tmp_path)
    assert main(["cards", "--json", "--cards", str(tmp_path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {"models", "hardware", "runtimes", "stacks", "heads", "proposers"}
    heads = {h["slug"]: h for h in got["heads"]}
    assert heads["my-head"]["source"] == str(tmp_path / "my-head.toml")
    assert "accept" in heads["my-head"]["sources"]
    assert {"my-stack", "vllm-v1"} <= {s["slug"] for s in got["stacks"]}
    shipped = {s["slug"]: s for s in got["stacks"]}["vllm-v1"]
    assert shipped["source"] == "models/stacks/vllm-v1.toml" and shipped["vendors"]
    assert {p["slug"] for p in got["proposers"]} >= {"dflash-qwen3-8b-b16", "peagle-gpt-oss-120b"}
    assert {m["slug"]: m for m in got["models"]}["gemma-3-27b"]["attention"] == "sliding-window"
    assert main(["cards", "--sources"]) == 0
    text = capsys.readouterr().out
    for title in ("stack profiles", "head cards", "proposer cards"):
        assert title in text
    assert "      file: models/heads/eagle3-qwen3-8b.toml" in text


def test_a_model_card_in_cards_is_found_by_the_plan_too(tmp_path: Path) -> None:
    src = MODELS / "lm" / "llama-68m.toml"
    _copy(src, tmp_path / "lm" / "my-68m.toml", "llama-68m", "my-68m")
    with searched_first([tmp_path]):
        assert load_model("my-68m").layers == load_model("llama-68m").layers
