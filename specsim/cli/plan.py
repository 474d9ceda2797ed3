"""``specsim plan``: would speculative decoding pay off here, with what, by how much?

Examples::

    specsim plan --model vicuna-7b-v1.3 --hardware h100-sxm --runtime vllm-h100 \\
        --heads eagle-vicuna-7b-v1.3 --heads medusa-vicuna-7b-v1.3 --ngram --rate 4
    specsim plan --model llama-2-70b --hardware a100-80gb --tensor-parallel 4 \\
        --draft llama-2-7b --alpha 0.7 --batch 8 --price-per-gpu-hour 2
    specsim plan --config studies/configs/plan-70b.toml --json

The deployment flags are those of ``specsim cost`` and ``specsim tree``
(:mod:`specsim.cli.deployment`); ``--config FILE`` reads a plan TOML
(:func:`specsim.plan.plan_toml.request_from_toml`), whose values the flags given here replace.
The logic is :func:`specsim.plan.plan`; the page is ``docs/plan.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from specsim.cli import deployment, jsonout
from specsim.cli.output import check_file, writable
from specsim.sim.workload.workload import PRESETS

_LOAD = {"batch": "--batch", "rate_per_s": "--rate", "workload": "--workload"}
_LOAD |= {"prompt_tokens": "--prompt", "output_tokens": "--output", "requests": "--requests"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    deployment.add_arguments(parser)
    parser.add_argument("--config", metavar="FILE", help="a plan TOML (docs/plan.md)")
    from specsim.proposers import KINDS  # start-up: the plan loads the proposers anyway

    g = parser.add_argument_group("options", "the proposers weighed against no speculation")
    for kind in KINDS.values():  # one flag per kind; a kind without a card is a switch
        if not kind.card:
            g.add_argument(kind.flag, action="store_true", help=kind.what)
        else:
            what = f"{kind.what} (repeatable)"
            g.add_argument(kind.flag, action="append", default=[], metavar="SLUG", help=what)
    _add_acceptance(g)
    _add_fixed(parser)
    load = parser.add_argument_group("load")
    load.add_argument("--batch", type=int, help="a closed batch of N sequences")
    load.add_argument("--rate", type=float, metavar="R", help="requests per second")
    load.add_argument("--workload", choices=sorted(PRESETS), help="a workload preset's lengths")
    load.add_argument("--prompt", type=int, metavar="N", help="prompt tokens (default 512)")
    load.add_argument("--output", type=int, metavar="N", help="output tokens (default 256)")
    load.add_argument("--requests", type=int, help="requests per serving run (default 200)")
    load.add_argument("--max-batch", type=int, help="sequences per pass at most (default 64)")
    parser.add_argument("--slo-ttft-p99", type=float, metavar="S", help="p99 TTFT target, seconds")
    parser.add_argument("--slo-tpot-p99", type=float, metavar="S", help="p99 TPOT target, seconds")
    parser.add_argument("--price-per-gpu-hour", type=float, metavar="USD", help="for $/M tokens")
    parser.add_argument("--precise", action="store_true", help="5x the requests: tighter intervals")
    parser.add_argument("--seed", type=int, default=None, help="seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    parser.add_argument("--html", metavar="FILE", help="also write the answer as an HTML page")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --html FILE")


def _add_acceptance(g: argparse._ArgumentGroup) -> None:
    """The acceptance flags: one form, bound as :func:`_bind` says (docs/plan.md)."""
    bound = "for the --draft options, else the one option given"
    g.add_argument(
        "--alpha",
        type=float,
        help="an assumed i.i.d. acceptance for --draft (for --ngram when no --draft is given); "
        "flagged as assumed; a --draft with no acceptance gets its break-even",
    )
    g.add_argument(
        "--acceptance",
        metavar="FILE",
        help=f"a measured acceptance by depth and rank (.toml/.csv), {bound}; for a card's "
        "kind in place of its published table (default for --ngram: the packaged sample "
        "corpus's, flagged)",
    )
    g.add_argument(
        "--acceptance-per-position",
        metavar="R1,R2,...",
        help=f"vLLM's acceptance_rate_per_position (measured per depth), {bound}",
    )
    g.add_argument(
        "--accept-length",
        metavar="L@K",
        help="a mean accepted length L (bonus token included) at lookahead K, as SGLang's "
        f"accept_length or TensorRT-LLM's acceptance length (i.i.d. assumed), {bound}",
    )


def _add_fixed(parser: argparse.ArgumentParser) -> None:
    """What the user fixes about each option: its lookahead, a draft model's deployment."""
    from specsim.plan.lookahead import SHAPES  # start-up: as the proposers above

    g = parser.add_argument_group("fixed", "what every option is held to instead of searched")
    ahead = g.add_mutually_exclusive_group()
    ahead.add_argument(
        "--k", type=int, metavar="K", help="a chain of K drafted tokens for every option"
    )
    ahead.add_argument("--tree", metavar="SHAPE", help=f"a token tree for every option: {SHAPES}")
    g.add_argument(
        "--draft-weights", metavar="FORMAT", help="the draft model's own weight format (e.g. int4)"
    )
    g.add_argument(
        "--draft-runtime", metavar="NAME", help="the draft model's own stack or runtime profile"
    )
    g.add_argument(
        "--draft-tensor-parallel", type=int, metavar="N", help="the draft model's own devices"
    )


