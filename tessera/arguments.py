"""Argument checks at the boundary of Tessera's public API.

Every public function checks its arguments before doing anything with them, so that a wrong argument is
answered by the function the user called, naming the parameter and the rule, never by an AttributeError
from deep inside. The convention:

- TypeError: the argument is of the wrong kind (None or a string where a module belongs, a size given as a
  string or as a bool, an array of objects, complex numbers or strings);
- ValueError: the right kind, but a value the function does not take (an unknown level, target or kernel
  name, a size that is not positive or exceeds a limit, a masked array, a size that contradicts the inputs);

and the message reads "WHERE: PARAMETER must RULE; got VALUE", WHERE being the public function
("tessera.interpret"). A size over `MAX_SIZE` is refused here, naming the limit; the launch limits (grid,
block, host memory) are checked by each launch path before it allocates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

MAX_SIZE = 2**31 - 1
"""Largest named size (seq_q, M, ...): sizes reach a compiled kernel as 32-bit parameters (`tessera.host`) and
Target IR computes indices in 32-bit registers, signed where they are compared (tessera-run takes the same)."""


def describe(value: object) -> str:
    """A short description of a refused value for a message: its repr when short, else its type."""
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def check_module(where: str, value: object, name: str = "module"):
    """`value` if it is an xDSL ModuleOp (as `tessera.parse_module` and the kernel builders return)."""
    from xdsl.dialects.builtin import ModuleOp

    if not isinstance(value, ModuleOp):
        hint = " (parse text with tessera.parse_module first)" if isinstance(value, str | bytes) else ""
        raise TypeError(f"{where}: {name} must be a ModuleOp (from tessera.parse_module or a tessera.kernels "
                        f"builder){hint}; got {type(value).__name__}")
    return value


def check_string(where: str, name: str, value: object, optional: bool = False) -> str | None:
    """`value` if it is a str (or None when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        wanted = "a string or None" if optional else "a string"
        raise TypeError(f"{where}: {name} must be {wanted}; got {type(value).__name__} {describe(value)}")
    return value


def check_choice(where: str, name: str, value: object, choices: Sequence[str], what: str | None = None) -> str:
    """`value` if it is one of the strings `choices` (`what` names them in the message; default `name`)."""
    if not isinstance(value, str):
        raise TypeError(f"{where}: {name} must be one of {', '.join(map(repr, choices))}; got "
                        f"{type(value).__name__} {describe(value)}")
    if value not in choices:
        raise ValueError(f"{where}: unknown {what or name} '{value}' (available: {', '.join(choices)})")
    return value


def check_size(where: str, name: str, value: object, limit: int = MAX_SIZE) -> int:
    """`value` as an int if it is a positive integer (a Python or NumPy integer, never a bool) <= `limit`."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{where}: size {name} must be a positive integer (not a bool or a string); got "
                        f"{type(value).__name__} {describe(value)}")
    size = int(value)
    if size <= 0:
        raise ValueError(f"{where}: size {name} must be a positive integer; got {size}")
    if size > limit:
        raise ValueError(f"{where}: size {name}={size} exceeds the limit of {limit} (sizes are passed to kernels "
                         "as 32-bit parameters)")
    return size


def check_sizes(where: str, sizes: object, known: Sequence[str] | None = None) -> dict[str, int]:
    """A dict of named sizes, each checked by `check_size`; with `known`, every name must be one of them."""
    if sizes is None:
        return {}
    if not isinstance(sizes, Mapping):
        raise TypeError(f"{where}: sizes must be a mapping of size names to integers; got {type(sizes).__name__}")
    checked: dict[str, int] = {}
    for name, value in sizes.items():
        if not isinstance(name, str):
            raise TypeError(f"{where}: size names must be strings; got {type(name).__name__} {describe(name)}")
        if known is not None and name not in known:
            raise ValueError(f"{where}: unknown size name '{name}' (the kernel's sizes: {', '.join(known) or 'none'})")
        checked[name] = check_size(where, name, value)
    return checked


def check_array(where: str, name: str, value: object) -> np.ndarray:
    """`value` as a NumPy array of real numbers (floats or integers, bf16 included). Refused by name: masked
    arrays (the kernel would ignore the mask), complex numbers (the imaginary part would be dropped), bools,
    objects, strings and other non-numbers."""
    if isinstance(value, np.ma.MaskedArray):
        raise ValueError(f"{where}: {name} is a masked array; kernels read every element and would ignore the "
                         "mask (pass np.ma.filled(x, fill) or x.data)")
    if value is None or isinstance(value, str | bytes | Mapping):
        raise TypeError(f"{where}: {name} must be a NumPy array of real numbers; got {type(value).__name__}")
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:  # ragged nested sequences, objects NumPy cannot hold
        raise TypeError(f"{where}: {name} must be a NumPy array of real numbers; {type(value).__name__} "
                        f"does not convert to one ({error})") from None
    kind = array.dtype.kind
    if kind == "c":
        raise TypeError(f"{where}: {name} has complex element type {array.dtype}; kernels take real numbers and "
                        "would drop the imaginary part (pass x.real explicitly)")
    if kind == "b":
        raise TypeError(f"{where}: {name} has element type bool; kernels take real numbers")
    if kind not in "fiu" and not _is_ml_dtype(array.dtype):
        raise TypeError(f"{where}: {name} must be a NumPy array of real numbers; got element type {array.dtype}")
    return array


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """bf16 and the other `ml_dtypes` floats, which NumPy lists as kind 'V'."""
    import ml_dtypes

    try:
        return dtype.kind == "V" and ml_dtypes.finfo(dtype) is not None
    except (TypeError, ValueError):
        return False


def check_seed(where: str, seed: object) -> int:
    """A random seed: a non-negative integer (not a bool)."""
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        raise TypeError(f"{where}: seed must be a non-negative integer; got {type(seed).__name__} {describe(seed)}")
    if seed < 0:
        raise ValueError(f"{where}: seed must be a non-negative integer; got {seed}")
    return int(seed)


__all__ = ["MAX_SIZE", "check_array", "check_choice", "check_module", "check_seed", "check_size", "check_sizes",
           "check_string"]
