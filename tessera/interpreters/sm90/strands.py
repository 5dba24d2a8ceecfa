"""Divergent paths of a CTA, run as cooperatively scheduled strands.

The simulator runs the threads of a CTA in lockstep: one pass of the interpreter executes an op for every
*active* thread at once (the strand's mask). A divergent `scf.if` first runs its then-branch with the threads
that take it and then its else-branch with the others, the way a SIMT machine serialises a branch. That is
enough until a branch waits for threads of the other branch: a producer warp waiting on an "empty" mbarrier
that only the consumer warpgroups (in the else-branch) arrive on, or a `bar_sync` that both branches reach.

So a branch that has to wait hands over. While a strand runs the then-branch of a divergent `scf.if`, the
else-branch is *deferred*; when the strand blocks (a `mbarrier_try_wait_parity` that fails in every active
thread, a `bar_sync` still missing threads, a join), its deferred branches start as new strands, each on its
own Python thread, and the scheduler passes control to a strand that can make progress. Exactly one strand
runs at a time and control changes only when the running strand blocks or ends, so the simulation stays
deterministic. Branches reconverge at the end of their `scf.if` (the parent waits for the deferred branch),
and threads that leave a loop early wait at its end for the others.

If every strand is blocked and none can proceed, the kernel deadlocks: `DeadlockError` names what each strand
waits for.

Every strand runs its ops under `np.errstate(all="ignore")`: an op's overflows, infinities and NaNs are its IEEE
results, as on the GPU, never NumPy warnings or errors (whatever the caller's NumPy settings). Entering it once
per strand instead of at each float op spares some 3 us per op run (`arith`'s float ops rely on it).

The schedule: "round_robin" (the default) passes control to the next strand in creation order that can run.
"adversarial" runs producers as far ahead as the synchronisation allows and the consumers as late: a strand
that has issued a TMA copy (`Strand.producer`) is always preferred, the others are picked in a random order
drawn from a seed (the same seed replays the same interleaving), and control also changes hands at every
mbarrier phase an arrival completes. It exposes at run time what only some interleavings show; the
happens-before checks (`happens_before`) report races whatever the schedule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from xdsl.interpreter import Interpreter
from xdsl.ir import Region

from tessera.interpreters.block_batch import KernelHazardError


class DeadlockError(KernelHazardError):
    """Every thread of the CTA waits for something no thread or in-flight copy will ever do."""


class HazardUnwind(BaseException):
    """Carries a KernelHazardError (`error`) from the op that found it to `run_target_kernel`, which raises it.
    A BaseException, so that xDSL's handler around each op implementation (which reprints the whole module for
    every enclosing region: seconds for a warp-specialized kernel) lets it pass."""

    def __init__(self, error: KernelHazardError):
        super().__init__(str(error))
        self.error = error


class StrandAbort(BaseException):
    """Unwinds a strand whose CTA has failed in another strand (a BaseException, so that no op
    implementation or xDSL error handler intercepts it)."""


@dataclass(eq=False)
class Deferred:
    """The else-branch of a divergent `scf.if`, waiting to run: its region, its threads, and the scope of
    SSA values it can see. `child` is the strand running it once started."""

    region: Region
    mask: np.ndarray
    env: object
    child: Strand | None = None


@dataclass(eq=False)
class Strand:
    """A sequence of ops run in lockstep by a set of threads: the stack of activity masks (the top is the set
    of threads executing the current op), the branches deferred while it runs, and what it waits for."""

    name: str
    interpreter: Interpreter
    masks: list[np.ndarray]
    deferred: list[Deferred] = field(default_factory=list)
    waiting: tuple[Callable[[], bool], Callable[[], tuple[str, str]]] | None = None
    finished: bool = False
    results: tuple = ()
    thread: threading.Thread | None = None
    factory: Callable[[object], Interpreter] | None = None
    """Makes the interpreters of the strand's deferred branches (its CTA's); None: the scheduler's."""
    producer: bool = False
    """It has issued a TMA copy (the adversarial schedule runs it first)."""
    shadow_results: tuple | None = None
    """The followers' values of its region's end (`followers`), for a deferred branch."""

    @property
    def active(self) -> np.ndarray:
        return self.masks[-1]

    def push(self, mask: np.ndarray) -> None:
        self.masks.append(self.active & mask)

    def pop(self) -> None:
        self.masks.pop()


