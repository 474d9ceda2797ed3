"""Argument checks shared by the numeric twins: one message style, naming the function,
the parameter and the offending value."""

from __future__ import annotations

from collections.abc import Callable

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


def _checked(
    x: ArrayLike, name: str, where: str, ok: Callable[[FloatArray], NDArray[np.bool_]], what: str
) -> FloatArray:
    """``x`` as floats if ``ok`` holds everywhere (NaN fails every comparison), else ValueError."""
    arr = as_real(x, name, where)
    bad = ~ok(arr)
    if np.any(bad):
        raise ValueError(f"{where}: {name} must be {what}, got {_first_bad(arr, bad)}")
    return arr


def check_alpha(alpha: ArrayLike, where: str) -> FloatArray:
    """Mean acceptance: finite and in [0, 1]."""
    return _checked(
        alpha, "alpha", where, lambda a: (a >= 0.0) & (a <= 1.0), "a finite number in [0, 1]"
    )


def check_count(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A non-negative integer (or an array of them); integral floats such as 3.0 are accepted."""
    return _checked(
        x,
        name,
        where,
        lambda g: (g >= 0.0) & np.isfinite(g) & (g == np.floor(g)),
        "a non-negative integer",
    )


def check_integer(x: ArrayLike, name: str, where: str) -> FloatArray:
    """Any integer (or an array of them)."""
    return _checked(x, name, where, lambda g: np.isfinite(g) & (g == np.floor(g)), "an integer")


def check_nonnegative(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A finite number >= 0 (a cost ratio such as c or c_hat)."""
    return _checked(x, name, where, lambda v: (v >= 0.0) & np.isfinite(v), "a finite number >= 0")


def check_positive(x: ArrayLike, name: str, where: str) -> FloatArray:
    """A finite number > 0 (a relative verification time v)."""
    return _checked(x, name, where, lambda v: (v > 0.0) & np.isfinite(v), "a finite number > 0")


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