_FIXED = {
    "k": "--k",
    "tree": "--tree",
    "weights": "--draft-weights",
    "runtime": "--draft-runtime",
    "tensor_parallel": "--draft-tensor-parallel",
}
"""An option's fixed field and the flag that sets it for every option."""


def _fixed(args: argparse.Namespace, options: list[Any]) -> list[Any]:
    """``options`` with what the flags fix (a lookahead for each, a deployment for each
    draft model) in place of their own; a draft flag without a draft option is refused."""
    from specsim.plan.draft_runs import DRAFT_KEYS  # start-up: as above

    ahead = {"k": args.k, "tree": args.tree} if args.k is not None or args.tree else {}
    draft = {f: getattr(args, _FIXED[f][2:].replace("-", "_")) for f in DRAFT_KEYS}
    draft = {f: v for f, v in draft.items() if v is not None}
    if draft and not any(o.kind == "draft" for o in options):
        flag = _FIXED[next(iter(draft))]
        raise ValueError(f"{flag}: the draft model's own deployment; no --draft option is given")
    out = []
    for o in options:
        own = draft if o.kind == "draft" else {}
        try:
            out.append(dataclasses.replace(o, **ahead, **own))
        except ValueError as exc:
            raise ValueError(_fixed_flag(str(exc), args)) from None
    return out


def _fixed_flag(text: str, args: argparse.Namespace) -> str:
    """An error about a fixed field (``k: ...``) named after its flag when one set it, else
    after the plan TOML it came from; ``text`` unchanged otherwise."""
    field, sep, rest = text.partition(":")
    if not sep or field not in _FIXED:
        return text
    if getattr(args, _FIXED[field][2:].replace("-", "_")) is not None:
        return f"{_FIXED[field]}:{rest}"
    return f"{args.config}: {text}" if args.config else text


def _options(args: argparse.Namespace) -> list[Any]:
    from specsim.plan import OptionSpec  # start-up: the plan loads the serving engine
    from specsim.proposers import KINDS

    out = []
    for kind in KINDS.values():
        given = getattr(args, kind.flag[2:])
        if not kind.card:
            out += [OptionSpec(kind=kind.name)] if given else []
        else:
            out += [OptionSpec(kind=kind.name, card=c) for c in given]
    return out


