"""The listeners of the CTA simulator's wgmma checks, and the analysis of the kernel they start from.

`wgmma_register_sources` finds, once per kernel, the ops whose values feed a wgmma's register operands (the
accumulator, an RS wgmma's A fragment) through renames and control flow, and `wgmma_accumulator_chains` the chains
of wgmmas sharing one accumulator's registers and the ops that read them. `RegisterWrites` records when those values
were computed (`wgmma.WgmmaUnit.produced`, `chain_read`), which the fence rule (`WgmmaUnit._check_fenced`,
`memory_model.WGMMA_FENCE`) judges; `PendingUseChecker` refuses an op that reads a pending wgmma value
(`WgmmaGroups.check_uses`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects import scf, vector
from xdsl.dialects.builtin import UnrealizedConversionCastOp
from xdsl.interpreter import Interpreter
from xdsl.ir import BlockArgument, Operation, OpResult

from tessera.dialects import sm90
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.wgmma import WgmmaUnit

_RENAMES = (vector.ShuffleOp, UnrealizedConversionCastOp)
"""Ops that only rename registers (no instruction in the PTX): a value through them keeps its write time."""


def wgmma_register_sources(func_op: Operation) -> tuple[frozenset, ...]:
    """(ids of the ops that compute values feeding a wgmma's accumulator or A-fragment operand, ids of the
    renaming ops on the way, then `wgmma_accumulator_chains`), traced back through renames and scf.for/scf.if
    values; a wgmma's own result (a chained accumulator) ends a trace."""
    origins, renames, seen = set(), set(), set()
    work = []
    for op in func_op.walk():
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
            work.append(op.operands[0])
            if op.a_in_registers:
                work.append(op.operands[1])
    while work:
        value = work.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, OpResult):
            owner = value.op
            if isinstance(owner, sm90.WgmmaMmaAsyncOp):
                continue
            if isinstance(owner, _RENAMES):
                renames.add(id(owner))
                work.extend(owner.operands)
            elif isinstance(owner, scf.ForOp):
                work.append(owner.iter_args[value.index])
                work.append(owner.body.block.last_op.operands[value.index])
            elif isinstance(owner, scf.IfOp):
                work.extend(region.block.last_op.operands[value.index] for region in owner.regions
                            if region.blocks and region.block.last_op.operands)
            else:
                origins.add(id(owner))
        elif isinstance(value, BlockArgument):
            parent = value.block.parent_op()
            if isinstance(parent, scf.ForOp) and value.index > 0:
                work.append(parent.iter_args[value.index - 1])
                work.append(parent.body.block.last_op.operands[value.index - 1])
    return (frozenset(origins), frozenset(renames), *wgmma_accumulator_chains(func_op))


_PASSES = (scf.YieldOp, scf.ConditionOp, scf.ForOp, scf.WhileOp, scf.IfOp)
"""Control flow that passes a value on without reading it (`wgmma_accumulator_chains` follows it)."""


def wgmma_accumulator_chains(func_op: Operation) -> tuple[frozenset, frozenset]:
    """(pairs (id of a wgmma, id of its chain's first wgmma), pairs (id of an op that reads a value of a chain,
    id of the chain's first wgmma)). A chain is a wgmma and the wgmmas taking its result as their accumulator,
    through renames: one set of registers in the PTX (the accumulator is both operand and result). Readers are
    found through renames and through control flow passing the value on (an scf.yield to the loop's next trip
    or results, an scf.if's result)."""
    heads: dict[int, int] = {}

    def head(op: sm90.WgmmaMmaAsyncOp) -> int:
        found = heads.get(id(op))
        if found is None:
            value = op.operands[0]
            while isinstance(value, OpResult) and isinstance(value.op, _RENAMES):
                value = value.op.operands[0]
            owner = value.op if isinstance(value, OpResult) else None
            found = heads[id(op)] = head(owner) if isinstance(owner, sm90.WgmmaMmaAsyncOp) else id(op)
        return found

    readers, seen = set(), set()
    work = [(op.results[0], head(op)) for op in func_op.walk() if isinstance(op, sm90.WgmmaMmaAsyncOp)]
    while work:
        value, chain = work.pop()
        if (id(value), chain) in seen:
            continue
        seen.add((id(value), chain))
        for use in value.uses:
            user, index = use.operation, use.index
            if isinstance(user, sm90.WgmmaMmaAsyncOp) and index == 0:
                continue  # the next wgmma of the chain (its own chain, the same registers)
            if isinstance(user, _RENAMES):
                work.extend((result, chain) for result in user.results)
            elif isinstance(user, _PASSES):
                parent = user.parent_op() if isinstance(user, (scf.YieldOp, scf.ConditionOp)) else None
                if isinstance(parent, scf.ForOp):
                    work.append((parent.results[index], chain))
                    work.append((parent.body.block.args[index + 1], chain))
                elif isinstance(parent, scf.IfOp):
                    work.append((parent.results[index], chain))
                elif isinstance(user, scf.ForOp) and index >= 3:
                    work.append((user.body.block.args[index - 2], chain))
                    work.append((user.results[index - 3], chain))
            else:
                readers.add((id(user), chain))
    return frozenset(heads.items()), frozenset(readers)


