"""The report opens with answers: the three deployments run, a user's config comes first,
and (in headless Chromium, when installed) the first screen of the page shows a verdict."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from browser import CHROMIUM, dump_dom

from specsim.plan.answer import PlanAnswer
from specsim.plan.cases import (
    Case,
    opening_html,
    plan_figure,
    report_answers,
    report_cases,
    user_case,
)
from specsim.report.demo import two_token_demo
from specsim.report.page import _render_png, render_html

VERDICT = re.compile(r"^(Turn on |Keep speculation off|NOT STABLE|No option meets)")


@pytest.fixture(scope="module")
def answers() -> list[tuple[Case, PlanAnswer]]:
    return report_answers()


@pytest.mark.slow
def test_the_three_report_deployments_run(answers: list[tuple[Case, PlanAnswer]]) -> None:
    assert len(answers) == 3
    deps = [c.request.deployment for c, _ in answers]
    assert deps[0].tensor_parallel == 1 and deps[0].target.params < 10e9  # small, one GPU
    assert deps[1].tensor_parallel > 1 and deps[1].target.params > 60e9  # 70B over TP
    assert deps[2].target.moe is not None  # a large MoE
    for case, a in answers:
        assert VERDICT.match(a.verdict.sentence), a.verdict.sentence
        assert case.command.startswith("specsim plan ")
        fig = plan_figure(a, title=case.title)
        assert len(fig.axes[0].patches) == len(a.rows)


def test_a_user_config_comes_first(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text(
        '[deployment]\ntarget = "llama-2-7b"\nhardware = "a100-80gb"\n'
        '[[options]]\nkind = "ngram"\n[load]\nbatch = 4\n',
        encoding="utf-8",
    )
    own = user_case(cfg)
    assert own.command == f"specsim plan --config {cfg}"
    cases = (own, report_cases()[1])
    page = opening_html(report_answers(cases), png=_render_png)
    assert page.index("Your deployment (mine.toml)") < page.index(cases[1].title)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)")
def test_the_first_screen_shows_a_verdict(
    answers: list[tuple[Case, PlanAnswer]], tmp_path: Path
) -> None:
    demo = two_token_demo(np.random.default_rng(0), blocks=2_000)
    page = render_html(
        [],
        demo=demo,
        validate={},
        validate_note="",
        seed=0,
        fast=True,
        seconds=0.0,
        opening=opening_html(answers, png=_render_png),
    )
    probe = (
        "<script>window.addEventListener('load', () => {"
        "const v = document.querySelector('p.verdict');"
        "const r = v.getBoundingClientRect();"
        "document.body.setAttribute('data-bottom', Math.ceil(r.bottom));"
        "document.body.setAttribute('data-height', window.innerHeight);"
        "document.body.setAttribute('data-verdict', v.querySelector('strong').innerText);"
        "});</script>"
    )
    probed = tmp_path / "page.html"
    probed.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    out = dump_dom(probed, tmp_path)
    bottom = re.search(r'data-bottom="(\d+)"', out)
    height = re.search(r'data-height="(\d+)"', out)
    verdict = re.search(r'data-verdict="([^"]*)"', out)
    assert bottom and height and verdict, out[:2000]
    assert int(bottom.group(1)) <= int(height.group(1)), "the verdict is below the first screen"
    assert VERDICT.match(verdict.group(1)), verdict.group(1)
