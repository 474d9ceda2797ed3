"""The scheduler seam (specsim.sim.serving.scheduler): first come, first served written
once, and a new admission rule as one class."""

from collections import deque
from functools import partial

import numpy as np
import pandas as pd
import pytest
from serving_cases import card_cost, serving_config
from tree_cases import DRAFT, HW, TARGET

from specsim.cost import Deployment
from specsim.policies.lookahead import HeuristicPlusTwoMinusOne
from specsim.policies.tree_optimizer import kary_tree
from specsim.sim import CardCost, TraceWorkload, simulate_serving
from specsim.sim.serving.scheduler import FCFS, FirstComeFirstServed
from specsim.sim.serving.tree_serving import TreeServingConfig, simulate_tree_serving


@pytest.fixture(scope="module")
def card() -> CardCost:
    return card_cost()


config = partial(serving_config, rate_per_s=40.0, max_batch=8)


def test_fcfs_takes_the_head_while_it_fits_and_blocks_behind_the_first_refusal() -> None:
    asked: list[int] = []

    def fits(i: int) -> bool:
        asked.append(i)
        return i != 7

    waiting = deque([4, 2, 7, 1])
    assert FCFS.admit(waiting, 5, fits) == [4, 2]
    assert list(waiting) == [7, 1] and asked == [4, 2, 7]  # 1 waits behind 7: never asked
    assert FCFS.admit(deque([3, 5, 6]), 2, lambda i: True) == [3, 5]  # the slots bound it
    assert FCFS.admit(deque([3]), 0, lambda i: True) == []


class ShortestPromptFirst:
    """A user's rule, one class: the waiting request with the shortest prompt first (ties:
    the earliest), while it fits."""

    def __init__(self, prompts: list[int]) -> None:
        self.prompts = prompts

    def admit(self, waiting, room, fits) -> list[int]:
        order = sorted(waiting, key=lambda i: (self.prompts[i], i))
        admitted = []
        for i in order[:room]:
            if not fits(i):
                break
            admitted.append(i)
            waiting.remove(i)
        return admitted


def _burst(card: CardCost) -> TraceWorkload:
    """Every request arrives at once (a queue to order)."""
    table = config(card).workload.sample(np.random.default_rng(0)).head(12)
    cols = {c: tuple(table[c].tolist()) for c in table.columns}
    cols["arrival_s"] = (0.0,) * len(table)
    return TraceWorkload(**cols)


@pytest.mark.parametrize(
    "engine",
    [{}, {"token_budget": 96}, {"kv_block_tokens": 16, "kv_capacity_tokens": 4000}],
    ids=["whole-prompts", "chunked", "paged"],
)
def test_a_scheduler_is_one_class_with_admit(card, engine) -> None:
    """One sequence at a time: the prompts start in the rule's order, on every engine path
    (the stepped loop, chunked prefill and the bulk drains all ask it)."""
    work = _burst(card)
    prompts = list(work.prompt_tokens)
    kw = dict(workload=work, max_batch=1, plain_twin=False, **engine)
    spf = simulate_serving(
        config(card, scheduler=ShortestPromptFirst(prompts), **kw), np.random.default_rng(2)
    )
    fcfs = simulate_serving(config(card, **kw), np.random.default_rng(2))
    started = lambda r: np.argsort(r.requests_spec["first_token_s"].to_numpy(), kind="stable")  # noqa: E731
    assert started(spf).tolist() == sorted(range(len(prompts)), key=lambda i: (prompts[i], i))
    assert started(fcfs).tolist() == list(range(len(prompts)))
    assert spf.requests_spec["finish_s"].notna().all()


@pytest.mark.parametrize(
    "kw", [{}, {"policy": HeuristicPlusTwoMinusOne(initial=3, max_gamma=8)}], ids=["drain", "loop"]
)
def test_under_a_token_budget_a_prompt_starts_only_while_the_budget_has_room(card, kw) -> None:
    """A burst, nothing decoding yet: prompts start while the budget has room after those
    already started (the bulk drain at a fixed gamma, the stepped loop under a policy)."""
    work = _burst(card)
    prompts = list(work.prompt_tokens)
    r = simulate_serving(
        config(card, workload=work, token_budget=96, plain_twin=False, **kw),
        np.random.default_rng(2),
    )
    fill = next(k for k in range(1, len(prompts) + 1) if sum(prompts[:k]) >= 96)
    assert int(r.iterations_spec["admitted"].iloc[0]) == min(fill, 8)


def test_the_default_scheduler_is_fcfs_and_an_instance_is_the_same_run(card) -> None:
    assert config(card).scheduler is FCFS
    a = simulate_serving(config(card, token_budget=96), np.random.default_rng(4))
    b = simulate_serving(
        config(card, token_budget=96, scheduler=FirstComeFirstServed()), np.random.default_rng(4)
    )
    pd.testing.assert_frame_equal(a.requests_spec, b.requests_spec)
    pd.testing.assert_frame_equal(a.iterations_spec, b.iterations_spec)


def test_a_scheduler_without_admit_is_named(card) -> None:
    with pytest.raises(TypeError, match="scheduler: expected an object with admit"):
        config(card, scheduler="fcfs")


def test_tree_serving_takes_the_same_scheduler(card) -> None:
    """A token-tree run (the same engine) admits by the config's scheduler too."""
    work = _burst(card)
    prompts = list(work.prompt_tokens)
    cfg = TreeServingConfig(
        workload=work,
        parents=kary_tree(2, 3),
        proposer=DRAFT,
        deployment=Deployment(target=TARGET, hardware=HW),
        plain_twin=False,
        max_batch=1,
        scheduler=ShortestPromptFirst(prompts),
    )
    res = simulate_tree_serving(cfg, np.random.default_rng(3))
    first = res.requests["first_token_s"].to_numpy()
    assert np.argsort(first, kind="stable").tolist() == sorted(
        range(len(prompts)), key=lambda i: (prompts[i], i)
    )