SCHEDULES = ("round_robin", "adversarial")


class Scheduler:
    """Runs the strands of one CTA, one at a time. `make_interpreter(env)` gives the interpreter of a new
    strand whose SSA values start as `env` (the CTA's `program.CompiledCta`, whose one frame its strands
    share); `schedule` is one of `SCHEDULES` (see the module docstring) and `seed` seeds the adversarial one."""

    def __init__(self, make_interpreter: Callable[[object], Interpreter], schedule: str = "round_robin",
                 seed: int = 0):
        self.adversarial = schedule == "adversarial"
        self._random = np.random.default_rng(seed) if self.adversarial else None
        self._cond = threading.Condition()
        self._make_interpreter = make_interpreter
        self.strands: list[Strand] = []
        self.current: Strand | None = None
        self.error: BaseException | None = None
        self._main: Strand | None = None

    # region running
    def run(self, interpreter: Interpreter, mask: np.ndarray, body: Callable[[], tuple]) -> tuple:
        """Run `body` (the kernel) as the main strand on the calling thread, with all threads in `mask`."""
        main = Strand("main", interpreter, [mask])
        self.strands.append(main)
        self.current = self._main = main
        try:
            with np.errstate(all="ignore"):  # IEEE results, never NumPy's warnings (see the module docstring)
                return body()
        except BaseException as error:
            with self._cond:
                if self.error is None:
                    self.error = error
            raise
        finally:
            self._stop_all()

    def run_together(self, bodies: list[tuple[str, Interpreter, np.ndarray, Callable[[], tuple], Callable]]) -> None:
        """Run several CTAs' kernels as strands of this scheduler (a cluster): each entry is (name, interpreter,
        thread mask, body, interpreter factory of its deferred branches). The first runs on the calling
        thread and, once its body is done, waits for the others; a deadlock or hazard in any is raised here."""
        (name, interpreter, mask, body, factory), rest = bodies[0], bodies[1:]
        main = Strand(name, interpreter, [mask], factory=factory)
        self.strands.append(main)
        self.current = self._main = main
        others = []
        for name, interpreter, mask, other_body, factory in rest:
            strand = Strand(name, interpreter, [mask], factory=factory)
            self.strands.append(strand)
            others.append(strand)
            strand.thread = threading.Thread(target=self._run_body, args=(strand, other_body), daemon=True,
                                             name=f"cta-strand-{len(self.strands)}")
            strand.thread.start()
        try:
            body()
            self.block(lambda: all(s.finished for s in others),
                       lambda: ("", f"{name} has ended and waits for the other CTAs of its cluster"))
        except BaseException as error:
            with self._cond:
                if self.error is None:
                    self.error = error
            raise
        finally:
            self._stop_all()

    def _run_body(self, strand: Strand, body: Callable[[], tuple]) -> None:
        """`body` (a CTA of a cluster other than the first, see `run_together`, or a deferred region) on its own
        Python thread, in its turn; its error is reported by the main strand."""
        try:
            with self._cond:
                self._wait_turn(strand)
            with np.errstate(all="ignore"):  # each thread has its own (`run`)
                strand.results = body()
            # the followers' values of a deferred region (`followers`), read by its parent after the join
            strand.shadow_results = getattr(strand.interpreter, "last_shadow", None)
        except StrandAbort:
            return
        except BaseException as error:  # reported by the main strand
            with self._cond:
                if self.error is None:
                    self.error = error
                self.current = self._main
                self._cond.notify_all()
            return
        with self._cond:
            strand.finished = True
            following = self._next_runnable(strand)
            if following is None:
                self.error = DeadlockError(self._deadlock_message(None))
                following = self._main
            self.current = following
            self._cond.notify_all()

    def _stop_all(self) -> None:
        with self._cond:
            if self.error is None and any(not s.finished for s in self.strands if s is not self._main):
                self.error = StrandAbort()
            self._cond.notify_all()
        for strand in self.strands:
            if strand.thread is not None:
                strand.thread.join()

    def _run_deferred(self, strand: Strand, deferred: Deferred) -> None:
        """A deferred region (a warp-specialized branch) on its own Python thread: `_run_body` of the region."""
        self._run_body(strand, lambda: strand.interpreter.run_ssacfg_region(deferred.region, (), "if"))

    # endregion
    # region blocking
    def block(self, ready: Callable[[], bool], describe: Callable[[], tuple[str, str]]) -> None:
        """Wait, in the running strand, until `ready()`: start the strand's deferred branches and let other
        strands run. Raises DeadlockError if no strand can make progress; `describe()` gives the op waiting
        and what it waits for (with the thread), for that message."""
        if ready():
            return
        strand = self.current
        assert strand is not None
        strand.waiting = (ready, describe)
        try:
            self._start_deferred(strand)
            with self._cond:
                while True:
                    following = self._next_runnable(strand)
                    if following is None:
                        raise HazardUnwind(DeadlockError(self._deadlock_message(strand)))
                    if following is strand:
                        return
                    self.current = following
                    self._cond.notify_all()
                    self._wait_turn(strand)
                    if ready():
                        return
        finally:
            strand.waiting = None

    def hand_over(self) -> None:
        """Let the other strands that can run do so (each until it blocks or ends) before the running strand
        goes on: called where the running strand may just have released a waiter."""
        strand = self.current
        if strand is None or len(self.strands) < 2:
            return
        others_ran = []

        def ready() -> bool:
            return bool(others_ran)

        strand.waiting = (ready, lambda: ("", "hands over"))
        try:
            with self._cond:
                following = self._next_runnable(strand)
                if following is None or following is strand:
                    return
                others_ran.append(True)
                self.current = following
                self._cond.notify_all()
                self._wait_turn(strand)
        finally:
            strand.waiting = None

    def join(self, deferred: Deferred, describe: Callable[[], tuple[str, str]]) -> tuple:
        """The results of a deferred branch, waiting for its strand to finish if it was started."""
        child = deferred.child
        assert child is not None
        self.block(lambda: child.finished, describe)
        return child.results

    def _start_deferred(self, strand: Strand) -> None:
        for deferred in strand.deferred:
            if deferred.child is not None:
                continue
            factory = strand.factory or self._make_interpreter
            child = Strand(f"{strand.name}/else{len(self.strands)}", factory(deferred.env), [deferred.mask],
                           factory=strand.factory)
            deferred.child = child
            self.strands.append(child)
            child.thread = threading.Thread(target=self._run_deferred, args=(child, deferred), daemon=True,
                                            name=f"cta-strand-{len(self.strands)}")
            child.thread.start()

    def _wait_turn(self, strand: Strand) -> None:
        while self.current is not strand and self.error is None:
            self._cond.wait()
        if self.error is not None:
            if strand is self._main and not isinstance(self.error, StrandAbort):
                if isinstance(self.error, KernelHazardError):
                    raise HazardUnwind(self.error)
                raise self.error
            raise StrandAbort()

    def _next_runnable(self, after: Strand) -> Strand | None:
        """The first strand after `after` (round robin, `after` itself last) that can run."""
        n = len(self.strands)
        start = self.strands.index(after) if after in self.strands else -1
        order = [self.strands[(start + k) % n] for k in range(1, n + 1)]
        if self.adversarial:
            shuffled = [order[i] for i in self._random.permutation(n)]
            order = [s for s in shuffled if s.producer] + [s for s in shuffled if not s.producer]
        for strand in order:
            if strand.finished:
                continue
            if strand.waiting is None or strand.waiting[0]():
                return strand
        return None

    def _deadlock_message(self, strand: Strand | None) -> str:
        """'OP: deadlock: WHAT; meanwhile OP2: WHAT2; ...', the blocked strand first."""
        waits = [s.waiting[1]() for s in self.strands if s.waiting is not None and s is not strand]
        if strand is not None and strand.waiting is not None:
            waits.insert(0, strand.waiting[1]())
        if not waits:
            return "deadlock: every strand of the CTA is blocked"
        (op, what), rest = waits[0], waits[1:]
        message = f"{op}: deadlock: {what}"
        if rest:
            message += "; meanwhile " + "; ".join(f"{o}: {w}" for o, w in rest)
        return message

    # endregion
