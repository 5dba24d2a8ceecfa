"""Remarks a pass leaves on the IR for a later pass to quote: what it was asked to do and did not, and why.

`UNPIPELINED_ATTR` (`tile.unpipelined`, a string on an `scf.for`): `pipeline-loops` left this loop that copies
single-stage, and the string says where and why (a copy whose rows TMA cannot read, so no ring stage can be
filled from it). A later pass that needs the loop pipelined (`overlap-softmax`, convert-tile-to-sm90's V
transpose) refuses with its own reason and quotes the remark (`unpipelined_remark`), so the diagnostic names
the cause, not only the symptom. The remark is discardable: convert-tile-to-sm90 builds new loops without it.
"""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

UNPIPELINED_ATTR = "tile.unpipelined"
"""The remark `pipeline-loops` leaves on a loop that copies and that it left single-stage (module docstring)."""


def mark_unpipelined(loop: scf.ForOp, reason: str) -> None:
    """Leave the remark on `loop`: `reason` says which copy kept it single-stage and why."""
    loop.attributes[UNPIPELINED_ATTR] = StringAttr(reason)


def unpipelined_remark(op: Operation) -> str:
    """`"; <reason>"` of the innermost loop around (or at) `op` that carries the remark, "" where none does: for
    a refusal to append to its own message."""
    current: Operation | None = op
    while current is not None:
        remark = current.attributes.get(UNPIPELINED_ATTR) if isinstance(current, scf.ForOp) else None
        if isinstance(remark, StringAttr):
            return f"; {remark.data}"
        current = current.parent_op()
    return ""
