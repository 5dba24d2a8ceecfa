"""Whether any or every element of an array is set, and whether two arrays are equal, each told in one C call.

`ndarray.any()`, `ndarray.all()` and `np.array_equal` go through NumPy's Python wrappers (`numpy._core._methods`,
`numeric.array_equal`): some 1.5 us a call on a thousand lanes, where `np.count_nonzero` takes 0.4-0.7 us, and the
C function its wrapper calls for a whole array's count (`_count_nonzero`, the same count) 0.14 us. The simulators
ask these questions thousands of times a launch (a mask before each report, a lane set's shape), so they ask them
here. The answers are the same: an element is set where it is nonzero (NaN is set, -0.0 is not),
an empty array has none set and all set.
"""

from __future__ import annotations

import numpy as np

try:  # NumPy 2's module (private: where it moves, the public wrapper gives the same count)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:
    _count_nonzero = np.count_nonzero


def any_set(x) -> bool:
    """`x.any()`: some element of `x` (an array or a NumPy scalar) is nonzero."""
    return bool(_count_nonzero(x))


def all_set(x) -> bool:
    """`x.all()`: every element of `x` is nonzero."""
    return bool(_count_nonzero(x) == np.asarray(x).size)


def equal_arrays(a, b) -> bool:
    """`np.array_equal(a, b)`: the same shape and elements (NaN equals nothing)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and not _count_nonzero(a != b)


__all__ = ["all_set", "any_set", "equal_arrays"]
