"""The values of a traced score_mod / mask_mod (`tessera.variants.trace`): `Node`s of an expression graph, of
dtype f32, i32 or bool, and the `CapturedArray`s their gathers read (extra kernel inputs). Their own module so
that what builds graphs for the tracer (`tessera.variants.searches`) needs not import it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32, I32, BOOL = "f32", "i32", "bool"


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
