"""Which CTAs of a grid the CTA simulator runs together, as a leader and its followers (`followers`).

`batchable` says whether a kernel's CTAs can run in batches at all; `run_batches` runs a list of CTAs (a grid,
or a worker's share of it, `launch`) batch by batch: consecutive CTAs first, then the followers that left a
batch grouped by where and why they left, so that CTAs whose control flow agrees (a query block of every head,
the query blocks of one causal trip count, the sequences of one shape) run as one.

A launch remembers how its CTAs parted (`_classes`): each CTA's *class*, the signatures (op and operand) of
every batch it left, kept on the compiled kernel for the grid and sizes of the launch. A later launch of the
same kernel, grid and sizes (a test's or a benchmark's next run, the next layer of a model) batches the CTAs
of one class together from the start, so that CTAs which parted at their first loop (a causal trip count)
no longer run a batch's first ops together only to leave it. A prediction is only an order: a CTA whose
operand differs from its leader's still leaves (and its class is updated), and the results are those of one
CTA at a time whatever the batches.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp

from tessera.dialects import sm90
from tessera.interpreters.sm90.follower_rules import follower_rule
from tessera.interpreters.sm90.global_memory import GlobalMemory, pointer_sources
from tessera.interpreters.sm90.record_pool import launch_pool


def run_batches(run_cta, kernel, module: ModuleOp, values: list, memory: GlobalMemory,
                ids: Sequence[tuple[int, int, int]], grid: tuple[int, int, int], allocation, listeners,
                options, traffic: dict | None, size: int, by_x: bool = False,
                on_cta=None) -> None:
    """Run the CTAs `ids` (a serial order) of `kernel` (a `target_abi.TargetKernel`, run with `options`, its
    `SimulatorOptions`) by `run_cta` (`launch.run_cta`) in batches of at most `size`, a leader and its
    followers (`followers`); `size` 1 runs them one at a time. The first batches are consecutive CTAs. Followers that
    leave a batch (their operand differed from the leader's) are batched again with those that left at the
    same op with the same operand (a causal trip count, a sequence's length), ahead of the rest; the first
    time any leave, with `by_x`, the CTAs not yet run are batched instead by their x index (a query block of
    every head, whose trip counts agree). Followers of a batch that fails run one at a time. `on_cta(cta_id)`
    is called before each CTA's run and before each follower's stores are made (a worker's access log names
    the CTA by it)."""
    with launch_pool(listeners is None) as pool:  # a listener may keep a CTA's state
        memory.accesses.pool = pool  # its race records, lent for the launch
        _run_batches(run_cta, kernel, module, values, memory, ids, grid, allocation, listeners, options, traffic,
                     size, by_x, on_cta, pool)


_CLASS_LAUNCHES = 16
"""The launches (grid and sizes) of one kernel whose classes are kept, the latest ones."""


def _classes(kernel, values: list, grid: tuple[int, int, int]) -> dict:
    """The CTAs' classes (module docstring) for launches of `kernel` with `grid` and the size arguments among
    `values`: a dict kept on the compiled kernel, updated by the launch that reads it."""
    sizes = tuple(int(value.flat[0]) for arg, value in zip(kernel.args, values) if arg.kind == "size")
    launches = kernel.program.fact("batch classes", dict)
    key = (tuple(grid), sizes)
    classes = launches.pop(key, None)
    if classes is None:
        classes = {}
        while len(launches) >= _CLASS_LAUNCHES:
            launches.pop(next(iter(launches)))
    launches[key] = classes  # the latest last
    return classes


def _by_class(ids: Sequence[tuple[int, int, int]], classes: dict, size: int) -> list[list[tuple]]:
    """`ids` as batches of at most `size` CTAs of one class each, the classes in order of their first CTA."""
    groups: dict[tuple, list] = {}
    for cta_id in ids:
        groups.setdefault(classes.get(cta_id, ()), []).append(cta_id)
    return [group[start:start + size] for group in groups.values() for start in range(0, len(group), size)]


def _run_batches(run_cta, kernel, module, values, memory, ids, grid, allocation, listeners, options, traffic,
                 size: int, by_x: bool, on_cta, pool) -> None:
    classes = _classes(kernel, values, grid) if size > 1 else {}
    if any(classes.get(cta_id) for cta_id in ids):  # a launch before parted some: batch them by class
        queue, by_x = _by_class(ids, classes, size), False
    else:
        queue = cta_batches(ids, size, False)
    while queue:
        batch = queue.pop(0)
        if on_cta is not None:
            on_cta(batch[0])
        cta = run_cta(kernel, module, values, memory, batch[0], grid, allocation, listeners, options, pool,
                      batch[1:])
        if traffic is not None:
            traffic[cta.cta_id] = dict(cta.traffic)
        if pool is not None:
            pool.reclaim()
        followers = cta.followers
        if followers is None:
            continue
        following = set(followers.following())
        for view in followers.commit(memory, on_cta, following):  # in the grid's order, as their own CTAs
            if traffic is not None:
                traffic[view.cta_id] = dict(cta.traffic)
        followers.release()
        if len(following) == followers.count:
            continue
        if followers.dropped is not None and not followers.left:  # a failure: each runs alone
            again = [[cta_id] for cta_id in batch[1:] if cta_id not in following]
        else:
            groups: dict = {}
            for f, cta_id in enumerate(batch[1:]):
                if cta_id not in following:
                    signature = followers.left.get(f, (None, ("failed", f)))[1]
                    groups.setdefault(signature, []).append(cta_id)
                    if f in followers.left:
                        classes[cta_id] = classes.get(cta_id, ()) + (signature,)
            again = [group[start:start + size] for group in groups.values()
                     for start in range(0, len(group), size)]
        if by_x:  # once: the rest by query block
            queue = cta_batches([cta_id for group in again for cta_id in group]
                                + [cta_id for later in queue for cta_id in later], size, True)
            by_x = False
        else:
            queue = again + queue


def cta_batches(ids: Sequence[tuple[int, int, int]], size: int, by_x: bool) -> list[list[tuple]]:
    """The CTAs `ids` as batches of at most `size` (`followers`), the first CTA leading the first batch:
    consecutive CTAs, or with `by_x` the CTAs that share their x index, in order of their first appearance."""
    if size <= 1:
        return [[cta_id] for cta_id in ids]
    if not by_x:
        return [list(ids[start:start + size]) for start in range(0, len(ids), size)]
    columns: dict[int, list] = {}
    for cta_id in ids:
        columns.setdefault(cta_id[0], []).append(cta_id)
    return [column[start:start + size] for column in columns.values() for start in range(0, len(column), size)]


def batchable(kernel, listeners, memory: GlobalMemory, options) -> bool:
    """Whether the CTAs of `kernel` can run in batches (`tessera.interpreters.sm90.followers`): no listeners (they
    observe one CTA), the round-robin schedule (the adversarial one draws a schedule per CTA), no atomics or
    reductions, every op with a follower rule, and no tensor that a TMA copy or a load reads written through a
    pointer (a follower's reads come before the stores of the CTAs before it)."""
    if listeners is not None or options.schedule != "round_robin" or memory.atomic_targets:
        return False
    if not kernel.program.fact("follower rules", lambda: all(follower_rule(op) is not None
                                                              for op in kernel.op.walk())):
        return False
    loaded, written = kernel.program.fact(("pointer accesses", kernel.args), lambda: _pointer_accesses(kernel))
    read = loaded | {arg.source for arg in kernel.args if arg.kind == "tensormap"}
    return not (read & written)


def _pointer_accesses(kernel) -> tuple[frozenset[int], frozenset[int]]:
    """(the tensors `kernel` loads from through pointers, the tensors it stores to or may write some other way):
    the `sm90.source` of each pointer argument from which a load's or store's address is computed (a loaded
    value counts as data: a kernel that stores where it loads from another CTA's bytes races, and the race
    checks between CTAs report it); every pointer argument not only loaded from counts as written."""
    pointers = {arg.source for arg in kernel.args if arg.kind == "pointer"}
    loads, stores = (sm90.LdGlobalOp, sm90.LdGlobalU16Op), (sm90.StGlobalOp, sm90.StGlobalB16Op)

    def sources(value) -> set[int]:  # a loaded value is data (a sequence's start), not that tensor's address
        return pointer_sources(kernel, value, stop=loads)

    read, stored = set(), set()
    for op in kernel.op.walk():
        if isinstance(op, loads):
            read |= sources(op.operands[0]) | sources(op.operands[1])
        elif isinstance(op, stores):
            stored |= sources(op.operands[0]) | sources(op.operands[1])
    return frozenset(read), frozenset(pointers - (read - stored))


__all__ = ["batchable", "cta_batches", "run_batches"]
