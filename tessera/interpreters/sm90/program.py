"""Target IR compiled to Python closures: the CTA simulator's execution engine.

xDSL's `Interpreter` looks every operand up in a chain of scoped dictionaries, finds the implementation by the
op's type, calls every listener and stores every result by SSA value, at every run of every op. The simulator
runs the same few hundred ops thousands of times per launch, so it compiles the kernel once instead:

- `CompiledKernel` (per kernel, cached on the `func.func` across CTAs and launches, rebuilt when the kernel's
  ops, blocks or operands change: `CompiledKernel.of`) numbers every SSA value of the kernel with a slot and
  lists, per block, each op with the slots it reads and writes. Nothing in it depends on a CTA.
- `CompiledCta` (per CTA) binds that program to the CTA's implementations (the `InterpreterFunctions` of the
  units) and listeners (the checkers): one closure per op that reads its operands from a flat list of slots
  (`values`), calls the listeners that observe that op (a listener with an `observes(op) -> (before, after)`
  method and an `observes_key` that decides its answers is called only where it says so; others at every op,
  as xDSL calls them), calls the implementation, checks and stores the results. Blocks are lists of those
  closures, built at a block's first run and shared by every CTA with the same implementation classes and
  listener keys.

`CompiledCta` stands in for the `Interpreter` the implementations receive: `run_ssacfg_region(region, args)`
runs a region's compiled blocks (the control-flow implementations call it) and `_ctx` is the frame a deferred
branch starts from (`strands`). One frame serves all strands of a CTA: each SSA value has its own slot, a
deferred branch writes only the values of its own region, and its parent waits for it at the end of the
`scf.if` before reading its results, so the strands never write one slot at once. Errors are xDSL's: an
exception from an implementation becomes the op's error diagnostic (`Operation.emit_error`), a missing
implementation an `InterpretationError` when the op runs, and a closure keeps the op in a local named `op`
(`parallel.innermost_op` locates a failure by it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, ReturnedValues, Successor, impl
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import InterpretationError

from tessera.interpreters.sm90.follower_views import FollowerDropout

_CACHE_ATTRIBUTE = "_tessera_compiled_kernel"


class _OpCode:
    """One op of a compiled block: the op, its type, the slots of its operands and results."""

    __slots__ = ("op", "kind", "reads", "writes")

    def __init__(self, op: Operation, slots: dict[SSAValue, int]):
        self.op = op
        self.kind = type(op)
        self.reads = tuple(slots[value] for value in op.operands)
        self.writes = tuple(slots[value] for value in op.results)


class _BlockCode:
    """A compiled block: the slots of its arguments and its ops in order (the last may be a terminator)."""

    __slots__ = ("block", "args", "ops")

    def __init__(self, block: Block, slots: dict[SSAValue, int]):
        self.block = block
        self.args = tuple(slots[arg] for arg in block.args)
        self.ops = tuple(_OpCode(op, slots) for op in block.ops)


def _structure(func_op: func.FuncOp) -> list:
    """Every op of the kernel with its operand tuple, every block with its argument tuple, in order: xDSL
    replaces an op's operand tuple when an operand is rewired, so comparing these by identity tells whether the
    kernel's structure changed (attributes are read by the implementations at each run and may change freely).
    Reads xDSL's fields directly: its `walk` and `operands` views cost ten times more; an op without regions is
    listed where its block is walked, a region op by a call for its regions."""
    out: list = []
    append = out.append

    def regions_of(op: Operation) -> None:
        for region in op.regions:
            block = region._first_block  # noqa: SLF001
            while block is not None:
                append(block)
                append(block._args)  # noqa: SLF001
                inner = block._first_op  # noqa: SLF001
                while inner is not None:
                    append(inner)
                    append(inner._operands)  # noqa: SLF001
                    if inner.regions:
                        regions_of(inner)
                    inner = inner._next_op  # noqa: SLF001
                block = block._next_block  # noqa: SLF001

    append(func_op)
    append(func_op._operands)  # noqa: SLF001
    regions_of(func_op)
    return out


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


class CompiledKernel:
    """The slots and blocks of one kernel (module docstring), independent of any CTA."""

    def __init__(self, func_op: func.FuncOp):
        self.func_op = func_op
        slots: dict[SSAValue, int] = {}
        blocks: list[Block] = []
        for op in func_op.walk():
            for region in op.regions:
                for block in region.blocks:
                    blocks.append(block)
                    for arg in block.args:
                        slots[arg] = len(slots)
            for result in op.results:
                slots[result] = len(slots)
        self.size = len(slots)
        self.blocks = {block: _BlockCode(block, slots) for block in blocks}
        self.entries = {region: self.blocks[region.blocks.first] for op in func_op.walk() for region in op.regions
                        if region.blocks.first is not None}
        self.steps: dict[tuple, _Steps] = {}
        """The closures per implementation classes and listener keys (`CompiledCta`)."""
        self._facts: dict = {}

    def fact(self, key, compute: Callable[[], object]):
        """`compute()`, kept under `key` while the kernel's structure stays the same: what a launch derives from
        the ops and operands alone (which ops have follower rules, the wgmma register sources, the reduction
        targets), found once instead of by a walk of every op at every launch. A fact that also reads
        attributes (which may change freely) puts them in `key`."""
        try:
            return self._facts[key]
        except KeyError:
            value = self._facts[key] = compute()
            return value

    @classmethod
    def of(cls, func_op: func.FuncOp) -> CompiledKernel:
        """The compiled form of `func_op`, kept on it while its structure stays the same (`_structure`)."""
        structure = _structure(func_op)
        cached = func_op.__dict__.get(_CACHE_ATTRIBUTE)
        if cached is not None and _same(cached[0], structure):
            return cached[1]
        compiled = cls(func_op)
        func_op.__dict__[_CACHE_ATTRIBUTE] = (structure, compiled)
        return compiled


def _implementations(functions: Sequence[InterpreterFunctions]) -> dict[type, tuple]:
    """Op type -> (functions object, implementation) over `functions`, as xDSL registers them."""
    interpreter = Interpreter(ModuleOp([]))  # xDSL's own registration rules (a duplicate is refused)
    for functions_object in functions:
        interpreter.register_implementations(functions_object)
    return interpreter._impls._impl_dict  # noqa: SLF001


_XDSL_IMPL_CODE = impl(arith.AddiOp)(lambda functions, interpreter, op, args: ()).__code__
"""The code of the wrapper xDSL's `impl` puts around an implementation (`_plain`)."""


