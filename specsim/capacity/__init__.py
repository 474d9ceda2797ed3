"""Capacity planning: the largest request rate a deployment sustains at an SLO."""

from specsim.capacity.planner import (
    MODES,
    SLO,
    TP_SIZES,
    Progress,
    Search,
    judge,
    kv_capacity,
    reporting,
    search_capacity,
    serve_replicas,
    smallest_deployment,
    smallest_tp,
)

__all__ = [
    "TP_SIZES",
    "MODES",
    "SLO",
    "Search",
    "Progress",
    "smallest_tp",
    "kv_capacity",
    "reporting",
    "judge",
    "serve_replicas",
    "search_capacity",
    "smallest_deployment",
]
