"""Model and accelerator cards: frozen dataclasses read from TOML files.

A *card* is data. A language-model card (:class:`ModelCard`) gives a model's
shape (layers, widths, heads, vocabulary), its stated parameter count and its
default dtype; an accelerator card (:class:`HardwareCard`) gives peak dense
FLOP/s per dtype, memory bandwidth and capacity, interconnect, power, and the
efficiency and overhead parameters of the cost model (:mod:`specsim.cost`).
Every number in a card file carries its source in a comment or in the card's
``sources`` table; ``models/README.md`` describes the schema and units.

Cards are found, in this order, in: a path given directly (``*.toml``);
folders passed as ``search_path``; folders listed in the environment variable
``SPECSIM_CARDS`` (separated by ``os.pathsep``); the cards shipped with the
package (``specsim/_models`` in a wheel, the top-level ``models/`` folder in a
checkout). Within a card folder, language models live in ``lm/``, accelerators
in ``hardware/`` and calibrated accelerators (written by the calibration
engine) in ``calibrated/``; a user folder may also hold cards directly. The
first card found for a slug wins.

This is the only module that reads TOML (Architecture: "a card is data ...
nothing else reads TOML").

>>> card = load_model("llama-2-7b")
>>> card.layers, card.kv_heads, round(card.shape_params / 1e9, 2)
(32, 32, 6.74)
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, cast

__all__ = [
    "DTYPE_BYTES",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "DEFAULT_LAYER_OVERHEAD_S",
    "DEFAULT_PASS_OVERHEAD_S",
    "ENV_VAR",
    "SearchPath",
    "ModelCard",
    "HardwareCard",
    "card_dirs",
    "load_model",
    "load_hardware",
    "read_toml",
    "write_hardware_card",
    "list_models",
    "list_hardware",
]

DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "float8": 1.0,
    "int8": 1.0,
}
"""Bytes per element of each dtype a card or a pass may name."""

# Defaults for accelerator cards that do not set these (documented in models/README.md).
# They are the values of the A100-80GB card (models/hardware/a100-80gb.toml, which says how
# each was chosen): compute efficiency from Narayanan et al. (SC'21, Megatron-LM: 502 PFLOP/s
# on 3072 A100s, 52% of peak); memory efficiency 1700/2039 from the gpt-fast README; layer
# overhead fitted to gpt-fast's Llama-2-7B decode rate; pass overhead tuned (see that card).
# Cards relying on them are *not* calibrated.
DEFAULT_COMPUTE_EFFICIENCY = 0.52
DEFAULT_MEMORY_EFFICIENCY = 0.834
DEFAULT_LAYER_OVERHEAD_S = 44.5e-6
DEFAULT_PASS_OVERHEAD_S = 3.0e-4

ENV_VAR = "SPECSIM_CARDS"
"""Environment variable naming extra card folders (``os.pathsep``-separated)."""

SearchPath = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

_ARCHITECTURES = ("decoder", "encoder-decoder")
_NORMS = ("rmsnorm", "layernorm")
_KINDS = ("gpu", "tpu", "cpu")


def _where(path: str | None, kind: str, slug: object) -> str:
    return path if path else f"{kind} card {slug!r}"


def _check_int(where: str, name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: field {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{where}: field {name!r} must be >= {minimum}, got {value}")


def _check_float(
    where: str, name: str, value: object, *, minimum: float = 0.0, strict: bool = False
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: field {name!r} must be a number, got {value!r}")
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"{where}: field {name!r} must be finite and {bound}, got {value}")


def _check_str(where: str, name: str, value: object, choices: Sequence[str] = ()) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    if choices and value not in choices:
        raise ValueError(f"{where}: field {name!r} must be one of {list(choices)}, got {value!r}")


def _check_bool(where: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: field {name!r} must be true or false, got {value!r}")


def _check_sources(where: str, value: object) -> None:
    items: Iterable[object]
    if isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise TypeError(f"{where}: field 'sources' must be a table or a list, got {value!r}")
    if not value or not all(isinstance(v, str) and v for v in items):
        raise ValueError(f"{where}: field 'sources' must hold at least one non-empty string")


@dataclass(frozen=True, kw_only=True)
class ModelCard:
    """A language model's shape, stated size and default dtype.

    ``layers`` counts decoder layers; ``encoder_layers`` is 0 for decoder-only
    models. ``params`` is the total parameter count as the source states it;
    ``__post_init__`` checks it against :attr:`shape_params` within
    ``params_tolerance`` (relative). Position tables (learned absolute
    positions, T5's relative-position buckets) and layer biases other than the
    q/k/v biases of ``qkv_bias`` models are not counted: they are below 0.5% of
    every card here.
    """

    slug: str
    name: str
    family: str
    architecture: str
    layers: int
    encoder_layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    gated_mlp: bool
    vocab: int
    params: int
    tied_embeddings: bool
    dtype: str
    max_position: int
    norm: str
    sources: dict[str, str] | list[str] = field(hash=False)
    qkv_bias: bool = False
    params_tolerance: float = 0.03
    hf_repo: str | None = None
    activation: str | None = None
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = _where(self.source_path, "model", self.slug)
        for name in ("slug", "name", "family"):
            _check_str(where, name, getattr(self, name))
        _check_str(where, "architecture", self.architecture, _ARCHITECTURES)
        _check_str(where, "norm", self.norm, _NORMS)
        _check_str(where, "dtype", self.dtype, tuple(DTYPE_BYTES))
        for name in ("layers", "d_model", "heads", "kv_heads", "head_dim", "d_ff", "vocab"):
            _check_int(where, name, getattr(self, name), minimum=1)
        for name in ("params", "max_position"):
            _check_int(where, name, getattr(self, name), minimum=1)
        _check_int(where, "encoder_layers", self.encoder_layers, minimum=0)
        for name in ("gated_mlp", "tied_embeddings", "qkv_bias"):
            _check_bool(where, name, getattr(self, name))
        _check_float(where, "params_tolerance", self.params_tolerance, strict=True)
        _check_sources(where, self.sources)
        if (self.architecture == "decoder") != (self.encoder_layers == 0):
            raise ValueError(
                f"{where}: field 'encoder_layers' must be 0 exactly for architecture "
                f"'decoder', got {self.encoder_layers} with {self.architecture!r}"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"{where}: field 'kv_heads' must divide heads ({self.heads}), got {self.kv_heads}"
            )
        shape = self.shape_params
        if abs(shape - self.params) > self.params_tolerance * self.params:
            raise ValueError(
                f"{where}: field 'params' = {self.params:,} disagrees with the count from the "
                f"shape, {shape:,} ({(shape / self.params - 1) * 100:+.1f}%, tolerance "
                f"{self.params_tolerance:.0%}); check layers, widths, vocab, gated_mlp and "
                "tied_embeddings"
            )

    # Shapes -----------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection, ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection, ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def _norm_params(self) -> int:
        return self.d_model * (2 if self.norm == "layernorm" else 1)

    @property
    def _self_attention_params(self) -> int:
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return 2 * self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim + bias

    @property
    def _mlp_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.d_model * self.d_ff

    @property
    def decode_layer_params(self) -> int:
        """Weights one decoder layer reads in a decode pass.

        Self-attention, MLP and norms; for encoder-decoder models also the
        cross-attention query and output projections. The cross-attention key and
        value projections of the encoder output run once, at prefill, and their
        result is cached, so a decode pass does not read them (it reads the cached
        cross keys and values instead; see :mod:`specsim.cost`).
        """
        n = self._self_attention_params + self._mlp_params + 2 * self._norm_params
        if self.architecture == "encoder-decoder":
            n += 2 * self.d_model * self.q_dim + self._norm_params
        return n

    @property
    def shape_params(self) -> int:
        """Total parameter count computed from the shape (all weights resident in memory)."""
        embed = self.vocab * self.d_model * (1 if self.tied_embeddings else 2)
        dec = self.layers * self.decode_layer_params + self._norm_params
        if self.architecture == "encoder-decoder":
            # Cross-attention key/value projections, skipped by decode_layer_params.
            dec += self.layers * 2 * self.d_model * self.kv_dim
            enc_layer = self._self_attention_params + self._mlp_params + 2 * self._norm_params
            dec += self.encoder_layers * enc_layer + self._norm_params
        return embed + dec

    @property
    def decode_params(self) -> int:
        """Parameters a decode pass reads: decoder layers, final norm and the LM head.

        For T5 this is the decoder's weights (with the cross-attention query and
        output projections) plus the untied LM head; the encoder runs once at
        prefill. The input embedding table is not counted when untied: a pass
        gathers only one row per token.
        """
        return (
            self.layers * self.decode_layer_params + self._norm_params + self.vocab * self.d_model
        )

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """Bytes of self-attention key/value cache per token over all decoder layers."""
        return self.layers * 2 * self.kv_dim * bytes_per_element


@dataclass(frozen=True, kw_only=True)
class HardwareCard:
    """An accelerator: peak rates, memory, interconnect, power, and cost-model parameters.

    Units: ``peak_flops`` FLOP/s (dense, per dtype); ``mem_bandwidth`` and
    ``interconnect_bandwidth`` bytes/s (the latter per direction);
    ``mem_capacity`` bytes; times in seconds; powers in watts; energies in joules.
    ``compute_efficiency`` and ``memory_efficiency`` are the fractions of peak a
    pass attains; ``layer_overhead_s`` is a fixed cost per layer (kernel launches,
    small-kernel floors), ``pass_overhead_s`` a fixed cost per pass (host loop,
    sampling). ``calibration`` keeps a calibrated card's metadata table.
    """

    slug: str
    name: str
    kind: str
    peak_flops: dict[str, float] = field(hash=False)
    mem_bandwidth: float
    mem_capacity: float
    interconnect_bandwidth: float
    interconnect_latency_s: float
    idle_power_w: float
    max_power_w: float
    sources: dict[str, str] | list[str] = field(hash=False)
    energy_per_flop_j: float | None = None
    energy_per_byte_j: float | None = None
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    memory_efficiency: float = DEFAULT_MEMORY_EFFICIENCY
    layer_overhead_s: float = DEFAULT_LAYER_OVERHEAD_S
    pass_overhead_s: float = DEFAULT_PASS_OVERHEAD_S
    calibration: dict[str, Any] | None = field(default=None, hash=False)
    notes: str = ""
    source_path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = _where(self.source_path, "hardware", self.slug)
        _check_str(where, "slug", self.slug)
        _check_str(where, "name", self.name)
        _check_str(where, "kind", self.kind, _KINDS)
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise TypeError(
                f"{where}: field 'peak_flops' must be a non-empty table dtype -> FLOP/s, "
                f"got {self.peak_flops!r}"
            )
        for dt, rate in self.peak_flops.items():
            if dt not in DTYPE_BYTES:
                raise ValueError(
                    f"{where}: field 'peak_flops' names unknown dtype {dt!r}; "
                    f"known: {sorted(DTYPE_BYTES)}"
                )
            _check_float(where, f"peak_flops.{dt}", rate, strict=True)
        positive = ("mem_bandwidth", "mem_capacity", "interconnect_bandwidth", "max_power_w")
        nonneg = ("interconnect_latency_s", "idle_power_w", "layer_overhead_s", "pass_overhead_s")
        optional = ("energy_per_flop_j", "energy_per_byte_j")
        for name in positive + nonneg + optional:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            _check_float(where, name, value, strict=name in positive)
            object.__setattr__(self, name, float(value))  # TOML integers become floats
        object.__setattr__(self, "peak_flops", {k: float(v) for k, v in self.peak_flops.items()})
        if (self.energy_per_flop_j is None) != (self.energy_per_byte_j is None):
            raise ValueError(
                f"{where}: fields 'energy_per_flop_j' and 'energy_per_byte_j' go together; "
                f"got {self.energy_per_flop_j!r} and {self.energy_per_byte_j!r}"
            )
        if self.idle_power_w > self.max_power_w:
            raise ValueError(
                f"{where}: field 'idle_power_w' ({self.idle_power_w}) exceeds "
                f"'max_power_w' ({self.max_power_w})"
            )
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            _check_float(where, name, value, strict=True)
            if value > 1:
                raise ValueError(f"{where}: field {name!r} must be in (0, 1], got {value}")
        _check_sources(where, self.sources)
        if self.calibration is not None and not isinstance(self.calibration, Mapping):
            raise TypeError(
                f"{where}: field 'calibration' must be a table, got {self.calibration!r}"
            )

    def peak(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``, or a ValueError naming the card's dtypes."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
        if dtype not in self.peak_flops:
            raise ValueError(
                f"dtype: hardware card {self.slug!r} gives no peak FLOP/s for {dtype!r}; "
                f"it has {sorted(self.peak_flops)}"
            )
        return float(self.peak_flops[dtype])

    def ridge_intensity(self, dtype: str) -> float:
        """FLOP per byte at which a pass turns compute-bound, at the card's efficiencies."""
        return (self.peak(dtype) * self.compute_efficiency) / (
            self.mem_bandwidth * self.memory_efficiency
        )


