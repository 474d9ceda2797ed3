"""What a pass costs the simulators: the cost-source protocol and the cost sources that ship.

- :mod:`~specsim.sim.costs.source`: :class:`~specsim.sim.costs.source.CostSource` (required)
  and :class:`~specsim.sim.costs.source.BatchedCostSource` (optional speed paths), the
  records of a pass's cost;
- :mod:`~specsim.sim.costs.plain`: :class:`~specsim.sim.costs.plain.PlainCost`, the
  theory's parameters;
- :mod:`~specsim.sim.costs.costs`: :class:`~specsim.sim.costs.costs.CardCost`, the roofline
  on cards, seen as a deployment by :mod:`~specsim.sim.costs.card_deployment`.

Nothing is imported here: each module loads on its own (the public names are in
:mod:`specsim.sim`).
"""

__all__: list[str] = []
