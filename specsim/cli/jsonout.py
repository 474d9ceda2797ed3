"""The one JSON convention of the ``specsim`` command's ``--json`` output.

Output is strict JSON (RFC 8259), which has no infinity and no NaN: a number
that is not finite is written as ``null``. A field that can be infinite says in
its command's help what its ``null`` means, and where the reason matters the
output carries a flag of its own beside it (``specsim theory --json``:
``optimal_gamma_unbounded``; ``oracle_speedup_bound`` is ``null`` exactly at
alpha = 1). Python's ``json`` module would otherwise write ``Infinity``, which
other JSON readers refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

__all__ = ["finite_or_null", "dumps"]


def finite_or_null(value: object) -> object:
    """``value`` with each non-finite float (numpy's too) replaced by ``None``, at any depth."""
    if isinstance(value, float):  # numpy.float64 is a float
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return value


def dumps(payload: object, *, indent: int | None = 2) -> str:
    """``payload`` as strict JSON text, non-finite numbers as ``null``."""
    return json.dumps(finite_or_null(payload), indent=indent, allow_nan=False)
