"""`scf` and `func` on a CTA whose threads may diverge.

The running strand's mask (see `strands`) says which threads execute. A condition that differs between the
active threads splits them: `scf.if` runs each branch with the threads that take it (the else-branch deferred
while the then-branch runs, so that it can start as its own strand if the then-branch has to wait for it) and
merges the results per thread; `scf.for` with per-thread bounds and `scf.while` keep iterating while any
active thread continues, the others keeping the values they left with.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func, scf
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)

from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.sm90.registers import dtype_of, row_mask
from tessera.interpreters.sm90.strands import Deferred

MAX_WHILE_ITERATIONS = 100_000
"""An `scf.while` still looping after this many iterations is reported, naming the op and a thread (a spin loop
on something the simulator cannot see change; a wait on an mbarrier that no one will complete is a deadlock,
reported as soon as nothing else can run). The suite's kernels loop at most about 110 times; an empty endless
loop reaches the limit in about 8 seconds."""


@register_impls
class DivergentControlFunctions(InterpreterFunctions):
    def __init__(self, cta: CtaState):
        super().__init__()
        self.cta = cta

    def merge(self, mask: np.ndarray, new, old):
        """Per thread, `new` where `mask` else `old`."""
        if new is old:
            return new
        if isinstance(new, np.ndarray) and isinstance(old, np.ndarray):
            return self.cta.wgmma.merged(np.where(row_mask(mask, new), new, old), new, old)
        raise NotImplementedError(f"threads that took different paths hold different {type(new).__name__} values")

    def _run(self, interpreter: Interpreter, region, args: tuple, mask: np.ndarray, name: str) -> PythonValues:
        strand = self.cta.strand
        strand.push(mask)
        try:
            return interpreter.run_ssacfg_region(region, args, name)
        finally:
            strand.pop()

    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: PythonValues) -> PythonValues:
        lb, ub, step = (np.asarray(a).astype(np.int64) for a in args[:3])
        values = tuple(args[3:])
        active = self.cta.active
        bad = active & (step <= 0)
        if bad.any():
            self.cta.fail(op, "loop step must be positive", bad)
        trips = np.where(active, np.maximum(0, -((lb - ub) // np.maximum(step, 1))), 0)
        count = int(trips.max(initial=0))
        uniform = bool((trips[active] == count).all())
        iv_dtype = dtype_of(op.body.block.args[0].type)
        for i in range(count):
            iv = (lb + i * step).astype(iv_dtype)
            if uniform:
                values = interpreter.run_ssacfg_region(op.body, (iv, *values), "for")
                continue
            taking = trips > i
            new = self._run(interpreter, op.body, (iv, *values), taking, "for")
            values = tuple(self.merge(taking, n, o) for n, o in zip(new, values))
        return values

    @impl(scf.WhileOp)
    def run_while(self, interpreter: Interpreter, op: scf.WhileOp, args: PythonValues) -> PythonValues:
        values, results = tuple(args), None
        looping = self.cta.active.copy()
        for _ in range(MAX_WHILE_ITERATIONS):
            condition, *forwarded = self._run(interpreter, op.before_region, values, looping, "while_before")
            staying = looping & condition
            leaving = looping & ~condition
            results = forwarded if results is None else [self.merge(leaving, f, r) for f, r in zip(forwarded, results)]
            if not staying.any():
                return tuple(results)
            values = self._run(interpreter, op.after_region, tuple(forwarded), staying, "while_after")
            looping = staying
        self.cta.fail(op, f"is still looping after {MAX_WHILE_ITERATIONS} iterations", looping)

    @impl(scf.IfOp)
    def run_if(self, interpreter: Interpreter, op: scf.IfOp, args: PythonValues) -> PythonValues:
        condition = np.asarray(args[0], bool)
        strand = self.cta.strand
        active = strand.active
        then_threads, else_threads = active & condition, active & ~condition
        has_else = bool(op.false_region.blocks)
        if not else_threads.any() or not has_else:
            if not then_threads.any():
                return ()
            return self._run(interpreter, op.true_region, (), condition, "if_then")
        if not then_threads.any():
            return self._run(interpreter, op.false_region, (), ~condition, "if_else")
        # Divergent: the else-branch waits, in case the then-branch blocks on its threads. It sees the SSA
        # scope of the if (the interpreter's current scope).
        deferred = Deferred(op.false_region, else_threads, interpreter._ctx)  # noqa: SLF001
        strand.deferred.append(deferred)
        try:
            then_values = self._run(interpreter, op.true_region, (), condition, "if_then")
        finally:
            strand.deferred.remove(deferred)
        if deferred.child is None:
            else_values = self._run(interpreter, op.false_region, (), ~condition, "if_else")
        else:
            else_values = self.cta.scheduler.join(deferred, lambda: self.cta.describe(
                op, "waits at the end of the scf.if for the threads of its else-branch", then_threads))
        return tuple(self.merge(condition, t, e) for t, e in zip(then_values, else_values))

    @impl_terminator(scf.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: scf.YieldOp, args: PythonValues):
        return ReturnedValues(args), ()

    @impl_terminator(scf.ConditionOp)
    def run_condition(self, interpreter: Interpreter, op: scf.ConditionOp, args: PythonValues):
        return ReturnedValues(args), ()

    @impl_terminator(func.ReturnOp)
    def run_return(self, interpreter: Interpreter, op: func.ReturnOp, args: PythonValues):
        return ReturnedValues(args), ()
