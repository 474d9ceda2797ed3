"""Bad inputs about cards (issue 35 item 6, issue 33 item 5): each one clear line naming the
card file, the field or the flag, exit status 2, no traceback.

Each case writes its files into a fresh folder (``DIR`` in its arguments is that folder) and
runs ``specsim.cli.main`` in-process, optionally with ``SPECSIM_CARDS`` pointing there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"


def _card(rel: str, old: str, new: str, *, drop: str = "", add: str = "") -> str:
    text = (MODELS / rel).read_text(encoding="utf-8").replace(f'slug = "{old}"', f'slug = "{new}"')
    lines = [ln for ln in text.splitlines() if not (drop and ln.startswith(f"{drop} ="))]
    if add:  # above the [sources] table, where card fields belong
        at = lines.index("[sources]")
        lines[at:at] = [add, ""]
    return "\n".join(lines) + "\n"


STACK = "stacks/vllm-v1.toml"
GPT_FAST = "runtime/gpt-fast.toml"
HEAD = "heads/eagle3-llama-3.1-8b.toml"
QWEN = "lm/qwen3-8b.toml"
COST = ["cost", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
PLAN = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "2"]


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    files: dict[str, Callable[[], str]] = field(default_factory=dict)
    fragment: str = ""
    env: bool = False  # SPECSIM_CARDS=DIR instead of (or beside) --cards


CASES = (
    Case(
        "stack-without-verify-by-path",
        (*COST, "--runtime", "DIR/mine.toml"),
        {"mine.toml": lambda: _card(STACK, "vllm-v1", "mine", drop="verify")},
        "mine.toml: missing field(s) ['verify'] of a stack profile",
    ),
    Case(
        "stack-without-verify-by-slug",
        (*COST, "--runtime", "mine", "--cards", "DIR"),
        {"mine.toml": lambda: _card(STACK, "vllm-v1", "mine", drop="verify")},
        "missing field(s) ['verify'] of a stack profile",
    ),
    Case(
        "stack-without-vendors",
        (*COST, "--runtime", "mine", "--cards", "DIR"),
        {"stacks/mine.toml": lambda: _card(STACK, "vllm-v1", "mine", drop="vendors")},
        "missing field 'vendors'",
    ),
    Case(
        "profile-named-like-a-stack-in-cards",
        (*COST, "--runtime", "vllm-v1", "--cards", "DIR"),
        {"runtime/vllm-v1.toml": lambda: _card(GPT_FAST, "gpt-fast", "vllm-v1")},
        "'vllm-v1' names both the runtime profile",
    ),
    Case(
        "profile-named-like-a-stack-in-the-variable",
        (*COST, "--runtime", "vllm-v1"),
        {"vllm-v1.toml": lambda: _card(GPT_FAST, "gpt-fast", "vllm-v1")},
        "'vllm-v1' names both the runtime profile",
        env=True,
    ),
    Case(
        "llama-cpp-on-gaudi",
        ("cost", "--model", "llama-3.1-8b", "--hardware", "gaudi-3", "--runtime", "llama.cpp"),
        {},
        "stack 'llama.cpp' runs on nvidia/amd devices only, and hardware 'gaudi-3' is intel",
    ),
    Case(
        "gpt-fast-stack-on-gaudi",
        ("cost", "--model", "llama-3.1-8b", "--hardware", "gaudi-3", "--runtime", "gpt-fast-stack"),
        {},
        "stack 'gpt-fast-stack' runs on nvidia/amd devices only",
    ),
    Case(
        "head-found-twice-in-cards",
        (*PLAN, "--heads", "my-head", "--cards", "DIR"),
        {
            "my-head.toml": lambda: _card(HEAD, "eagle3-llama-3.1-8b", "my-head"),
            "heads/my-head.toml": lambda: _card(HEAD, "eagle3-llama-3.1-8b", "my-head"),
        },
        "the head card 'my-head' is found twice on the search path",
    ),
    Case(
        "unknown-head-lists-the-cards-folder",
        (*PLAN, "--heads", "nope", "--cards", "DIR"),
        {"my-head.toml": lambda: _card(HEAD, "eagle3-llama-3.1-8b", "my-head")},
        "no head card 'nope' (known: ",
    ),
    Case(
        "head-file-named-for-another-card",
        (*PLAN, "--heads", "my-head", "--cards", "DIR"),
        {"other.toml": lambda: _card(HEAD, "eagle3-llama-3.1-8b", "my-head")},
        "holds the head card 'my-head'",
    ),
    Case(
        "bad-attention-table",
        ("cost", "--model", "my-qwen", "--hardware", "h100-sxm", "--cards", "DIR"),
        {
            "lm/my-qwen.toml": lambda: _card(
                QWEN, "qwen3-8b", "my-qwen", add='[attention]\nkind = "local"'
            )
        },
        "my-qwen.toml: field 'attention.kind' must be one of",
    ),
    Case(
        "window-without-size",
        ("cost", "--model", "my-qwen", "--hardware", "h100-sxm", "--cards", "DIR"),
        {
            "lm/my-qwen.toml": lambda: _card(
                QWEN, "qwen3-8b", "my-qwen", add='[attention]\nkind = "chunked"'
            )
        },
        "missing key(s) ['window'] in [attention] (kind 'chunked')",
    ),
    Case(
        "sparse-attention-without-mla",
        ("cost", "--model", "my-qwen", "--hardware", "h100-sxm", "--cards", "DIR"),
        {
            "lm/my-qwen.toml": lambda: _card(
                QWEN,
                "qwen3-8b",
                "my-qwen",
                add='[attention]\nkind = "sparse"\ntop_k = 64\nindex_heads = 4\n'
                "index_head_dim = 32\nindex_bytes_per_token = 36",
            )
        },
        "needs an [mla] table with q_lora_rank > 0",
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_card_bad_input(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for rel, text in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text(), encoding="utf-8")
    if case.env:
        monkeypatch.setenv("SPECSIM_CARDS", str(tmp_path))
    argv = [a.replace("DIR", str(tmp_path)) for a in case.argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.match(rf"specsim {argv[0]}: error: ", lines[0]), err
    assert case.fragment in lines[0], lines[0]
