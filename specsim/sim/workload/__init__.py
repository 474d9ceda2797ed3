"""Serving workloads: when requests arrive and how long their prompts and outputs are.

- :mod:`~specsim.sim.workload.arrivals`: arrival processes and recorded request traces;
- :mod:`~specsim.sim.workload.lengths`: length distributions with their exact moments;
- :mod:`~specsim.sim.workload.workload`: the workloads (synthetic, Poisson, preset, trace)
  that draw a request table.

Nothing is imported here: each module loads on its own (the public names are in
:mod:`specsim.sim`).
"""

__all__: list[str] = []
