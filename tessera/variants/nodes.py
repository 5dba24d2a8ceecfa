"""The values of a traced score_mod / mask_mod (`tessera.variants.trace`): `Node`s of an expression graph, of
dtype f32, i32 or bool, and the `CapturedArray`s their gathers read (extra kernel inputs). Their own module so
that what builds graphs for the tracer (`tessera.variants.searches`) needs not import it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32, I32, BOOL = "f32", "i32", "bool"
I32_RANGE = (-2**31, 2**31 - 1)
"""The values an i32 holds (integer arrays are read as i32; i32 arithmetic wraps outside them)."""
COMPARES = ("lt", "le", "gt", "ge", "eq", "ne")
"""The ops that compare two numbers (their result is bool)."""


@dataclass(frozen=True)
class CapturedArray:
    """A NumPy array a modifier reads, passed to the kernel as an input named `name` (f32 for floats, i32 for
    integers and booleans): `array` is what the kernel takes (a boolean array as 0/1 int32, `boolean` set)."""

    name: str
    array: np.ndarray
    boolean: bool = False

    @property
    def dtype(self) -> str:
        return F32 if self.array.dtype.kind == "f" else I32


@dataclass(eq=False)
class Node:
    """One value of a traced modifier: `op` on `args` (Nodes), with `value` for constants, arguments and
    gathers (the CapturedArray), and `dtype` f32, i32 or bool."""

    op: str
    args: tuple[Node, ...]
    dtype: str
    value: object = None


@dataclass(frozen=True)
class Read:
    """A read the modifier wrote of a captured array, `name[indices]` (`name` as the user calls it), at
    `where` (file:line): what `tessera.variants.index_ranges` proves in bounds for a launch."""

    array: CapturedArray
    name: str
    indices: tuple[Node, ...]
    where: str


@dataclass(frozen=True)
class Count:
    """A search's count (np.searchsorted, np.digitize, torch.searchsorted / bucketize of `value` in the `n`
    boundaries of `boundaries`): a value in [0, n], whatever the graph that computes it."""

    n: int
    function: str
    boundaries: str
    value: Node
