"""The notebooks in docs/notebooks run from a clean kernel, save their figures, and print answers
that the package's own functions reproduce.

Each notebook is executed with nbclient on a kernel that runs this interpreter (a kernel spec
written into a temporary JUPYTER_PATH, so no user kernel spec is picked up), with its figures
sent to a temporary folder (SPECSIM_NOTEBOOK_OUT). The committed notebooks carry no outputs; the
tutorial's is made from docs/tutorial.md and must not be stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specsim import sampling, theory
from specsim.cards import load_hardware, load_model
from specsim.cost import step_cost_grid
from specsim.report import notebook as maker

nbformat = pytest.importorskip("nbformat", reason="needs the test extra (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra (nbclient)")
pytest.importorskip("ipykernel", reason="needs the test extra (ipykernel)")

FOLDER = Path(__file__).resolve().parent.parent / "docs" / "notebooks"
NOTEBOOKS = ("tutorial", "lab-exact-sampler", "lab-closed-forms", "lab-capacity")
FIGURES = {
    "tutorial": "tutorial-capacity.png",
    "lab-exact-sampler": "lab-exact-sampler.png",
    "lab-closed-forms": "lab-closed-forms.png",
    "lab-capacity": "lab-capacity.png",
}
_PROBE = "import sys\nprint(sys.executable)"
# Run after the notebook: the saved figure `fig`, described for the checks every figure meets.
_FIGURE_PROBE = """
import json as _json
def _style(h):
    get = lambda name: str(getattr(h, name)()) if hasattr(h, name) else ""
    return [get("get_marker"), get("get_linestyle"), get("get_hatch")]
_suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
print(_json.dumps([
    {"title": ax.get_title() or _suptitle, "x": ax.get_xlabel(), "y": ax.get_ylabel(),
     "legend": [_style(h) for h in (ax.get_legend().legend_handles if ax.get_legend() else [])]}
    for ax in fig.axes
]))
"""


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JUPYTER_PATH whose python3 kernel is this interpreter."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Python 3 (specsim tests)", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel), encoding="utf-8")
    return root


def _execute(name: str, out: Path, kernel_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    nb = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_PROBE))
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    monkeypatch.setenv("SPECSIM_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(out)}}
    )
    nb.cells.append(nbformat.v4.new_code_cell(_FIGURE_PROBE))
    client.execute()
    assert _stdout(nb.cells[0]).strip() == sys.executable
    _check_figure(json.loads(_stdout(nb.cells.pop())))
    return nb


def _check_figure(axes: list[dict[str, Any]]) -> None:
    """What tests/report/test_figures.py asks of every figure: a title and both axis labels on
    each axes, and legend entries that differ in style, not in colour alone (grey-scale print)."""
    assert axes
    for ax in axes:
        assert ax["title"] and ax["x"] and ax["y"], ax
        styles = [tuple(entry) for entry in ax["legend"]]
        assert len(set(styles)) == len(styles), f"legend entries alike but for colour: {ax}"


def _stdout(cell: Any) -> str:
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream"
    )


def _result(nb: Any) -> str:
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# result")]
    assert len(cells) == 1, "a notebook has one '# result' cell"
    return _stdout(cells[0])


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_without_outputs(name: str) -> None:
    nb = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_tutorial_notebook_is_made_from_the_page() -> None:
    assert maker.main(["--check"]) == 0


def _check_tutorial(text: str) -> None:
    a100, target, draft = (
        load_hardware("a100-80gb"),
        load_model("llama-2-7b"),
        load_model("llama-68m"),
    )
    batches = np.array([1, 2, 4, 8, 16, 32, 64])

    def time_s(model: Any, new: int) -> np.ndarray:
        return step_cost_grid(model, a100, batch=batches, context=1024, new_tokens=new).time_s

    plain = 1 / time_s(target, 1)
    spec = theory.expected_tokens(0.7, 4) / (4 * time_s(draft, 1) + time_s(target, 5))
    want = [int(batches[plain >= 50].max()), int(batches[spec >= 50].max())]
    assert [int(x) for x in text.split()] == want


def _check_sampler(r: dict[str, Any]) -> None:
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.3, 0.2, 0.5])
    assert r["alpha"] == pytest.approx(sampling.acceptance_rate(p, q), abs=1e-12)
    want = theory.expected_tokens(r["alpha"], r["gamma"])
    assert r["mean_block_length"] == pytest.approx(want, abs=1e-12)
    assert r["bigram_max_gap"] < 1e-12  # exactness, by enumeration


def _check_closed_forms(r: dict[str, Any]) -> None:
    a, g, c = np.array(r["alphas"]), r["gamma"], r["c"]
    for key, se, want in (
        ("tokens_per_pass", "tokens_per_pass_se", theory.expected_tokens(a, g)),
        ("speedup", "speedup_se", theory.walltime_speedup(a, g, c)),
    ):
        z = (np.array(r[key]) - want) / np.array(r[se])
        assert np.all(np.abs(z) < 4.5), (key, z)  # each run's batch-means standard error
    mean, se = r["bursty"]
    from specsim.acceptance.processes import MarkovAcceptance

    exact = MarkovAcceptance.two_state(mean=0.7, spread=0.25, persistence=0.9).mean_tokens(g)
    assert abs(mean - exact) < 4.5 * se


def _check_capacity(r: dict[str, Any]) -> None:
    batches = np.array(r["batches"])
    target, draft = load_model("llama-2-7b"), load_model("llama-68m")

    def users(slug: str, gamma: int) -> int:
        hw = load_hardware(slug)
        t = step_cost_grid(target, hw, batch=batches, context=r["context"], new_tokens=gamma + 1)
        if gamma:
            d = step_cost_grid(draft, hw, batch=batches, context=r["context"], new_tokens=1)
            speed = theory.expected_tokens(0.7, gamma) / (gamma * d.time_s + t.time_s)
        else:
            speed = 1 / t.time_s
        ok = batches[speed >= r["promise"]]
        return int(ok.max()) if ok.size else 0

    assert r["a100_plain_users"] == users("a100-80gb", 0)
    assert r["a100_spec_users"] == users("a100-80gb", 4)
    assert r["h100_plain_users"] == users("h100-sxm", 0)
    assert r["h100_spec_users"] == users("h100-sxm", 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_saves_its_figure_and_its_answer_checks(
    name: str, tmp_path: Path, kernel_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = _execute(name, tmp_path, kernel_path, monkeypatch)
    figure = tmp_path / FIGURES[name]
    assert figure.is_file() and figure.stat().st_size > 5000
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors
    text = _result(nb) if name != "tutorial" else _stdout(nb.cells[-1])
    if name == "tutorial":
        _check_tutorial(text)
    else:
        check = {
            "lab-exact-sampler": _check_sampler,
            "lab-closed-forms": _check_closed_forms,
            "lab-capacity": _check_capacity,
        }
        check[name](json.loads(text))
