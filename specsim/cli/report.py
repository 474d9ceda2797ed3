"""``specsim report``: the main job."""

from __future__ import annotations

import argparse

import numpy as np

from specsim.demo import SamplingDemo, two_token_demo

HELP = "Run the main job: the sampling demonstration (and, as specsim grows, the studies)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=2023, help="seed of the Monte Carlo check")
    parser.add_argument(
        "--blocks", type=int, default=200_000, help="Monte Carlo blocks for the sampling demo"
    )


def format_demo(d: SamplingDemo) -> str:
    def vec(x: tuple[float, ...]) -> str:
        return "(" + ", ".join(f"{v:.6g}" for v in x) + ")"

    mc = ", ".join(
        f"{v:.4f} ± {1.96 * s:.4f}" for v, s in zip(d.mc_emitted, d.mc_emitted_se, strict=True)
    )
    corrected = (
        "n/a" if d.rejected_b_corrected_to_a is None else f"{d.rejected_b_corrected_to_a:.4f}"
    )
    return "\n".join(
        [
            "Exact speculative sampling, one position, two tokens (A, B)",
            f"  target p                       {vec(d.target)}",
            f"  draft q                        {vec(d.draft)}",
            f"  acceptance sum min(p, q)       {d.acceptance:.6g}",
            f"  correction norm(max(0, p - q)) {vec(d.correction)}",
            f"  emitted distribution           {vec(d.emitted)}",
            f"  max |emitted - p|              {d.max_deviation:.3g}",
            f"Monte Carlo check of verify ({d.blocks:,} blocks, 95% intervals)",
            f"  acceptance                     {d.mc_acceptance:.4f} ± "
            f"{1.96 * d.mc_acceptance_se:.4f}",
            f"  emitted frequencies            {mc}",
            f"  rejected B corrected to A      {corrected}",
        ]
    )


def run(args: argparse.Namespace) -> int:
    demo = two_token_demo(np.random.default_rng(args.seed), blocks=args.blocks)
    print(format_demo(demo))
    return 0
