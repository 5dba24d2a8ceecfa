"""The tags of a simulated CTA's shared-memory bytes and the lines their changes are counted in
(`shared_memory`'s module docstring says what each tag means and who reads it)."""

NEVER, GENERIC, IN_FLIGHT, LANDED, CP_ASYNC = range(5)

EPOCH_BYTES = 128
"""The lines whose changes are counted (`shared_memory`'s docstring): a 128B-swizzled row, so that a wgmma operand's rows
are whole lines."""
