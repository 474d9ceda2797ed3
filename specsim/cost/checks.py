"""Input checks shared by the modules of :mod:`specsim.cost`.

Each check raises TypeError (wrong kind of value) or ValueError (a value the
model cannot run) naming the argument, the value and the card it was checked
against, and shows plain Python values (``0``, never ``np.int64(0)``).

>>> from specsim.cards import load_model
>>> m = load_model("llama-2-7b")
>>> check_tensor_parallel(m, 3)
Traceback (most recent call last):
...
ValueError: tensor_parallel: 3 does not divide the 32 attention heads of llama-2-7b
>>> check_positions(m, context=100_000, new_tokens=1)
Traceback (most recent call last):
...
ValueError: context: 100000 + 1 new tokens exceeds llama-2-7b's max_position 4096
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specsim.cards import (
    HardwareCard,
    ModelCard,
    RuntimeProfile,
    check_runtime_device,
    load_hardware,
    load_model,
    load_runtime,
)
from specsim.cards.stack import StackProfile
from specsim.cards.stack_files import compose, is_stack, load_stack

CardT = TypeVar("CardT", ModelCard, HardwareCard, RuntimeProfile)

__all__ = [
    "int_array",
    "plain",
    "card_of",
    "check_model",
    "check_hardware",
    "check_runtime",
    "check_tensor_parallel",
    "check_positions",
    "check_draft_pair",
]


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as plain Python numbers and lists (for messages)."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def _whole(value: Any) -> Any:
    """A whole number as an int (``2048``, not ``2048.0``), anything else as :func:`plain`."""
    v = plain(value)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def int_array(name: str, value: ArrayLike, minimum: int) -> NDArray[np.float64]:
    """``value`` as a float64 array of integers >= minimum, or a ValueError/TypeError naming it."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name}: expected integer(s), got {plain(value)!r}")
    out = arr.astype(np.float64)
    if np.issubdtype(arr.dtype, np.integer):  # integers need only the range check
        bad = arr < minimum
    else:
        bad = ~np.isfinite(out) | (out != np.round(out)) | (out < minimum)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" at index {idx}" if arr.ndim else ""
        raise ValueError(
            f"{name}: expected finite integer(s) >= {minimum}, got {plain(arr[idx])!r}{where}"
        )
    return out


def _card_type_error(name: str, kind: str, loader: str, example: str, value: object) -> TypeError:
    got = (
        f"{type(value).__name__} {value.slug!r}"
        if isinstance(value, ModelCard | HardwareCard)
        else f"{type(value).__name__} {plain(value)!r}"
    )
    return TypeError(
        f"{name}: expected a {kind} or a card slug or .toml path ({loader}({example!r})), got {got}"
    )


def _reason(exc: Exception) -> str:
    # The loaders name their own parameter; the caller's argument is named instead.
    return str(exc).removeprefix("slug_or_path: ")


def _card(
    value: object, *, name: str, card: type[CardT], load: Callable[[Any], CardT], example: str
) -> CardT:
    """``value`` as a ``card``: a card, or a slug or path that ``load`` reads; else a TypeError."""
    if isinstance(value, card):
        return value
    if isinstance(value, str | os.PathLike):
        try:
            return load(value)
        except ValueError as exc:  # an unknown slug or a bad file: say which argument it was
            raise ValueError(f"{name}: {_reason(exc)}") from exc
    raise _card_type_error(name, card.__name__, load.__name__, example, value)


def check_model(value: ModelCard | str | os.PathLike[str], *, name: str = "model") -> ModelCard:
    """``value`` as a :class:`~specsim.cards.ModelCard`: a card, or a slug or path it is loaded
    from (:func:`specsim.cards.load_model`); a TypeError for anything else."""
    return _card(value, name=name, card=ModelCard, load=load_model, example="llama-2-7b")


def check_hardware(
    value: HardwareCard | str | os.PathLike[str], *, name: str = "hardware"
) -> HardwareCard:
    """``value`` as a :class:`~specsim.cards.HardwareCard`: a card, or a slug or path it is
    loaded from (:func:`specsim.cards.load_hardware`); a TypeError for anything else."""
    return _card(value, name=name, card=HardwareCard, load=load_hardware, example="a100-80gb")


def card_of(name: str, value: object) -> Any:
    """A :class:`~specsim.sim.CardCost`-style argument as its card: ``target`` and ``draft``
    through :func:`check_model`, ``hardware`` and ``draft_hardware`` through
    :func:`check_hardware`; ``None`` stays ``None`` for the optional ``draft*`` ones."""
    if value is None and name.startswith("draft"):
        return None
    check = check_hardware if "hardware" in name else check_model
    return check(value, name=name)  # type: ignore[arg-type]


