"""``specsim tree``: the token tree with the most emitted tokens per second on a machine.

Examples::

    specsim tree --model llama-2-7b --draft llama-68m --hardware a100-80gb --batch 1 \\
        --acceptance models/measured/ngram/accept-sample.toml
    specsim tree --model llama-2-7b --ngram --hardware h100-sxm --batch 16 \\
        --acceptance models/measured/ngram/accept-sample.toml --json
    specsim tree --model llama-2-7b --head eagle-llama-2-chat-7b --hardware a100-80gb --batch 8
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

from specsim.cards import load_head, load_model
from specsim.checks import LIMITS
from specsim.cli import deployment, jsonout
from specsim.cli.output import card_option
from specsim.cost import DEFAULT_CONTEXT
from specsim.policies.tree_optimizer import TreePlan, optimize_tree
from specsim.proposers import DraftModel, Heads, NGram, Proposer, load_acceptance


def add_arguments(parser: argparse.ArgumentParser) -> None:
    deployment.add_arguments(parser)
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--draft", default=None, help="draft model card slug or .toml path")
    who.add_argument("--head", default=None, help="head card slug (models/heads/) or .toml path")
    who.add_argument(
        "--ngram", action="store_true", help="n-gram lookup: no model, a host search per pass"
    )
    parser.add_argument(
        "--acceptance",
        default=None,
        metavar="FILE",
        help="acceptance by depth and rank, .toml or .csv (docs/proposers.md); required with "
        "--draft and --ngram, optional with --head (default: the head card's)",
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
    acc = None if args.acceptance is None else load_acceptance(args.acceptance)
    if args.head is not None:
        card = card_option(load_head, args.head, option="--head", cards=args.cards)
        heads = Heads(card=card)
        if acc is not None:
            raise ValueError("--acceptance: a head card carries its own acceptance; drop one")
        return heads
    if acc is None:
        raise ValueError("--acceptance: required with --draft and --ngram")
    if args.ngram:
        return NGram(acceptance=acc)
    draft = card_option(load_model, args.draft, option="--draft", cards=args.cards)
    return DraftModel(card=draft, acceptance=acc)


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
