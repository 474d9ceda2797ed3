"""One drafting rule for every proposer kind: a draft step pays the stack's draft-step host
cost (inside the target's step, or a separate worker's), never its per-pass cost; the
proposer's own KV prefill is priced; a ragged batch of equal trees is the homogeneous pass;
self-speculation drafts in the deployment's formats and parallelism."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from specsim.cards import load_head, load_model
from specsim.cards.stack import StackProfile
from specsim.cards.stack_files import load_stack
from specsim.cost import Deployment, PassShape
from specsim.cost.memory import footprint
from specsim.proposers import (
    DraftModel,
    Heads,
    KVBudget,
    NGram,
    ParallelDraft,
    Proposer,
    RankAcceptance,
    SelfSpeculation,
    StreamingSelfSpec,
    early_exit_card,
)

ACC = RankAcceptance(accept=((0.7, 0.2),) * 5)
CHAIN3, TREE = [-1, 0, 1], [-1, -1, 0, 0, 1]  # a chain of 3; a tree of depth 3, widths 1, 2, 2
B, CTX = 4, 600


def _draft() -> DraftModel:
    return DraftModel(card=load_model("llama-3.2-1b"), acceptance=ACC)


def _heads(slug: str) -> Callable[[], Proposer]:
    return lambda: Heads(card=load_head(slug))


def _card(kind: type[ParallelDraft] | type[SelfSpeculation], slug: str) -> Callable[[], Proposer]:
    return lambda: kind.from_card(slug)


def _streaming() -> StreamingSelfSpec:
    return StreamingSelfSpec(target="llama-3.1-8b", budget=256, acceptance=ACC)


def _budgeted() -> KVBudget:
    return KVBudget(proposer=_draft(), budget=256, acceptance=ACC)


L8, H100 = "llama-3.1-8b", "h100-sxm"
EP8 = {"tensor_parallel": 8, "expert_parallel": 8}
# (proposer, target, hardware, extra deployment fields, draft steps of CHAIN3)
KINDS: dict[str, tuple[Callable[[], Proposer], str, str, dict[str, object], int]] = {
    "draft-model": (_draft, L8, H100, {}, 3),
    "eagle": (_heads("eagle3-llama-3.1-8b"), L8, H100, {}, 3),
    "medusa": (_heads("medusa-vicuna-7b-v1.3"), "vicuna-7b-v1.3", H100, {}, 1),
    "mtp": (_heads("mtp-deepseek-v3"), "deepseek-v3", "h200", EP8, 3),
    "pard": (_card(ParallelDraft, "pard-llama-3.2-1b-llama-3.1-8b"), L8, H100, {}, 1),
    "layerskip": (
        _card(SelfSpeculation, "layerskip-llama-2-7b-e8"),
        "llama-2-7b",
        "a100-80gb",
        {},
        3,
    ),
    "streaming": (_streaming, L8, H100, {}, 3),
    "kv-budget": (_budgeted, L8, H100, {}, 3),
    "ngram": (lambda: NGram(acceptance=ACC), L8, H100, {}, 0),
}


def _on(kind: str, stack: StackProfile | str | None) -> tuple[Proposer, Deployment]:
    make, target, hw, extra, _ = KINDS[kind]
    dep = Deployment(target=target, hardware=hw, runtime=stack, **extra)  # type: ignore[arg-type]
    return make(), dep


def _time(kind: str, stack: StackProfile, parents: list[int] = CHAIN3) -> float:
    proposer, dep = _on(kind, stack)
    return float(proposer.draft_cost(parents, deployment=dep, batch=B, context=CTX).time_s)


@pytest.mark.parametrize("slug", ["sglang", "vllm-v0"], ids=["same-worker", "separate-worker"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_draft_step_pays_the_stacks_draft_step_host_cost(kind: str, slug: str) -> None:
    """The host cost of each draft step is the stack's draft-step cost (``draft_step_overhead_s``
    and, for a separate worker, its per-sequence work): raising it by one second raises a
    chain of three's draft by one second a step; the stack's per-pass host cost is never
    charged. A head or a layer subset pays it in full, not its share of the pass; a parallel
    drafter and Medusa heads run one step; n-gram lookup none (host work of its own)."""
    st, steps = load_stack(slug), KINDS[kind][4]
    base = _time(kind, st)
    dear = dataclasses.replace(st, draft_step_overhead_s=st.draft_step_overhead_s + 1.0)
    assert _time(kind, dear) - base == pytest.approx(steps, abs=1e-9)
    per_pass = dataclasses.replace(st, pass_overhead_s=st.pass_overhead_s + 1.0)
    assert _time(kind, per_pass) == pytest.approx(base, abs=1e-12)
    per_seq = dataclasses.replace(st, sequence_overhead_s=st.sequence_overhead_s + 1.0)
    separate = st.draft_worker == "separate"
    assert _time(kind, per_seq) - base == pytest.approx(steps * B * separate, abs=1e-9)
    free = dataclasses.replace(st, draft_step_overhead_s=0.0, sequence_overhead_s=0.0)
    one = _time(kind, st, [-1]) - _time(kind, free, [-1])  # the host seconds of one step
    assert one == pytest.approx(st.draft_step_host_s(B) * (steps > 0), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "ngram"])
def test_the_draft_steps_are_far_below_a_target_step_on_a_stack(kind: str) -> None:
    """Issue 31: on a stack with a 1.43 ms host cost per pass, a head's or an MTP module's
    step no longer pays it: one draft step costs less than the target's plain step minus that
    host cost (a smaller model or a share of the target; the target itself over a KV budget
    saves that host cost less its draft step's)."""
    proposer, dep = _on(kind, "tensorrt-llm")
    one = float(proposer.draft_cost([-1], deployment=dep, batch=1, context=CTX).time_s)
    step = dep.pass_cost(PassShape.chain(context=CTX, new=1)).time_s
    st = dep.runtime.stack_profile  # type: ignore[union-attr]
    saved = st.pass_overhead_s - (st.draft_step_host_s(1) if kind == "streaming" else 0.0)  # type: ignore[union-attr]
    assert one < step - saved


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("slug", [None, "sglang", "vllm-v0"])
def test_a_ragged_batch_of_equal_trees_is_the_homogeneous_pass(kind: str, slug: str | None) -> None:
    proposer, dep = _on(kind, slug)
    tree = TREE
    ragged = proposer.ragged_draft_cost([tree] * B, [CTX] * B, deployment=dep)  # type: ignore[attr-defined]
    same = proposer.draft_cost(tree, deployment=dep, batch=B, context=CTX)
    for got, want in zip((ragged.time_s, ragged.energy_j, ragged.flops),
                         (same.time_s, same.energy_j, same.flops), strict=True):  # fmt: skip
        assert got == pytest.approx(float(want), rel=1e-12, abs=1e-18)


def _batch_oracle(
    dep: Deployment, widths: list[tuple[int, ...]], ctx: np.ndarray, scale: float
) -> tuple[float, float]:
    """The ragged frontier, slowly: per depth, one pass of every sequence that reaches it (the
    formula specsim.sim's dynamic trees priced with, batch_draft_cost, written out)."""
    depth = max(len(w) for w in widths)
    time = energy = 0.0
    steps_t, steps_e = [], []
    for d in range(depth):
        on = [(w[d], c + d) for w, c in zip(widths, ctx.tolist(), strict=True) if len(w) > d]
        t = dep.aggregates_cost(
            batch=float(len(on)),
            tokens=float(sum(w for w, _ in on)),
            context_tokens=float(sum(c for _, c in on)),
            pairs=float(sum(w * (c + 1.0) for w, c in on)),
        )
        steps_t.append(t.time_s)
        steps_e.append(t.energy_j)
    time, energy = scale * float(np.sum(steps_t)), scale * float(np.sum(steps_e))
    return time, energy


@pytest.mark.parametrize("kind", ["draft-model", "eagle", "medusa"])
def test_ragged_is_the_batch_of_frontiers(kind: str) -> None:
    """What specsim.sim's dynamic trees price for draft models and heads (batch_draft_cost),
    to a rounding, on a deployment without a stack: per depth one batched step over the
    sequences that reach it (a Medusa head once per sequence)."""
    from specsim.proposers import frontier_widths

    proposer, dep = _on(kind, None)
    trees = [[-1, 0, 1], [-1, -1, 0], [], [-1, 0, 0, 1, 2, 2]]
    ctx = np.array([100, 2000, 50, 700])
    got = proposer.ragged_draft_cost(trees, ctx, deployment=dep)  # type: ignore[attr-defined]
    if kind == "medusa":
        widths = [(1,) if t else () for t in trees]
        scale = proposer.card.layer_fraction / dep.target.layers  # type: ignore[attr-defined]
    else:
        widths = [frontier_widths(t) if t else () for t in trees]
        scale = 1.0 if kind == "draft-model" else proposer.card.layer_fraction / 32  # type: ignore[attr-defined]
    on = proposer.deployment(dep)  # type: ignore[attr-defined]
    want = _batch_oracle(on, widths, ctx, scale)
    assert (got.time_s, got.energy_j) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("slug", [None, "sglang"])
def test_pard_prefills_its_own_kv(slug: str | None) -> None:
    """PARD's draft keeps a KV cache of its own: its prompt prefill is priced, and is the
    draft's pass over the prompt under the stack's drafting profile."""
    pard, dep = _on("pard", slug)
    prompts = [300, 1200]
    got = pard.prefill_cost(deployment=dep, tokens=prompts, context=0)  # type: ignore[attr-defined]
    want = pard.deployment(dep).drafting().pass_cost(PassShape.prefill(prompts))  # type: ignore[attr-defined]
    assert got.time_s > 0
    assert got.time_s == pytest.approx(want.time_s, rel=1e-12)
    assert got.flops == pytest.approx(want.flops, rel=1e-12)
    chunk = pard.prefill_cost(deployment=dep, tokens=[256], context=[1024])  # type: ignore[attr-defined]
    shape = PassShape.chain(context=1024, new=256)
    assert chunk.time_s == pytest.approx(
        pard.deployment(dep).drafting().pass_cost(shape).time_s,
        rel=1e-12,  # type: ignore[attr-defined]
    )


def test_each_kind_says_what_its_own_kv_is() -> None:
    """Prefill and KV of its own: a draft model's and PARD's, an EAGLE head's one layer, MTP's
    block; none for Medusa heads, self-speculation (the target's KV), n-gram."""
    prompts = [512, 128]
    for kind in KINDS:
        proposer, dep = _on(kind, "sglang")
        kv = proposer.kv_bytes_per_token(dep)  # type: ignore[attr-defined]
        pre = proposer.prefill_cost(deployment=dep, tokens=prompts, context=0)  # type: ignore[attr-defined]
        own = kind in ("draft-model", "eagle", "mtp", "pard", "kv-budget")
        assert (kv > 0) == own and (pre.time_s > 0) == own, kind
    eagle, dep = _on("eagle", None)
    layer = footprint(dep.target, tensor_parallel=1, formats=dep.formats()).kv_bytes_per_token_layer
    assert eagle.kv_bytes_per_token(dep) == layer  # type: ignore[attr-defined]


@pytest.mark.parametrize("fields", [{"weights": "int8"}, {"tensor_parallel": 2}])
@pytest.mark.parametrize("slug", [None, "vllm-v1"])
def test_self_speculation_drafts_in_the_deployments_formats(
    fields: dict[str, object], slug: str | None
) -> None:
    """Issue 35: a self-speculative draft step runs the target's first E layers with the
    target's weight format and tensor parallelism (not the card's own dtype on one device,
    as ``deployment.on_model`` would give)."""
    ls = SelfSpeculation.from_card("layerskip-llama-2-7b-e8")
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb", runtime=slug, **fields)  # type: ignore[arg-type]
    got = ls.draft_cost([-1], deployment=dep, batch=B, context=CTX).time_s
    draft = Deployment(target=early_exit_card(dep.target, 8), hardware="a100-80gb", runtime=slug,
                       **fields)  # type: ignore[arg-type]  # fmt: skip
    want = draft.drafting().pass_cost(PassShape.chain(context=CTX, new=1, batch=B)).time_s
    assert got == pytest.approx(want, rel=1e-12)
    card = early_exit_card(dep.target, 8)  # the bugs: the card's dtype, or one device
    wrong = (
        dep.on_model(card) if "weights" in fields else dataclasses.replace(draft, tensor_parallel=1)
    )
    other = wrong.drafting().pass_cost(PassShape.chain(context=CTX, new=1, batch=B)).time_s
    assert abs(got - other) > 0.02 * got  # the formats or devices show


def test_a_draft_model_on_its_own_deployment() -> None:
    """DraftModel.draft_deployment: the draft's own devices and formats price it; it is
    checked against the target's deployment like CardCost's."""
    dep = Deployment(target="llama-3.1-8b", hardware="h100-sxm", draft_placement="own-device")
    own = Deployment(target="llama-3.2-1b", hardware="a100-80gb", draft_placement="own-device",
                     weights="int8")  # fmt: skip
    d = DraftModel(card=load_model("llama-3.2-1b"), acceptance=ACC, draft_deployment=own)
    assert d.deployment(dep) is own
    got = d.draft_cost([-1], deployment=dep, batch=2, context=CTX).time_s
    assert got == pytest.approx(own.pass_cost(PassShape.chain(context=CTX, new=1, batch=2)).time_s)
    wrong = DraftModel(card=load_model("llama-3.1-8b"), acceptance=ACC, draft_deployment=own)
    with pytest.raises(ValueError, match=r"DraftModel draft_deployment\.target"):
        wrong.draft_cost([-1], deployment=dep, batch=1, context=CTX)
    with pytest.raises(ValueError, match="DraftModel dtype"):
        DraftModel(card=own.target, acceptance=ACC, dtype="float16", draft_deployment=own)
    with pytest.raises(TypeError, match="draft_deployment"):
        DraftModel(card=own.target, acceptance=ACC, draft_deployment="a100")  # type: ignore[arg-type]


def test_streaming_self_speculation_drafts_on_the_targets_devices() -> None:
    """The target drafting for itself over a KV budget runs on all the target's devices and
    in its formats: a step is the target's pass at the budget under the drafting profile."""
    dep = Deployment(target=L8, hardware=H100, tensor_parallel=2, weights="int8", runtime="sglang")
    got = _streaming().draft_cost([-1], deployment=dep, batch=B, context=4096).time_s
    want = dep.drafting().pass_cost(PassShape.chain(context=256, new=1, batch=B)).time_s
    assert got == pytest.approx(want, rel=1e-12)