class RegisterWrites(Interpreter.Listener):
    """Records when each value feeding a wgmma register operand was computed (`WgmmaUnit.produced`), from the
    sets `wgmma_register_sources` found: an origin's results now, a rename's results at its operand's time."""

    @staticmethod
    def in_pure_region(op: Operation) -> bool:
        """A branch of pure ops (no wgmma_fence in it) that only batch followers take (`follower_rules.pure_if`)
        writes its values between the same fences as the branch its leader takes: the fence rule judges them
        alike, and there is nothing to check (`check_pure_region`)."""
        return True

    def check_pure_region(self, op: Operation, args: tuple) -> None:
        pass

    def __init__(self, unit: WgmmaUnit, sources: tuple[frozenset, ...]):
        self.unit = unit
        self.origins, self.renames, heads, self.chain_pairs = sources
        unit.heads = dict(heads)
        self.chains: dict[int, list[int]] = {}
        for reader, chain in self.chain_pairs:
            self.chains.setdefault(reader, []).append(chain)
        self._args: tuple = ()

    @property
    def observes_key(self) -> tuple:
        """What decides `observes` (`program`): the same sources give the same answers."""
        return ("RegisterWrites", self.origins, self.renames, self.chain_pairs)

    def observes(self, op: Operation) -> tuple[bool, bool]:
        """(before, after): only the renames' operands, the origins' and renames' results, and the readers of
        wgmma results (`wgmma_accumulator_chains`) matter."""
        key = id(op)
        return key in self.renames, key in self.origins or key in self.renames or key in self.chains

    def will_interpret_op(self, op: Operation, args: tuple) -> None:
        if id(op) in self.renames:
            self._args = args

    def did_interpret_op(self, op: Operation, results: tuple) -> None:
        key = id(op)
        chains = self.chains.get(key)
        if chains is not None:
            unit = self.unit
            now, warpgroups = unit.cta.tick(), unit.cta.active.reshape(-1, facts.WARPGROUP_SIZE).any(axis=1)
            for chain in chains:
                read = unit.chain_read.get(chain)
                if read is None:
                    read = (np.full(len(warpgroups), -1, np.int64), op)
                read[0][warpgroups] = now
                unit.chain_read[chain] = (read[0], op)
        if key in self.origins:
            produced, now = self.unit.produced, self.unit.cta.tick()
            for value in results:
                produced[id(value)] = (value, now, op)
        elif key in self.renames:
            produced = self.unit.produced
            entries = [produced.get(id(arg)) for arg in self._args]
            entries = [e for e, arg in zip(entries, self._args) if e is not None and e[0] is arg]
            if entries:
                latest = max(entries, key=lambda e: e[1])
                for value in results:
                    produced[id(value)] = (value, latest[1], latest[2])


class PendingUseChecker(Interpreter.Listener):
    """Checks every op's operands against the pending wgmma values before it runs."""

    @staticmethod
    def in_pure_region(op: Operation) -> bool:
        """In a branch of pure ops that only batch followers take (`follower_rules.pure_if`) each op is checked with
        the leader's values of its operands defined outside the branch (which values are pending is the same in
        every CTA of a batch: `check_pure_region`)."""
        return True

    def check_pure_region(self, op: Operation, args: tuple) -> None:
        self.unit.check_uses(op, args)

    def __init__(self, unit: WgmmaUnit):
        self.unit = unit
        # `will_interpret_op` is the unit's check itself: it runs before some 2,000 ops a launch, and a method
        # that only calls it cost a Python frame at each
        self.will_interpret_op = unit.check_uses

    observes_key = "PendingUseChecker"

    @staticmethod
    def observes(op: Operation) -> tuple[bool, bool]:
        """(before, after) for `program`: only an op with operands can read a pending value."""
        return bool(op.operands), False
