"""wgmma in the PTX executor's asynchrony checks (`asynchrony.AsyncTracker` inherits these): the shared bytes a
wgmma reads stay read until a `wgmma.wait_group` covers its group, its accumulator and A registers are pending until
then, and registers written since the last `wgmma.fence` may not feed one.

- Groups [memory_model.WGMMA_WAIT_PER_THREAD]: `wgmma.mma_async` joins its warp's open group,
  `wgmma.commit_group` closes it, `wgmma.wait_group N` completes all but the N newest committed groups for each
  executing thread; a warpgroup's wgmma-group is complete (its shared-memory reads over) when a thread of it waited.
- Reads: recorded per 16-byte chunk (a descriptor reads whole chunks) and per warpgroup; a write into bytes a
  pending wgmma reads is a hazard (`wgmma_read_tracking.WgmmaReadTracking`, this class's base).
- Registers: an instruction other than wgmma.mma_async naming a pending accumulator or A register is a hazard
  (`check_registers`); one that names any wgmma register marks it touched in its thread (`touch`), and a wgmma
  whose accumulator or A register is touched since the thread's last `wgmma.fence` is a hazard (`check_fenced`)
  [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-fence]; chains of one shape (`wgmma_shaped`).

The state (`warp_open`, `lane_done`, `wg_open`, `wg_done`, `wg_issued`, `pending`, `touch_log`, `shaped`, ...) is
created and reset by `AsyncTracker.reset` with the rest of the batch's asynchrony state.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import NamedTuple

import numpy as np

from tessera.interpreters.ptx.decode import elements
from tessera.interpreters.ptx.wgmma_accumulators import write_back
from tessera.interpreters.ptx.wgmma_read_tracking import WgmmaReadTracking
from tessera.interpreters.ptx.syntax import Address, Negated, Reg, Vector
from tessera.interpreters.ranges import distinct_ascending
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts

_NO_GROUP = np.iinfo(np.int64).max  # above every wgmma group (`WgmmaTracking.wgmma_wait`)


def named_registers(inst) -> set[str]:
    """Names of the registers an instruction names (operands, vector elements, address bases, guard)."""
    names: set[str] = set()
    for operand in inst.operands:
        kind = type(operand)
        if kind is Reg:
            names.add(operand.name)
        elif kind is Vector:
            names.update(e.name for e in operand.elements if type(e) is Reg)
        elif kind is Address and type(operand.base) is Reg:
            names.add(operand.base.name)
        elif kind is Negated:
            names.add(operand.operand.name)
    if inst.guard is not None:
        names.add(inst.guard.predicate.name)
    return names


class WgmmaRoles(NamedTuple):
    """The registers of a wgmma.mma_async, worked out once per instruction: `kinds` (register -> "result" or
    "A operand"), the same names split by kind (`results`, `a_operands`, each name once, in operand order), and
    its `shape` ('m64nNkK.dtype.atype.btype': what "the same shape" compares). The bookkeeping updates the
    entries of a kind's registers together (`WgmmaTracking.wgmma_issued`), not one register at a time."""

    kinds: dict[str, str]
    results: tuple[str, ...]
    a_operands: tuple[str, ...]
    shape: str


def wgmma_roles(inst) -> WgmmaRoles | None:
    """The `WgmmaRoles` of a wgmma.mma_async instruction (None for anything else, or one naming no register)."""
    if inst.opcode != "wgmma" or "mma_async" not in inst.modifiers or len(inst.operands) < 2:
        return None
    kinds = {r.name: "result" for r in elements(inst.operands[0]) if isinstance(r, Reg)}
    if isinstance(inst.operands[1], Vector):
        kinds.update({r.name: "A operand" for r in inst.operands[1].elements if isinstance(r, Reg)})
    if not kinds:
        return None
    shape = ".".join(x for x in inst.modifiers if x not in ("mma_async", "sync", "aligned"))
    return WgmmaRoles(kinds, tuple(n for n, k in kinds.items() if k == "result"),
                      tuple(n for n, k in kinds.items() if k == "A operand"), shape)


