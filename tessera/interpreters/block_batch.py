"""The state of a batch of thread blocks run together by the Tile IR interpreter.

The interpreter runs B blocks of the grid at once: every register tile is an array with a leading block axis
of length B, every index value is an int64 array of shape [B] (or a Python int when it is the same for all).
Control flow may differ between blocks (a causal loop runs fewer trips in early query blocks); the blocks that
do not take a path are *inactive* there: their results are discarded and their side effects suppressed.
`BlockBatch.active` is the mask of blocks active at the current point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation
from xdsl.utils.exceptions import InterpretationError


class KernelHazardError(InterpretationError):
    """A kernel did something whose result the hardware does not define (a race, a read of data that has not
    arrived, a write outside a buffer). The message names the op and the first block affected."""


def describe_op(op: Operation) -> str:
    text = str(op).splitlines()[0].strip()
    return text if len(text) < 160 else text[:157] + "..."


@dataclass
class BlockBatch:
    """Program ids of the B blocks in the batch, and the stack of activity masks."""

    program_ids: tuple[np.ndarray, np.ndarray, np.ndarray]
    masks: list[np.ndarray] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.program_ids[0])

    @property
    def active(self) -> np.ndarray:
        return self.masks[-1] if self.masks else np.ones(self.size, bool)

    def push(self, mask: np.ndarray) -> None:
        self.masks.append(self.active & mask)

    def pop(self) -> None:
        self.masks.pop()

    def block_name(self, index: int) -> str:
        x, y, z = (int(p[index]) for p in self.program_ids)
        return f"block ({x}, {y}, {z})"

    def fail(self, op: Operation, message: str, where: np.ndarray | None = None) -> None:
        """Raise a KernelHazardError for `op`, naming the first block in `where` (a [B] mask)."""
        block = ""
        if where is not None and where.any():
            block = f" in {self.block_name(int(np.argmax(where)))}"
        raise KernelHazardError(f"{describe_op(op)}: {message}{block}")

    def index_array(self, value) -> np.ndarray:
        """An index value (Python int or [B] array) as a [B] int64 array."""
        return np.broadcast_to(np.asarray(value, dtype=np.int64), (self.size,))

    def select(self, mask: np.ndarray, new, old):
        """Per block, `new` where `mask` else `old` (for values leaving a region some blocks skipped)."""
        if new is old:
            return new
        if isinstance(new, np.ndarray) and new.ndim >= 1 and new.shape[0] == self.size and getattr(old, "shape", None) == new.shape:
            return np.where(mask.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
        if _is_float_scalar(new) and _is_float_scalar(old):  # f32 scalars (or [B] of them): keep their type
            dtype = np.result_type(np.asarray(new).dtype, np.asarray(old).dtype)
            return np.where(mask, np.broadcast_to(new, (self.size,)), np.broadcast_to(old, (self.size,))).astype(dtype)
        if isinstance(new, (int, np.integer, np.ndarray)) and isinstance(old, (int, np.integer, np.ndarray)):
            return np.where(mask, self.index_array(new), self.index_array(old))
        if hasattr(new, "select") and type(new) is type(old):
            return new.select(mask, old)
        raise InterpretationError(f"cannot merge values of {type(new).__name__} across blocks that took different paths")


def _is_float_scalar(value) -> bool:
    """A float scalar value of the batch: a NumPy/Python float, or a [B] array of them (one per block)."""
    if isinstance(value, np.ndarray):
        return value.ndim <= 1 and value.dtype.kind == "f"
    return isinstance(value, (float, np.floating))
