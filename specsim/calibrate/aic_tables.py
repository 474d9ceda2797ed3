"""The per-operation tables of NVIDIA's aiconfigurator, read and cut down to what decode uses.

aiconfigurator (Apache-2.0; the tables ship in the ``aiconfigurator-core`` wheel, under
``aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/*.parquet``) times
single operations inside a serving framework's own kernels: a weight GEMM by ``(m, n, k)``
and GEMM format, a custom all-reduce by message size and GPU count, and more (attention,
MLA, MoE, ...). :func:`extract` reads the installed package's tables (or a copy's
``systems`` folder), keeps a small subset: the GEMMs of a handful of 7-70B models' weight
shapes at the rows of decode and verification passes (:data:`GEMM_SHAPES`,
:data:`GEMM_ROWS`) in bf16, fp8 and weight-only int4/int8 where a table has them, and the
custom all-reduce at the message sizes of those passes on 2, 4 and 8 GPUs
(:data:`ALLREDUCE_ELEMENTS`), and writes them as CSV (``models/measured/aiconfigurator/``).
Only the TensorRT-LLM and SGLang tables are read: the vLLM ones are kept as an
independent check, never fitted (:data:`BACKENDS`). Reading parquet needs ``pyarrow``; the
committed CSVs do not (:func:`load_extract`).

The GEMM CSV has the columns of a kernel sweep (:data:`specsim.calibrate.kernels.SWEEP_COLUMNS`),
so :func:`specsim.calibrate.kernels.fit_kernel_sweep` fits it, plus ``compute`` (the dtype the
kernel multiplies in). Units: the tables' latencies are milliseconds per call (the
collectors time CUDA-graph replays with CUDA events); ``message_size`` counts elements of
``allreduce_dtype`` (the collector all-reduces a tensor of that many elements).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pandas as pd

from specsim.cards.files import packaged_root

__all__ = [
    "PACKAGE",
    "SYSTEMS",
    "BACKENDS",
    "GEMM_SHAPES",
    "GEMM_ROWS",
    "GEMM_FORMATS",
    "ALLREDUCE_ELEMENTS",
    "ALLREDUCE_KERNELS",
    "EXTRACTS",
    "check_pair",
    "systems_root",
    "version_key",
    "read_table",
    "package_source",
    "timing_columns",
    "table_path",
    "gemm_rows",
    "allreduce_rows",
    "extract",
    "extract_folder",
    "load_extract",
]

PACKAGE = "aiconfigurator_core"
"""The import name of the wheel that holds the tables (PyPI ``aiconfigurator-core``)."""

SYSTEMS: dict[str, str] = {
    "a100_sxm": "a100-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "l40s": "l40s",
}
"""aiconfigurator's system names that have a specsim hardware card, and that card (the
tables' ``device`` column: "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", ...)."""

BACKENDS: dict[str, str] = {"trtllm": "tensorrt-llm", "sglang": "sglang"}
"""The backends whose tables are fitted, and the specsim stack each is."""

GEMM_SHAPES: tuple[tuple[int, int], ...] = (
    (4096, 4096),  # Llama-3-8B o_proj
    (4096, 6144),  # Llama-3-8B qkv_proj (32 + 2 x 8 heads of 128)
    (4096, 12288),  # Llama-2-7B qkv_proj (MHA)
    (12288, 4096),  # a 7-8B down_proj's shape at the tables' nearest K (11008, 14336)
    (5120, 5120),  # Llama-2-13B o_proj
    (8192, 8192),  # Llama-3-70B o_proj
    (8192, 10240),  # Llama-3-70B qkv_proj (64 + 2 x 8 heads of 128)
    (16384, 8192),  # a 70B down_proj's shape at the tables' nearest K (28672)
)
"""``(K, N)`` of the weight GEMMs kept: a handful of 7-70B dense models' projections, each
on the tables' grid of ``n`` and ``k``."""

GEMM_ROWS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
"""The rows (``m``) kept: a decode or verification pass's new tokens over its batch."""

GEMM_FORMATS: dict[str, tuple[str, str]] = {
    "bfloat16": ("bfloat16", "bfloat16"),
    "fp8": ("float8", "float8"),
    "int8_wo": ("int8", "bfloat16"),
    "int4_wo": ("int4", "bfloat16"),
}
"""aiconfigurator ``gemm_dtype`` -> (specsim weight format, the dtype the kernel multiplies
in): ``fp8`` is an fp8 x fp8 GEMM (one scale per tensor), ``int*_wo`` weight-only GEMMs on
bf16 activations (TensorRT-LLM's WeightOnlyQuantMatmul: one scale per output channel). Not
kept: ``fp8_block`` (DeepGEMM's 128 x 128 block scales), ``nvfp4`` (no card has an FP4
peak), ``sq`` (SmoothQuant int8 x int8)."""

ALLREDUCE_ELEMENTS: tuple[int, ...] = tuple(2**i for i in range(7, 24))
"""Message sizes kept, in elements (128 to 8 Mi: one token of a 4096-wide model to 1024
tokens of an 8192-wide one)."""

