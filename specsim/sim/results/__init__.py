"""What a simulation reports: metrics records, tidy tables, the stability verdict, Chrome traces.

- :mod:`~specsim.sim.results.records`: the serving result, the tidy event and iteration
  tables (and the stream's result, re-exported);
- :mod:`~specsim.sim.results.stream_result`: one stream's result;
- :mod:`~specsim.sim.results.engine_metrics`: acceptance metrics as the serving engines
  define them;
- :mod:`~specsim.sim.results.stability`: whether a serving run is stable;
- :mod:`~specsim.sim.results.chrome`: the Chrome trace-event format of a timeline.

Nothing is imported here: each module loads on its own (the public names are in
:mod:`specsim.sim`).
"""

__all__: list[str] = []
