"""`assign-swizzle`: choose the shared-memory swizzle and alignment of every shared tile.

Input: Tile IR. Output: the same IR where each `tile.alloc_shared` has the largest swizzle of 128/64/32
bytes that its rows allow (the row's bytes must be a whole number of swizzle widths; rows of less than 32
bytes, or not a multiple of 32, stay unswizzled, and so do one-row tiles) and the alignment that swizzle needs (its period: 1024,
512 or 256 bytes; 128 bytes, what bulk tensor copies need, when unswizzled). `tile.stage` results follow
their ring's type. Swizzles already written in the input are replaced: the pass owns the choice. The ops it
rebuilds keep their source locations, so later diagnostics about them say `file:line:col`.

With `report=true` it writes, to stderr, one line per shared buffer and one per shared access (copy
destinations, loads, `tile.mma` operands) with its bank-conflict ways (`tessera.analysis.bank_conflicts`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tessera.analysis.bank_conflicts import AccessPattern, AccessReport, conflict_ways
from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType, element_byte_width
from tessera.sm90.facts import SWIZZLE_MODES, TMA_SMEM_ALIGNMENT, swizzled_buffer_alignment


def largest_swizzle(ty: TileType) -> int:
    """The widest swizzle (bytes) whose width divides the tile's row bytes; 0 if none does, and 0 for a one-row
    tile ([1, N] or a ring of them: a swizzle permutes a row's 16-byte chunks by the row's place in its 8-row
    period, which one row does not have; such a row is read with ld.shared, never by the tensor core)."""
    if ty.rank >= 2 and ty.get_shape()[-2] == 1:
        return 0
    row_bytes = ty.get_shape()[-1] * element_byte_width(ty.element_type)
    return max((m for m in SWIZZLE_MODES if m and row_bytes % m == 0), default=0)


def required_alignment(swizzle: int) -> int:
    """What a shared tile filled by bulk tensor copies and read by the tensor cores must start on: the swizzle
    period (descriptor base offset 0), and at least the TMA destination alignment."""
    return max(swizzled_buffer_alignment(swizzle), TMA_SMEM_ALIGNMENT)


def _shared_accesses(op: Operation) -> list[tuple[str, object, AccessPattern]]:
    """(operand name, value, pattern) of each shared tile `op` reads or writes."""
    if isinstance(op, tile.ASYNC_COPY_OPS):
        return [("destination", op.dest, AccessPattern.ROW_VECTORS)]
    if isinstance(op, tile.LoadOp):
        return [("source", op.source, AccessPattern.ROW_VECTORS)]
    if isinstance(op, tile.MmaOp):
        return [("operand A", op.a, AccessPattern.ROW_GROUP_CHUNKS), ("operand B", op.b, AccessPattern.ROW_GROUP_CHUNKS)]
    return []


def bank_conflict_report(module: ModuleOp) -> list[AccessReport]:
    """The bank-conflict ways of every shared access in `module`, in program order."""
    reports = []
    for op in module.walk():
        for operand, value, pattern in _shared_accesses(op):
            ty = value.type
            if isinstance(ty, TileType) and ty.memory_space == MemSpace.SHARED:
                buffer = value.owner.source if isinstance(value.owner, tile.StageOp) else value
                reports.append(AccessReport(op.name, operand, buffer.name_hint or "?", pattern, conflict_ways(ty, pattern)))
    return reports


@dataclass(frozen=True)
class AssignSwizzlePass(ModulePass):
    """Give each shared tile the widest swizzle its rows allow and the alignment it needs."""

    name = "assign-swizzle"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    report: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewriter = Rewriter()
        for alloc in [o for o in op.walk() if isinstance(o, tile.AllocSharedOp)]:
            ty = alloc.result.type
            swizzle = largest_swizzle(ty)
            new = tile.AllocSharedOp(ty.with_(swizzle=swizzle), required_alignment(swizzle))
            new.attributes.update(alloc.attributes)
            new.location = alloc.location  # diagnostics of later passes point at the source's alloc
            rewriter.replace_op(alloc, new)
            if self.report:
                print(f"assign-swizzle: %{new.result.name_hint} {_shape_text(ty)}: swizzle {swizzle}, align "
                      f"{required_alignment(swizzle)}", file=sys.stderr)
        for stage in [o for o in op.walk() if isinstance(o, tile.StageOp)]:
            new_stage = tile.StageOp(stage.source, stage.index)
            new_stage.location = stage.location
            rewriter.replace_op(stage, new_stage)
        if self.report:
            for line in bank_conflict_report(op):
                print(f"assign-swizzle: {line}", file=sys.stderr)


def _shape_text(ty: TileType) -> str:
    return "x".join(map(str, ty.get_shape())) + f"x{ty.element_type}"