def _plain(implementation: Callable) -> Callable | None:
    """The function xDSL's `impl` wrapped into `implementation` (it returns the result values; the wrapper only
    packs them with no terminator value), or None if `implementation` is no such wrapper (a terminator's, or
    another xDSL's): calling it directly spares an `OpImplResult` and a call at every run of an op."""
    code = getattr(implementation, "__code__", None)
    if code is not _XDSL_IMPL_CODE or "func" not in code.co_freevars:
        return None
    return implementation.__closure__[code.co_freevars.index("func")].cell_contents


def _gather(slots: tuple[int, ...]) -> Callable[[list], tuple]:
    """frame -> the tuple of its values at `slots` (an `operator.itemgetter`, a third of the time of building the
    tuple in Python at each run of an op; one slot by subscript, which needs no call)."""
    if not slots:
        return lambda frame: ()
    if len(slots) == 1:
        slot = slots[0]
        return lambda frame: (frame[slot],)
    return operator.itemgetter(*slots)


def _observer_key(listener: Interpreter.Listener) -> object:
    """What decides which ops `listener` observes, the same for every CTA of a launch: its `observes_key`
    (required with `observes`), None for a listener that observes every op."""
    return listener.observes_key if hasattr(listener, "observes") else None


class _Steps:
    """The closures of one kernel for one set of implementation classes and listener keys (`CompiledCta`):
    the same for every CTA of a launch, and for later launches with the same checks."""

    def __init__(self, kernel: CompiledKernel, functions: Sequence[InterpreterFunctions]):
        self.kernel = kernel
        self.classes = {type(f): k for k, f in enumerate(functions)}
        self.implementations = {kind: (self.classes[type(f)], implementation)
                                for kind, (f, implementation) in _implementations(functions).items()}
        self.blocks: dict[Block, tuple[tuple[int, ...], tuple[Callable, ...]]] = {}

    def block(self, block: Block, listeners: Sequence[Interpreter.Listener]) -> tuple[tuple[int, ...], tuple]:
        """(the slots of `block`'s arguments, its closures), built at its first run from the `listeners` of the
        CTA that runs it first: their `observes` answers are the same in every CTA (`_observer_key`); the
        listeners themselves are not kept (they hold their CTA's state)."""
        bound = self.blocks.get(block)
        if bound is None:
            code = self.kernel.blocks[block]
            bound = self.blocks[block] = (code.args, tuple(self._closure(op_code, listeners) for op_code in code.ops))
        return bound

    def _closure(self, code: _OpCode, listeners: Sequence[Interpreter.Listener]) -> Callable:
        """The closure that runs one op in a CTA (`CompiledCta`): operands from their slots, the listeners that
        observe it, the implementation, the results into their slots; returns the terminator's value (None
        for other ops)."""
        op, reads, writes = code.op, code.reads, code.writes
        before, after = [], []
        for j, listener in enumerate(listeners):
            observes = getattr(listener, "observes", None)
            will, did = observes(op) if observes is not None else (True, True)
            if will:
                before.append(j)
            if did:
                after.append(j)
        before, after = tuple(before), tuple(after)
        entry = self.implementations.get(code.kind)
        if entry is None:
            def missing(cta: CompiledCta):
                raise InterpretationError(f"Could not find interpretation function for op {op.name}")
            return missing
        position, implementation = entry
        plain = _plain(implementation)
        count = len(writes)
        write = writes[0] if count == 1 else None  # (most ops have one result: no zip)
        gather = _gather(reads)

        def step(cta: CompiledCta):
            values = cta._ctx  # noqa: SLF001
            args = gather(values)
            followers = cta.followers
            if followers is not None:
                if followers.dropped is None:
                    shadow = cta.shadow
                    cta.fargs = fargs = gather(shadow)
                else:
                    followers = None
            if before:
                wills = cta.wills
                for j in before:
                    wills[j](op, args)
            try:
                if plain is not None:
                    results, terminator = plain(cta.functions[position], cta, op, args), None
                else:
                    result = implementation(cta.functions[position], cta, op, args)
                    results, terminator = result.values, result.terminator_value
            except Exception as error:  # noqa: BLE001 - xDSL's handling: the op's error diagnostic
                op.emit_error("Error while interpreting op", error)
            if len(results) != count:
                raise InterpretationError(f"Number of operation results ({count}) doesn't match the number of "
                                          f"implementation results ({len(results)}) of {op.name}")
            if after:
                dids = cta.dids
                for j in after:
                    dids[j](op, results)
            if write is not None:
                values[write] = results[0]
            elif count:
                for slot, value in zip(writes, results):
                    values[slot] = value
            if followers is not None and followers.dropped is None:
                if terminator is not None:
                    cta.last_shadow = fargs
                else:
                    try:
                        follower_results = followers.run(op, implementation, cta.functions[position], args, fargs,
                                                         results)
                    except FollowerDropout as dropout:
                        followers.drop(str(dropout))
                    except Exception as error:  # noqa: BLE001 - the followers run alone (`followers`)
                        followers.drop(f"{op.name}: {type(error).__name__}: {error}")
                    else:
                        for slot, value in zip(writes, follower_results):
                            shadow[slot] = value
            return terminator

        return step


