"""One-edit bugs seeded into the Target IR of the warp-specialized flash kernel (issue 31's matrix at Target IR
level): deleted waits, flipped parities, wrong or missing expect_tx, missing commits and wait_groups, deleted
fences and barriers, slots released early or never, wrong barrier counts, the ping-pong named barriers and
global stores of two threads onto the same bytes.

The flash kernel's loop runs its first trip too (overlap-softmax's fold): the previous trip's P.V wgmmas, V wait
and V release run under `scf.if first_trip {} else {...}`, and no trip is peeled before the loop. Bugs that the
peeled trip carried are seeded into the loop's first trip (the K release kept on it alone, the S fence moved
before the loop for the warpgroup's first wgmma), and edits that are benign on every later trip are applied to
those trips only (the first trip has no V release of a trip before it to order an early K release).

`SEEDS` maps a bug's name to (kind, kernel variant, edit); `seeded(name)` returns a fresh copy of the variant's
kernel with the edit applied. tests/test_target_races.py runs one bug per kind; bench/races_target.py runs all
of them on two shapes (`python bench/races_target.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache

from xdsl.dialects import arith, scf
from xdsl.ir import Block

import tessera
from tessera.dialects import sm90
from tessera.passes import PIPELINED_PIPELINE, SPECIALIZED_PIPELINE

VARIANTS = {
    "specialized": SPECIALIZED_PIPELINE,
    "pingpong": PIPELINED_PIPELINE + ",warp-specialize{pingpong=true}",
    "gemm": SPECIALIZED_PIPELINE,
}
"""Kernel variants: the flash kernel (head_dim 64, bf16) through the default specialized pipeline or with
ping-pong consumer warpgroups, and the warp-specialized GEMM (bf16, 128 x 128 x 64 blocks), a kernel the
flash seeds were not written for."""


@lru_cache(maxsize=None)
def _lowered(variant: str, head_dim: int = 64):
    if variant == "gemm":
        module = tessera.kernels.gemm()
    else:
        module = tessera.kernels.flash_attention(head_dim=head_dim, causal=False, dtype="bf16")
    sig = tessera.find_kernel(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sig, tessera.lower_to_target(module, sig.name, VARIANTS[variant])


def kernel(variant: str, head_dim: int = 64):
    """(signature, a fresh copy of the unseeded kernel)."""
    sig, lowered = _lowered(variant, head_dim)
    return sig, lowered.clone()


# region finding ops


def _roles(fn):
    """(producer region, consumer region): the two branches of the role split."""
    split = [op for op in fn.body.block.ops if isinstance(op, scf.IfOp)][-1]
    return split.true_region, split.false_region


def _loops(region) -> list[scf.ForOp]:
    return [op for op in region.walk() if isinstance(op, scf.ForOp)]


def _steady(fn, role: int) -> scf.ForOp:
    """The first loop of the producer (0) or of the first consumer (1): the loop of every trip (its masks under a
    branch, peel-masked-iterations{branch=true}; the consumer's first trip folded in, overlap-softmax)."""
    return _loops(_roles(fn)[role])[0]


def _top(loop: scf.ForOp, kind) -> list:
    return [op for op in loop.body.block.ops if isinstance(op, kind)]


def _waits(loop: scf.ForOp) -> list[scf.WhileOp]:
    return [op for op in loop.body.walk() if isinstance(op, scf.WhileOp)]


def _wait_parity(wait: scf.WhileOp):
    return next(op for op in wait.before_region.walk() if isinstance(op, sm90.MBarrierTryWaitParityOp))


def _erase(op) -> None:
    op.detach()
    op.erase()


def _first(fn, kind, region=None):
    return next(op for op in (region or fn.body).walk() if isinstance(op, kind))


def _move_before(op, anchor) -> None:
    op.detach()
    anchor.parent_block().insert_op_before(op, anchor)


# endregion
# region edits


def _shift_store_column(fn) -> None:
    """The first global store's second register goes 8 bytes further: onto the column the next lane of the quad
    stores its first register to (two threads write the same bytes, unordered)."""
    from xdsl.dialects.builtin import DenseArrayBase, i32

    store = _first(fn, sm90.StGlobalOp)
    columns = list(store.column_bytes.get_values())
    columns[1] += 8
    store.properties["column_bytes"] = DenseArrayBase.from_list(i32, columns)


def _delete(find: Callable) -> Callable:
    return lambda fn: _erase(find(fn))


def _flip_parity(find: Callable) -> Callable:
    """The wait tests the other parity: `xori parity, 1` inserted before the try_wait."""

    def edit(fn):
        wait = _wait_parity(find(fn))
        parity = wait.operands[1]
        one = arith.ConstantOp.from_int_and_width(1, parity.type)
        flipped = arith.XOrIOp(parity, one.result)
        wait.parent_block().insert_ops_before([one, flipped], wait)
        wait.operands[1] = flipped.result

    return edit


def _unflip_producer_parity(index: int) -> Callable:
    """The producer waits on an empty barrier with the full barrier's parity (its xori dropped)."""

    def edit(fn):
        wait = _wait_parity(_waits(_steady(fn, 0))[index])
        flip = wait.operands[1].owner
        assert isinstance(flip, arith.XOrIOp)
        wait.operands[1] = flip.lhs

    return edit


def _expect_bytes(find: Callable, factor: float) -> Callable:
    def edit(fn):
        op = find(fn)
        op.properties["bytes"] = type(op.properties["bytes"])(int(op.properties["bytes"].value.data * factor),
                                                              op.properties["bytes"].type)

    return edit


def _init_count(index: int, count: int) -> Callable:
    def edit(fn):
        op = [o for o in fn.body.walk() if isinstance(o, sm90.MBarrierInitOp)][index]
        op.properties["count"] = type(op.properties["count"])(count, op.properties["count"].type)

    return edit


def _wait_group_pending(find: Callable, pending: int) -> Callable:
    def edit(fn):
        op = find(fn)
        op.properties["pending"] = type(op.properties["pending"])(pending, op.properties["pending"].type)

    return edit


def _consumer_loop(fn):
    return _steady(fn, 1)


def _releases(fn) -> list:
    """The consumer loop's slot releases, nested ones included: 0 = K (after wait_group 1), 1 = V (after
    wait_group 0, under `scf.if first_trip {} else {...}`: the folded loop's first trip has no previous V)."""
    return [op for op in _consumer_loop(fn).body.walk() if isinstance(op, sm90.MBarrierArriveOp)]


def _release(position: int):
    return lambda fn: _releases(fn)[position]


def _wait_group(position: int):
    return lambda fn: _top(_consumer_loop(fn), sm90.WgmmaWaitGroupOp)[position]


def _release_early(position: int, before: Callable) -> Callable:
    """Release `position` moved before `before`; moved to the loop's top level, it takes the branch that skips
    it on the first trip along (the V release: otherwise the edit would add a release of a slot never filled)."""

    def edit(fn):
        release, anchor = _release(position)(fn), before(fn)
        loop = _consumer_loop(fn)
        if anchor.parent_block() is loop.body.block and release.parent_block() is not loop.body.block:
            release = loop.body.block.find_ancestor_op_in_block(release)
        _move_before(release, anchor)

    return edit


def _retarget_release(position: int, other: int) -> Callable:
    """Release `position` arrives on the barrier release `other` uses (both computed before either release)."""

    def edit(fn):
        releases = _releases(fn)
        releases[position].operands[0] = releases[other].operands[0]

    return edit


def _double(find: Callable) -> Callable:
    def edit(fn):
        op = find(fn)
        op.parent_block().insert_op_after(op.clone(), op)

    return edit


def _wait_after(position: int, anchor: Callable) -> Callable:
    """The consumer's full-barrier wait `position` moved after `anchor` (its slot is read before the wait)."""

    def edit(fn):
        wait, after = _consumer_wait(position)(fn), anchor(fn)
        wait.detach()
        after.parent_block().insert_op_after(wait, after)

    return edit


def _consumer_wait(position: int):
    """The consumer loop's full-barrier waits: 0 = K, 1 = V."""
    return lambda fn: _waits(_consumer_loop(fn))[position]


def _producer_wait(position: int):
    """The producer loop's empty-barrier waits: 0 = K, 1 = V."""
    return lambda fn: _waits(_steady(fn, 0))[position]


def _producer_expect(position: int):
    return lambda fn: [op for op in _steady(fn, 0).body.walk() if isinstance(op, sm90.MBarrierArriveExpectTxOp)][
        position]


def _q_wait(fn):
    consumer = _roles(fn)[1]
    return next(op for op in consumer.block.ops if isinstance(op, scf.WhileOp))


def _bar_sync(threads: int):
    return lambda fn: next(op for op in fn.body.walk() if isinstance(op, sm90.BarSyncOp)
                           and op.threads.value.data == threads)


def _pingpong(kind, barrier_index: int):
    """The first named-barrier op of `kind` on `barrier_index` inside a consumer loop."""

    def find(fn):
        return next(op for loop in _loops(_roles(fn)[1]) for op in loop.body.walk()
                    if isinstance(op, kind) and op.barrier.value.data == barrier_index)

    return find


def _issuing(loop: scf.ForOp, kind) -> list:
    """The ops of `kind` in `loop` (nested ones included) beside more than one wgmma_mma_async: 0 = S's, 1 =
    P.V's (under the folded loop's `scf.if first_trip`; mask-by-mma's bias, one wgmma in the masked trips'
    branch, is not counted)."""
    return [op for op in loop.body.walk() if isinstance(op, kind)
            and sum(isinstance(o, sm90.WgmmaMmaAsyncOp) for o in op.parent_block().ops) > 1]


def _loop_fence(position: int):
    return lambda fn: _issuing(_consumer_loop(fn), sm90.WgmmaFenceOp)[position]


def _prologue_fence(fn):
    """The consumers' first wgmma_fence: the folded loop's S fence (no trip is peeled before the loop)."""
    return _first(fn, sm90.WgmmaFenceOp, _roles(fn)[1])


def _commit(position: int):
    return lambda fn: _issuing(_consumer_loop(fn), sm90.WgmmaCommitGroupOp)[position]


def _out_of_the_loop(find: Callable) -> Callable:
    """The op moved from its loop to just before it: it runs once, before the first trip, and no later trip has
    it (the folded loop's S fence: the warpgroup's first wgmma keeps a fence, every later S has none, as when
    the first trip was peeled before the loop and only the loop's fence was deleted)."""

    def edit(fn):
        op = find(fn)
        _move_before(op, op.parent_op())

    return edit


def _update_branch(fn):
    """The consumer loop's `scf.if first_trip` with results: the previous trip's P.V update, past which the
    first trip branches (retiring its S group there)."""
    return next(op for op in _consumer_loop(fn).body.block.ops if isinstance(op, scf.IfOp) and op.results
                and op.cond.name_hint == "first_trip")


def _first_trip_test(loop: scf.ForOp):
    """`iv == lb`, computed at the top of `loop`'s body."""
    first = arith.CmpiOp(loop.body.block.args[0], loop.lb, "eq")
    loop.body.block.insert_op_before(first, loop.body.block.first_op)
    return first.result


def _only_when(op, condition) -> None:
    """`op` moved into `scf.if condition {op}` at its place."""
    guard = scf.IfOp(condition, [], [Block([scf.YieldOp()])])
    op.parent_block().insert_op_before(guard, op)
    op.detach()
    guard.true_region.block.insert_op_before(op, guard.true_region.block.first_op)


def _first_trip_only(find: Callable) -> Callable:
    """The op of the consumer loop runs on the first trip only: deleted from every later trip (as the op of the
    loop was when the first trip was peeled before it: the first K release)."""

    def edit(fn):
        op = find(fn)
        _only_when(op, _first_trip_test(_consumer_loop(fn)))

    return edit


def _after_the_first_trip(position: int, before: Callable) -> Callable:
    """Release `position` moved before `before` on every trip but the first (which keeps it where it was:
    `scf.if iv == lb {release}` there, `scf.if iv == lb {} else {release}` before `before`). The folded loop's
    first trip has no V release of a trip before it to order the refill its early K release would allow."""

    def edit(fn):
        release, anchor = _release(position)(fn), before(fn)
        first = _first_trip_test(_consumer_loop(fn))
        early = scf.IfOp(first, [], [Block([scf.YieldOp()])], [Block([release.clone(), scf.YieldOp()])])
        anchor.parent_block().insert_op_before(early, anchor)
        _only_when(release, first)

    return edit


# endregion

S, P, G = "specialized", "pingpong", "gemm"

SEEDS: dict[str, tuple[str, str, Callable]] = {
    # deleted waits
    "consumer K full wait deleted": ("deleted mbarrier wait", S, _delete(_consumer_wait(0))),
    "consumer V full wait deleted": ("deleted mbarrier wait", S, _delete(_consumer_wait(1))),
    "consumer Q wait deleted": ("deleted mbarrier wait", S, _delete(_q_wait)),
    "producer K empty wait deleted": ("deleted mbarrier wait", S, _delete(_producer_wait(0))),
    "producer V empty wait deleted": ("deleted mbarrier wait", S, _delete(_producer_wait(1))),
    # parities
    "consumer K full parity flipped": ("flipped parity", S, _flip_parity(_consumer_wait(0))),
    "consumer V full parity flipped": ("flipped parity", S, _flip_parity(_consumer_wait(1))),
    "producer K empty parity not flipped": ("flipped parity", S, _unflip_producer_parity(0)),
    "producer V empty parity not flipped": ("flipped parity", S, _unflip_producer_parity(1)),
    # transaction bytes
    "K expect_tx halved": ("wrong expect_tx bytes", S, _expect_bytes(_producer_expect(0), 0.5)),
    "V expect_tx doubled": ("wrong expect_tx bytes", S, _expect_bytes(_producer_expect(1), 2)),
    "K expect_tx deleted": ("missing expect_tx", S, _delete(_producer_expect(0))),
    "V expect_tx deleted": ("missing expect_tx", S, _delete(_producer_expect(1))),
    # wgmma groups
    "S commit deleted": ("missing wgmma commit", S, _delete(_commit(0))),
    "P.V commit deleted": ("missing wgmma commit", S, _delete(_commit(1))),
    "wait_group 1 deleted": ("deleted wgmma wait", S, _delete(_wait_group(0))),
    "wait_group 0 deleted": ("deleted wgmma wait", S, _delete(_wait_group(1))),
    "wait_group 1 waits for 2": ("wrong wgmma wait count", S, _wait_group_pending(_wait_group(0), 2)),
    # fences
    "loop S wgmma_fence moved before the loop": ("deleted wgmma fence", S, _out_of_the_loop(_loop_fence(0))),
    "prologue wgmma_fence deleted": ("deleted wgmma fence", S, _delete(_prologue_fence)),
    # global stores
    "O store column shifted": ("overlapping global stores", S, _shift_store_column),
    # CTA barriers
    "bar_sync after mbarrier_init deleted": ("deleted barrier after init", S, _delete(_bar_sync(384))),
    # slot releases
    "V release before wait_group 0": ("slot released early", S, _release_early(1, _wait_group(1))),
    "V release before its wgmma": ("slot released early", S, _release_early(1, _loop_fence(1))),
    "V release before wait_group 1": ("slot released early", S, _release_early(1, _wait_group(0))),
    # the first trip's: no V release of a trip before orders the refill of K's slot after the S wgmma
    "K release before the P.V update": ("slot released early", S, _release_early(0, _update_branch)),
    "K release before its wgmma": ("slot released early", S, _release_early(0, _loop_fence(0))),
    "K release deleted after the first trip": ("slot never released", S, _first_trip_only(_release(0))),
    "V release deleted": ("slot never released", S, _delete(_release(1))),
    "K release on the V empty barrier": ("release on the wrong barrier", S, _retarget_release(0, 1)),
    "V release on the K empty barrier": ("release on the wrong barrier", S, _retarget_release(1, 0)),
    "K release doubled": ("extra arrival", S, _double(_release(0))),
    "V release doubled": ("extra arrival", S, _double(_release(1))),
    "K full wait after the S wgmmas": ("wait moved after its use", S, _wait_after(0, _commit(0))),
    "V full wait after the P.V wgmmas": ("wait moved after its use", S, _wait_after(1, _commit(1))),
    # barrier counts
    "K empty count halved": ("wrong barrier count", S, _init_count(2, 128)),
    "K full count doubled": ("wrong barrier count", S, _init_count(1, 2)),
    # ping-pong named barriers
    "ping-pong bar_sync deleted": ("deleted ping-pong barrier", P, _delete(_pingpong(sm90.BarSyncOp, 1))),
    "ping-pong bar_arrive deleted": ("deleted ping-pong barrier", P, _delete(_pingpong(sm90.BarArriveOp, 2))),
    "ping-pong K release deleted": ("slot never released", P, _delete(_release(0))),
    "ping-pong V release before wait_group 0": ("slot released early", P, _release_early(1, _wait_group(1))),
    # the warp-specialized GEMM: A and B rings, one wgmma group per trip
    "GEMM A full wait deleted": ("deleted mbarrier wait", G, _delete(_consumer_wait(0))),
    "GEMM B full parity flipped": ("flipped parity", G, _flip_parity(_consumer_wait(1))),
    "GEMM wgmma_fence deleted": ("deleted wgmma fence", G, _delete(_loop_fence(0))),
    "GEMM wait_group deleted": ("deleted wgmma wait", G, _delete(_wait_group(0))),
    "GEMM A release before wait_group": ("slot released early", G, _release_early(0, _wait_group(0))),
    "GEMM B release deleted": ("slot never released", G, _delete(_release(1))),
    "GEMM C store column shifted": ("overlapping global stores", G, _shift_store_column),
    "GEMM A expect_tx halved": ("wrong expect_tx bytes", G, _expect_bytes(_producer_expect(0), 0.5)),
}


BENIGN: dict[str, tuple[str, str, Callable]] = {
    # Each is ordered by another edge; reporting it would cry wolf.
    "fence_mbarrier_init deleted": (
        "a kernel without clusters: the bar_sync after the inits orders them before every use in the CTA, the TMA "
        "copies its threads issue included (memory_model.MBARRIER_INIT_FENCE: the fence releases inits to other "
        "CTAs of a cluster)", S, _delete(lambda fn: _first(fn, sm90.FenceMBarrierInitOp))),
    "GEMM fence_mbarrier_init deleted": (
        "the same, in the GEMM", G, _delete(lambda fn: _first(fn, sm90.FenceMBarrierInitOp))),
    "consumers' bar_sync deleted": (
        "every consumer thread waits on the Q barrier itself (its acquire orders the Q copy before its wgmma); no "
        "shared byte is written by one consumer and read by another", S, _delete(_bar_sync(256))),
    "K release before wait_group 1": (
        "the producer refills that K slot only after its V refill of the slot before, which waits for the V "
        "release of the trip before (after its wait_group 0, which completes that trip's S wgmma too); on the "
        "first trip, which has no V release before it, the branch past the P.V update retired S", S,
        _release_early(0, _wait_group(0))),
    "K release before its wgmma after the first trip": (
        "the same V release orders the K refill after the S wgmma's completion; the first trip, which has no V "
        "release before it, keeps its K release in place", S, _after_the_first_trip(0, _loop_fence(0))),
}


def seeded(name: str, head_dim: int = 64):
    """(signature, the kernel with bug `name` (or benign edit) seeded)."""
    kind, variant, edit = SEEDS[name] if name in SEEDS else BENIGN[name]
    sig, fn = kernel(variant, head_dim)
    edit(fn)
    return sig, fn


def one_per_kind() -> list[str]:
    """The first bug of each kind (the fast slice the tests run)."""
    names: dict[str, str] = {}
    for name, (kind, _, _) in SEEDS.items():
        names.setdefault(kind, name)
    return list(names.values())
