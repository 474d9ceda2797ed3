"""The deployment flags every subcommand shares, and the one function that reads them.

``add_arguments(parser)`` adds one argument group, "deployment", with the same flag names
on every subcommand that prices a pass (``cost``, ``tree``): ``--model``, ``--hardware``,
``--runtime``, ``--dtype``, ``--weights``, ``--group-size``, ``--kv``,
``--tensor-parallel``, ``--expert-parallel``, ``--expert-weights``, ``--draft-placement``
(and ``--cards``, the extra card folders the cards are looked up in). ``--deployment FILE``
reads a TOML file's ``[deployment]`` table (:func:`specsim.cost.deployment.load_deployment`)
and the flags given override its keys.
``from_args(args)`` returns the :class:`~specsim.cost.deployment.Deployment`; an error
names the flag (or the file) the bad value came from.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from specsim.cards import is_stack, load_hardware, load_model, load_runtime
from specsim.cards.stack_files import stacks_dir
from specsim.cli.output import card_option
from specsim.cost.deployment import PLACEMENTS, Deployment, load_deployment
from specsim.cost.quant import KV_FORMATS, WEIGHT_FORMATS

__all__ = ["add_arguments", "from_args", "FLAGS"]

FLAGS = {
    "dtype": "--dtype",
    "weights": "--weights",
    "kv": "--kv",
    "group_size": "--group-size",
    "tensor_parallel": "--tensor-parallel",
    "expert_parallel": "--expert-parallel",
    "expert_weights": "--expert-weights",
    "draft_placement": "--draft-placement",
}
"""Deployment field -> the flag that sets it (besides the cards: --model, --hardware,
--runtime), so an error from the Deployment names the flag the user typed."""


def add_arguments(parser: argparse.ArgumentParser, *, cards: bool = True) -> None:
    """The deployment group (module docstring); ``cards``: also add ``--cards DIR``."""
    g = parser.add_argument_group("deployment", "what runs where (docs/design.md)")
    g.add_argument("--deployment", default=None, metavar="FILE", help="a TOML [deployment] table")
    g.add_argument("--model", default=None, help="target model card slug or .toml path")
    g.add_argument("--hardware", default=None, help="accelerator card slug or .toml path")
    g.add_argument(
        "--runtime",
        default=None,
        metavar="NAME",
        help="a software stack, on any card of its kind ("
        + ", ".join(sorted(p.stem for p in stacks_dir().glob("*.toml")))
        + "; docs/stacks.md), or a runtime profile slug or .toml path (default: the one "
        "the hardware card names, gpt-fast for GPUs; `specsim cards` lists them)",
    )
    g.add_argument("--dtype", default=None, help="compute dtype (default: the model card's)")
    g.add_argument(
        "--weights",
        default=None,
        metavar="FORMAT",
        help=f"weight format, one of {', '.join(WEIGHT_FORMATS)} (or bf16, fp16, fp8; "
        "default: --dtype)",
    )
    g.add_argument(
        "--group-size", type=int, default=None, help="int4 only: weights per quantization group"
    )
    g.add_argument(
        "--kv",
        default=None,
        metavar="FORMAT",
        help=f"KV-cache format, one of {', '.join(KV_FORMATS)} (default: --dtype)",
    )
    g.add_argument("--tensor-parallel", type=int, default=None, help="devices (default 1)")
    g.add_argument(
        "--expert-parallel",
        type=int,
        default=None,
        help="MoE targets: expert groups over the --tensor-parallel devices (default 1)",
    )
    g.add_argument(
        "--expert-weights",
        default=None,
        metavar="FORMAT",
        help="MoE targets: the routed experts' weight format (default: --weights)",
    )
    g.add_argument(
        "--draft-placement",
        default=None,
        choices=PLACEMENTS,
        help="where a draft model runs (default shared: on the target's devices)",
    )
    if cards:
        g.add_argument(
            "--cards", action="append", default=None, metavar="DIR", help="extra card folder"
        )


def _cards(args: argparse.Namespace) -> dict[str, Any]:
    cards = getattr(args, "cards", None)
    out: dict[str, Any] = {}
    for field, flag, loader in (
        ("target", "--model", load_model),
        ("hardware", "--hardware", load_hardware),
    ):
        value = getattr(args, flag[2:])
        if value is not None:
            out[field] = card_option(loader, value, option=flag, cards=cards)
    return out


def from_args(args: argparse.Namespace) -> Deployment:
    """The Deployment the flags (over ``--deployment FILE``, when given) describe."""
    base = None if args.deployment is None else load_deployment(args.deployment)
    given = _cards(args)
    for field, flag in FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            given[field] = value
    if base is None:
        for field, flag in (("target", "--model"), ("hardware", "--hardware")):
            if field not in given:
                raise ValueError(f"{flag}: required (or --deployment FILE)")
    if args.runtime is not None:
        cards = getattr(args, "cards", None)
        given["runtime"] = (
            args.runtime  # a stack: the Deployment composes it with the hardware's device part
            if is_stack(args.runtime)
            else card_option(load_runtime, args.runtime, option="--runtime", cards=cards)
        )
    elif base is not None and "hardware" in given and base.runtime is not None:
        given["runtime"] = None  # --hardware replaces the file's: its profile may not fit
    try:
        if base is not None:
            return dataclasses.replace(base, **given)
        return Deployment(**given)
    except ValueError as exc:
        raise ValueError(f"{_flag_of(str(exc))}{exc}") from None


def _flag_of(message: str) -> str:
    """The flag a Deployment error is about, as a prefix (``"--kv: "``), or ``""``."""
    for field, flag in (("runtime", "--runtime"), *FLAGS.items()):
        if message.startswith((f"{field}:", f"deployment {field}")):
            return f"{flag}: "
    return ""