def check_runtime(
    value: RuntimeProfile | StackProfile | str | os.PathLike[str] | None, hardware: HardwareCard
) -> RuntimeProfile | None:
    """``value`` as a :class:`~specsim.cards.RuntimeProfile` for ``hardware`` (a profile, or a
    slug or path :func:`specsim.cards.load_runtime` reads), or None (the card's own numbers);
    a ValueError naming an unknown profile or one fitted on another device.

    A stack profile, or its slug or path (``"sglang"``, ``models/stacks/``), is composed
    with ``hardware``'s device part (:func:`specsim.cards.stack_files.compose`): any stack on
    any card of its kind, refused only where a part is device-specific."""
    if value is None:
        return None
    if isinstance(value, StackProfile):
        return compose(value, hardware)
    if is_stack(value):
        return compose(load_stack(value), hardware)  # type: ignore[arg-type]
    prof = _card(
        value, name="runtime", card=RuntimeProfile, load=load_runtime, example="gpt-fast-a100"
    )
    check_runtime_device(prof, hardware)
    return prof


def check_tensor_parallel(
    model: ModelCard, tensor_parallel: ArrayLike, *, name: str = "tensor_parallel"
) -> NDArray[np.float64]:
    """``tensor_parallel`` (a number or an array) as :func:`int_array` gives it, each value a
    tensor-parallel degree the model can be split over; else a ValueError.

    Tensor parallelism (Shoeybi et al., "Megatron-LM", 2019) gives each device
    whole attention heads, so the degree must divide ``heads``. Key/value heads
    are split the same way while there are at least as many as devices, and
    replicated beyond (:func:`specsim.cost.memory.kv_heads_per_device`): the
    degree must divide ``kv_heads`` or be a multiple of it, as in vLLM.
    """
    tp = int_array(name, tensor_parallel, 1)
    heads, kv = model.heads, model.kv_heads
    for t in np.unique(tp).astype(np.int64).tolist():  # few distinct degrees, even on a grid
        if heads % t:
            raise ValueError(
                f"{name}: {t} does not divide the {heads} attention heads of {model.slug}"
            )
        if (kv % t) if t <= kv else (t % kv):
            raise ValueError(
                f"{name}: {t} neither divides the {kv} key/value heads of {model.slug} nor is "
                "a multiple of them (each device holds whole key/value heads)"
            )
    return tp


def check_positions(
    model: ModelCard, *, context: ArrayLike, new_tokens: ArrayLike, name: str = "context"
) -> None:
    """A ValueError unless every ``context + new_tokens`` (broadcasting) is at most the model's
    ``max_position``: the last new token's position must be one the model was made for.

    Encoder-decoder models (T5) are not checked: their relative-position
    buckets have no last position, and their cards' ``max_position`` is the
    input length they were pre-trained on, not a limit.
    """
    if model.architecture != "decoder":
        return
    ctx, new = np.broadcast_arrays(np.asarray(context), np.asarray(new_tokens))
    ends = ctx.astype(np.float64) + new
    if not ends.size or float(ends.max()) <= model.max_position:
        return
    i = np.unravel_index(int(np.argmax(ends)), ends.shape)
    where = f" (element {tuple(int(j) for j in i)})" if ends.size > 1 else ""
    raise ValueError(
        f"{name}: {_whole(ctx[i])} + {_whole(new[i])} new tokens exceeds {model.slug}'s "
        f"max_position {model.max_position}{where}"
    )


def check_draft_pair(
    target: ModelCard | str | os.PathLike[str], draft: ModelCard | str | os.PathLike[str]
) -> None:
    """A ValueError unless ``draft`` can draft for ``target`` in speculative decoding.

    The target verifies the draft's tokens, so both must share one tokenizer:
    the same vocabulary size, or one family (a family shares its tokenizer
    while padding its embedding tables differently: Qwen2.5-0.5B has 151,936
    rows, Qwen2.5-7B 152,064). Both must be of one architecture (a decoder-only
    draft cannot feed an encoder-decoder target's decoder, nor the reverse). A
    draft with more parameters than its target only slows decoding down (the
    cost coefficient c exceeds 1); a draft the target's own size is allowed
    (self-drafting, the upper bound alpha = 1 of a check).
    """
    target, draft = check_model(target, name="target"), check_model(draft, name="draft")
    pair = f"draft {draft.slug} for target {target.slug}"
    if draft.architecture != target.architecture:
        raise ValueError(
            f"draft: architecture {draft.architecture!r} of {draft.slug} differs from "
            f"{target.architecture!r} of target {target.slug}"
        )
    if draft.vocab != target.vocab and draft.family != target.family:
        raise ValueError(
            f"draft: vocab {draft.vocab:,} of {draft.slug} differs from vocab {target.vocab:,} "
            f"of target {target.slug} (family {draft.family!r} vs {target.family!r}): a draft "
            "must share its target's tokenizer"
        )
    if draft.params > target.params:
        raise ValueError(
            f"draft: {pair} is larger than its target ({draft.params:,} > {target.params:,} "
            "parameters): it would slow decoding down"
        )
