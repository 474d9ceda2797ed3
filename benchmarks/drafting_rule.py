"""Issue 31's closing figures for the one drafting rule: plain step, draft step, verification.

Run: .venv/bin/python benchmarks/drafting_rule.py [--context N]

Two deployments of the issue: DeepSeek-V3 with its MTP module on 8 B200s (tensor and expert
parallel 8) under ``tensorrt-llm`` at batch 1, and Llama-3.1-8B with an EAGLE-3 head
(``models/heads/eagle3-llama-3.1-8b.toml``) on one H100 under ``sglang`` at batch 1 and 64.
For each: the target's plain step (its host part: the stack's per-pass and per-layer host
costs), one draft step now (the drafting rule, :func:`specsim.cost.drafting.price_draft`:
the stack's draft-step host cost) and before it (the step priced on the target's own
deployment, ``scale`` of its pass with the per-pass host cost in it: what ``Heads`` did
before the rule), each with its host share, and the verification passes of k + 1 positions
with v = their time over the plain step's. Every number is the model's; none is measured.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from specsim.cards import load_head
from specsim.cost import Deployment, PassShape
from specsim.cost.drafting import DraftWork, price_draft
from specsim.cost.resolved import pass_terms
from specsim.proposers import Heads
from specsim.proposers.work import frontier_work


@dataclass(frozen=True)
class Case:
    label: str
    deployment: Deployment
    heads: Heads
    batch: int


def cases() -> list[Case]:
    dsv3 = Deployment(
        target="deepseek-v3",
        hardware="b200",
        runtime="tensorrt-llm",
        tensor_parallel=8,
        expert_parallel=8,
    )
    llama = Deployment(target="llama-3.1-8b", hardware="h100-sxm", runtime="sglang")
    mtp, eagle = (
        Heads(card=load_head("mtp-deepseek-v3")),
        Heads(card=load_head("eagle3-llama-3.1-8b")),
    )
    return [
        Case("DeepSeek-V3 + MTP, 8 x B200, tensorrt-llm", dsv3, mtp, 1),
        Case("Llama-3.1-8B + EAGLE-3, H100, sglang", llama, eagle, 1),
        Case("Llama-3.1-8B + EAGLE-3, H100, sglang", llama, eagle, 64),
    ]


def _step_work(case: Case, context: int) -> DraftWork:
    dep, scale = case.heads.runs_on(case.deployment)
    work = frontier_work(dep, (1,), batch=case.batch, context=[context], scale=scale)
    assert work is not None
    return work


def before(work: DraftWork) -> tuple[float, float]:
    """``(seconds, host seconds)`` of one step by the pricing before the rule: ``scale`` of
    the model's pass on the target's own deployment, its per-pass host cost included."""
    t = pass_terms(work.deployment.resolved(), **_sums(work))
    return work.scale * float(t.time_s[0, 0]), work.scale * float(t.overhead_time_s[0, 0])


def after(work: DraftWork, batch: int) -> tuple[float, float]:
    """``(seconds, host seconds)`` of one step under the drafting rule (:func:`price_draft`):
    the stack's draft-step host cost whole, the per-layer launches scaled with the work."""
    r = work.deployment.drafting().resolved()
    step = r.step_host_s(float(batch))
    launches = float(pass_terms(r, **_sums(work)).overhead_time_s[0, 0]) - step
    return float(price_draft(work).time_s[0]), step + work.scale * launches


def _sums(work: DraftWork) -> dict[str, object]:
    B, T, C, P = work.sums()
    return {"batch": B, "tokens": T, "context_tokens": C, "pairs": P}


def rows(context: int) -> list[tuple[str, ...]]:
    out = []
    for case in cases():
        dep, b = case.deployment, case.batch
        plain = dep.pass_cost(PassShape.chain(context=context, new=1, batch=b))
        work = _step_work(case, context)
        (t0, h0), (t1, h1) = before(work), after(work, b)
        check = case.heads.draft_cost([-1], deployment=dep, batch=b, context=context).time_s
        assert abs(check - t1) <= 1e-12 * t1, (check, t1)  # the proposer prices it so
        ver = [
            dep.pass_cost(PassShape.chain(context=context, new=n, batch=b), verify=True).time_s
            for n in range(2, 7)
        ]
        out.append((
            f"{case.label}, batch {b}",
            f"{plain.time_s * 1e3:.3f} ({plain.overhead_time_s * 1e3:.2f} host, "
            f"{plain.allreduce_time_s * 1e3:.2f} collectives)",
            f"{t0 * 1e3:.3f} = {t0 / plain.time_s:.2f} step ({h0 / t0:.0%} host)",
            f"{t1 * 1e3:.3f} = {t1 / plain.time_s:.3f} step ({h1 / t1:.0%} host)",
            " / ".join(f"{v * 1e3:.2f}" for v in ver),
            " / ".join(f"{v / plain.time_s:.3f}" for v in ver),
        ))  # fmt: skip
    return out


HEADER = (
    "deployment",
    "plain step, ms",
    "draft step before, ms",
    "draft step now, ms",
    "verify k+1 = 2..6, ms",
    "v(k) = verify / plain",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=512, help="cached tokens (default 512)")
    args = parser.parse_args()
    print(f"context {args.context} tokens")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for row in rows(args.context):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
