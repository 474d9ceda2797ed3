"""One request decoded on its own: the single-stream simulators.

- :mod:`~specsim.sim.stream.stream`: a chain, block by block
  (:func:`~specsim.sim.stream.stream.simulate_stream`);
- :mod:`~specsim.sim.stream.tree_stream`: a token tree, pass by pass;
- :mod:`~specsim.sim.stream.tree_policies`: trees chosen per pass from the draft's
  confidence (EAGLE-2), shared with the serving engine.

Nothing is imported here: each module loads on its own (the public names are in
:mod:`specsim.sim`), so a plain stream never loads the serving engine.
"""

__all__: list[str] = []
