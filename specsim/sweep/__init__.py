"""Parameter sweeps: the spec, where points run (local or Dask), resumable output."""

from specsim.sweep.run import (
    SweepResult,
    SweepSpec,
    check_axis,
    check_metrics,
    local_cluster,
    metric_names,
    point_config,
    point_key,
    point_seed,
    read_spec,
    run_point,
    run_sweep,
    spec_from_dict,
    sweep_points,
)

__all__ = [
    "SweepSpec",
    "SweepResult",
    "read_spec",
    "spec_from_dict",
    "check_axis",
    "sweep_points",
    "point_config",
    "point_key",
    "point_seed",
    "run_point",
    "metric_names",
    "check_metrics",
    "run_sweep",
    "local_cluster",
]
