"""The asynchrony of the CTA simulator's warpgroup MMA (`wgmma`): commit and wait groups, and the checks that
nothing reads a wgmma's result, or its A registers, or writes the shared memory it reads, before its group
completes, as the mixin `WgmmaGroups` of `wgmma.WgmmaUnit`.

The result is computed at once but is *pending*: each warpgroup has an open group that its mma_async ops
join, `wgmma_commit_group` closes it, and `wgmma_wait_group N` completes all committed groups but the N
newest. A pending value is tracked by the identity of its array (`Pending`): any op other than a later
mma_async taking it as accumulator (or control flow passing it along) that reads it before its group
completes is an error, and so is reading the A registers of a pending RS wgmma, or overwriting the shared
memory a pending wgmma reads. Writes into the registers of a pending wgmma need a register allocation and are
checked by `register_check`, from the groups kept here (`open`: the group a new mma joins; `done`: the
newest completed group; a group g of warpgroup w is pending while g > done[w]).

Invariants: `done[w]` only grows, and a group g of warpgroup w completes once (`wait`, which also drops the
values no longer pending from `registry`); the completion times (`completed_at`, on the cluster clock in a
cluster: `cluster_completed_at`) are those `happens_before` orders a group's shared-memory reads by. The state
(`open`, `committed`, `done`, `registry`, `read_group`, `newest_read`, `group_ops`, `wait_ops`, the completion
tables) is made by `WgmmaUnit.__init__`, and written here and by `WgmmaUnit.mma` (the groups its shared-memory
reads join, the groups its values wait for).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import scf
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.byte_box import look, take
from tessera.interpreters.sm90.registers import filled
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

_PASS_THROUGH = {scf.YieldOp: 0, scf.ConditionOp: 1, scf.ForOp: 3, scf.WhileOp: 0}
"""Control flow that carries values without reading them: operands from this position on."""


@dataclass(eq=False)
class Pending:
    """A register value tied to wgmma groups: `groups[w]` is the group of warpgroup w it waits for (-1: none).
    `kind` is "result" (an accumulator) or "A operand" (the registers of an RS wgmma)."""

    array: np.ndarray
    groups: np.ndarray
    kind: str
    op: Operation


class WgmmaGroups:
    """The commit and wait groups of a CTA's warpgroups and the pending-value checks (module docstring), a mixin
    of `wgmma.WgmmaUnit`, whose `__init__` makes the state read here."""

    def completed_at(self, warpgroup: int, groups: np.ndarray) -> np.ndarray:
        """The times the `groups` of `warpgroup` completed (-1: not yet)."""
        done = self._completed[warpgroup]
        inside = groups < len(done)
        return np.where(inside, done[np.where(inside, groups, 0)], -1)

    # region groups
    def commit(self, op: Operation) -> None:
        for w in self.cta.converged_units(op, facts.WARPGROUP_SIZE, "wgmma_commit_group"):
            self.committed[w].append(int(self.open[w]))
            self.open[w] += 1

    def wait(self, op: Operation, pending: int) -> None:
        for w in self.cta.converged_units(op, facts.WARPGROUP_SIZE, "wgmma_wait_group"):
            outstanding = [g for g in self.committed[w] if g > self.done[w]]
            if len(outstanding) > pending:
                finished = outstanding[: len(outstanding) - pending]
                self.done[w] = finished[-1]
                self._record_completion(op, w, finished)
        self.registry = {k: p for k, p in self.registry.items() if np.count_nonzero(p.groups > self.done)}

    def cluster_completed_at(self, warpgroup: int, groups: np.ndarray) -> np.ndarray:
        """`completed_at` on the cluster clock (-1: not yet), in a CTA of a cluster."""
        done = self._completed_cluster[warpgroup]
        inside = groups < len(done)
        return np.where(inside, done[np.where(inside, groups, 0)], -1)

    def _record_completion(self, op: Operation, warpgroup: int, groups: list[int]) -> None:
        for table, clock in ((self._completed, self.cta), (self._completed_cluster, self.cta.cluster)):
            if clock is None:
                continue
            done = table[warpgroup]
            if groups[-1] >= len(done):
                grown = np.full(max(2 * len(done), groups[-1] + 1), -1, np.int64)
                grown[: len(done)] = done
                done = table[warpgroup] = grown
            done[groups] = clock.tick()
        for g in groups:
            if (warpgroup, g) in self.group_ops:
                self.wait_ops[(warpgroup, g)] = op

    def _groups_of(self, value) -> np.ndarray:
        entry = self.registry.get(id(value))
        if entry is None or entry.array is not value:
            return filled(len(self.done), -1, np.int64)
        return entry.groups

    # endregion
    # region checks
    def check_uses(self, op: Operation, args: tuple) -> None:
        """Refuse an op that reads a pending wgmma value (called before every op)."""
        if not self.registry:
            return
        first_free = _PASS_THROUGH.get(type(op))
        for position, value in enumerate(args):
            entry = self.registry.get(id(value))
            if entry is None or entry.array is not value:
                continue
            if first_free is not None and position >= first_free:
                continue
            if type(op) is sm90.WgmmaMmaAsyncOp and (position, entry.kind) in ((0, "result"), (1, "A operand")):
                continue
            self._refuse_pending(op, entry)

    def _refuse_pending(self, op: Operation, entry: Pending) -> None:
        size, active = facts.WARPGROUP_SIZE, self.cta.active
        for w in np.nonzero(entry.groups > self.done)[0]:
            mine = active[w * size : (w + 1) * size]
            if not any_set(mine):
                continue
            what = "the result" if entry.kind == "result" else "the A registers"
            self.cta.fail(op, f"reads {what} of `{describe_op(entry.op)}` before a wgmma_wait_group covers its "
                              f"group (group {int(entry.groups[w])} of warpgroup {w} is still pending)",
                          w * size + int(np.argmax(mine)))

    def merged(self, result: np.ndarray, *sources) -> np.ndarray:
        """`result`, merged from `sources` at a reconvergence point, stays pending on their groups."""
        entries = [self.registry[id(s)] for s in sources if id(s) in self.registry and self.registry[id(s)].array is s]
        if entries:
            groups = np.maximum.reduce([e.groups for e in entries])
            self.registry[id(result)] = Pending(result, groups, entries[0].kind, entries[0].op)
        return result

    def check_not_read_by_pending(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str) -> None:
        """Refuse writing shared bytes that a wgmma whose group has not completed may still read."""
        reading = np.flatnonzero(self.newest_read > self.done)  # warpgroups with a pending wgmma that read shared
        # memory (a row's groups are at most its newest_read: no other row holds a pending group)
        if not any(np.count_nonzero(look(self.read_group[w], addresses) > self.done[w]) for w in reading.tolist()):
            return
        pending = np.stack([take(groups, addresses) for groups in self.read_group]) > self.done[:, None]
        if any_set(pending):
            w, i = np.unravel_index(np.argmax(pending), pending.shape)
            reader = self.group_ops[(int(w), int(self.read_group[w, addresses[i]]))]
            self.cta.fail(op, f"{what} overwrites {self.cta.smem.locate(addresses[i])} while `{describe_op(reader)}` "
                              f"of warpgroup {w} may still read it (wgmma_wait_group first)", int(threads[i]))

    def check_drained(self) -> None:
        """At the end of the kernel, every wgmma must have completed."""
        for (w, group), op in self.group_ops.items():
            if group > self.done[w]:
                self.cta.fail(op, f"the kernel ends with this wgmma pending in warpgroup {w} (no wgmma_commit_group "
                                  "and wgmma_wait_group cover it)", w * facts.WARPGROUP_SIZE)

    # endregion

__all__ = ["Pending", "WgmmaGroups"]
