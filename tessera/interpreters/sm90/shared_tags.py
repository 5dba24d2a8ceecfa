"""The tags of a simulated CTA's shared-memory bytes, the lines their changes are counted in and the buffers it
declares (`shared_memory`'s module docstring says what each tag means and who reads it)."""

from dataclasses import dataclass

NEVER, GENERIC, IN_FLIGHT, LANDED, CP_ASYNC = range(5)

EPOCH_BYTES = 128
"""The lines whose changes are counted (`shared_memory`'s docstring): a 128B-swizzled row, so that a wgmma
operand's rows are whole lines."""


@dataclass(frozen=True)
class Buffer:
    """A `sm90.shared_buffer`: its name, byte range and swizzle."""

    name: str
    offset: int
    size: int
    swizzle: int