class WgmmaTracking(WgmmaReadTracking):
    """The wgmma half of `asynchrony.AsyncTracker` (see the module docstring; its shared-memory reads in
    `WgmmaReadTracking`); its state lives on the tracker."""

    def wgmma_issued(self, inst, lanes: np.ndarray, roles: WgmmaRoles) -> list | None:
        """The warpgroups of `lanes` issued a wgmma: its registers are pending in their open group. Registers
        pending on the same groups share one array (never modified in place); the registers of one kind that
        share one entry (a chain's accumulators) get one new entry, set for all of them in one update. Returns
        the entry of `pending` its accumulators now hold where it made one for them alone (`_pend`), else None
        (then `_sole_entry` finds whether they hold one)."""
        self.events += 1
        ws = self.m.unit_of[facts.WARPGROUP_SIZE][lanes[::facts.WARPGROUP_SIZE]]  # whole warpgroups, ascending
        opened = self.wg_open[ws]
        self.wg_issued[ws] = opened
        for w in ws.tolist():
            self.last_wgmma[w] = inst
        updated: dict[int, np.ndarray] = {}  # id of an old groups array (or of None) -> its successor
        # (the A registers are others than the accumulators: their entries leave the accumulators' as made)
        results = self._pend(inst, "result", roles.results, ws, opened, updated) if roles.results else None
        if roles.a_operands:
            self._pend(inst, "A operand", roles.a_operands, ws, opened, updated)
        return results

    def _pend(self, inst, kind: str, names: tuple[str, ...], ws: np.ndarray, opened: np.ndarray,
              updated: dict[int, np.ndarray]) -> list | None:
        """The registers `names` of kind `kind` of the wgmma `inst` of the warpgroups `ws` are pending in their
        open groups `opened`; `updated`: each old groups array's successor made so far (shared, not copied
        again). Returns the new entry where all of `names` got one (a new list: no other register holds it),
        else None."""

        def successor(old) -> np.ndarray:
            groups = updated.get(id(old))
            if groups is None:
                groups = updated[id(old)] = old.copy() if old is not None else np.full(self.warpgroups, -1, np.int64)
                groups[ws] = opened
            return groups

        olds = list(map(self.pending.get, names))
        if all(map(is_, olds, repeat(olds[0]))):  # every register of the kind in one entry (or none): one new entry
            old = olds[0]
            entry = [successor(None if old is None else old[0]), kind, inst, names]
            self.pending_entries[id(entry)] = entry
            self.pending.update(dict.fromkeys(names, entry))
            return entry
        entries = [[successor(None if e is None else e[0]), kind, inst, (name,)] for name, e in zip(names, olds)]
        self.pending_entries.update(zip(map(id, entries), entries))
        self.pending.update(zip(names, entries))
        return None

    def wgmma_commit(self, lanes: np.ndarray) -> None:
        """wgmma.commit_group by `lanes`: each executing warp closes its open group (counted once per warp
        however the scheduler split the warpgroup's warps into steps)."""
        self.events += 1
        warp_of = self.m.unit_of[facts.WARP_SIZE]
        self.warp_open[warp_of[lanes]] += 1  # (a warp named by many lanes still counts once: one buffered add)
        np.maximum.at(self.wg_open, self.m.unit_of[facts.WARPGROUP_SIZE][lanes], self.warp_open[warp_of[lanes]])

    def wgmma_wait(self, lanes: np.ndarray, keep: int, inst=None) -> None:
        """wgmma.wait_group `keep` by `lanes`: for each executing thread, every group its warp committed but
        the `keep` newest is complete [memory_model.WGMMA_WAIT_PER_THREAD]; a thread that did not execute it
        has waited for nothing, whatever the other threads of its warpgroup did."""
        self.events += 1
        if self.m.deferred:  # the chains' accumulators into their registers (`wgmma_accumulators`)
            write_back(self.m)
        unit = self.m.unit_of[facts.WARPGROUP_SIZE]
        ws = distinct_ascending(unit[lanes])  # (lanes ascend)
        target = self.warp_open[self.m.unit_of[facts.WARP_SIZE][lanes]] - 1 - keep
        previous = self.lane_done[lanes]
        self.lane_done[lanes] = np.maximum(previous, target)
        np.maximum.at(self.wg_done, unit[lanes], target)
        if self.wg_read is not None and self.hb.races:
            # the shared bytes these groups read last are read until now (happens_before): recorded per group,
            # never per byte, for every wait that completes a group for its threads (not only the first of the
            # warpgroup: any of them frees the bytes)
            found = [c for c in _completions(unit, lanes, ws, target, previous) if c[2] >= c[1]]
            if found:
                self.hb.wgmma_wait_completed(found, lanes, inst)
        if self.pending:
            least = np.full(self.warpgroups, _NO_GROUP, np.int64)
            np.minimum.at(least, unit, self.lane_done)  # a register stays pending until every thread waited
            # each register's entry is one of `pending_entries`, which name the registers that may hold them:
            # one look per entry and groups array (registers pending together share one), none per register
            entries = self.pending_entries
            arrays = {id(e[0]): e[0] for e in entries.values()}
            live = (np.stack(list(arrays.values())) > least).any(axis=1)
            if not any_set(live):
                self.pending = {}
                entries.clear()
            elif not all_set(live):  # the registers of the dead arrays dropped, the others kept in their order
                alive = dict(zip(arrays, live.tolist()))
                for key, entry in [(k, e) for k, e in entries.items() if not alive[id(e[0])]]:
                    del entries[key]
                    for name in entry[3]:
                        if self.pending.get(name) is entry:
                            del self.pending[name]
                if not self.pending:
                    entries.clear()
        self.reading = any_set(self.wg_issued > self.wg_done)

    def touch(self, inst, lanes: np.ndarray | slice, names: frozenset) -> None:
        """`lanes` (an index or a slice of every lane, never modified afterwards) accessed the wgmma registers
        `names` outside a wgmma: a wgmma.fence must follow (`dirty` learns it when next read)."""
        self.touch_seq += 1
        self.events += 1
        self.touch_log.append((self.touch_seq, names, lanes, inst.line))

    def touch_block(self, lanes: np.ndarray | slice, names: frozenset, lines: dict[str, int]) -> None:
        """`touch` by the instructions of a fused block, each run by all of `lanes`: one entry of the log, naming
        the registers `names` and the line of each one's last access (`lines`). No wgmma.fence can fall between
        them, so every check that reads the log (`_touched_any`, `_touched`, `_dirty`) decides as on one entry
        per instruction, and names the same line."""
        self.touch_seq += 1
        self.events += 1
        self.touch_log.append((self.touch_seq, names, lanes, lines))

    def _dirty(self) -> np.ndarray:
        """`dirty`, with the touches logged since it was last read: one write per distinct lanes object (the steps
        of a straight run share theirs), not one per instruction."""
        if self.dirty_from < len(self.touch_log):
            seen: set[int] = set()
            for _, _, lanes, _ in self.touch_log[self.dirty_from:]:
                if id(lanes) not in seen:
                    seen.add(id(lanes))
                    self.dirty[lanes] = True
            self.dirty_from = len(self.touch_log)
        return self.dirty

    def _touched_any(self, names: frozenset, lanes: np.ndarray) -> bool:
        """Whether one of `lanes` accessed one of the registers `names` since its last wgmma.fence."""
        fenced = self.fence_seq[lanes]
        for seq, touched, sel, _ in self.touch_log:
            if touched.isdisjoint(names):
                continue
            hit = np.zeros(self.m.lanes, bool)
            hit[sel] = True
            if any_set(hit[lanes] & (fenced < seq)):
                return True
        return False

    def _touched(self, name: str, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each of `lanes` accessed register `name` since its last wgmma.fence, the line of its last
        such access)."""
        bad, line = np.zeros(len(lanes), bool), np.zeros(len(lanes), np.int32)
        for seq, names, sel, at in self.touch_log:  # (`at`: a line, or each register's, `touch_block`)
            if name in names:
                hit = np.zeros(self.m.lanes, bool)
                hit[sel] = True
                here = hit[lanes] & (self.fence_seq[lanes] < seq)
                bad |= here
                line[here] = at if type(at) is int else at[name]
        return bad, line

    def wgmma_fenced(self, lanes: np.ndarray) -> None:
        self.ever_fenced[lanes] = True
        self.touch_seq += 1
        self.events += 1
        self.fence_seq[lanes] = self.touch_seq
        dirty = self._dirty()
        dirty[lanes] = False
        if not any_set(dirty):
            self.touch_log.clear()
        elif len(self.touch_log) > 256:  # keep the accesses some lane has not fenced since
            self.touch_log = [e for e in self.touch_log if any_set(self.fence_seq[e[2]] < e[0])]
        self.dirty_from = len(self.touch_log)
        for unfenced in {id(e[0]): e[0] for e in self.shaped.values()}.values():
            unfenced[lanes] = False

    def wgmma_shaped(self, inst, lanes: np.ndarray, roles: WgmmaRoles) -> list | None:
        """A wgmma.mma_async of `lanes` accessed its accumulators: only a wgmma of the same shape and types may
        access them next without a wgmma.fence [memory_model.WGMMA_FENCE_SCALE_D]. Registers last accessed by
        the same wgmmas share one entry (never modified in place once another wgmma takes some of them).
        Returns the entry its accumulators now hold where it made a new one for them alone, else None (then
        `_sole_entry` finds whether they hold one)."""
        self.events += 1
        shape, results = roles.shape, roles.results
        olds = list(map(self.shaped.get, results))
        if olds and all(map(is_, olds, repeat(olds[0]))):  # every register in one entry (a chain's wgmmas)
            old = olds[0]
            if old is not None and old[1] is inst:
                old[0][lanes] = True  # the same wgmma again (a loop): the entry as it is
                return None
            unfenced = old[0].copy() if old is not None else np.zeros(self.m.lanes, bool)
            unfenced[lanes] = True
            entry = [unfenced, inst, shape]
            self.shaped.update(dict.fromkeys(results, entry))
            return entry
        updated: dict[int, tuple] = {}
        for name in results:
            old = self.shaped.get(name)
            key = id(old) if old is not None else 0
            entry = updated.get(key)
            if entry is None:
                if old is not None and old[1] is inst:
                    old[0][lanes] = True  # the same wgmma again (a loop): its registers' entry as it is
                    entry = old
                else:
                    unfenced = old[0].copy() if old is not None else np.zeros(self.m.lanes, bool)
                    unfenced[lanes] = True
                    entry = [unfenced, inst, shape]
                updated[key] = entry
            self.shaped[name] = entry
        return None

    def chain_continues(self, lanes: np.ndarray, roles: WgmmaRoles) -> bool:
        """Whether a wgmma.mma_async of `lanes` with `roles` continues the chain the last one opened (`chain_open`):
        the same lanes, accumulators and shape, and no change of the wgmma register state since (`events`: no
        touch, wgmma.fence, commit, wait or other wgmma). Its checks of the accumulators then decide as the last
        one's, which passed: they are pending as accumulators (`check_registers` passes over them), none was
        touched since, and the last wgmma on them had this shape (`check_fenced` passes over them); only its A
        registers (a register A differs at each K step) and other registers are checked
        (`async_checks.install`)."""
        chain = self.chain
        if chain is None or chain[0] != self.events:
            return False
        last_lanes, last = chain[1], chain[2]
        if roles is not last and (roles.shape != last.shape or roles.results != last.results):
            return False
        return lanes is last_lanes or (len(lanes) == len(last_lanes) and equal_arrays(lanes, last_lanes))

    def chain_open(self, lanes: np.ndarray, roles: WgmmaRoles, pending: list | None = None,
                   shaped: list | None = None) -> None:
        """After `wgmma_issued` and `wgmma_shaped` of a wgmma of `lanes`: where its accumulators are one entry of
        `pending` and one of `shaped` that no other register shares, the chain's next wgmma (`chain_continues`)
        is recorded by `chain_issued`, those entries updated in place. The chain keeps whether none of its lanes
        has touched a wgmma register since its last wgmma.fence (`check_fenced_in_chain`). `pending`, `shaped`:
        the entries `wgmma_issued` and `wgmma_shaped` made for the accumulators alone, where they did (None:
        looked for with `_sole_entry`)."""
        if pending is None:
            pending = _sole_entry(self.pending, roles.results)
        if shaped is None:
            shaped = _sole_entry(self.shaped, roles.results)
        if pending is None or shaped is None:
            self.chain = None
            return
        ws = self.m.unit_of[facts.WARPGROUP_SIZE][lanes[::facts.WARPGROUP_SIZE]]
        clean = not any_set(self._dirty()[lanes])
        # (lanes: never modified)
        self.chain = (self.events, lanes, roles, ws, self.wg_open[ws], pending, shaped, clean)

    def chain_issued(self, inst, roles: WgmmaRoles) -> None:
        """`wgmma_issued` and `wgmma_shaped` of a wgmma that continues the chain (`chain_continues`): its open
        groups, pending accumulators and unfenced lanes are those the chain's last wgmma left (no commit since,
        the same lanes and accumulators), so for them only the wgmma they name changes (one assignment per entry,
        not one per register); its A registers are made pending as `wgmma_issued` does."""
        _, _, _, ws, opened, pending, shaped, _ = self.chain
        for w in ws.tolist():
            self.last_wgmma[w] = inst
        pending[2] = inst
        shaped[1] = inst
        if roles.a_operands:
            self._pend(inst, "A operand", roles.a_operands, ws, opened, {})

    def check_fenced(self, inst, lanes: np.ndarray, roles: WgmmaRoles) -> None:
        """A wgmma.mma_async of `lanes` uses `roles`' registers: none may be touched since a wgmma.fence (with
        scale-d false too: the wgmma writes its accumulators [memory_model.WGMMA_FENCE_SCALE_D]), nor accessed by
        a wgmma of another shape since then, and the warpgroup's first wgmma.mma_async needs a wgmma.fence before
        it (the PTX ISA's first location for the fence, [memory_model.WGMMA_FENCE]), whether or not its
        registers were touched (a chain starting with scale-d false reads no accumulator)."""
        unfenced = ~self.ever_fenced[lanes]
        if any_set(unfenced):
            raise self.hazard(inst, "is the warpgroup's first wgmma.mma_async and no wgmma.fence precedes it "
                                    "(missing wgmma.fence)", lanes[int(np.argmax(unfenced))])
        shape = roles.shape
        touched = any_set(self._dirty()[lanes])  # some register touched since the lanes' last wgmma.fence
        # one look per entry and per logged access, not per register; the walk below names the register
        olds = list(map(self.shaped.get, roles.results))
        entries = dict(zip(map(id, olds), olds))
        entries.pop(id(None), None)
        if not any(e[2] != shape and any_set(e[0][lanes]) for e in entries.values()) \
                and not (touched and self._touched_any(frozenset(roles.kinds), lanes)):
            return
        for name, kind in roles.kinds.items():
            shaped = self.shaped.get(name) if kind == "result" else None
            if shaped is not None and shaped[2] != shape:
                bad = shaped[0][lanes]
                if any_set(bad):
                    i = int(np.argmax(bad))
                    raise self.hazard(inst, f"uses {name} as its accumulator register after the wgmma.mma_async at "
                                            f"line {shaped[1].line} of another shape or type ({shaped[2]}"
                                            f") accessed it, with no wgmma.fence between them: only wgmmas of one "
                                            "shape are ordered on their accumulators by default (missing wgmma.fence, "
                                            "[memory_model.WGMMA_FENCE_SCALE_D])", lanes[i])
            if not touched:
                continue
            bad, line = self._touched(name, lanes)
            if any_set(bad):
                i = int(np.argmax(bad))
                what = "accumulator" if kind == "result" else "A-fragment"
                raise self.hazard(inst, f"uses {name} as its {what} register after the instruction at line "
                                        f"{int(line[i])} accessed it, with no wgmma.fence between them "
                                        "(missing wgmma.fence)", lanes[i])

    def check_fenced_in_chain(self, inst, lanes: np.ndarray, roles: WgmmaRoles) -> None:
        """`check_fenced` of the A registers `roles` of a wgmma of `lanes` that continues the chain (`chain_continues`),
        which passes without a look where the chain's lanes had touched no wgmma register since their last
        wgmma.fence when it opened (`chain_open`): no touch or fence came since (the chain's `events`), so none of
        them touched one since, they had fenced (the chain's first wgmma was checked; `ever_fenced` only grows),
        and A registers have no shape to agree with."""
        if not self.chain[7]:
            self.check_fenced(inst, lanes, roles)

    def check_registers(self, inst, lanes: np.ndarray, names, kinds: dict[str, str]) -> None:
        """Refuse an instruction of `lanes` naming registers of a wgmma whose group is still pending (`kinds`:
        `WgmmaRoles.kinds` of a wgmma.mma_async, whose registers of the same kind may be pending; else {})."""
        ws = None
        for name in names:
            entry = self.pending.get(name)
            if entry is None or kinds.get(name) == entry[1]:
                continue
            if ws is None:
                ws = self.m.unit_of[facts.WARPGROUP_SIZE][lanes]
            groups, kind, wgmma, _ = entry
            bad = groups[ws] > self.lane_done[lanes]
            if any_set(bad):
                i = int(np.argmax(bad))
                what = "an accumulator" if kind == "result" else "an A-fragment"
                others = (": another thread's wgmma.wait_group covered it, and each thread waits only for itself "
                          "[memory_model.WGMMA_WAIT_PER_THREAD]") if self.wg_done[ws[i]] >= groups[ws[i]] else ""
                raise self.hazard(inst, f"touches {name}, {what} register of the wgmma.mma_async at line "
                                        f"{wgmma.line}, before a wgmma.wait_group covers its group (group "
                                        f"{int(groups[ws[i]])} of warpgroup {int(ws[i]) % self.groups_per_cta} is "
                                        f"still pending){others}", lanes[i])


def _completions(unit: np.ndarray, lanes: np.ndarray, ws: np.ndarray, target: np.ndarray, previous: np.ndarray):
    """(warpgroup, first group, last group, its lanes that completed them, where those lie in `lanes`: a slice or
    a mask) for each warpgroup of `ws` (ascending) and each distinct `target` of its lanes (ascending), as a wait
    of `lanes` completes them (`target`: the last group each lane completes, `previous`: the last it had
    completed). Lanes that are whole warpgroups, each waiting for one group (a consumer's wait), are taken a
    warpgroup at a time without a search."""
    size = facts.WARPGROUP_SIZE
    if len(lanes) == len(ws) * size:
        rows, targets = lanes.reshape(-1, size), target.reshape(-1, size)
        if all_set(unit[rows] == ws[:, None]) and all_set(targets == targets[:, :1]):
            firsts = previous.reshape(-1, size).min(axis=1) + 1
            return [(w, first, last, row, slice(i * size, i * size + size)) for i, (w, first, last, row) in
                    enumerate(zip(ws.tolist(), firsts.tolist(), targets[:, 0].tolist(), rows))]
    found = []
    for w in ws.tolist():
        mine = unit[lanes] == w
        for last in np.unique(target[mine]).tolist():
            same = mine & (target == last)
            found.append((w, int(previous[same].min()) + 1, last, lanes[same], same))
    return found


def _sole_entry(table: dict, names: tuple[str, ...]):
    """The entry of `table` (`pending` or `shaped`) that every one of `names` holds and no other register does, or
    None."""
    first = table.get(names[0]) if names else None  # (identity compared in C: `map` with `operator.is_`)
    if type(first) is not list or not all(map(is_, map(table.get, names), repeat(first))):
        return None
    return first if sum(map(is_, table.values(), repeat(first))) == len(names) else None
