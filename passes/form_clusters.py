"""`form-clusters{x=2,y=1,z=1}`: group a Tile IR kernel's blocks into clusters and mark the copies they share.

Input: Tile IR kernels. Output: each kernel carries `tile.cluster = array<i64: x, y, z>` and every
`tile.cp_async` that is the same for all blocks of a cluster is marked `cluster_shared` (see `tessera.cluster`):

- its window's indices do not depend on `tile.program_id` along an axis the cluster spans (a loop's induction
  variable depends on them only through its lower bound and step: the members take the same values);
- every loop and `scf.if` around it is entered the same way by every member: bounds and conditions that do
  not depend on those program ids, so the members copy in step.

Flash attention clustered along x (query blocks of one head): the K and V copies of the key loop are shared,
the Q copy (its window starts at the block's own query rows) is not. GEMM clustered along x (M blocks): the B
copies are shared, the A copies are not. Refused by name: a copy whose window is shared but whose loop runs a
number of trips that depends on the cluster's program ids (causal attention: the members' key ranges differ,
so they would not copy in step), a cluster under which no copy is shared (it would save nothing), and a cluster
that `multicast-cluster-copies` could not give the shared copies (more than 8 blocks, or a copy's TMA box whose
rows do not split into one slice of whole swizzle periods per block: `facts.multicast_slice_problem`; flash
attention's K and V boxes of 128 rows take clusters of 1, 2, 4 or 8), naming the sizes that fit. Options
below 1 are refused as a pipeline error. `x = y = z = 1` leaves a kernel unchanged. A kernel clustered already
(an earlier form-clusters, or a builder's `cluster=`) is left as it is for the same shape (the pass is
idempotent) and refused by name for another: its copies are marked for the cluster it has, and a copy shared
along one axis may differ along another (`form-clusters{x=2},form-clusters{y=2}` on the GEMM left B shared in a
cluster along y); form the cluster once, with the shape wanted.

`tessera.kernels.flash_attention(..., cluster=2)` and `tessera.kernels.gemm(..., cluster=(2, 1))` apply
`form_clusters` to the kernel they build.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tessera.cluster import CLUSTER_ATTR, cluster_attr, kernel_cluster
from tessera.ir.diagnostics import located
from tessera.dialects import tile
from tessera.dialects.tile_types import element_byte_width
from tessera.kernel_abi import is_kernel
from tessera.passes.assign_swizzle import largest_swizzle
from tessera.sm90 import facts


class FormClustersError(DiagnosticException):
    """A kernel form-clusters refuses; the message names the op and the rule."""


class _Varies:
    """Whether a value may differ between the blocks of one cluster: it depends on `tile.program_id` along
    one of `axes`. Conservative: results of region ops and loop-carried values count as varying."""

    def __init__(self, axes: set[str]):
        self.axes = axes
        self.memo: dict[SSAValue, bool] = {}

    def __call__(self, value: SSAValue) -> bool:
        if value not in self.memo:
            self.memo[value] = True  # a cycle (loop-carried) is conservatively varying
            self.memo[value] = self._compute(value)
        return self.memo[value]

    def _compute(self, value: SSAValue) -> bool:
        if isinstance(value, OpResult):
            op = value.op
            if isinstance(op, tile.ProgramIdOp):
                return op.axis.data in self.axes
            if op.regions:
                return True
            return any(self(o) for o in op.operands)
        assert isinstance(value, BlockArgument)
        parent = value.block.parent_op()
        if isinstance(parent, func.FuncOp):
            return False  # the kernel's tensors and sizes are the same for every block
        if isinstance(parent, scf.ForOp) and value.index == 0:
            return self(parent.lb) or self(parent.step)
        return True

    def control(self, op: Operation) -> Operation | None:
        """The first loop or scf.if around `op` that the members may enter differently, or None."""
        parent = op.parent_op()
        while parent is not None and not isinstance(parent, func.FuncOp):
            if isinstance(parent, scf.ForOp) and any(self(v) for v in (parent.lb, parent.ub, parent.step)):
                return parent
            if isinstance(parent, scf.IfOp) and self(parent.cond):
                return parent
            if isinstance(parent, scf.WhileOp):
                return parent
            parent = parent.parent_op()
        return None


def _refuse(op: Operation, message: str) -> None:
    where = f"{str(op).splitlines()[0].strip()[:120]}: " if not isinstance(op, func.FuncOp) else ""
    raise FormClustersError(located(op, f"form-clusters: {where}{message}", name_op=False))


def form_clusters(fn: func.FuncOp, shape: tuple[int, int, int]) -> list[tile.CpAsyncOp]:
    """Give the Tile IR kernel `fn` the cluster `shape` and mark its shared copies (module docstring); returns
    the copies marked. Raises FormClustersError naming what it refuses."""
    if tuple(shape) == (1, 1, 1):
        return []
    if CLUSTER_ATTR in fn.attributes and (had := kernel_cluster(fn)) != tuple(shape):
        _refuse(fn, f"the kernel is clustered already, {had[0]} x {had[1]} x {had[2]} blocks (an earlier form-clusters "
                    f"or the builder's cluster=), and its copies are marked for that cluster; form the cluster once, "
                    f"with the shape wanted, not {shape[0]} x {shape[1]} x {shape[2]} over it")
    axes = {a for a, n in zip("xyz", shape) if n > 1}
    varies = _Varies(axes)
    names = ", ".join(sorted(axes))
    shared = []
    for op in fn.walk():
        if not isinstance(op, tile.CpAsyncOp):
            continue
        view = op.source.owner
        window_varies = not isinstance(view, tile.ViewOp) or any(varies(i) for i in view.indices)
        if window_varies:
            continue
        control = varies.control(op)
        if control is not None:
            _refuse(op, f"the blocks of a cluster along {names} copy the same window here, but the "
                        f"{control.name} around it depends on the program id along {names} (the members' loops "
                        "differ, as causal attention's key ranges do), so they would not copy in step")
        shared.append(op)
    if not shared:
        _refuse(fn, f"no copy of the kernel is the same for the blocks of a cluster along {names}: a cluster "
                    "would share nothing")
    _check_multicast(fn, shape, shared)
    fn.attributes[CLUSTER_ATTR] = cluster_attr(shape)
    for op in shared:
        op.cluster_shared = UnitAttr()
    return shared


def _box(op: tile.CpAsyncOp) -> tuple[int, int, int]:
    """(rows, row bytes, swizzle bytes) of the TMA box the lowering gives the copy `op`: one swizzle width of
    its rows (`assign-swizzle`'s choice for its destination), or its whole row unswizzled."""
    rows, cols = op.source.type.get_shape()[0], op.source.type.get_shape()[-1]
    swizzle = largest_swizzle(op.dest.type)
    return rows, swizzle or cols * element_byte_width(op.source.type.element_type), swizzle


def _check_multicast(fn: func.FuncOp, shape: tuple[int, int, int], shared: list[tile.CpAsyncOp]) -> None:
    """Refuse, before anything is lowered, a cluster that `multicast-cluster-copies` could not give its shared
    copies: more blocks than a cluster may hold, or a copy whose TMA box does not split into a slice per block of
    whole swizzle periods (`facts.multicast_slice_problem`); the message names the sizes that fit."""
    boxes = [_box(op) for op in shared]
    allowed = ", ".join(str(n) for n in facts.multicast_sizes(boxes))
    why = (f"clusters of {allowed} blocks share this kernel's copies (up to {facts.MAX_PORTABLE_CLUSTER_SIZE} "
           "blocks a cluster; TMA multicast gives each block a slice of every shared box, of whole swizzle periods)")
    try:
        facts.check_cluster(shape, shape)  # the size limit (a grid of one cluster)
    except ValueError as error:
        _refuse(fn, f"{error}: {why}")
    for op, box in zip(shared, boxes):
        problem = facts.multicast_slice_problem(*box, math.prod(shape))
        if problem:
            _refuse(op, f"a cluster of {math.prod(shape)} blocks cannot multicast this copy's TMA box: "
                        f"{problem}; {why}")


@dataclass(frozen=True)
class FormClustersPass(ModulePass):
    """Cluster every Tile IR kernel's blocks x by y by z and mark the copies the members share."""

    name = "form-clusters"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""
    x: int = 1
    y: int = 1
    z: int = 1

    def __post_init__(self) -> None:
        for axis in "xyz":
            value = getattr(self, axis)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"form-clusters: {axis} must be an integer >= 1, got {value!r}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [o for o in op.walk() if is_kernel(o)]:
            form_clusters(fn, (self.x, self.y, self.z))
