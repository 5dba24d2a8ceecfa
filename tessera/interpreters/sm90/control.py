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

from tessera.interpreters.limits import MAX_LOOP_TRIPS
from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.sm90.follower_rules import pure_if
from tessera.interpreters.sm90.follower_views import FollowerDropout
from tessera.interpreters.sm90.registers import dtype_of, row_mask
from tessera.interpreters.sm90.strands import Deferred
from tessera.interpreters.truth import all_set, any_set

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

    def _run(self, interpreter: Interpreter, region, args: tuple, mask: np.ndarray, name: str,
             fargs: tuple | None = None) -> PythonValues:
        strand = self.cta.strand
        strand.push(mask)
        try:
            if fargs is None:
                return interpreter.run_ssacfg_region(region, args, name)
            return interpreter.run_ssacfg_region(region, args, name, fargs)
        finally:
            strand.pop()

    # region followers (`followers`): their values go the leader's way, checked to agree with it
    @staticmethod
    def _followers(interpreter: Interpreter):
        """The live followers of the CTA and the followers' operands of the op starting now, or (None, None)."""
        followers = getattr(interpreter, "followers", None)
        if followers is None or followers.dropped is not None:
            return None, None
        return followers, interpreter.fargs

    @staticmethod
    def _followed(interpreter: Interpreter, followers) -> tuple | None:
        """The followers' values of the region that just ended (None once they have dropped out)."""
        return interpreter.last_shadow if followers is not None and followers.dropped is None else None

    @staticmethod
    def _follower_merge(mask: np.ndarray, new, old):
        """`merge` for the followers' values [F, T, ...] with the leader's mask."""
        if new is old:
            return new
        return np.where(row_mask(mask, new[0])[None], new, old)

    @staticmethod
    def _agree(followers, op, leader, values) -> bool:
        """Whether any follower still follows after comparing its operand with the leader's (those whose
        operand differs leave the batch, `Followers.same`)."""
        try:
            followers.same(op, leader, values)
        except FollowerDropout as dropout:
            followers.drop(str(dropout))
        return followers.dropped is None

    # endregion
    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: PythonValues) -> PythonValues:
        followers, fargs = self._followers(interpreter)
        if followers is not None and not all(self._agree(followers, op, a, f) for a, f in zip(args[:3], fargs[:3])):
            followers = None
        fvalues = tuple(fargs[3:]) if followers is not None else None
        lb, ub, step = (np.asarray(a).astype(np.int64) for a in args[:3])
        values = tuple(args[3:])
        active = self.cta.active
        bad = active & (step <= 0)
        if any_set(bad):
            self.cta.fail(op, "loop step must be positive", bad)
        trips = np.where(active, np.maximum(0, -((lb - ub) // np.maximum(step, 1))), 0)
        count = int(trips.max(initial=0))
        if count > MAX_LOOP_TRIPS:
            self.cta.fail(op, f"would run {count} trips, more than the interpreters' limit of {MAX_LOOP_TRIPS} "
                              "(tessera.interpreters.limits.MAX_LOOP_TRIPS)", trips > MAX_LOOP_TRIPS)
        uniform = all_set(trips[active] == count)
        iv_dtype = dtype_of(op.body.block.args[0].type)
        for i in range(count):
            iv = (lb + i * step).astype(iv_dtype)
            body_fargs = None if fvalues is None else (followers.broadcast(iv), *fvalues)
            if uniform:
                values = (interpreter.run_ssacfg_region(op.body, (iv, *values), "for") if body_fargs is None
                          else interpreter.run_ssacfg_region(op.body, (iv, *values), "for", body_fargs))
                fvalues = self._followed(interpreter, followers) if fvalues is not None else None
                continue
            taking = trips > i
            new = self._run(interpreter, op.body, (iv, *values), taking, "for", body_fargs)
            values = tuple(self.merge(taking, n, o) for n, o in zip(new, values))
            if fvalues is not None:
                fnew = self._followed(interpreter, followers)
                fvalues = None if fnew is None else tuple(self._follower_merge(taking, n, o)
                                                          for n, o in zip(fnew, fvalues))
        if followers is not None and fvalues is not None:
            followers.control_results = fvalues
        return values

    @impl(scf.WhileOp)
    def run_while(self, interpreter: Interpreter, op: scf.WhileOp, args: PythonValues) -> PythonValues:
        followers, fargs = self._followers(interpreter)
        values, results = tuple(args), None
        fvalues, fresults = (tuple(fargs) if followers is not None else None), None
        looping = self.cta.active.copy()
        for _ in range(MAX_WHILE_ITERATIONS):
            condition, *forwarded = self._run(interpreter, op.before_region, values, looping, "while_before",
                                              fvalues)
            staying = looping & condition
            leaving = looping & ~condition
            results = forwarded if results is None else [self.merge(leaving, f, r) for f, r in zip(forwarded, results)]
            if fvalues is not None:
                ended = self._followed(interpreter, followers)
                if ended is None or not self._agree(followers, op, condition, ended[0]):
                    fvalues = None
                else:
                    fforwarded = ended[1:]
                    fresults = fforwarded if fresults is None else [self._follower_merge(leaving, f, r)
                                                                    for f, r in zip(fforwarded, fresults)]
            if not any_set(staying):
                if fvalues is not None:
                    followers.control_results = tuple(fresults)
                return tuple(results)
            values = self._run(interpreter, op.after_region, tuple(forwarded), staying, "while_after",
                               tuple(fforwarded) if fvalues is not None else None)
            if fvalues is not None:
                fvalues = self._followed(interpreter, followers)
            looping = staying
        self.cta.fail(op, f"is still looping after {MAX_WHILE_ITERATIONS} iterations", looping)

    @impl(scf.IfOp)
    def run_if(self, interpreter: Interpreter, op: scf.IfOp, args: PythonValues) -> PythonValues:
        followers, fargs = self._followers(interpreter)
        fcondition = None
        if followers is not None:
            if followers.differ(args[0], fargs[0]) and pure_if(interpreter, op):
                fcondition = fargs[0]  # each follower takes its own way (`_both_ways`)
            elif not self._agree(followers, op, args[0], fargs[0]):
                followers = None
        values = self._run_if(interpreter, op, args, followers)
        if fcondition is not None and followers.dropped is None:
            self._both_ways(interpreter, op, followers, np.asarray(args[0], bool), fcondition)
        return values

    def _run_if(self, interpreter: Interpreter, op: scf.IfOp, args: PythonValues, followers) -> PythonValues:
        follow = () if followers is not None else None  # the branches have no arguments
        condition = np.asarray(args[0], bool)
        strand = self.cta.strand
        active = strand.active
        then_threads, else_threads = active & condition, active & ~condition
        has_else = bool(op.false_region.blocks)
        if not np.count_nonzero(else_threads) or not has_else:
            if not np.count_nonzero(then_threads):
                if followers is not None:
                    followers.control_results = ()
                return ()
            values = self._run(interpreter, op.true_region, (), condition, "if_then", follow)
            return self._follow_branch(interpreter, followers, values)
        if not np.count_nonzero(then_threads):
            values = self._run(interpreter, op.false_region, (), ~condition, "if_else", follow)
            return self._follow_branch(interpreter, followers, values)
        # Divergent: the else-branch waits, in case the then-branch blocks on its threads. It sees the SSA
        # scope of the if (the interpreter's current scope).
        deferred = Deferred(op.false_region, else_threads, interpreter._ctx)  # noqa: SLF001
        strand.deferred.append(deferred)
        try:
            then_values = self._run(interpreter, op.true_region, (), condition, "if_then", follow)
            fthen = self._followed(interpreter, followers)
        finally:
            strand.deferred.remove(deferred)
        if deferred.child is None:
            else_values = self._run(interpreter, op.false_region, (), ~condition, "if_else", follow)
            felse = self._followed(interpreter, followers)
        else:
            else_values = self.cta.scheduler.join(deferred, lambda: self.cta.describe(
                op, "waits at the end of the scf.if for the threads of its else-branch", then_threads))
            felse = deferred.child.shadow_results if followers is not None and followers.dropped is None else None
        if fthen is not None and felse is not None and followers.dropped is None:
            followers.control_results = tuple(self._follower_merge(condition, t, e) for t, e in zip(fthen, felse))
        return tuple(self.merge(condition, t, e) for t, e in zip(then_values, else_values))

    def _both_ways(self, interpreter: Interpreter, op: scf.IfOp, followers, leader: np.ndarray,
                   condition: np.ndarray) -> None:
        """The followers' results of a pure `scf.if` (`pure_if`) whose condition differs from the leader's: each
        branch the leader did not run is computed for the followers alone (`Followers.region`), and each
        follower's thread takes the values of its own branch."""
        ran = followers.control_results if len(op.results) else ()
        then_values = else_values = None
        active = self.cta.strand.active
        if any_set(active & leader):
            then_values = ran if not any_set(active & ~leader) or not op.false_region.blocks else None
        elif op.false_region.blocks:
            else_values = ran
        try:  # (a branch without results is run too: its ops are checked)
            if then_values is None:
                then_values = followers.region(interpreter, op.true_region)
            if else_values is None:
                else_values = followers.region(interpreter, op.false_region) if op.false_region.blocks else ()
        except FollowerDropout as dropout:
            followers.drop(str(dropout))
            return
        rows = condition.reshape(condition.shape[:2])
        followers.control_results = tuple(np.where(rows.reshape(rows.shape + (1,) * (t.ndim - 2)), t, e)
                                          for t, e in zip(then_values, else_values))

    def _follow_branch(self, interpreter: Interpreter, followers, values: PythonValues) -> PythonValues:
        """The values of an scf.if that all threads took one way: the followers' are their branch's."""
        ended = self._followed(interpreter, followers)
        if ended is not None:
            followers.control_results = tuple(ended)
        return values

    @impl_terminator(scf.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: scf.YieldOp, args: PythonValues):
        return ReturnedValues(args), ()

    @impl_terminator(scf.ConditionOp)
    def run_condition(self, interpreter: Interpreter, op: scf.ConditionOp, args: PythonValues):
        return ReturnedValues(args), ()

    @impl_terminator(func.ReturnOp)
    def run_return(self, interpreter: Interpreter, op: func.ReturnOp, args: PythonValues):
        return ReturnedValues(args), ()
