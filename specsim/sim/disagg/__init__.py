"""Prefill/decode disaggregation: separate prefill and decode pools, the KV hand-over
between them, speculation on the decode pool.

Engines that do this: vLLM (disaggregated prefilling with KV connectors such as
NixlConnector), SGLang (``--disaggregation-mode prefill|decode``, Mooncake or NIXL
transfer), TensorRT-LLM (disaggregated serving: context and generation servers) and NVIDIA
Dynamo (prefill and decode workers, NIXL). The model and its sources:
``docs/disaggregation.md``.

- :mod:`~specsim.sim.disagg.link`: the link and the time of one hand-over;
- :mod:`~specsim.sim.disagg.first_step`: the decode pool's admission pass (the first
  decode step after a transfer, the draft's prefill, and the recompute of a request
  preempted there);
- :mod:`~specsim.sim.disagg.config`: :class:`DisaggConfig` (and :class:`DecodeTrees`, the
  decode pool's engine configuration under a tree plan);
- :mod:`~specsim.sim.disagg.simulate`: :func:`simulate_disaggregated`;
- :mod:`~specsim.sim.disagg.result`: :class:`DisaggResult`.
"""

from specsim.sim.disagg.config import DecodeTrees, DisaggConfig
from specsim.sim.disagg.first_step import AfterTransfer, first_step_cost
from specsim.sim.disagg.link import LINKS, KVLink, card_link, hand_over, target_kv_bytes_per_token
from specsim.sim.disagg.result import DisaggResult
from specsim.sim.disagg.simulate import simulate_disaggregated

__all__ = [
    "LINKS",
    "AfterTransfer",
    "DecodeTrees",
    "DisaggConfig",
    "DisaggResult",
    "KVLink",
    "card_link",
    "first_step_cost",
    "hand_over",
    "simulate_disaggregated",
    "target_kv_bytes_per_token",
]
