"""Every derived closed form: :func:`derive_all` runs the derivations once per process.

The derivations live in :mod:`specsim.theory.tokens`, :mod:`specsim.theory.speedup`,
:mod:`specsim.theory.opsbill` and :mod:`specsim.theory.overlap` (and :mod:`specsim.theory.moe`),
which build on the vocabulary of :mod:`specsim.theory.symbolic`; this module sits above
all of them, so that the vocabulary does not import its users (no import cycle). Running
them takes a few seconds of sympy, so nothing runs at import.
"""

from __future__ import annotations

import functools

from specsim.theory import moe, opsbill, overlap, speedup, tokens
from specsim.theory import token_trees as trees
from specsim.theory.symbolic import SymbolicResult

__all__ = ["derive_all", "get_result"]


@functools.cache
def derive_all() -> tuple[SymbolicResult, ...]:
    """Run every derivation once per process (seconds of sympy) and return the results."""
    return (
        *tokens.derive(),
        *speedup.derive(),
        *opsbill.derive(),
        *trees.derive(),
        overlap.overlap_identity(2),
        overlap.overlap_identity(3),
        *moe.derive(),
    )


def get_result(name: str) -> SymbolicResult:
    """The derived result called ``name`` (see ``[r.name for r in derive_all()]``)."""
    for result in derive_all():
        if result.name == name:
            return result
    names = ", ".join(r.name for r in derive_all())
    raise KeyError(f"get_result: no symbolic result named {name!r}; known: {names}")
