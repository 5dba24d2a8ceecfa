"""`multicast-cluster-copies`: share a clustered kernel's ring refills between its CTAs with TMA multicast.

Input: a Target IR kernel (after `warp-specialize`, or without it) whose Tile IR declared a cluster
(`tile.cluster`, see `tessera.cluster`) and whose ring refills of `cluster_shared` copies are marked
`sm90.cluster_shared` by `convert-tile-to-sm90`. Kernels without a cluster, or without marked refills, are left
unchanged. Output, for a cluster of C CTAs (FlashAttention-3's `ClusterM = 2`, CUTLASS's multicast TMA):

- each marked box is split along its rows into C slices (the tensor map's box shrinks to box rows / C); CTA of
  %cluster_ctarank j issues slice j with `sm90.tma_load_multicast` into every member (mask: all C bits), at
  the slice's offset in the slot and on the full barrier at the same offset: every member still receives the
  whole box, so its full barrier's expect_tx is unchanged, and each CTA reads 1/C of the box from global;
- the empty barrier of a shared ring slot counts the consumers of every member (init count x C): each
  consumer thread, where it released the slot, arrives on that slot's empty barrier in every member
  (`sm90.mapa` + `sm90.mbarrier_arrive_cluster`), so a producer refills (and multicasts into) a slot only once
  every member has released it;
- after the mbarrier initialisation's `bar_sync`, and before the kernel returns, every thread passes a cluster
  barrier (`sm90.cluster_arrive` + `sm90.cluster_wait`): no multicast or remote arrive reaches a barrier before
  its init is visible to the cluster, and no CTA exits while a peer may still write into its shared memory or
  arrive on its barriers.

The kernel adapts to the cluster it is launched with: with %cluster_nctarank = 1 (the launcher's fallback when
the cluster does not divide the grid, `tessera.cluster.launch_cluster`) each CTA issues every slice itself with
plain `sm90.tma_load`, and its C arrivals per consumer all go to its own empty barrier. Launches with other
cluster sizes are not supported (the host description gives C or 1).

Refused by name: a cluster past the hardware's limits (`facts.check_cluster`), a tensor map that also serves
copies that are not shared, a box whose rows do not split into C slices of whole swizzle periods, a refill
whose empty barrier or whose buffers cannot be traced to a `sm90.shared_buffer`, a kernel without the
initialisation `bar_sync`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ArrayAttr, IndexType, IntegerAttr, ModuleOp, i32
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tessera.cluster import CLUSTER_ATTR, kernel_cluster
from tessera.ir.walk import walk_ops
from tessera.ir.diagnostics import located
from tessera.dialects import sm90
from tessera.ir.kernel_marks import target_kernels_in
from tessera.kernel_abi import BOX_ATTR, ELEMENT_ATTR, SWIZZLE_ATTR
from tessera.lowering.fragments import element_type_bytes
from tessera.passes.convert_tile_to_sm90.common import CLUSTER_SHARED_ATTR
from tessera.sm90 import facts


class MulticastError(DiagnosticException):
    """A kernel multicast-cluster-copies refuses; the message names the op and the rule."""


def _refuse(op: Operation, message: str) -> None:
    where = f"{str(op).splitlines()[0].strip()[:120]}: " if not isinstance(op, func.FuncOp) else ""
    raise MulticastError(located(op, f"multicast-cluster-copies: {where}{message}", name_op=False))


def buffer_of(value: SSAValue) -> sm90.SharedBufferOp | None:
    """The shared buffer an address is an offset into (through arith.addi of offsets), or None."""
    while True:
        owner = value.owner
        if isinstance(owner, sm90.SharedBufferOp):
            return owner
        if isinstance(owner, arith.AddiOp):
            left, right = buffer_of(owner.lhs), buffer_of(owner.rhs)
            return left or right
        return None


def _empty_barrier(load: sm90.TmaLoadOp) -> sm90.SharedBufferOp | None:
    """The empty barrier the refill issuing `load` waited on: the last `mbarrier_try_wait_parity` before it in
    its block (inside the spin loop), traced to its shared buffer."""
    op = load.prev_op
    while op is not None:
        waits = [o for o in op.walk() if isinstance(o, sm90.MBarrierTryWaitParityOp)]
        if waits:
            return buffer_of(waits[-1].mbarrier)
        op = op.prev_op
    return None


@dataclass
class _Multicast:
    fn: func.FuncOp
    shape: tuple[int, int, int]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def run(self) -> None:
        loads = [op for op in self.fn.walk() if isinstance(op, sm90.TmaLoadOp) and CLUSTER_SHARED_ATTR in op.attributes]
        if self.size == 1 or not loads:
            for op in loads:
                del op.attributes[CLUSTER_SHARED_ATTR]
            return
        try:
            facts.check_cluster(self.shape, self.shape)  # the size limit (a grid of one cluster)
        except ValueError as error:
            _refuse(self.fn, str(error))
        entry = self.fn.body.block
        init = next((op for op in entry.ops if isinstance(op, sm90.BarSyncOp)), None)
        if init is None:
            _refuse(self.fn, "no bar_sync after the mbarrier initialisation to put the cluster barrier after")
        empties = set()
        for load in loads:
            empty = _empty_barrier(load)
            if empty is None:
                _refuse(load, "the refill's empty barrier cannot be traced to a sm90.shared_buffer")
            empties.add(empty.sym.data)
        slices = {arg: self._split_map(arg, loads) for arg in {load.tensor_map for load in loads}}
        for load in loads:
            self._multicast(load, *slices[load.tensor_map])
        for op in list(self.fn.walk()):
            if isinstance(op, sm90.MBarrierInitOp) and (buffer := buffer_of(op.mbarrier)) is not None \
                    and buffer.sym.data in empties:
                op.count = IntegerAttr(op.count.value.data * self.size, 64)
            elif isinstance(op, sm90.MBarrierArriveOp) and (buffer := buffer_of(op.mbarrier)) is not None \
                    and buffer.sym.data in empties:
                self._arrive_everywhere(op)
        entry.insert_ops_after([sm90.ClusterArriveOp(), sm90.ClusterWaitOp()], init)
        entry.insert_ops_before([sm90.ClusterArriveOp(), sm90.ClusterWaitOp()], entry.last_op)

    # -- the tensor maps ---------------------------------------------------------------------------------------
    def _split_map(self, arg: SSAValue, loads: list[sm90.TmaLoadOp]) -> tuple[int, int]:
        """Shrink the map's box to rows / C; (rows per slice, bytes per slice)."""
        if not isinstance(arg, BlockArgument) or arg.block is not self.fn.body.block:
            _refuse(loads[0], "the tensor map is not a kernel argument")
        unshared = [u.operation for u in arg.uses if isinstance(u.operation, sm90.TmaLoadOp | sm90.TmaLoadMulticastOp)
                    and CLUSTER_SHARED_ATTR not in u.operation.attributes]
        if unshared:
            _refuse(unshared[0], "this copy is not cluster_shared but uses the tensor map of shared ones")
        attrs = dict(self.fn.arg_attrs.data[arg.index].data)
        if not (isinstance(attrs.get(BOX_ATTR), ArrayAttr) and all(isinstance(b, IntegerAttr) for b in attrs[BOX_ATTR])
                and hasattr(attrs.get(ELEMENT_ATTR), "bitwidth") and isinstance(attrs.get(SWIZZLE_ATTR), IntegerAttr)):
            _refuse(loads[0], f"the tensor map argument needs '{BOX_ATTR}', '{ELEMENT_ATTR}' and '{SWIZZLE_ATTR}'")
        box = [b.value.data for b in attrs[BOX_ATTR].data]
        elt = element_type_bytes(attrs[ELEMENT_ATTR])
        swizzle = attrs[SWIZZLE_ATTR].value.data
        if len(box) < 2:
            _refuse(loads[0], f"the box {box} has no rows to split among the cluster's {self.size} CTAs")
        problem = facts.multicast_slice_problem(box[1], box[0] * elt, swizzle, self.size)
        if problem:
            _refuse(loads[0], f"the box {box}: {problem}")
        rows = box[1] // self.size
        slice_bytes = rows * box[0] * elt
        attrs[BOX_ATTR] = ArrayAttr([IntegerAttr(b, 64) for b in [box[0], rows] + box[2:]])
        arg_attrs = list(self.fn.arg_attrs.data)
        arg_attrs[arg.index] = type(self.fn.arg_attrs.data[arg.index])(attrs)
        self.fn.arg_attrs = ArrayAttr(arg_attrs)
        return rows, slice_bytes

    # -- the copies --------------------------------------------------------------------------------------------
    def _multicast(self, load: sm90.TmaLoadOp, rows: int, slice_bytes: int) -> None:
        """Replace `load` by its C slices: multicast by rank j of slice j, or all issued locally when alone."""
        block = load.parent_block()
        ops: list[Operation] = []

        def add(op: Operation) -> SSAValue:
            ops.append(op)
            return op.results[0] if op.results else None

        n = add(sm90.SpecialRegOp("cluster_nctarank"))
        rank = add(sm90.SpecialRegOp("cluster_ctarank"))
        one = add(arith.ConstantOp(IntegerAttr(1, IndexType())))
        clustered = add(arith.CmpiOp(n, one, "ne"))
        coords = list(load.coords)
        shared_block, alone_block = Block(), Block()
        mask = (1 << self.size) - 1
        for j in range(self.size):
            at = []
            row = coords[1]
            if j:
                step = arith.ConstantOp(IntegerAttr(j * rows, coords[1].type))
                moved = arith.AddiOp(coords[1], step.result)
                offset = arith.ConstantOp(IntegerAttr(j * slice_bytes, i32))
                dest = arith.AddiOp(load.dest, offset.result)
                at = [step, moved, offset, dest]
                row, address = moved.result, dest.result
            else:
                address = load.dest
            slice_coords = [coords[0], row] + coords[2:]
            mine_c = arith.ConstantOp(IntegerAttr(j, IndexType()))
            mine = arith.CmpiOp(rank, mine_c.result, "eq")
            issue = Block([sm90.TmaLoadMulticastOp(load.tensor_map, slice_coords, address, load.mbarrier, mask),
                           scf.YieldOp()])
            shared_block.add_ops([*at, mine_c, mine, scf.IfOp(mine.result, [], Region(issue))])
            mapping: dict[SSAValue, SSAValue] = {}
            clones = [op.clone(value_mapper=mapping) for op in at]
            alone_block.add_ops(clones + [sm90.TmaLoadOp(load.tensor_map, [mapping.get(c, c) for c in slice_coords],
                                                         mapping.get(address, address), load.mbarrier)])
        shared_block.add_op(scf.YieldOp())
        alone_block.add_op(scf.YieldOp())
        add(scf.IfOp(clustered, [], Region(shared_block), Region(alone_block)))
        block.insert_ops_before(ops, load)
        load.detach()
        load.erase()

    def _arrive_everywhere(self, arrive: sm90.MBarrierArriveOp) -> None:
        """One arrival on the slot's empty barrier in member j mod %cluster_nctarank, for each j < C."""
        ops: list[Operation] = [n := sm90.SpecialRegOp("cluster_nctarank")]
        for j in range(self.size):
            c = arith.ConstantOp(IntegerAttr(j, IndexType()))
            target = arith.RemUIOp(c.result, n.result)
            remote = sm90.MapaOp(arrive.mbarrier, target.result)
            ops += [c, target, remote, sm90.MBarrierArriveClusterOp(remote.result)]
        arrive.parent_block().insert_ops_before(ops, arrive)
        arrive.detach()
        arrive.erase()


@dataclass(frozen=True)
class MulticastClusterCopiesPass(ModulePass):
    """Multicast the cluster-shared ring refills of every clustered Target IR kernel (module docstring)."""

    name = "multicast-cluster-copies"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in target_kernels_in(op):
            if CLUSTER_ATTR in fn.attributes:
                try:
                    shape = kernel_cluster(fn)
                except ValueError as error:
                    _refuse(fn, str(error))
                _Multicast(fn, shape).run()
            else:
                for load in walk_ops(fn):
                    if CLUSTER_SHARED_ATTR in load.attributes:
                        del load.attributes[CLUSTER_SHARED_ATTR]