ALLREDUCE_KERNELS: dict[str, str] = {"trtllm": "TRTLLM", "sglang": "SGLang_CustomAllReduce_graph"}
"""The all-reduce kernel kept per backend: TensorRT-LLM's AllReduce (strategy AUTO), SGLang's
custom all-reduce replayed in a CUDA graph (as its decode runs; the eager rows are left)."""

_OPS = {
    "gemm": ("gemm", "gemm_perf.parquet"),
    "allreduce": ("comm", "custom_allreduce_perf.parquet"),
}


EXTRACTS = ("gemm", "allreduce", "moe")
"""The extracts committed per system and backend (``moe`` by :mod:`specsim.calibrate.aic_moe`;
a system and backend without an MoE table has none)."""


def check_pair(system: str, backend: str) -> None:
    """A ValueError naming ``system`` when it has no specsim card, or ``backend`` when its
    tables are not fitted (the vLLM ones are kept as an independent check)."""
    if system not in SYSTEMS:
        raise ValueError(f"aiconfigurator: system {system!r} is not read; known: {sorted(SYSTEMS)}")
    if backend not in BACKENDS:
        raise ValueError(
            f"aiconfigurator: backend {backend!r} is not fitted (only {sorted(BACKENDS)}; the "
            "vLLM tables are kept as an independent check)"
        )


def systems_root(path: str | os.PathLike[str] | None = None) -> Path:
    """The ``systems`` folder: ``path`` (a copy of the package's ``systems`` folder, or a
    folder holding it), else the installed ``aiconfigurator_core`` package's (found without
    importing it); a ValueError saying how to get one when neither is there."""
    if path is not None:
        root = Path(path)
        root = root / "systems" if (root / "systems" / "data").is_dir() else root
        if not (root / "data").is_dir():
            raise ValueError(f"aiconfigurator: {path} has no data/ folder of tables")
        return root
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"aiconfigurator: package {PACKAGE} is not installed (pip install "
            "'specsim[aiconfigurator]', or give --systems-path)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "systems"


def version_key(version: str) -> list[tuple[int, str]]:
    """A framework version's sort key (numbers compared as numbers)."""
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.findall(r"\d+|[a-z]+", version)]


def table_path(root: Path, system: str, backend: str, op: str) -> Path:
    """The newest version's table of ``op`` (``"gemm"`` or ``"allreduce"``) for ``system`` and
    ``backend``; a ValueError naming what is not shipped (the system, the backend, or the
    operation for that system and backend) and what is."""
    data = root / "data"
    shipped = sorted(p.name for p in data.iterdir() if p.is_dir())
    if system not in shipped:
        raise ValueError(f"aiconfigurator: system {system!r} is not shipped; systems: {shipped}")
    if system not in SYSTEMS:
        raise ValueError(
            f"aiconfigurator: system {system!r} has no specsim hardware card; known: "
            f"{sorted(SYSTEMS)}"
        )
    if backend not in BACKENDS:
        raise ValueError(
            f"aiconfigurator: backend {backend!r} is not fitted (only {sorted(BACKENDS)}; the "
            "vLLM tables are kept as an independent check)"
        )
    if op not in _OPS:
        raise ValueError(f"aiconfigurator: operation {op!r} is not read; known: {sorted(_OPS)}")
    folder, name = _OPS[op]
    backends = sorted(p.name for p in (data / system / folder).glob("*") if p.is_dir())
    if backend not in backends:
        raise ValueError(
            f"aiconfigurator: system {system!r} ships no {folder} tables for backend "
            f"{backend!r}; backends: {backends}"
        )
    found = sorted(
        (data / system / folder / backend).glob(f"*/{name}"),
        key=lambda p: version_key(p.parent.name),
    )
    if not found:
        raise ValueError(
            f"aiconfigurator: system {system!r} backend {backend!r} has no table of operation "
            f"{op!r} ({folder}/{backend}/*/{name})"
        )
    return found[-1]


def read_table(path: Path) -> pd.DataFrame:
    """One parquet table of the package, its rows renumbered from 0 (needs pyarrow)."""
    try:
        import pyarrow  # noqa: F401  (only to say what is missing)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ValueError(
            f"aiconfigurator: reading {path} needs pyarrow (pip install pyarrow)"
        ) from e
    return pd.read_parquet(path).reset_index(drop=True)


def package_source(root: Path, path: Path) -> str:
    """``path`` as the package names it (``aiconfigurator_core/systems/...``)."""
    return f"{PACKAGE}/systems/{path.relative_to(root).as_posix()}"


def timing_columns(
    rows: pd.DataFrame, *, root: Path, path: Path, backend: str
) -> dict[str, object]:
    """The columns every extract ends with: ``time_s`` (``latency`` / 1000: the tables'
    milliseconds per call), ``backend``, ``version``, ``source`` (the parquet file in the
    package) and ``line`` (the row's index in it)."""
    return {
        "time_s": rows["latency"].astype(float) / 1e3,
        "backend": backend,
        "version": rows["version"].astype(str),
        "source": package_source(root, path),
        "line": rows.index.astype(str),
    }