class CompiledCta:
    """A `CompiledKernel` run by one CTA with its implementations and listeners (module docstring); it is the
    interpreter the implementations see. The closures are shared (`_Steps`, kept on the compiled kernel per
    implementation classes and listener keys); the frame, the implementations and listeners are this CTA's."""

    def __init__(self, kernel: CompiledKernel, functions: Sequence[InterpreterFunctions],
                 listeners: Sequence[Interpreter.Listener] = ()):
        self.kernel = kernel
        self.functions = tuple(functions)
        self.listeners = tuple(listeners)
        self.wills = tuple(listener.will_interpret_op for listener in listeners)
        self.dids = tuple(listener.did_interpret_op for listener in listeners)
        self._ctx: list = [None] * kernel.size
        self.followers = None
        """The `followers.Followers` computed alongside this CTA (None: it runs alone)."""
        self.shadow: list = []
        """The followers' values, slot by slot ([F, T, ...] arrays), while they follow."""
        self.fargs: tuple = ()
        """The followers' operands of the op now running (a control-flow op reads them at its start)."""
        self.last_shadow: tuple | None = None
        """The followers' values of the terminator that ended the last region run (read by its caller)."""
        key = (tuple(type(f) for f in functions), tuple(_observer_key(listener) for listener in listeners))
        steps = kernel.steps.get(key)
        if steps is None:
            steps = kernel.steps[key] = _Steps(kernel, functions)
        self._steps = steps

    def follow(self, followers, arguments: Sequence) -> None:
        """Compute `followers` (`followers.Followers`) alongside this CTA, from the kernel's `arguments` (the
        same in every CTA)."""
        self.followers = followers
        self.shadow = [None] * self.kernel.size
        self.fargs = tuple(followers.broadcast(value) for value in arguments)

    def release(self) -> None:
        """Drop the frame (the leader's values and the followers') and the implementations, once the CTA has ended:
        a CTA's units and strands refer to each other, so what they hold is otherwise freed only by the cyclic
        garbage collector, and the arrays of every launch in between (tens of MB for a batch) take fresh pages."""
        self._ctx = [None] * self.kernel.size
        self.functions = ()  # they hold the launch's global memory
        self.shadow = []
        self.fargs = ()
        self.last_shadow = None

    def run_ssacfg_region(self, region: Region, args: Sequence, name: str = "unknown",
                          fargs: Sequence | None = None) -> tuple:
        """Run `region` from its first block with `args` as its arguments (what the control-flow implementations
        call of an xDSL Interpreter); its terminator's values. `fargs`: the followers' arguments, while
        followers follow (their terminator values are then `last_shadow`)."""
        code = self.kernel.entries.get(region)
        if code is None:
            if not region.blocks:
                return ()
            raise InterpretationError(f"the region of {region.parent_op().name} is not part of the compiled kernel")
        values, steps_of, listeners = self._ctx, self._steps.block, self.listeners
        block = code.block
        while True:
            arg_slots, steps = steps_of(block, listeners)
            for slot, value in zip(arg_slots, args):
                values[slot] = value
            if fargs is not None:
                shadow = self.shadow
                for slot, value in zip(arg_slots, fargs):
                    shadow[slot] = value
            for step in steps:
                ended = step(self)
                if ended is not None:
                    break
            else:
                return ()
            if isinstance(ended, ReturnedValues):
                return ended.values
            assert isinstance(ended, Successor)
            block, args = ended.block, ended.args
            fargs = None
            if self.followers is not None:
                self.followers.drop(f"a branch to another block ({block}) has no follower rule")


__all__ = ["CompiledKernel", "CompiledCta"]
