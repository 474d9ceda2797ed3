"""Argument checks shared by the numeric twins: one message style, naming the function,
the parameter and the offending value."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def _first_bad(arr: FloatArray, bad: NDArray[np.bool_]) -> str:
    """``value`` or ``value at index (i, j)`` for the first offending element."""
    if arr.ndim == 0:
        return repr(float(arr))
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{float(arr[at])!r} at index {at}"


def as_real(x: ArrayLike, name: str, where: str) -> FloatArray:
    """``x`` as a float64 array, or TypeError if it is not real numbers (bools refused)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf":
        raise TypeError(
            f"{where}: {name} must be a real number or an array of them, "
            f"got {type(x).__name__} with dtype {arr.dtype}"
        )
    return arr.astype(np.float64, copy=False)


def check_alpha(alpha: ArrayLike, where: str) -> FloatArray:
    """Mean acceptance: finite and in [0, 1]."""
    a = as_real(alpha, "alpha", where)
    bad = ~((a >= 0.0) & (a <= 1.0))  # NaN fails both comparisons
    if np.any(bad):
        raise ValueError(
            f"{where}: alpha must be a finite number in [0, 1], got {_first_bad(a, bad)}"
        )
    return a


def check_count(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A non-negative integer (or an array of them); integral floats such as 3.0 are accepted."""
    g = as_real(x, name, where)
    bad = ~((g >= 0.0) & np.isfinite(g) & (g == np.floor(g)))
    if np.any(bad):
        raise ValueError(
            f"{where}: {name} must be a non-negative integer, got {_first_bad(g, bad)}"
        )
    return g


def check_integer(x: ArrayLike, name: str, where: str) -> FloatArray:
    """Any integer (or an array of them)."""
    g = as_real(x, name, where)
    bad = ~(np.isfinite(g) & (g == np.floor(g)))
    if np.any(bad):
        raise ValueError(f"{where}: {name} must be an integer, got {_first_bad(g, bad)}")
    return g


def check_nonnegative(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A finite number >= 0 (a cost ratio such as c or c_hat)."""
    v = as_real(x, name, where)
    bad = ~((v >= 0.0) & np.isfinite(v))
    if np.any(bad):
        raise ValueError(
            f"{where}: {name} must be a finite number >= 0, got {_first_bad(v, bad)}"
        )
    return v


def check_positive(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A finite number > 0 (a relative verification time v)."""
    v = as_real(x, name, where)
    bad = ~((v > 0.0) & np.isfinite(v))
    if np.any(bad):
        raise ValueError(f"{where}: {name} must be a finite number > 0, got {_first_bad(v, bad)}")
    return v


def check_shapes(where: str, **arrays: FloatArray) -> tuple[int, ...]:
    """The broadcast shape of the arguments, or a ValueError naming their shapes."""
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in arrays.items())
        raise ValueError(f"{where}: shapes do not broadcast: {shapes}") from None


def scalar_or_array(x: FloatArray) -> FloatArray | float:
    """A Python float for a 0-d result, the array otherwise."""
    return float(x) if x.ndim == 0 else x
