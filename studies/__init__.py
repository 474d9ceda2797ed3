"""The what-if studies of specsim, one module per study.

Each module defines ``Config`` (a flat, frozen, keyword-only dataclass of
settings on real cards), ``run(config, rng, *, fast=False) -> DataFrame``
(tidy), ``figures(df) -> dict[str, Figure]`` and ``summary(df) -> str``. Load
and run them with :mod:`specsim.report.studies` (``specsim study NAME``); this package ships
in the wheel as ``specsim._studies``. See ``README.md`` beside this file.
"""
