"""``specsim cost``: the cost of one pass of a model on an accelerator.

Examples::

    specsim cost --model llama-2-7b --hardware a100-80gb --batch 1 --context 512
    specsim cost --model llama-2-70b --hardware h100-sxm --tensor-parallel 4 --json
    specsim cost --model llama-2-7b --hardware a100-80gb --plot-v v.png
    specsim cost --model llama-2-7b --hardware a100-80gb --weights int4 --group-size 32 --kv fp16
    specsim cost --model llama-3.2-1b --hardware h100-sxm --tensor-parallel 16
    specsim cost --model llama-160m --hardware cpu-epyc-2vcpu --runtime cpu-eager-pytorch
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specsim.checks import LIMITS
from specsim.cli import deployment, jsonout
from specsim.cli.output import check_file, writable
from specsim.cost import (
    DEFAULT_CONTEXT,
    Deployment,
    StepCost,
    chain_shape,
    ridge_tokens,
    verification_factor,
    verification_frame,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    deployment.add_arguments(parser)
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help=f"sequences in the pass (default 1, at most {LIMITS['batch'].most:,})",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"tokens already in each sequence's KV cache (default {DEFAULT_CONTEXT})",
    )
    parser.add_argument(
        "--new-tokens", type=int, default=1, help="new tokens per sequence (gamma + 1 to verify)"
    )
    parser.add_argument(
        "--encoder-length", type=int, default=None, help="T5 only: encoder output length"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot-v",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="also draw v(gamma) against batch x (gamma + 1) for gamma 1, 3, 7 into FILE",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing --plot-v FILE")


REFERENCE_GAMMA = 7
"""The gamma whose v(gamma) is shown when the pass itself verifies nothing (one new token)."""


def verified_gamma(new_tokens: int) -> int:
    """The gamma whose verification pass ``new_tokens`` describes (``new_tokens - 1``).

    A one-token pass verifies no draft; v(gamma) is then shown for
    :data:`REFERENCE_GAMMA`, and the output says so.
    """
    return new_tokens - 1 if new_tokens > 1 else REFERENCE_GAMMA


def run(args: argparse.Namespace) -> int:
    if args.plot_v is not None:
        check_file(args.plot_v, option="--plot-v", force=args.force)
    dep = deployment.from_args(args)
    shape = chain_shape(batch=args.batch, context=args.context, new_tokens=args.new_tokens)
    cost = dep.pass_cost(shape, verify=False, encoder_length=args.encoder_length)
    gamma = verified_gamma(args.new_tokens)
    v = float(
        verification_factor(
            dep, gamma, batch=args.batch, context=args.context, encoder_length=args.encoder_length
        )
    )
    hw, runtime = dep.hardware, dep.runtime
    ridge = ridge_tokens(hw, cost.dtype, runtime=runtime)
    stack = runtime.slug if runtime is not None else (hw.runtime or f"{hw.slug}'s own numbers")
    if args.plot_v is not None:
        from specsim.plots.cost import plot_verification_factor  # start-up: matplotlib

        df = verification_frame(dep, context=args.context, encoder_length=args.encoder_length)
        plot_verification_factor(df).savefig(writable(args.plot_v), dpi=120)
    if args.json:
        out = {
            "model": dep.target.slug,
            "hardware": hw.slug,
            "context": args.context,
            "runtime": stack,
            **cost.as_dict(),
            "tokens_per_s": cost.tokens / cost.time_s,
            "ridge_tokens": ridge,
            "verification_gamma": gamma,
            "verification_factor": v,
        }
        if args.plot_v is not None:
            out["plot_v"] = str(args.plot_v)
        print(jsonout.dumps(out))
        return 0
    rows = _rows(args, dep, cost, stack=stack, ridge=ridge, gamma=gamma, v=v)
    width = max(len(label) for label, _ in rows)
    for label, text in rows:
        print(f"{label:<{width}}  {text}")
    return 0


def _rows(
    args: argparse.Namespace,
    dep: Deployment,
    cost: StepCost,
    *,
    stack: str,
    ridge: float,
    gamma: int,
    v: float,
) -> list[tuple[str, str]]:
    """The table ``specsim cost`` prints: one (label, text) a line."""
    gb = 1e9
    rows = [
        (
            "pass",
            f"{dep.target.slug} on {dep.hardware.slug}, batch {cost.batch}, context "
            f"{args.context}, {args.new_tokens} new token(s), {cost.dtype}, tensor parallel "
            f"{cost.tensor_parallel}",
        ),
        (
            "formats",
            f"weights {cost.weight_format}"
            + (f" (group {dep.group_size})" if dep.group_size else "")
            + f", KV cache {cost.kv_format}, activations {cost.dtype}",
        ),
        ("runtime", stack),
        *_time_rows(cost, ridge),
        ("flops", f"{cost.flops:.4g}"),
        (
            "bytes",
            f"{cost.bytes / gb:.3f} GB  (weights {cost.weight_bytes / gb:.3f}, KV "
            f"{cost.kv_bytes / gb:.3f}, activations {cost.activation_bytes / gb:.3f})",
        ),
        ("energy", f"{cost.energy_j:.3f} J  ({cost.energy_j / cost.tokens:.3f} J per token)"),
        (
            "memory used",
            f"{cost.resident_bytes / gb:.2f} GB of {dep.hardware.mem_capacity / gb:.2f} GB per "
            "device",
        ),
        (
            f"v(gamma={gamma})",
            f"{v:.3f}  (time of {gamma + 1} new tokens / time of 1, same batch"
            + (
                ")"
                if args.new_tokens > 1
                else f"; this pass verifies no draft, gamma {gamma} shown)"
            ),
        ),
    ]
    if args.plot_v is not None:
        rows.append(("plot", str(args.plot_v)))
    return rows


def _time_rows(cost: StepCost, ridge: float) -> list[tuple[str, str]]:
    """The pass's time and what it is made of: roofline, dequantization, overheads, all-reduce."""
    ms = 1e3
    return [
        ("time", f"{cost.time_s * ms:.3f} ms  ({cost.tokens / cost.time_s:,.1f} tokens/s)"),
        ("bound", f"{cost.bound}  (ridge at ~{ridge:.0f} tokens per pass)"),
        (
            "  roofline",
            f"{cost.roofline_time_s * ms:.3f} ms  (compute {cost.compute_time_s * ms:.3f} ms, "
            f"memory {cost.memory_time_s * ms:.3f} ms)",
        ),
        ("  dequantize", f"{cost.dequant_time_s * ms:.3f} ms  (part of the roofline)"),
        ("  overheads", f"{cost.overhead_time_s * ms:.3f} ms"),
        (
            "  all-reduce",
            f"{cost.allreduce_time_s * ms:.3f} ms  "
            f"({cost.allreduce_time_s / cost.time_s:.1%} of the pass)",
        ),
    ]