def gemm_rows(root: Path, system: str, backend: str) -> pd.DataFrame:
    """The kept GEMM rows of ``system`` and ``backend`` as a kernel sweep (module docstring):
    ``time_s`` = ``latency`` / 1000, ``line`` the row's index in the parquet table."""
    path = table_path(root, system, backend, "gemm")
    df = read_table(path)
    keep = df["gemm_dtype"].isin(list(GEMM_FORMATS)) & df["m"].isin(list(GEMM_ROWS))
    keep &= pd.Series(list(zip(df["k"], df["n"], strict=True))).isin(list(GEMM_SHAPES))
    rows = df.loc[keep]
    if rows.empty:
        raise ValueError(f"aiconfigurator: {path} has no rows of the kept GEMM shapes and rows")
    fmt = rows["gemm_dtype"].map(lambda g: GEMM_FORMATS[g][0])
    out = pd.DataFrame(
        {
            "sweep": f"aic-{system}-{backend}",
            "hardware": SYSTEMS[system],
            "kernel": rows["kernel_source"].str.slice(0, 40),
            "weights": fmt,
            "compute": rows["gemm_dtype"].map(lambda g: GEMM_FORMATS[g][1]),
            "group_size": pd.array(
                [int(k) if f == "int4" else None for f, k in zip(fmt, rows["k"], strict=True)],
                dtype="Int64",
            ),
            "K": rows["k"].astype(int),
            "N": rows["n"].astype(int),
            "rows": rows["m"].astype(int),
            **timing_columns(rows, root=root, path=path, backend=backend),
        }
    )
    return out.sort_values(["weights", "K", "N", "rows"]).reset_index(drop=True)


def allreduce_rows(root: Path, system: str, backend: str) -> pd.DataFrame:
    """The kept all-reduce rows of ``system`` and ``backend``: ``devices``, ``elements``,
    ``bytes`` (elements x 2, bf16), ``time_s`` (``latency`` / 1000), source and row."""
    path = table_path(root, system, backend, "allreduce")
    df = read_table(path)
    keep = (df["kernel_source"] == ALLREDUCE_KERNELS[backend]) & df["message_size"].isin(
        list(ALLREDUCE_ELEMENTS)
    )
    rows = df.loc[keep & (df["allreduce_dtype"] == "bfloat16")]
    if rows.empty:
        raise ValueError(
            f"aiconfigurator: {path} has no bf16 {ALLREDUCE_KERNELS[backend]} all-reduce rows"
        )
    out = pd.DataFrame(
        {
            "sweep": f"aic-{system}-{backend}",
            "hardware": SYSTEMS[system],
            "kernel": rows["kernel_source"],
            "devices": rows["num_gpus"].astype(int),
            "elements": rows["message_size"].astype(int),
            "bytes": rows["message_size"].astype(int) * 2,
            **timing_columns(rows, root=root, path=path, backend=backend),
        }
    )
    return out.sort_values(["devices", "elements"]).reset_index(drop=True)


def extract_folder() -> Path:
    """``models/measured/aiconfigurator/``, where the committed extract lies."""
    root = packaged_root()
    if root is None:  # pragma: no cover - an installation without its cards
        raise ValueError("aiconfigurator: the packaged measurements (models/) are not found")
    return root / "measured" / "aiconfigurator"


def extract(
    system: str,
    backend: str,
    *,
    systems_path: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> dict[str, Path]:
    """Write the kept rows of ``system`` and ``backend`` as ``<system>-<backend>-gemm.csv``
    and ``-allreduce.csv`` under ``out`` (default :func:`extract_folder`); the paths by op."""
    root = systems_root(systems_path)
    folder = Path(out) if out is not None else extract_folder()
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for op, rows in (
        ("gemm", gemm_rows(root, system, backend)),
        ("allreduce", allreduce_rows(root, system, backend)),
    ):
        path = folder / f"{system}-{backend}-{op}.csv"
        rows.to_csv(path, index=False, float_format="%.6g")
        written[op] = path
    return written


def load_extract(
    system: str, backend: str, op: str, *, folder: str | os.PathLike[str] | None = None
) -> pd.DataFrame:
    """The committed extract of ``op`` (one of :data:`EXTRACTS`) for ``system`` and
    ``backend`` (CSV: no pyarrow); a ValueError naming the file when it is not there."""
    if op not in EXTRACTS:
        raise ValueError(
            f"aiconfigurator: operation {op!r} is not extracted; known: {sorted(EXTRACTS)}"
        )
    check_pair(system, backend)
    path = Path(folder or extract_folder()) / f"{system}-{backend}-{op}.csv"
    if not path.is_file():
        raise ValueError(
            f"aiconfigurator: no extract {path} (system {system!r}, backend {backend!r}, "
            f"operation {op!r}): run python -m specsim.calibrate.aiconfigurator --extract"
        )
    return pd.read_csv(path, dtype={"group_size": "Int64", "line": str, "source": str})