# Loading -------------------------------------------------------------------------------------
_MODEL_KEYS = frozenset(f.name for f in fields(ModelCard)) - {"source_path"}
_HARDWARE_KEYS = frozenset(f.name for f in fields(HardwareCard)) - {"source_path"}


def _packaged_root() -> Path | None:
    try:
        root = resources.files("specsim") / "_models"
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - namespace oddities
        root = None
    if root is not None and root.is_dir():
        return Path(str(root))
    checkout = Path(__file__).resolve().parent.parent / "models"
    return checkout if checkout.is_dir() else None


def card_dirs(kind: str, search_path: SearchPath = None) -> list[Path]:
    """Folders searched for cards of ``kind`` ("lm" or "hardware"), first match wins."""
    if kind not in ("lm", "hardware"):
        raise ValueError(f"kind: expected 'lm' or 'hardware', got {kind!r}")
    subdirs = ("lm",) if kind == "lm" else ("hardware", "calibrated")
    if search_path is None:
        user: list[Path] = []
    elif isinstance(search_path, str | os.PathLike):
        user = [Path(search_path)]
    else:
        user = [Path(p) for p in search_path]
    env = os.environ.get(ENV_VAR, "")
    user += [Path(p) for p in env.split(os.pathsep) if p]
    out: list[Path] = []
    for root in user:
        if not root.is_dir():
            raise ValueError(f"search_path: {str(root)!r} is not a folder")
        out.append(root)
        out += [root / s for s in subdirs if (root / s).is_dir()]
    packaged = _packaged_root()
    if packaged is not None:
        out += [packaged / s for s in subdirs if (packaged / s).is_dir()]
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc


