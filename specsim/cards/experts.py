"""Mixture-of-experts and multi-head latent attention shapes of a model card.

A model card's optional ``[moe]`` table (:class:`MoE`) says its feed-forward layers are
routed experts; its optional ``[mla]`` table (:class:`MLA`) says its attention is
DeepSeek's multi-head latent attention. Both are validated here, naming the card's
file and the key, and both say how many weights they hold.

>>> moe = MoE.from_table({"experts": 8, "top_k": 2, "expert_ffn": 14336}, where="x.toml")
>>> moe.routed_expert_params(4096, gated=True)
176160768
>>> MoE.from_table({"experts": 8, "top_k": 9, "expert_ffn": 1}, where="x.toml")
Traceback (most recent call last):
...
ValueError: x.toml: field 'moe.top_k' = 9 exceeds moe.experts = 8
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from specsim.cards.checks import check_bool, check_int
from specsim.cards.routing import load_routing_profile

__all__ = ["MoE", "MLA"]


def _table(table: object, where: str, name: str) -> Mapping[str, object]:
    if not isinstance(table, Mapping):
        raise TypeError(f"{where}: field {name!r} must be a table, got {table!r}")
    return table


def _keys(cls: type, table: Mapping[str, object], where: str, name: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {unknown} in [{name}]; known keys: {sorted(known)}"
        )


@dataclass(frozen=True, kw_only=True)
class MoE:
    """Routed experts in a decoder's feed-forward layers.

    ``experts`` routed experts per MoE layer, of which each token uses ``top_k``;
    ``shared_experts`` that every token uses (DeepSeek's; 0 for Mixtral, Qwen3,
    gpt-oss); ``expert_ffn`` the intermediate width of one expert (and of one shared
    expert); ``dense_layers`` the first decoder layers that keep a dense MLP of the
    card's ``d_ff`` (DeepSeek's ``first_k_dense_replace``); ``router`` whether the gate
    GEMM (``d_model x experts``) is counted; ``expert_bias`` whether the experts' GEMMs
    and the gate carry biases (gpt-oss). ``routing`` is how tokens spread over the
    experts: ``"uniform"``, the name of a measured profile
    (:mod:`specsim.cards.routing`, for this expert count) or one share per expert
    (positive, summing to 1, none above ``1 / top_k``).
    """

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0
    router: bool = True
    expert_bias: bool = False
    routing: str | tuple[float, ...] = "uniform"

    @classmethod
    def from_table(cls, table: object, *, where: str) -> MoE:
        """The ``[moe]`` table of the card ``where``, validated; errors name the key."""
        t = _table(table, where, "moe")
        _keys(cls, t, where, "moe")
        for key in ("experts", "top_k", "expert_ffn"):
            if key not in t:
                raise ValueError(f"{where}: missing key 'moe.{key}' in [moe]")
        return cls._checked(t, where)

    @classmethod
    def _checked(cls, t: Mapping[str, object], where: str) -> MoE:
        for key in ("experts", "top_k", "expert_ffn"):
            check_int(where, f"moe.{key}", t[key], minimum=1)
        for key in ("shared_experts", "dense_layers"):
            if key in t:
                check_int(where, f"moe.{key}", t[key], minimum=0)
        for key in ("router", "expert_bias"):
            if key in t:
                check_bool(where, f"moe.{key}", t[key])
        if t["top_k"] > t["experts"]:  # type: ignore[operator]
            raise ValueError(
                f"{where}: field 'moe.top_k' = {t['top_k']} exceeds moe.experts = {t['experts']}"
            )
        if "routing" in t:
            t = {**t, "routing": _routing(t["routing"], t, where)}
        return cls(**t)  # type: ignore[arg-type]

    def routed_expert_params(self, d_model: int, *, gated: bool) -> int:
        """Weights of one routed expert: up (and gate) and down projections, biases if any."""
        n = (3 if gated else 2) * d_model * self.expert_ffn
        if self.expert_bias:
            n += (2 if gated else 1) * self.expert_ffn + d_model
        return n

    def router_params(self, d_model: int) -> int:
        """Weights of the gate GEMM (``d_model x experts``, plus a bias per expert if any)."""
        if not self.router:
            return 0
        return d_model * self.experts + (self.experts if self.expert_bias else 0)


def _routing(value: object, t: Mapping[str, object], where: str) -> str | tuple[float, ...]:
    """``moe.routing`` checked against the table's experts and top-k (class docstring)."""
    name = f"{where}: field 'moe.routing'"
    experts, top_k = int(t["experts"]), int(t["top_k"])  # type: ignore[call-overload]
    if isinstance(value, str):
        if value != "uniform":
            profile = load_routing_profile(value, where=name)
            if profile.experts != experts:
                raise ValueError(
                    f"{name}: profile {value!r} measures {profile.experts} experts "
                    f"({profile.model}), the card has {experts}"
                )
        return value
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{name}: expected 'uniform', a profile name or a list of shares")
    shares = tuple(float(v) for v in value)
    if len(shares) != experts:
        raise ValueError(f"{name}: lists {len(shares)} shares, moe.experts = {experts}")
    if not all(v > 0 and v < float("inf") for v in shares):
        raise ValueError(f"{name}: every share must be positive and finite, got {min(shares)}")
    if abs(sum(shares) - 1.0) > 1e-6:
        raise ValueError(f"{name}: the shares must sum to 1, they sum to {sum(shares):.9g}")
    if top_k * max(shares) > 1 + 1e-6:
        raise ValueError(
            f"{name}: share {max(shares)!r} exceeds 1 / top_k = {1 / top_k!r} (an expert "
            "cannot be chosen by more than every token)"
        )
    return shares


@dataclass(frozen=True, kw_only=True)
class MLA:
    """DeepSeek's multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Section 2.1).

    Keys and values are compressed into a latent of ``kv_lora_rank`` per token, plus a
    decoupled rotary key of ``qk_rope_head_dim`` shared by all heads; queries into a
    latent of ``q_lora_rank`` (0: a full-rank query projection). Each head's query and
    key have ``qk_nope_head_dim + qk_rope_head_dim`` dimensions, its value
    ``v_head_dim``.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0

    @classmethod
    def from_table(cls, table: object, *, where: str) -> MLA:
        """The ``[mla]`` table of the card ``where``, validated; errors name the key."""
        t = _table(table, where, "mla")
        _keys(cls, t, where, "mla")
        for f in fields(cls):
            if f.name == "q_lora_rank":
                if f.name in t:
                    check_int(where, "mla.q_lora_rank", t[f.name], minimum=0)
                continue
            if f.name not in t:
                raise ValueError(f"{where}: missing key 'mla.{f.name}' in [mla]")
            check_int(where, f"mla.{f.name}", t[f.name], minimum=1)
        return cls(**t)  # type: ignore[arg-type]

    @property
    def kv_width(self) -> int:
        """Elements cached per token and layer: the latent plus the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: the non-rotary and the rotary parts."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def attention_params(self, d_model: int, heads: int) -> int:
        """Weights of one MLA block (DeepSeek-V3's ``inference/model.py``, class ``MLA``):
        the query down/up projections and the query latent's norm (or one full-rank
        query projection), the joint key/value down projection (latent plus rotary
        key), the latent's norm, the key/value up projection and the output projection."""
        qh = heads * self.qk_head_dim
        if self.q_lora_rank:
            q = d_model * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * qh
        else:
            q = d_model * qh
        kv_down = d_model * self.kv_width + self.kv_lora_rank
        kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_down + kv_up + heads * self.v_head_dim * d_model
