"""aiconfigurator's operation tables as a calibration source (specsim.calibrate.aic_tables,
aic_fit, aiconfigurator): the committed extract, the refit of the committed device parts, the
stacks that use them, and bad input named."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.aic_fit import fit_allreduce, fit_gemm
from specsim.calibrate.aic_tables import (
    ALLREDUCE_ELEMENTS,
    GEMM_ROWS,
    GEMM_SHAPES,
    extract_folder,
    load_extract,
    systems_root,
    table_path,
)
from specsim.calibrate.aiconfigurator import PAIRS, fit_part, holdout_table, part_values
from specsim.calibrate.kernels import SWEEP_COLUMNS
from specsim.cards import compose, load_hardware, load_stack
from specsim.cards.stack_files import device_part_for, list_device_parts
from specsim.cli import main
from specsim.cost import step_cost

README = extract_folder() / "README.md"


@pytest.fixture(scope="module")
def fits():
    return [fit_part(s, b) for s, b in PAIRS]


def test_the_extract_is_small_with_a_source_on_every_row():
    files = sorted(extract_folder().glob("*.csv"))
    ops = sorted(extract_folder().glob("*-gemm.csv")) + sorted(
        extract_folder().glob("*-allreduce.csv")
    )
    assert len(ops) == 2 * len(PAIRS)
    assert sum(f.stat().st_size for f in ops) < 1_000_000
    assert sum(f.stat().st_size for f in files) < 2_000_000  # the MoE extract included
    text = README.read_text()
    for s, b in PAIRS:
        g, a = load_extract(s, b, "gemm"), load_extract(s, b, "allreduce")
        assert set(SWEEP_COLUMNS) <= set(g.columns)
        assert set(zip(g["K"], g["N"], strict=True)) <= set(GEMM_SHAPES)
        assert set(g["rows"]) <= set(GEMM_ROWS) and set(a["elements"]) <= set(ALLREDUCE_ELEMENTS)
        for df in (g, a):
            assert df["source"].notna().all() and df["line"].notna().all()
            assert (df["time_s"] > 0).all()
            assert f"`{s}-{b}-" in text and df["source"].iloc[0].split("data/")[1] in text
        assert (a["bytes"] == 2 * a["elements"]).all()


def test_the_refit_gives_the_committed_parts(fits):
    parts = {p.slug: p for p in list_device_parts()}
    for fit in fits:
        slug = f"{fit.hardware}-{fit.stack}"
        if not (fit.wins("gemm") or fit.wins("allreduce") or fit.moe_committed):
            assert slug not in parts
            continue
        part = parts[slug]
        assert part.cards == [fit.hardware] and part.stacks == [fit.stack]
        for name, value in part_values(fit).items():
            table, _, fmt = name.partition(".")
            shipped = getattr(part, table)[fmt] if fmt else getattr(part, table)
            assert shipped == pytest.approx(value, rel=1e-3), (slug, name)
        if not fit.wins("allreduce"):
            assert part.allreduce_latency_s is None


def test_fits_recover_the_tables_and_beat_the_previous_numbers_where_committed(fits):
    table = holdout_table(fits)
    assert len(table) == 2 * len(fits) + sum(len(f.moe) for f in fits)
    done = table.loc[table["committed"]]
    assert (done["fitted_median_abs_error"] < done["current_median_abs_error"]).all()
    for fit in fits:
        assert np.median(np.abs(fit.gemm.residuals["rel_error"])) < 0.1
        assert np.median(np.abs(fit.allreduce.residuals["rel_error"])) < 0.25
        se = fit.gemm.parameters.loc[~fit.gemm.parameters["fixed"], "std_error"]
        assert np.isfinite(se).all() and (se > 0).all()
        assert 0 < fit.allreduce.latency_s_se < fit.allreduce.latency_s


def test_the_stacks_use_their_parts_and_others_do_not():
    hw = load_hardware("h100-sxm")
    part = device_part_for(hw, "tensorrt-llm")
    assert part.slug == "h100-sxm-tensorrt-llm"
    assert device_part_for(hw).slug == "h100-sxm" == device_part_for(hw, "vllm-v1").slug
    rt = compose(load_stack("tensorrt-llm"), hw)
    assert rt.memory_efficiency == part.memory_efficiency
    assert compose(load_stack("vllm-v1"), hw).allreduce_latency_s is None
    # A TP-2 decode step's all-reduces: 2 per layer, each alpha + 2 (p - 1) / p * bytes / beta.
    cost = step_cost(
        "llama-3.1-8b",
        hw,
        batch=1,
        context=128,
        new_tokens=1,
        tensor_parallel=2,
        runtime="tensorrt-llm",
    )
    assert part.allreduce_latency_s is not None and part.allreduce_bandwidth is not None
    each = part.allreduce_latency_s + 4096 * 2 / part.allreduce_bandwidth
    assert cost.allreduce_time_s == pytest.approx(2 * 32 * each, rel=1e-9)


def _tree(tmp_path: Path, *files: str) -> Path:
    for f in files:
        p = tmp_path / "systems" / "data" / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    return tmp_path / "systems"


def test_a_system_backend_or_operation_not_shipped_is_named(tmp_path):
    root = _tree(
        tmp_path,
        "h100_sxm/gemm/sglang/0.5.14/gemm_perf.parquet",
        "h100_sxm/comm/trtllm/1.3.0/nccl_perf.parquet",
        "b60/gemm/trtllm/1/gemm_perf.parquet",
    )
    assert systems_root(tmp_path) == root
    with pytest.raises(ValueError, match="system 'x100_sxm' is not shipped; systems"):
        table_path(root, "x100_sxm", "trtllm", "gemm")
    with pytest.raises(ValueError, match="system 'b60' has no specsim hardware card"):
        table_path(root, "b60", "trtllm", "gemm")
    with pytest.raises(ValueError, match="backend 'vllm' is not fitted"):
        table_path(root, "h100_sxm", "vllm", "gemm")
    with pytest.raises(ValueError, match="ships no gemm tables for backend 'trtllm'"):
        table_path(root, "h100_sxm", "trtllm", "gemm")
    with pytest.raises(ValueError, match="has no table of operation 'allreduce'"):
        table_path(root, "h100_sxm", "trtllm", "allreduce")
    with pytest.raises(ValueError, match="operation 'attention' is not read"):
        table_path(root, "h100_sxm", "trtllm", "attention")
    with pytest.raises(ValueError, match="has no data/ folder"):
        systems_root(tmp_path / "nothing")
    with pytest.raises(ValueError, match=re.escape("no extract")):
        load_extract("h100_sxm", "trtllm", "gemm", folder=tmp_path)


def test_a_fit_without_the_operation_or_degrees_of_freedom_is_named():
    g = load_extract("h100_sxm", "trtllm", "gemm")
    with pytest.raises(ValueError, match="no bfloat16 rows"):
        fit_gemm(g.loc[g["weights"] == "float8"], hardware="h100-sxm")
    with pytest.raises(ValueError, match=r"lack column\(s\) \['compute'\]"):
        fit_gemm(g.drop(columns="compute"), hardware="h100-sxm")
    few = g.loc[g["weights"] == "bfloat16"].head(3)
    with pytest.raises(ValueError, match="no degrees of freedom"):
        fit_gemm(few, hardware="h100-sxm")
    a = load_extract("h100_sxm", "trtllm", "allreduce")
    with pytest.raises(ValueError, match="no degrees of freedom"):
        fit_allreduce(a.head(2))
    with pytest.raises(ValueError, match="no rows"):
        fit_allreduce(pd.DataFrame(columns=a.columns))


def test_the_extract_of_a_system_or_backend_not_read_is_named():
    with pytest.raises(ValueError, match="system 'x100' is not read"):
        load_extract("x100", "trtllm", "gemm")
    with pytest.raises(ValueError, match="backend 'vllm' is not fitted"):
        load_extract("h100_sxm", "vllm", "gemm")
    with pytest.raises(ValueError, match="operation 'attention' is not extracted"):
        load_extract("h100_sxm", "trtllm", "attention")  # moe is: aic_moe's extract
    assert len(load_extract("h100_sxm", "trtllm", "moe")) > 0


def test_the_command_fits_one_system_and_backend(capsys):
    assert main(["calibrate", "--aiconfigurator", "h100_sxm", "--backend", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "h100_sxm sglang (h100-sxm, sglang): GEMM 192 rows" in out
    assert re.search(r"h100_sxm\s+sglang\s+h100-sxm\s+sglang\s+gemm\s+192 .*False", out)
    assert main(["calibrate", "--aiconfigurator", "h100_sxm"]) == 2
    assert "--aiconfigurator needs --backend" in capsys.readouterr().err
