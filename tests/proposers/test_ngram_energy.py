"""n-gram lookup drafts on the host while the accelerators wait: its energy is the idle power
of every device of the deployment (a tensor-parallel group idles whole), over the search."""

from __future__ import annotations

import pytest

from specsim.cost.deployment import Deployment
from specsim.proposers import NGram, RankAcceptance

NGRAM = NGram(acceptance=RankAcceptance(accept=((0.5,), (0.4,)), source="test"))


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_ngram_idle_energy_counts_every_device_of_the_group(tp: int) -> None:
    dep = Deployment(target="llama-2-7b", hardware="a100-80gb", tensor_parallel=tp)
    cost = NGRAM.draft_cost((-1, 0), deployment=dep, batch=8, context=1024)
    alone = NGRAM.draft_cost(
        (-1, 0),
        deployment=Deployment(target="llama-2-7b", hardware="a100-80gb"),
        batch=8,
        context=1024,
    )
    assert cost.time_s == alone.time_s > 0  # the host's search does not depend on the devices
    assert cost.energy_j == pytest.approx(tp * dep.hardware.idle_power_w * cost.time_s, rel=1e-12)
    assert cost.energy_j == pytest.approx(tp * alone.energy_j, rel=1e-12)
    assert cost.flops == 0.0
