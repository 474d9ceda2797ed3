"""Simulation configs from TOML tables, through the configuration boundary :mod:`specsim.config`.

- :mod:`~specsim.sim.config.config`: a ``specsim simulate`` config becomes a run
  (:func:`~specsim.sim.config.config.config_from_dict`);
- :mod:`~specsim.sim.config.config_kinds`: the kinds each table may name;
- :mod:`~specsim.sim.config.config_cards`: a chain config's card-priced cost;
- :mod:`~specsim.sim.config.config_compose`: the composed ``[deployment]``, ``[proposer]``,
  ``[tree]`` and ``[slo]`` tables.

Nothing is imported here: each module loads on its own.
"""

__all__: list[str] = []