def _acceptance_flags(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The acceptance flag given (empty: none) and the option fields it sets; two refused."""
    # start-up: the acceptance forms load the plan, as the options do
    from specsim.plan.option_acceptance import FORMS

    # start-up: as above
    from specsim.proposers.engine_forms import parse_accept_length, parse_per_position

    given = [f for f in FORMS if getattr(args, f) is not None]
    flags = [f"--{f.replace('_', '-')}" for f in given]
    if len(given) > 1:
        raise ValueError(f"{', '.join(flags)}: give one acceptance form, not several")
    if not given:
        return "", {}
    value = getattr(args, given[0])
    if given[0] == "acceptance_per_position":
        value = parse_per_position(value, flag=flags[0])
    if given[0] == "accept_length":
        length, k = parse_accept_length(value, flag=flags[0])
        return flags[0], {"accept_length": length, "accept_length_k": k}
    return flags[0], {given[0]: value}


def _bind(args: argparse.Namespace, options: list[Any]) -> list[Any]:
    """``options`` with the acceptance flag's form: on every --draft option when one is
    given, else on the one option that takes it (an alpha: the n-gram lookup); no such
    option, or several, is refused naming the flag. It replaces an option's own form."""
    from specsim.plan.option_acceptance import COMMAND_LINE, FORMS  # start-up: as above
    from specsim.plan.options import spec_label  # start-up: as above
    from specsim.proposers import KINDS  # start-up: as above

    flag, form = _acceptance_flags(args)
    if not flag or not options:  # no option: the request names the flags to give
        return options
    takes = [o for o in options if flag != "--alpha" or KINDS[o.kind].needs_acceptance]
    if not takes:
        raise ValueError(
            "--alpha: an assumed alpha applies to --draft and --ngram options; for a card's "
            "kind give --accept-length L@K, --acceptance-per-position or --acceptance FILE"
        )
    bound = [o for o in takes if o.kind == "draft"] or takes
    if len(bound) > 1 and bound[0].kind != "draft":
        raise ValueError(
            f"{flag}: binds to the --draft options, else to the one option that takes it, "
            f"and {len(bound)} do ({', '.join(spec_label(o) for o in bound)}); give each "
            "option its own in a plan TOML ([[options]])"
        )
    own = {**dict.fromkeys((*FORMS, "accept_length_k")), **form, "acceptance_from": COMMAND_LINE}
    out = []
    for o in options:
        try:
            out.append(dataclasses.replace(o, **own) if any(o is b for b in bound) else o)
        except ValueError as exc:  # an alpha out of range: named after its flag
            raise ValueError(f"{flag}: {str(exc).removeprefix('alpha: ')}") from None
    return out


def _load(args: argparse.Namespace, base: Any) -> Any:
    from specsim.plan import Load  # start-up: as above

    given = {f: getattr(args, flag[2:]) for f, flag in _LOAD.items()}
    given = {f: v for f, v in given.items() if v is not None}
    fields = {} if base is None else dataclasses.asdict(base)
    if "batch" in given or "rate_per_s" in given:  # a load flag replaces the file's load
        fields.update(batch=None, rate_per_s=None)
    try:
        return Load(**(fields | given))
    except ValueError as exc:  # name the flag, or the file's key, the value came from
        file = None if base is None else f"{args.config} [load]"
        raise ValueError(_sourced(str(exc), _LOAD, given, file)) from None


def _sourced(text: str, flags: dict[str, str], given: Any, file: str | None) -> str:
    """An error about field ``NAME: ...`` named where its value came from: the flag when
    the field is in ``given`` (or there is no ``file``), else ``FILE [table]: key: ...`` as
    the file's own errors read; ``text`` unchanged when it names no field of ``flags``."""
    name, sep, rest = text.partition(":")
    field = "rate_per_s" if name == "rate" else name
    if not sep or field not in flags:
        return text
    if field in given or file is None:
        return f"{flags[field]}:{rest}"
    table, _, key = _FILE_KEYS.get(field, f" {field}").rpartition(" ")
    return f"{file}{table}: {key}:{rest}"


def request(args: argparse.Namespace) -> Any:
    """The :class:`~specsim.plan.PlanRequest` the flags (over ``--config``) describe."""
    from specsim.plan import PlanRequest, request_from_toml  # start-up: as above

    base = None
    if args.config:
        if not os.path.isfile(args.config):
            raise ValueError(f"--config: no such file {args.config!r}")
        base = request_from_toml(args.config)
        if args.deployment is None:
            args.deployment = args.config  # its [deployment] table, under the flags given
    dep = deployment.from_args(args)
    options = _options(args) or (list(base.options) if base is not None else [])
    options = _fixed(args, _bind(args, options))
    extra = {
        "slo_ttft_p99_s": args.slo_ttft_p99,
        "slo_tpot_p99_s": args.slo_tpot_p99,
        "price_per_gpu_hour": args.price_per_gpu_hour,
        "seed": args.seed,
        "max_batch": args.max_batch,
    }
    fields = {k: v for k, v in extra.items() if v is not None}
    if args.precise:
        fields["precise"] = True
    load = _load(args, None if base is None else base.load)
    try:
        if base is not None:
            return dataclasses.replace(
                base, deployment=dep, options=tuple(options), load=load, **fields
            )
        return PlanRequest(deployment=dep, options=tuple(options), load=load, **fields)
    except ValueError as exc:  # name the flag, or the file's key, the value came from
        raise ValueError(_flagged(_sourced(str(exc), _FIELDS, fields, args.config))) from None


_FIELDS = {
    "slo_tpot_p99_s": "--slo-tpot-p99",
    "slo_ttft_p99_s": "--slo-ttft-p99",
    "price_per_gpu_hour": "--price-per-gpu-hour",
    "max_batch": "--max-batch",
    "precise": "--precise",
    "seed": "--seed",
}
_FILE_KEYS = {"slo_tpot_p99_s": " [slo] tpot_p99_s", "slo_ttft_p99_s": " [slo] ttft_p99_s"}
"""A request field -> its table and key in a plan TOML, where they are not its own name."""


def _flagged(text: str) -> str:
    """A request error with the flag its value came from in front of it."""
    _, placement, rest = text.partition("deployment draft_placement ")
    if placement:  # the tree optimizer's check, named after the function that made it
        return f"--draft-placement: {rest}"
    for name, flag in _FIELDS.items():
        if text.startswith(name):
            return f"{flag}:{text[len(name) :].removeprefix(':')}"
    return text


def run(args: argparse.Namespace) -> int:
    from specsim.plan import plan, render_html, render_text  # start-up: as above

    if args.html:
        check_file(args.html, option="--html", force=args.force)
    try:
        answer = plan(request(args))
    except ValueError as exc:
        raise ValueError(_fixed_flag(_flagged(str(exc)), args)) from None
    if args.html:
        with open(writable(args.html), "w", encoding="utf-8") as fh:
            fh.write(render_html(answer))
    if args.json:
        print(jsonout.dumps(answer.as_dict()))
    else:
        print(render_text(answer), end="")
    return 0
