"""convert-tile-to-sm90, riding rings: a ring of one-row tiles shares the mbarriers of the ring filled just
before it in the same copy group (FlashAttention-3 loads LSE with Q and dPsum with dO on their barriers).

A one-row tile (`common.ROW_TILE_ROWS`: the backward's LSE2 and dPsum, 256 bytes a stage) filled by TMA beside a
large tile would cost as much synchronisation as the large one: a full and an empty barrier per slot, the
producer's wait and arrive, the consumers' wait and arrive every trip. Riding on the other ring's barriers it
costs one more TMA on the producer's side and nothing on the consumers': the leader's fill expects both copies'
bytes (`RidingRings.expect_bytes`), the consumers' one wait on the leader's full barrier covers both, and one
arrive on its empty barrier releases both (at the family's last `tile.release` in the block; the others,
`RidingRings.silent`, only retire their wgmma readers).

A row ring rides only where that is the same synchronisation: every fill of it is a TMA copy (not
`cluster_shared`) that follows, in its block, a TMA copy into a stage of one and the same *leader* ring (not a
row ring, not gathered, not transposed) with the same slot count and the same stage index value; every fill of
the leader is followed by one of it (the leader's expect_tx counts the row's bytes); and in every block that
releases one of them, both are released, once each, from stages of the same index value. Otherwise it keeps
barriers of its own (still correct, only slower).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.ir import Operation

from tessera.dialects import tile
from tessera.ir.walk import walk_ops
from tessera.lowering.fragments import element_type_bytes
from tessera.passes.convert_tile_to_sm90.common import ROW_TILE_ROWS


@dataclass
class RidingRings:
    """The plan: `leader` maps each riding ring (its `tile.alloc_shared`) to the ring whose barriers it uses;
    `expect_bytes` a leader to the bytes its fill expects (its own stage's and its riders'); `silent` the
    `tile.release`s that do not arrive (a later release of their family, in the same block, does)."""

    leader: dict = field(default_factory=dict)
    expect_bytes: dict = field(default_factory=dict)
    silent: set = field(default_factory=set)

    def family(self, ring: Operation) -> Operation:
        """The ring whose barriers `ring` uses (itself when it does not ride)."""
        return self.leader.get(ring, ring)


def _ring_of(value) -> tuple[Operation, object] | None:
    """(the ring's tile.alloc_shared, the stage index value) of a `tile.stage` result, else None."""
    stage = value.owner
    if isinstance(stage, tile.StageOp) and isinstance(stage.source.owner, tile.AllocSharedOp):
        return stage.source.owner, stage.index
    return None


def _is_row_ring(ring: Operation) -> bool:
    shape = ring.result.type.get_shape()
    return len(shape) == 3 and shape[1] == ROW_TILE_ROWS


def _stage_bytes(ring: Operation) -> int:
    _, rows, cols = ring.result.type.get_shape()
    return rows * cols * element_type_bytes(ring.result.type.element_type)


def _neighbour_copy(copy: Operation, forward: bool) -> Operation | None:
    """The copy after (or before) `copy` in its block, none past a commit."""
    op = copy.next_op if forward else copy.prev_op
    while op is not None and not isinstance(op, (*tile.ASYNC_COPY_OPS, tile.CpCommitGroupOp)):
        op = op.next_op if forward else op.prev_op
    return op if isinstance(op, tile.ASYNC_COPY_OPS) else None


def _leader_of_fill(copy: tile.CpAsyncOp, excluded: set) -> tuple[Operation, object] | None:
    """The (ring, index) of the TMA copy before `copy` in its block that fills a stage of a ring that may lead."""
    op = _neighbour_copy(copy, forward=False)
    if not isinstance(op, tile.CpAsyncOp) or op.cluster_shared is not None:
        return None
    found = _ring_of(op.dest)
    if found is None or _is_row_ring(found[0]) or found[0] in excluded:
        return None
    return found


def plan_riding_rings(fn: func.FuncOp, excluded: set) -> RidingRings:
    """The riding rings of kernel `fn` (module docstring); `excluded`: rings that neither ride nor lead (gathered
    or transposed rings, whose barriers count other arrivals)."""
    fills = defaultdict(list)  # ring -> [(its copy's stage index, leader found or None)]
    copies = defaultdict(list)  # ring -> the copies that fill it
    releases = defaultdict(lambda: defaultdict(list))  # block -> ring -> [(release op, stage index)]
    for op in walk_ops(fn):
        if isinstance(op, tile.ASYNC_COPY_OPS):
            found = _ring_of(op.dest)
            if found is not None:
                copies[found[0]].append(op)
                ok = isinstance(op, tile.CpAsyncOp) and op.cluster_shared is None
                fills[found[0]].append((found[1], _leader_of_fill(op, excluded) if ok else None))
        elif isinstance(op, tile.ReleaseOp):
            found = _ring_of(op.stage)
            if found is not None:
                releases[op.parent_block()][found[0]].append((op, found[1]))
    plan = RidingRings()
    for ring, ring_fills in fills.items():
        if not _is_row_ring(ring) or ring in excluded:
            continue
        leaders = {leader[0] for _, leader in ring_fills if leader is not None}
        if len(leaders) != 1 or any(leader is None or leader[1] is not index for index, leader in ring_fills):
            continue
        (leader,) = leaders
        if leader.result.type.get_shape()[0] != ring.result.type.get_shape()[0]:
            continue
        # every fill of the leader brings the row along (its expect_tx counts the row's bytes)
        if not all(_fills(_neighbour_copy(c, forward=True), ring) for c in copies[leader]):
            continue
        if all(_released_together(by_ring, leader, ring) for by_ring in releases.values()):
            plan.leader[ring] = leader
    for ring, leader in plan.leader.items():
        plan.expect_bytes[leader] = plan.expect_bytes.get(leader, _stage_bytes(leader)) + _stage_bytes(ring)
    for by_ring in releases.values():
        families = defaultdict(list)
        for ring, found in by_ring.items():
            families[plan.family(ring)].extend(op for op, _ in found)
        for family, ops in families.items():
            if family in plan.expect_bytes:  # a family with riders: its last release arrives
                last = max(ops, key=lambda o: o.parent_block().get_operation_index(o))
                plan.silent.update(o for o in ops if o is not last)
    return plan


def _fills(copy: Operation | None, ring: Operation) -> bool:
    found = None if copy is None else _ring_of(copy.dest)
    return found is not None and found[0] is ring


def _released_together(by_ring: dict, leader: Operation, rider: Operation) -> bool:
    """In one block: neither ring released, or each released once, from stages of the same index value."""
    mine, theirs = by_ring.get(rider, []), by_ring.get(leader, [])
    if not mine and not theirs:
        return True
    return len(mine) == len(theirs) == 1 and mine[0][1] is theirs[0][1]
