"""Checking a register allocation while the CTA simulator runs (as xDSL's RISC-V interpreter does).

Beside the SSA values, the simulator keeps a register file: each op's results are written, for the active
threads, into the registers `tessera.regalloc` assigned them; before each op runs, its operands that live in
registers are compared with the register file. If another value has overwritten a register while it was
still needed, the comparison fails and the run stops, naming the op, the value, the register and the thread:
allocation bugs are errors, not wrong results. Which comparisons can fail is decided once per kernel and
allocation (`register_windows`: a read is compared only if an op writing one of its registers can run between
its value's definition and it), and the file records only the writes of registers some compared read uses,
so a correct allocation costs next to nothing and a wrong one is reported at the same op as by comparing every
read (`RegisterLayout(every_read=True)`, the reference the tests hold it to). A view (an op whose result is
its operands' registers, printing no instruction) placed in other registers writes nothing: its reads are
compared with what those registers hold. Immediates, kernel arguments and a loop's induction variable are
not checked; a loop-carried value is read from the registers the loop's moves (at its entry, its yields and
an `scf.condition`) write, after those ops read their operands.

Registers of in-flight wgmma groups: from a `wgmma_mma_async` until the `wgmma_wait_group` that completes its group
(`WgmmaUnit.done`), the tensor core still reads the A fragment's registers (register A) and writes the result's
`{d...}` registers. An op other than a wgmma that writes one of them in a thread of that warpgroup meanwhile is
reported, naming the writer, the register and the wgmma (PTX: touching them before the wait is undefined; ptxas
warns C7515 for accumulators); so is an instruction that reads one (`_check_reads_in_flight`: through any value
held in those registers, a view of them included, where `wgmma.WgmmaUnit`'s check by SSA value sees only the
wgmma's own operand). Ops whose results are views of their operands' registers print no instruction and
write nothing. `scf.if`, `scf.for` and `scf.while` write their result registers with moves at their yields (and a
loop's initial values at its entry); a result register that one of those sources already holds needs no move and is
not counted as written (the check cannot tell which branch a thread took); the moves of a loop's latch into its
carried registers are not checked against registers in flight.

`wgmma_fence` by registers (`memory_model.WGMMA_FENCE`, with `races`): between a thread's access of a register and a
wgmma that accesses the same register (its accumulator, which it writes, or its A fragment), the warpgroup must
execute a `wgmma_fence`; accesses by the wgmmas of a chain are exempt. The checker keeps, per warpgroup and
register, the first instruction that touched it since the warpgroup's latest fence (reads and writes of ops that
print an instruction: not views, not yields, not a constant folded into a wgmma's accumulator), and refuses a wgmma
whose registers one touched; only accesses that can fall between a wgmma and the latest fence before it in its block
are noted (`register_windows.fence_touches`). This is the rule on the registers the PTX has, so the CTA simulator
and the PTX executor agree: a zero accumulator (scale-d 0) written by no instruction needs no fence, S registers
read by the softmax since the last fence do. Without an allocation, `wgmma.WgmmaUnit` applies the rule to SSA values
instead (a value feeding the wgmma computed after the fence)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import scf
from xdsl.interpreter import Interpreter
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError, describe_op
from tessera.interpreters.ranges import as_slice
from tessera.interpreters.sm90.register_layout import OpPlan, RegisterLayout, ValueLayout
from tessera.interpreters.truth import all_set, any_set
from tessera.regalloc import Allocation
from tessera.sm90 import facts


def _bits(array: np.ndarray) -> np.ndarray:
    """Compare by bit pattern, so NaNs compare equal to themselves and -0.0 differs from 0.0."""
    array = np.ascontiguousarray(array)
    return array.view(_UNSIGNED[array.dtype.itemsize])


_UNSIGNED = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}

_OWNED = 1 << 20
"""`RegisterFileChecker.owner` codes a register's owner as token * _OWNED + element."""


@dataclass(frozen=True)
class InFlight:
    """A register that wgmma `op` of `warpgroup` reads (role "A fragment") or writes ("accumulator") until
    its `group` completes."""

    warpgroup: int
    group: int
    op: Operation
    role: str