def _build(cls: type, keys: frozenset[str], data: dict[str, Any], path: Path) -> Any:
    unknown = sorted(set(data) - keys)
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {unknown}; known fields: {sorted(keys)}")
    missing = sorted(
        f.name
        for f in fields(cls)
        if f.name in keys
        and f.name not in data
        and f.default is MISSING
        and f.default_factory is MISSING
    )
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}")
    return cls(**data, source_path=str(path))


def _model_from_file(path: Path) -> ModelCard:
    return cast(ModelCard, _build(ModelCard, _MODEL_KEYS, _read(path), path))


def _hardware_from_file(path: Path) -> HardwareCard:
    return cast(HardwareCard, _build(HardwareCard, _HARDWARE_KEYS, _read(path), path))


def _is_kind(data: dict[str, Any], kind: str) -> bool:
    return ("architecture" in data) if kind == "lm" else ("peak_flops" in data)


def _find(kind: str, slug_or_path: str | os.PathLike[str], search_path: SearchPath) -> Path:
    text = os.fspath(slug_or_path)
    if not isinstance(text, str) or not text:
        raise TypeError(f"slug_or_path: expected a slug or a .toml path, got {slug_or_path!r}")
    direct = Path(text)
    if text.endswith(".toml") or direct.is_file():
        if not direct.is_file():
            raise FileNotFoundError(f"card file {text!r} does not exist")
        return direct
    dirs = card_dirs(kind, search_path)
    for d in dirs:
        candidate = d / f"{text}.toml"
        if candidate.is_file() and _is_kind(_read(candidate), kind):
            return candidate
    known = sorted({p.stem for d in dirs for p in d.glob("*.toml")})
    what = "model" if kind == "lm" else "hardware"
    raise ValueError(
        f"slug_or_path: no {what} card {text!r} in {[str(d) for d in dirs]}; available: {known}"
    )


