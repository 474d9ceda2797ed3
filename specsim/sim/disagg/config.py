"""A disaggregated serving run's configuration: :class:`DisaggConfig`.

Two pools of replicas (:mod:`specsim.sim.disagg`): ``prefill_replicas`` replicas of
``prefill_cost`` prefill prompts (prompts only, no speculation, their own batching under
``prefill_max_batch`` and their own KV budget); each prompt's KV cache crosses ``link``
(:class:`~specsim.sim.disagg.link.KVLink`); ``decode_replicas`` replicas of
``decode_cost`` decode with the lookahead ``policy`` (whose drafting may differ from the
prefill pool's: it has none). Each pool is served by the one serving engine
(:mod:`specsim.sim.serving`) through :meth:`DisaggConfig.prefill_serving` and
:meth:`DisaggConfig.decode_serving`.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.acceptance.processes import AcceptanceProcess
from specsim.policies.lookahead import MAX_GAMMA, FixedGamma, LookaheadPolicy
from specsim.sim.disagg.first_step import AfterTransfer
from specsim.sim.disagg.link import KVLink
from specsim.sim.router import Router
from specsim.sim.serving.config import ServingConfig
from specsim.sim.source import CostSource, check_whole
from specsim.sim.workload import Workload

__all__ = ["DisaggConfig"]


@dataclass(frozen=True, kw_only=True)
class DisaggConfig:
    """A run on separate prefill and decode pools.

    ``prefill_cost`` / ``decode_cost``: each pool's replica (a cost source: the deployment
    it runs; the prefill pool's drafts nothing, so its draft is never priced, and its
    footprint gives the KV bytes per token the link carries). ``prefill_replicas`` and
    ``decode_replicas``: the pools' sizes (at least one each). ``max_batch``,
    ``kv_capacity_tokens`` and ``router`` are the decode pool's; ``prefill_max_batch``,
    ``prefill_kv_capacity_tokens`` and ``prefill_router`` the prefill pool's (None: the
    decode pool's value; the KV budgets: each cost source's own). ``plain_twin``: also
    decode the same requests without speculation (the prefill pool and the link are the
    same for both: they do not speculate).
    """

    workload: Workload
    prefill_cost: CostSource
    decode_cost: CostSource
    acceptance: AcceptanceProcess
    policy: LookaheadPolicy
    link: KVLink
    prefill_replicas: int = 1
    decode_replicas: int = 1
    max_batch: int = 64
    prefill_max_batch: int | None = None
    kv_capacity_tokens: int | None = None
    prefill_kv_capacity_tokens: int | None = None
    max_gamma: int = MAX_GAMMA
    plain_twin: bool = True
    router: Router = "round-robin"
    prefill_router: Router | None = None

    def __post_init__(self) -> None:
        check_whole(self.prefill_replicas, "disaggregation.prefill_replicas", minimum=1)
        check_whole(self.decode_replicas, "disaggregation.decode_replicas", minimum=1)
        if not isinstance(self.link, KVLink):
            raise TypeError(f"disaggregation.link: expected a KVLink, got {self.link!r}")
        if self.prefill_max_batch is not None:
            check_whole(self.prefill_max_batch, "disaggregation.prefill_max_batch", minimum=1)
        if self.prefill_kv_capacity_tokens is not None:
            check_whole(
                self.prefill_kv_capacity_tokens,
                "disaggregation.prefill_kv_capacity_tokens",
                minimum=1,
            )
        # Each pool's own fields are checked where its engine configuration is built.
        self.prefill_serving()
        self.decode_serving()

    def prefill_serving(self) -> ServingConfig:
        """The prefill pool as a serving run: every request one token long (its prompt's
        pass emits it and it is done), decoding plainly, no twin."""
        return ServingConfig(
            workload=self.workload,
            cost=self.prefill_cost,
            acceptance=self.acceptance,
            policy=FixedGamma(gamma=0),
            max_batch=self.max_batch if self.prefill_max_batch is None else self.prefill_max_batch,
            kv_capacity_tokens=self.prefill_kv_capacity_tokens,
            max_gamma=0,
            plain_twin=False,
            replicas=self.prefill_replicas,
            router=self.router if self.prefill_router is None else self.prefill_router,
        )

    def decode_serving(self) -> ServingConfig:
        """The decode pool as a serving run on :class:`AfterTransfer` (its admission pass is
        the first decode step, the prompt's KV having arrived)."""
        return ServingConfig(
            workload=self.workload,
            cost=AfterTransfer(self.decode_cost),
            acceptance=self.acceptance,
            policy=self.policy,
            max_batch=self.max_batch,
            kv_capacity_tokens=self.kv_capacity_tokens,
            max_gamma=self.max_gamma,
            plain_twin=self.plain_twin,
            replicas=self.decode_replicas,
            router=self.router,
        )
