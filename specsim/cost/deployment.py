"""The deployment: the one value that says what runs where.

A :class:`Deployment` names the target model card, the hardware card, the software
stack's runtime profile, the weight and KV-cache formats (with the weight group size),
the tensor-parallel degree, the expert-parallel degree of an MoE target
(:mod:`specsim.cost.moe`) and where a draft runs (:data:`PLACEMENTS`). Every entry
point (``cost``, ``tree``, ``simulate``, capacity, studies, sweeps, calibration's
predictions) takes one instead of restating these fields as keywords.

Built in one place from each source: :func:`deployment_from_table` (a ``[deployment]``
table of a TOML file, :func:`load_deployment`, through :func:`specsim.config.build`: the
keys are the fields, cards by slug or path, an unknown key an error naming it and the
file), ``specsim.cli.deployment`` (the one group of flags every subcommand shares) and
Python (the constructor; cards or their slugs).

Its methods are the only way the layers above price a pass on it: :meth:`pass_cost`
for one :class:`~specsim.cost.shape.PassShape`, :meth:`aggregates_cost` for passes
given as sums (the simulators' vectorised path), and :meth:`on_model` for the same
devices, stack and formats running another model (a draft model, a target with
layers skipped).

>>> from specsim.cards import load_hardware, load_model
>>> dep = Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb"))
>>> from specsim.cost.shape import PassShape
>>> dep.pass_cost(PassShape.chain(context=512, new=5)).tokens
5
>>> dep.on_model(load_model("llama-68m")).target.slug
'llama-68m'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from numpy.typing import ArrayLike

from specsim.cards import HardwareCard, ModelCard, RuntimeProfile, profile_of_card, read_toml
from specsim.checks import check_int
from specsim.config import build
from specsim.cost.checks import (
    check_hardware,
    check_model,
    check_runtime,
    check_tensor_parallel,
)
from specsim.cost.formats import Formats, resolve_formats
from specsim.cost.moe import check_expert_parallel
from specsim.cost.resolved import Resolved, encoder_tokens, pass_cost, pass_terms
from specsim.cost.results import PassTerms, StepCost
from specsim.cost.shape import PassShape
from specsim.cost.stack_terms import stack_costs

__all__ = [
    "PLACEMENTS",
    "Deployment",
    "Placement",
    "deployment_from_table",
    "load_deployment",
    "resolve",
]

Placement = Literal["shared", "own-device", "overlapped"]
PLACEMENTS: tuple[str, ...] = ("shared", "own-device", "overlapped")
"""Where a draft runs: on the target's devices, serialized with verification
(``shared``); on a device of its own, still waiting for each verification
(``own-device``); or on its own device drafting the next block while the target
verifies (``overlapped``)."""


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """What runs where: target, hardware, stack, formats, parallelism, draft placement.

    ``target`` and ``hardware`` are cards or their slugs (or ``.toml`` paths). ``runtime``
    None means the hardware card's own numbers (:func:`specsim.cards.profile_of_card`); a
    slug or path is loaded, and a profile fitted on another device is an error. ``dtype``
    None means the target card's compute dtype; ``weights``/``kv`` None keep ``dtype``
    (:func:`specsim.cost.resolve_formats`); ``group_size`` is for int4 weights only;
    ``expert_weights`` stores an MoE target's routed experts in a format of their own.
    ``tensor_parallel`` must split the target's heads
    (:func:`specsim.cost.checks.check_tensor_parallel`); ``expert_parallel`` (an MoE
    target's expert groups over those devices) must divide its routed experts and
    ``tensor_parallel`` (:func:`specsim.cost.moe.check_expert_parallel`).
    ``draft_placement``: one of :data:`PLACEMENTS`. Every bad value is a ValueError naming
    the field.
    """

    target: ModelCard
    hardware: HardwareCard
    runtime: RuntimeProfile | None = None
    dtype: str | None = None
    weights: str | None = None
    kv: str | None = None
    group_size: int | None = None
    tensor_parallel: int = 1
    draft_placement: Placement = "shared"
    expert_parallel: int = 1
    expert_weights: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", check_model(self.target))
        object.__setattr__(self, "hardware", check_hardware(self.hardware))
        object.__setattr__(self, "runtime", check_runtime(self.runtime, self.hardware))
        tp = self.tensor_parallel
        check_int(tp, name="deployment tensor_parallel", minimum=1)
        check_tensor_parallel(self.target, tp, name="deployment tensor_parallel")
        check_expert_parallel(
            self.target, self.expert_parallel, tensor_parallel=tp, name="deployment expert_parallel"
        )
        if self.draft_placement not in PLACEMENTS:
            raise ValueError(
                f"deployment draft_placement: expected one of {', '.join(PLACEMENTS)}, "
                f"got {self.draft_placement!r}"
            )
        # An unknown format or a bad group size fails here; the formats are kept (resolved
        # once per deployment, :meth:`resolved`).
        fm = resolve_formats(
            self.target,
            self.dtype,
            weights=self.weights,
            kv=self.kv,
            group_size=self.group_size,
            expert_weights=self.expert_weights,
        )
        object.__setattr__(self, "_formats", fm)

    def formats(self) -> Formats:
        """The compute dtype and the byte widths of this deployment's passes (resolved when
        it was built)."""
        fm: Formats = self.__dict__["_formats"]
        return fm

    def resolved(self, *, encoder_length: int | None = None) -> Resolved:
        """This deployment as the cost kernel takes it (:class:`specsim.cost.resolved.Resolved`:
        its cards, formats, parallelism and stack constants), remembered: every pass priced on
        it resolves nothing. ``encoder_length``: the encoder tokens an encoder-decoder target
        cross-attends to (default :data:`specsim.cost.resolved.DEFAULT_ENCODER_LENGTH`).

        >>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb", kv="fp8")
        >>> dep.resolved() is dep.resolved(), dep.resolved().formats.kv_format
        (True, 'float8')
        """
        if encoder_length is not None:
            return resolve(self, encoder_length=encoder_length)
        hit = self.__dict__.get("_resolved")
        if hit is None:
            hit = resolve(self)
            object.__setattr__(self, "_resolved", hit)
        return hit

    def on_model(self, model: ModelCard, *, tensor_parallel: int | None = None) -> Deployment:
        """The same hardware, stack and KV format running ``model`` (a draft, a pruned
        target). Weight formats are the target's only when ``model`` is the target; a
        different model keeps its own dtype (its card's), as drafts ship."""
        tp = self.tensor_parallel if tensor_parallel is None else tensor_parallel
        memo = self.__dict__.setdefault("_on_model", {})  # remembered: every draft step asks
        hit = memo.get((id(model), tp))
        if hit is not None and hit.target is model:
            return hit
        same = model.slug == self.target.slug
        dep = dataclasses.replace(
            self,
            target=model,
            dtype=self.dtype if same else None,
            weights=self.weights if same else None,
            group_size=self.group_size if same else None,
            tensor_parallel=tp,
            expert_parallel=self.expert_parallel if same else 1,
            expert_weights=self.expert_weights if same else None,
        )
        if len(memo) >= 16:
            memo.clear()
        memo[(id(model), tp)] = dep
        return dep

    def drafting(self) -> Deployment:
        """The deployment a draft model's steps run under: this one with its stack's drafting
        profile (:meth:`specsim.cards.RuntimeProfile.drafting`: the stack's host cost per draft
        step, eager launches where the stack drafts eagerly); itself without a stack. The one
        place that decides it: the simulator's draft steps and the draft-model proposer both
        price their steps on it (:mod:`specsim.cost.drafting`, the one drafting rule).

        >>> dep = Deployment(target="llama-68m", hardware="a40", runtime="vllm-v0")
        >>> dep.drafting().runtime.slug
        'vllm-v0-draft'
        >>> bare = Deployment(target="llama-68m", hardware="a40")
        >>> bare.drafting() is bare, dep.drafting() is dep.drafting()
        (True, True)
        """
        rt = self.runtime
        if rt is None or rt.stack_profile is None:
            return self
        hit = self.__dict__.get("_drafting")
        if hit is None:  # remembered: every draft step asks it
            hit = dataclasses.replace(self, runtime=rt.drafting())
            object.__setattr__(self, "_drafting", hit)
        return hit

    def keywords(self) -> dict[str, Any]:
        """The deployment as the keywords of the functional API (:func:`specsim.cost.step_cost`,
        :func:`specsim.cost.verification_factor`, ...), whose first two arguments are
        ``target`` and ``hardware``."""
        return {
            "dtype": self.dtype,
            "tensor_parallel": self.tensor_parallel,
            "weights": self.weights,
            "kv": self.kv,
            "group_size": self.group_size,
            "runtime": self.runtime,
            "expert_parallel": self.expert_parallel,
            "expert_weights": self.expert_weights,
        }

    def describe(self) -> dict[str, Any]:
        """Plain values for tables and JSON: slugs, formats, parallelism, placement."""
        fm = self.formats()
        return {
            "model": self.target.slug,
            "hardware": self.hardware.slug,
            "runtime": self.runtime.slug if self.runtime is not None else self.hardware.runtime,
            "dtype": fm.compute,
            "weights": fm.weight_format,
            "kv": fm.kv_format,
            "group_size": self.group_size,
            "tensor_parallel": self.tensor_parallel,
            "expert_parallel": self.expert_parallel,
            "expert_weights": fm.expert_format or None,
            "draft_placement": self.draft_placement,
        }

    def pass_cost(
        self,
        shape: PassShape,
        *,
        verify: bool | None = None,
        verified: int | None = None,
        encoder_length: int | None = None,
    ) -> StepCost:
        """One pass of ``shape`` on this deployment (:func:`specsim.cost.resolved.pass_cost` on
        :meth:`resolved`; ``verify`` and ``verified`` as there: None means a token tree
        verifies and chains do not; ``encoder_length`` as in :meth:`resolved`)."""
        r = self.resolved(encoder_length=encoder_length)
        return pass_cost(r, shape, verify=verify, verified=verified)

    def aggregates_cost(
        self,
        *,
        batch: ArrayLike,
        tokens: ArrayLike,
        context_tokens: ArrayLike,
        pairs: ArrayLike,
        verify: bool = False,
        verified: ArrayLike | None = None,
    ) -> PassTerms:
        """Passes given as sums over their sequences (:func:`specsim.cost.resolved.pass_terms`
        on :meth:`resolved`; ``verify``: they verify drafted tokens, so a stack's speculative
        terms apply, over ``verified`` of their new tokens, None: all)."""
        return pass_terms(
            self.resolved(),
            batch=batch,
            tokens=tokens,
            context_tokens=context_tokens,
            pairs=pairs,
            verify=verify,
            verified=verified,
        )


_Key = tuple[int, int, int, Formats, int, int, float]
_MEMO: dict[_Key, tuple[Deployment, Resolved]] = {}


def resolve(deployment: Deployment, *, encoder_length: int | None = None) -> Resolved:
    """``deployment`` resolved (:class:`specsim.cost.resolved.Resolved`), with
    ``encoder_length`` encoder tokens for an encoder-decoder target (default
    :data:`specsim.cost.resolved.DEFAULT_ENCODER_LENGTH`; a decoder-only target takes none:
    a ValueError naming it).

    Remembered on the cards' identity, the formats and the parallelism (a speed trick, as
    :func:`specsim.cost.roofline.roofline`'s: hashing a frozen card costs more than a
    pass); the remembered entry holds the deployment, so its cards' ids cannot be reused."""
    fm = deployment.formats()
    e = encoder_tokens(deployment.target, encoder_length)
    tp, ep = deployment.tensor_parallel, deployment.expert_parallel
    key = (id(deployment.target), id(deployment.hardware), id(deployment.runtime), fm, tp, ep, e)
    hit = _MEMO.get(key)
    if hit is not None and _same_cards(hit[0], deployment):
        return hit[1]
    hw = deployment.hardware
    rt = profile_of_card(hw) if deployment.runtime is None else deployment.runtime
    r = Resolved(
        target=deployment.target,
        hardware=hw,
        runtime=rt,
        formats=fm,
        tensor_parallel=int(tp),
        expert_parallel=int(ep),
        stack=stack_costs(rt, deployment.target.layers),
        encoder=e,
    )
    if len(_MEMO) >= 256:
        _MEMO.clear()
    _MEMO[key] = (deployment, r)
    return r


def _same_cards(a: Deployment, b: Deployment) -> bool:
    return a.target is b.target and a.hardware is b.hardware and a.runtime is b.runtime


def deployment_from_table(table: Mapping[str, Any], *, where: str) -> Deployment:
    """A :class:`Deployment` from a table (a ``[deployment]`` table of a TOML file, a dict):
    its keys are the dataclass's fields (``target``, ``hardware``, ``runtime``, ``dtype``,
    ``weights``, ``kv``, ``group_size``, ``tensor_parallel``, ``expert_parallel``,
    ``expert_weights``,
    ``draft_placement``), cards
    by slug or path. Unknown or missing keys, wrong types and bad values are ValueErrors
    that begin with ``where`` (the file and table) and name the key.

    >>> deployment_from_table({"target": "llama-2-7b", "hardware": "a100-80gb", "kv": "fp8"},
    ...                       where="run.toml [deployment]").formats().kv_format
    'float8'
    """
    return build(Deployment, table, where=where)


def load_deployment(path: str | os.PathLike[str], *, table: str = "deployment") -> Deployment:
    """The :class:`Deployment` of the ``[deployment]`` table (or ``table``) of a TOML file;
    a ValueError naming the file when it has none."""
    data = read_toml(path)
    if table not in data or not isinstance(data[table], Mapping):
        raise ValueError(f"{os.fspath(path)}: expected a [{table}] table")
    return deployment_from_table(data[table], where=f"{os.fspath(path)} [{table}]")
