"""``specsim tree``: the token tree with the most emitted tokens per second on a machine.

Examples::

    specsim tree --model llama-2-7b --draft llama-68m --hardware a100-80gb --batch 1 \\
        --acceptance models/measured/ngram/accept-sample.toml
    specsim tree --model llama-2-7b --ngram --hardware h100-sxm --batch 16 \\
        --acceptance models/measured/ngram/accept-sample.toml --json
    specsim tree --model llama-2-7b --head eagle-llama-2-chat-7b --hardware a100-80gb --batch 8
    specsim tree --model llama-3.1-8b --parallel pard-llama-3.2-1b-llama-3.1-8b \
        --hardware h100-sxm --batch 4
    specsim tree --model llama-2-7b --selfspec layerskip-llama-2-7b-e8 --hardware a100-80gb
    specsim tree --model llama-2-7b --draft llama-68m --hardware a100-80gb \
        --acceptance models/measured/ngram/accept-sample.toml --runtime pytorch-eager-a100 \
        --weights int4 --kv fp8

The deployment flags (``--model``, ``--hardware``, ``--runtime``, ``--dtype``, ``--weights``,
``--group-size``, ``--kv``, ``--tensor-parallel``, ``--draft-placement``, ``--deployment``)
are those of ``specsim cost`` (:mod:`specsim.cli.deployment`): the target's verification
and the proposer's drafting are both priced under them.
"""

from __future__ import annotations

import argparse

from specsim.checks import LIMITS
from specsim.cli import deployment, jsonout
from specsim.cost import DEFAULT_CONTEXT
from specsim.policies.tree_optimizer import TreePlan, optimize_tree
from specsim.proposers import KINDS, Proposer, build_proposer, load_acceptance


def add_arguments(parser: argparse.ArgumentParser) -> None:
    deployment.add_arguments(parser)
    who = parser.add_mutually_exclusive_group(required=True)
    for kind in KINDS.values():  # every proposer kind, one flag each
        if not kind.card:
            who.add_argument(kind.flag, action="store_true", help=kind.what)
        elif kind.name == "heads":  # --head: the flag's first name, kept
            who.add_argument("--heads", "--head", dest="heads", metavar="SLUG", help=kind.what)
        else:
            who.add_argument(kind.flag, metavar="SLUG", help=f"{kind.what}, slug or .toml path")
    parser.add_argument(
        "--acceptance",
        default=None,
        metavar="FILE",
        help="acceptance by depth and rank, .toml or .csv (docs/proposers.md); required with "
        "--draft and --ngram; the other kinds' cards carry theirs",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help=f"sequences per pass (default 1, at most {LIMITS['batch'].most:,})",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=32,
        help=f"most tree nodes (default 32, at most {LIMITS['tree_nodes'].most:,})",
    )
    parser.add_argument("--max-depth", type=int, default=12, help="deepest tree (default 12)")
    parser.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"tokens already cached per sequence (default {DEFAULT_CONTEXT})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _proposer(args: argparse.Namespace) -> Proposer:
    kind = next(k for k in KINDS.values() if getattr(args, k.flag[2:]))
    acc = None if args.acceptance is None else load_acceptance(args.acceptance)
    if kind.needs_acceptance and acc is None:
        raise ValueError(f"--acceptance: required with {kind.flag}")
    if not kind.needs_acceptance and acc is not None:
        raise ValueError(f"--acceptance: {kind.what} carries its own acceptance; drop one")
    card = getattr(args, kind.flag[2:]) if kind.card else None
    try:
        return build_proposer(kind.name, card=card, acceptance=acc, search_path=args.cards)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        which = next(t for t in (FileNotFoundError, TypeError, ValueError) if isinstance(exc, t))
        raise which(f"{kind.flag}: {exc}") from None


def _line(p: TreePlan, none: TreePlan) -> str:
    return (
        f"{p.nodes:>3} nodes, depth {p.depth:>2}: {p.tokens_per_pass:6.3f} tokens/pass, "
        f"{p.tokens_per_s:10,.1f} tokens/s ({p.tokens_per_s / none.tokens_per_s:5.2f}x), "
        f"{p.energy_per_token_j * 1e3:8.3f} mJ/token, discarded {p.discarded_share:6.1%}"
    )


def run(args: argparse.Namespace) -> int:
    dep = deployment.from_args(args)
    target, hw = dep.target, dep.hardware
    proposer = _proposer(args)
    o = optimize_tree(
        proposer=proposer,
        deployment=dep,
        batch=args.batch,
        budget=args.budget,
        context=args.context,
        max_depth=args.max_depth,
    )
    stack = dep.describe()
    if args.json:
        out = {
            **stack,
            "proposer": proposer.name,
            "acceptance_source": proposer.acceptance.source,
            "batch": args.batch,
            "budget": args.budget,
            "max_depth": args.max_depth,
            "context": args.context,
            "chains_only": o.chains_only or None,
            "best": o.best.as_dict(),
            "chain": o.chain.as_dict(),
            "kary": None if o.chains_only else o.kary.as_dict(),
            "none": o.none.as_dict(),
        }
        print(jsonout.dumps(out))
        return 0
    print(
        f"{proposer.name} for {target.slug} on {hw.slug}, batch {args.batch}, context "
        f"{args.context}, budget {args.budget} nodes, depth <= {args.max_depth}"
    )
    print(
        f"stack: {stack['runtime'] or hw.slug + ' card numbers'}, weights {stack['weights']}, "
        f"KV {stack['kv']}, tensor parallel {stack['tensor_parallel']}"
    )
    if proposer.acceptance.source:
        print(f"acceptance: {proposer.acceptance.source}")
    if o.chains_only:
        print(f"chains only (no branching tree searched): {o.chains_only}")
    width = max(len(p.kind) for p in o.plans())
    for p in o.plans():
        print(f"{p.kind:<{width}}  {_line(p, o.none)}")
    print(f"best tree parents: {list(o.best.parents)}")
    return 0