class RegisterFileChecker(Interpreter.Listener):
    """Keeps the register file of one CTA and checks every operand against it (module docstring).

    The file holds bit patterns: one [T, R] array per register width over all R registers the allocation
    names, and per register the dtype last written into it (`kinds`, -1 before the first write). An operand is
    compared only in the registers whose last write had its dtype (a register read under another class view,
    or written implicitly as a loop-carried one, is not compared); a register written under a new dtype starts
    from zeros in every thread.

    Cheap on assignment boundaries: a write by whole warps does not copy bits; it records, per warp and
    register, which array (a token) and which element of it the register holds (`owner`, [W, R]). An operand
    whose registers still hold its own array's elements in every active warp needs no comparison (a [W, k]
    integer compare, not [T, k] bits); otherwise, and for a write by part of a warp, the registers' bits are
    materialised from their owners into the file and compared bit for bit in the active threads, as before.
    The verdict is the per-operand bit comparison's: a register another array overwrote is compared by bits
    (equal bits pass). The ops with nothing to compare, record or note are not observed at all (`observes`)."""

    def __init__(self, cta, allocation: "Allocation | RegisterLayout"):
        self.cta = cta
        self.layout = allocation if isinstance(allocation, RegisterLayout) else RegisterLayout(allocation)
        self.names = self.layout.names
        self._layout = self.layout.of
        registers = len(self.layout.index)
        self.files: dict[int, np.ndarray] = {}
        self.kinds = np.full(registers, -1, np.int16)
        self._kind_codes: dict[np.dtype, int] = {}
        # a layout whose registers all held `kind` when kinds last changed (`_kind_epoch`) needs no new look
        self._kind_epoch = 0
        self._kind_checked: dict[int, tuple[int, int]] = {}
        # owner[g, r]: _OWNED * token + element of the array that register r holds in every thread of granule g
        # (a warp; a thread if the CTA is not whole warps); -1: the file holds its bits
        self.granule = facts.WARP_SIZE if cta.threads % facts.WARP_SIZE == 0 else 1
        self.owner = np.full((cta.threads // self.granule, registers), -1, np.int64)
        self._tokens: dict[int, tuple[np.ndarray, int]] = {}  # id(array) -> (array, token)
        self._arrays: dict[int, np.ndarray] = {}  # token -> array
        self._next_token = 0
        self._op_plans = self.layout.op_plans
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(view) -> (view, owner codes it matched)
        self._mask: tuple = (None, None, False)  # (active mask, its granules with a thread, all whole)
        self._rows: tuple = (None, None)  # (active mask, its threads' indices)
        self.issues: list[list[tuple[int, Operation, tuple]]] | None = None  # see _issue
        self._held: list[int] = []
        self._warpgroup_mask: tuple = (None, [])
        # touched[w, r]: index (in touch_ops) of the first op that accessed register r in warpgroup w since w's
        # latest wgmma_fence, -1 none (the fence rule by registers, module docstring)
        self.fences = bool(getattr(cta, "races", True))
        self.touched = np.full((max(1, cta.threads // facts.WARPGROUP_SIZE), registers), -1, np.int32)
        self.touch_ops: list[Operation] = []
        self._touched_any = [False] * len(self.touched)
        """Whether row w of `touched` holds any op (else it is -1 everywhere: a wgmma's check of it finds nothing)."""
        if self.fences and getattr(cta, "wgmma", None) is not None:  # (a CTA without a wgmma unit: no fences)
            cta.wgmma.register_fences = True  # the SSA form of the rule gives way to this one

    @property
    def observes_key(self) -> tuple:
        """What decides `observes` (`program`): the layout (its plans) and whether the fence rule applies."""
        return ("RegisterFileChecker", self.layout, self.fences)

    def observes(self, op: Operation) -> tuple[bool, bool]:
        """(before, after) for `program`: an op with reads to compare or register accesses the fence rule
        follows, a wgmma; after it also an op whose writes are recorded or may hit registers in flight."""
        plan = self._plan(op)
        touched = self.fences and (plan.touch_reads is not None)
        before = (bool(plan.reads) or bool(plan.moves) or plan.wgmma and self.fences or touched
                  or not plan.wgmma and plan.flight_reads is not None)
        after = (bool(plan.writes) or plan.wgmma or bool(plan.written)
                 or self.fences and (plan.fence or plan.touch_writes is not None))
        return before, after

    def in_pure_region(self, op: Operation) -> bool:
        """Whether `op`, in a branch of pure ops that only batch followers take (`follower_rules.pure_if`), needs only
        `check_pure_region`: it has no read to compare, no write to record or move, and no register access the
        fence rule notes; what is left is the check that it writes no register a pending wgmma holds, which
        depends on the wgmma groups alone (the same in every CTA of a batch)."""
        plan = self._plan(op)
        touched = self.fences and (plan.touch_reads is not None or plan.touch_writes is not None)
        return not (plan.reads or plan.writes or plan.moves) and not touched

    def check_pure_region(self, op: Operation, args: tuple) -> None:
        if self.issues is not None:
            plan = self._plan(op)
            self._check_reads_in_flight(op, self.cta.active, plan)
            if plan.written:
                self._check_writes(op, self.cta.active, plan)

    # region the register file
    def _plan(self, op: Operation) -> OpPlan:
        """The layout's `OpPlan` of `op` (kept by id: xDSL hashes an op in Python)."""
        plan = self._op_plans.get(id(op))
        if plan is None or plan.op is not op:
            plan = self.layout.op_plan(op, self._written)
        return plan

    def _granules(self, active: np.ndarray) -> tuple[slice | np.ndarray, bool]:
        """(the granules with an active thread, as a slice where consecutive, whether each of them is wholly
        active), cached per mask."""
        mask, granules, whole = self._mask
        if mask is not active:
            groups = active.reshape(-1, self.granule)
            some = groups.any(axis=1)
            granules = as_slice(np.flatnonzero(some)) if any_set(some) else slice(0, 0)
            whole = all_set(groups.all(axis=1) == some)
            self._mask = (active, granules, whole)
        return granules, whole

    def _active_rows(self, active: np.ndarray) -> np.ndarray:
        """The indices of the active threads, cached per mask (masks are never changed in place)."""
        mask, rows = self._rows
        if mask is not active:
            rows = np.flatnonzero(active)
            self._rows = (active, rows)
        return rows

    def _view(self, array: np.ndarray, layout: ValueLayout, granules: np.ndarray) -> bool:
        """A view op's result `array` (its registers are its operands', which they already hold): remember
        what its registers hold now instead of writing them, if owner arrays hold them in every active granule."""
        held = self.owner[:, layout.columns]
        if not all_set(held[granules] >= 0):
            return False
        if len(self._views) > 4096:
            self._views.clear()  # only makes later reads of the forgotten views compare bits
        self._views[id(array)] = (array, held)
        return True

    def _kind(self, array: np.ndarray) -> int:
        kind = self._kind_codes.get(array.dtype)
        if kind is None:
            kind = self._kind_codes[array.dtype] = len(self._kind_codes)
        return kind

    def _file(self, itemsize: int) -> np.ndarray:
        file = self.files.get(itemsize)
        if file is None:
            file = self.files[itemsize] = np.zeros((self.cta.threads, len(self.kinds)), _UNSIGNED[itemsize])
        return file

    def _token(self, array: np.ndarray) -> int:
        entry = self._tokens.get(id(array))
        if entry is not None and entry[0] is array:
            return entry[1]
        if len(self._arrays) > 4 * len(self.kinds) + 64:
            self._prune()
        token = self._next_token
        self._next_token += 1
        self._tokens[id(array)] = (array, token)
        self._arrays[token] = array
        return token

    def _prune(self) -> None:
        """Forget the arrays that no register holds any more."""
        live = set(np.unique(self.owner[self.owner >= 0] // _OWNED).tolist())
        self._arrays = {t: a for t, a in self._arrays.items() if t in live}
        self._tokens = {id(a): (a, t) for t, a in self._arrays.items()}

    def _materialise(self, columns: np.ndarray) -> None:
        """Copy the bits of the registers `columns` (indices) that owner arrays hold into the file."""
        codes = self.owner[:, columns]
        if not any_set(codes >= 0):
            return
        lanes = np.arange(self.granule)
        for token in np.unique(codes[codes >= 0] // _OWNED).tolist():
            granules, j = np.nonzero((codes >= 0) & (codes // _OWNED == token))
            bits = _bits(self._arrays[token])
            bits = bits[:, None] if bits.ndim == 1 else bits
            rows = granules[:, None] * self.granule + lanes
            self._file(bits.itemsize)[rows, columns[j][:, None]] = bits[rows, (codes[granules, j] % _OWNED)[:, None]]
        codes[codes >= 0] = -1
        self.owner[:, columns] = codes

    def did_interpret_op(self, op: Operation, results) -> None:
        plan = self._plan(op)
        active = self.cta.active
        if plan.wgmma:
            self._issue(op, active, plan.held)
        elif plan.written and self.issues is not None:
            self._check_writes(op, active, plan)
        if self.fences:
            if plan.fence:
                warpgroups = self._warpgroups(active)
                self.touched[warpgroups] = -1
                for w in warpgroups:
                    self._touched_any[w] = False
            elif plan.touch_writes is not None:
                self._touch(op, active, plan.touch_writes)
        if plan.writes:
            self._record(results, plan.writes, plan.view, active)

    def _record(self, values, writes: tuple, alias: bool, active: np.ndarray) -> None:
        """The active threads' registers of each (position, layout) of `writes` now hold `values[position]` (a
        view's: what they held, `_view`)."""
        granules, whole = self._granules(active)
        rows = granules if isinstance(granules, slice) else granules[:, None]
        for position, layout in writes:
            array = np.asarray(values[position])
            if alias and self._view(array, layout, granules):
                continue
            kind = self._kind(array)
            columns = layout.columns
            if self._kind_checked.get(id(layout)) != (kind, self._kind_epoch):
                changed = self.kinds[layout.registers] != kind
                if any_set(changed):  # a register written under another dtype starts from zeros in every thread
                    self.owner[:, columns[changed]] = -1
                    for file in self.files.values():
                        file[:, columns[changed]] = 0
                    self.kinds[columns] = kind
                    self._kind_epoch += 1
                self._kind_checked[id(layout)] = (kind, self._kind_epoch)
            if whole:
                codes = self._token(array) * _OWNED + (layout.codes if array.ndim > 1 else 0)
                self.owner[rows, layout.registers] = codes
                continue
            self._materialise(columns)
            bits = _bits(array)
            bits = bits[:, None] if bits.ndim == 1 else bits[:, layout.elements]
            rows = np.flatnonzero(active)
            self._file(bits.itemsize)[rows[:, None], columns] = bits[rows]

    def will_interpret_op(self, op: Operation, args) -> None:
        plan = self._plan(op)
        active = self.cta.active
        if self.issues is not None and plan.flight_reads is not None:  # (a wgmma has none)
            self._check_reads_in_flight(op, active, plan)
        if self.fences:
            if plan.wgmma:
                self._check_fenced(op, active, plan.wgmma_registers)
            elif plan.touch_reads is not None:
                self._touch(op, active, plan.touch_reads)
        if plan.reads:
            self._check_reads(op, args, plan.reads)
        if plan.moves:  # the moves into a loop's carried registers, after their sources were read
            self._record(args, plan.moves, False, active)

    def _check_reads(self, op: Operation, args, reads: tuple) -> None:
        granules = self._granules(self.cta.active)[0]
        rows = granules if isinstance(granules, slice) else granules[:, None]
        for position, layout in reads:
            array = args[position]
            entry = self._tokens.get(id(array))
            if entry is not None and entry[0] is array:
                expected = entry[1] * _OWNED + (layout.codes if array.ndim > 1 else 0)
                if all_set(self.owner[rows, layout.registers] == expected):
                    continue
            view = self._views.get(id(array))
            if view is not None and view[0] is array:
                if all_set(self.owner[rows, layout.registers] == view[1][granules]):
                    continue
            self._compare(op, op.operands[position], layout, np.asarray(array))

    def _compare(self, op: Operation, value, layout: ValueLayout, array: np.ndarray) -> None:
        kind = self._kind(array)
        same = self.kinds[layout.registers] == kind
        if not any_set(same):
            return  # written implicitly (a loop-carried register) or a different class view
        self._materialise(layout.columns)
        bits = _bits(array)
        bits = bits[:, None] if bits.ndim == 1 else bits[:, layout.elements]
        rows = self._active_rows(self.cta.active)  # only the active threads' registers are compared
        differs = self._file(bits.itemsize)[rows[:, None], layout.columns] != bits[rows]
        bad = differs & same[None, :]
        if any_set(bad):
            column = int(np.argmax(bad.any(axis=0)))
            thread = int(rows[int(np.argmax(bad[:, column]))])
            raise KernelHazardError(
                f"{describe_op(op)}: register {layout.names[column]} no longer holds "
                f"%{value.name_hint or '?'} (another value was allocated to it while it was live) in thread {thread}"
            )

    # endregion

    # region wgmma_fence between register accesses and a wgmma (memory_model.WGMMA_FENCE)
    def _touch(self, op: Operation, active: np.ndarray, columns: np.ndarray) -> None:
        """Note the registers `columns` that `op` reads or writes as touched since the latest fence."""
        for w in self._warpgroups(active):
            row = self.touched[w]
            fresh = row[columns] < 0
            if any_set(fresh):
                if not self.touch_ops or self.touch_ops[-1] is not op:
                    self.touch_ops.append(op)
                row[columns[fresh]] = len(self.touch_ops) - 1
                self._touched_any[w] = True

    def _check_fenced(self, op: sm90.WgmmaMmaAsyncOp, active: np.ndarray, registers: tuple) -> None:
        warpgroups = [w for w in self._warpgroups(active) if self._touched_any[w]]
        if not warpgroups:
            return  # no register touched since the warpgroups' latest fences
        columns, names = registers
        for w in warpgroups:
            if self.cta.wgmma.fenced_at[w] < 0:
                continue  # no fence yet: `WgmmaUnit` reports the first wgmma
            touched = self.touched[w, columns]
            if np.count_nonzero(touched >= 0):
                j = int(np.argmax(touched >= 0))
                other = self.touch_ops[int(touched[j])]
                self.cta.fail(op, f"accesses register {names[j]} (its accumulator or A fragment), which "
                                  f"`{describe_op(other)}` accessed after warpgroup {w}'s latest wgmma_fence (race: "
                                  "missing wgmma_fence between the access and the wgmma)", w * facts.WARPGROUP_SIZE)

    # endregion
    # region registers of in-flight wgmma groups
    def _warpgroups(self, active: np.ndarray) -> list[int]:
        mask, warpgroups = self._warpgroup_mask
        if mask is not active:
            size = facts.WARPGROUP_SIZE
            warpgroups = [w for w in range(self.cta.threads // size) if any_set(active[w * size : (w + 1) * size])]
            self._warpgroup_mask = (active, warpgroups)
        return warpgroups

    def _issue(self, op: sm90.WgmmaMmaAsyncOp, active: np.ndarray, held: tuple) -> None:
        """The registers of wgmma `op` (`held`: `RegisterLayout.held`) are in flight until its group completes:
        `issues[w]` lists the (group, wgmma, registers held) of warpgroup w not yet seen complete, oldest first,
        and `_held[w]` the mask of their registers. A warpgroup's groups only grow, so the completed ones are a
        prefix of its list (`_in_flight` drops them), and a register is in flight where a listed wgmma holds it."""
        unit = self.cta.wgmma
        if self.issues is None:
            self.issues = [[] for _ in range(len(unit.done))]
            self._held = [0] * len(unit.done)
        for w in self._warpgroups(active):
            self.issues[w].append((int(unit.open[w]), op, held))
            self._held[w] |= held[0]

    def _in_flight(self, w: int, done: int) -> int:
        """The mask of the registers a pending group of warpgroup `w` holds, its groups up to `done` complete."""
        issues = self.issues[w]
        if issues and issues[0][0] <= done:
            count = 1
            while count < len(issues) and issues[count][0] <= done:
                count += 1
            del issues[:count]
            mask = 0
            for _, _, held in issues:
                mask |= held[0]
            self._held[w] = mask
        return self._held[w]

    def _written(self, op: Operation) -> list[tuple[str, object]]:
        return self.layout.written(op, self._find_written)

    def _find_written(self, op: Operation) -> list[tuple[str, object]]:
        if self.layout.is_view(op):
            return []
        written = []
        for j, result in enumerate(op.results):
            already = self._sources(op, j) if op.regions else set()
            written += [(name, result) for name in self.names.get(result, ())
                        if name.startswith("%") and name not in already]
        return written

    def _sources(self, op: Operation, j: int) -> set[str]:
        """Registers of the values a region op moves into its result j (yields, a loop's initial value)."""
        sources = list(op.iter_args[j : j + 1]) if isinstance(op, scf.ForOp) else []
        for region in op.regions:
            for block in region.blocks:
                terminator = block.last_op
                if isinstance(terminator, scf.YieldOp | scf.ConditionOp):
                    values = terminator.operands[1:] if isinstance(terminator, scf.ConditionOp) else terminator.operands
                    sources += list(values[j : j + 1])
        return {name for value in sources for name in self.names.get(value, ())}

    def _check_writes(self, op: Operation, active: np.ndarray, plan: OpPlan) -> None:
        """Refuse `op` writing (`plan.written`: the register columns, names and values) a register of a wgmma of
        an active warpgroup whose group is pending."""
        columns, names, values = plan.written
        found = self._pending(active, columns, plan.written_mask)
        if found is not None:
            j, entry, thread = found
            self.cta.fail(op, f"writes register {names[j]} (%{values[j].name_hint or '?'}) while "
                              f"{self._holder(entry)}", thread)

    def _check_reads_in_flight(self, op: Operation, active: np.ndarray, plan: OpPlan) -> None:
        """Refuse `op` reading a register of a wgmma of an active warpgroup whose group is pending: its A
        fragment's as well as its accumulator's (the PTX ISA leaves both undefined before the wait; the PTX
        executor's `wgmma_tracking` reports the same access)."""
        columns = plan.flight_reads
        if columns is None:
            return
        found = self._pending(active, columns, plan.flight_read_mask)
        if found is not None:
            j, entry, thread = found
            name = next(n for n, c in self.layout.index.items() if c == columns[j])
            self.cta.fail(op, f"reads register {name} while {self._holder(entry)}", thread)

    def _pending(self, active: np.ndarray, columns: np.ndarray, mask: int) -> tuple[int, InFlight, int] | None:
        """(position in `columns` (`mask`: theirs), its in-flight entry, a thread of the entry's warpgroup) of the
        first register of `columns` that a pending wgmma group of the first such active warpgroup holds, or None.
        The entry is the newest wgmma holding that register, in its last role that does."""
        done, issues = self.cta.wgmma.done, self.issues
        for w in self._warpgroups(active):
            if not issues[w] or not self._in_flight(w, int(done[w])) & mask:
                continue
            size = facts.WARPGROUP_SIZE
            thread = w * size + int(np.argmax(active[w * size : (w + 1) * size]))
            for j, column in enumerate(columns.tolist()):
                for group, wgmma, held in reversed(self.issues[w]):
                    for role_mask, role in reversed(held[1]):
                        if role_mask >> column & 1:
                            return j, InFlight(w, group, wgmma, role), thread
        return None

    @staticmethod
    def _holder(entry: InFlight) -> str:
        what = "reads it as its A fragment" if entry.role == "A fragment" else "writes its accumulator into it"
        return (f"`{describe_op(entry.op)}` of warpgroup {entry.warpgroup} still {what} (group {entry.group} is "
                "pending: a wgmma_wait_group must complete it first)")

    # endregion
