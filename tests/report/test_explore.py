"""The explorer page: self-contained, its sliders start where asked, and its JavaScript formulas
equal specsim.theory's numeric twins on a grid (evaluated in headless Chromium)."""

from __future__ import annotations

import html
import itertools
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from specsim.cli import main
from specsim.report.explore import ExplorerStart, explorer_html, write_explorer
from specsim.theory import expected_tokens, ops_factor, optimal_gamma, walltime_speedup
from specsim.theory.token_trees import expected_tokens_tree

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).is_file()), None
)
ALPHAS = (0.0, 0.05, 0.3, 0.5, 0.8, 0.95, 0.999, 1.0)
GAMMAS = (1, 2, 3, 5, 8, 16)
CS = (0.0, 0.05, 0.4)
VS = (1.0, 1.35, 3.0)
TREES = ((1, 0, 0, 0), (2, 0, 0, 0), (3, 2, 0, 0), (2, 2, 1, 0), (4, 4, 3, 3), (1, 1, 1, 1))
BETAS = (0.0, 0.3, 1.0)


def test_page_is_self_contained_and_starts_where_asked() -> None:
    page = explorer_html(ExplorerStart(alpha=0.6, gamma=3, c=0.1, v=1.2, c_hat=0.2))
    assert 'id="alpha" type="range" min="0" max="1" step="0.01"\n  value="0.6"' in page
    assert 'value="3"' in page and 'value="1.2"' in page and 'value="0.2"' in page
    # No network: nothing loaded from anywhere (the SVG namespace is a name, not a fetch).
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", page)
    assert refs == [], refs
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")
    assert not re.search(r"__[A-Z0-9]+__", page)


@pytest.mark.parametrize(
    ("field", "value"),
    [("alpha", 1.5), ("gamma", 0), ("gamma", 2.5), ("c", -0.1), ("v", 0.5), ("beta", 2.0)],
)
def test_start_outside_a_slider_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"ExplorerStart.{field}"):
        ExplorerStart(**{field: value})  # type: ignore[arg-type]


def test_bad_tree_widths_are_refused() -> None:
    with pytest.raises(ValueError, match="depth 1"):
        ExplorerStart(widths=(0, 2, 1, 0))
    with pytest.raises(ValueError, match="4 widths"):
        ExplorerStart(widths=(1, 1))  # type: ignore[arg-type]


def test_cli_writes_the_page_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explore", "--out", str(tmp_path / "ex"), "--alpha", "0.7"]) == 0
    page = (tmp_path / "ex" / "explore.html").read_text(encoding="utf-8")
    assert 'value="0.7"' in page and "specsim explore --out" in page
    assert main(["explore", "--out", str(tmp_path / "ex")]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["explore", "--out", str(tmp_path / "ex"), "--gamma", "40"]) == 2
    assert "--gamma: expected 1 <= gamma <= 16" in capsys.readouterr().err


def _tree_parents(widths: tuple[int, ...]) -> list[int]:
    """The toy's tree, built independently of the page: breadth first, parents before children."""
    parents: list[int] = []
    frontier = [-1]
    for w in widths:
        if w == 0:
            break
        nxt = []
        for p in frontier:
            for _ in range(w):
                parents.append(p)
                nxt.append(len(parents) - 1)
        frontier = nxt
    return parents


_PROBE = """<script>
const S = window.specsimExplore, out = {chain: [], tree: []};
for (const [a, g, c, v] of GRID) {
  out.chain.push([S.expectedTokens(a, g), S.speedup(a, g, c, v), S.opsFactor(a, g, c),
                  S.bestGamma(a, c, v, 64)]);
}
for (const [w, a, b] of TREES) {
  out.tree.push([S.treeParents(w), S.treeExpected(S.treeParents(w), S.toyAccept(a, b, 4, 4))]);
}
const pre = document.createElement("pre");
pre.id = "probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
document.body.setAttribute("data-paths", document.querySelectorAll("path.series").length);
document.body.setAttribute("data-nodes", document.querySelectorAll("circle.node").length);
</script>"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)")
def test_javascript_formulas_equal_the_numeric_twins(tmp_path: Path) -> None:
    grid = list(itertools.product(ALPHAS, GAMMAS, CS, VS))
    trees = [(w, a, b) for w in TREES for a in (0.0, 0.6, 1.0) for b in BETAS]
    probe = _PROBE.replace("GRID", json.dumps(grid)).replace("TREES", json.dumps(trees))
    page = write_explorer(tmp_path, start=ExplorerStart(widths=(2, 2, 1, 0)))
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"))
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert m, done.stdout[-2000:]
    got = json.loads(html.unescape(m.group(1)))
    a, g, c, v = (np.array(x, dtype=float) for x in zip(*grid, strict=True))
    want = np.stack([expected_tokens(a, g), walltime_speedup(a, g, c, v), ops_factor(a, g, c)])
    chain = np.array(got["chain"]).T
    np.testing.assert_allclose(chain[:3], want, rtol=1e-12, atol=0)
    best = [optimal_gamma(x, y, 64, v=[1.0] + [z] * 64) for x, y, z in zip(a, c, v, strict=True)]
    assert chain[3].astype(int).tolist() == best
    for (w, alpha, beta), (parents, e_js) in zip(trees, got["tree"], strict=True):
        assert parents == _tree_parents(w)
        accept = [[alpha] + [beta] * 3] * 4
        assert e_js == pytest.approx(expected_tokens_tree(parents, accept), rel=1e-12, abs=0)
    # The page drew: four charts (each with its curve and a dashed reference) and the tree.
    assert re.search(r'data-paths="8"', done.stdout), done.stdout[-500:]
    assert re.search(r'data-nodes="10"', done.stdout)  # 2 + 2*2 + 4*1 nodes