def load_model(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> ModelCard:
    """Load a language-model card by slug (``"llama-2-7b"``) or from a ``.toml`` path."""
    return _model_from_file(_find("lm", slug_or_path, search_path))


def load_hardware(
    slug_or_path: str | os.PathLike[str], *, search_path: SearchPath = None
) -> HardwareCard:
    """Load an accelerator card by slug (``"a100-80gb"``) or from a ``.toml`` path."""
    return _hardware_from_file(_find("hardware", slug_or_path, search_path))


def _list(kind: str, search_path: SearchPath) -> list[Path]:
    seen: dict[str, Path] = {}
    for d in card_dirs(kind, search_path):
        for path in sorted(d.glob("*.toml")):
            if path.stem not in seen and _is_kind(_read(path), kind):
                seen[path.stem] = path
    return [seen[k] for k in sorted(seen)]


def list_models(*, search_path: SearchPath = None) -> list[ModelCard]:
    """Every language-model card found, sorted by slug (the first of each slug wins)."""
    return [_model_from_file(p) for p in _list("lm", search_path)]


def list_hardware(*, search_path: SearchPath = None) -> list[HardwareCard]:
    """Every accelerator card found (base and calibrated), sorted by slug."""
    return [_hardware_from_file(p) for p in _list("hardware", search_path)]


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read any specsim TOML file (cards, simulation configs, sweep specs): the one reader.

    Raises FileNotFoundError naming a missing file and ValueError for invalid TOML.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    return _read(p)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


def write_hardware_card(
    card: HardwareCard, path: str | os.PathLike[str], *, header: str = ""
) -> Path:
    """Write ``card`` as a TOML hardware card that :func:`load_hardware` reads back equal.

    ``header`` becomes leading comment lines (where the numbers come from).
    """
    tables = ("peak_flops", "sources", "calibration")
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for f in fields(HardwareCard):
        value = getattr(card, f.name)
        if f.name in tables or f.name == "source_path" or value is None:
            continue
        lines.append(f"{f.name} = {_toml_value(value)}")
    for name in tables:
        table = getattr(card, name)
        if table is None:
            continue
        lines.append(f"\n[{name}]")
        items = table.items() if isinstance(table, Mapping) else enumerate(table)
        for key, value in items:
            name = key if isinstance(key, str) else f"source{key}"
            lines.append(f"{name} = {_toml_value(value)}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p
