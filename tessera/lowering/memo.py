"""An in-process memo of lowered modules, keyed by their content: `tessera.passes.apply_pipeline` given the same
module (text and source locations) and the same spec twice lowers it once.

Off unless a caller turns it on for a block (`memoized_lowering()`): a process that lowers the same kernels many
times (the test suite, where a kernel is compiled to Target IR, then to PTX, then run at both levels by test
after test) pays for each lowering once. The key is everything the lowered module depends on that the process
can see: the module's generic text, each op's source location (diagnostics name them, and the generic text
omits them), the pipeline spec and whether the default pipeline's fallback may spill
(`tessera.lowering.fallback.spilling_allowed()`). Code it cannot see is not in the key, nor is the ptxas the
fallback asks of a tight kernel (`tessera.lowering.spill_check`): a block that patches a pass, a hardware fact,
the register allocator or the ptxas found must run without the memo (`tests/conftest.py` turns it off for every
test that takes pytest's `monkeypatch`).

A hit replaces the module's ops with a copy of the stored result (never the stored module itself, so callers
may edit what they get) and warns again every warning the lowering gave, in order (the fallback's, say).
A lowering that raises is not stored: the next call lowers again and raises again. Specs that print reports
(`{report=true}`) are not memoized: their output is the point. The memo holds `capacity` modules, the least
recently used dropped first.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from xdsl.dialects.builtin import ModuleOp

CAPACITY = 64
"""Lowered modules kept by default: a few test files' kernels (a flash attention module at Target IR takes about
1 MB of memory)."""


class LoweringMemo:
    """Lowered modules and the warnings their lowering gave, by `memo_key`, least recently used first."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"a lowering memo holds at least one module, got capacity {capacity}")
        self.capacity = capacity
        self.entries: OrderedDict[str, tuple[ModuleOp, tuple]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: str) -> tuple[ModuleOp, tuple] | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key: str, lowered: ModuleOp, caught: tuple) -> None:
        self.entries[key] = (lowered, caught)
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


_ACTIVE: ContextVar[LoweringMemo | None] = ContextVar("tessera_lowering_memo", default=None)


@contextmanager
def memoized_lowering(memo: LoweringMemo | None = None) -> Iterator[LoweringMemo]:
    """`apply_pipeline` memoized for the block, in `memo` (a new one by default); yields the memo."""
    memo = memo if memo is not None else LoweringMemo()
    token = _ACTIVE.set(memo)
    try:
        yield memo
    finally:
        _ACTIVE.reset(token)


@contextmanager
def unmemoized_lowering() -> Iterator[None]:
    """`apply_pipeline` lowers every time for the block, inside a `memoized_lowering()` block too."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def memo_key(module: ModuleOp, spec: str) -> str:
    """The SHA-256 of what the lowering of `module` by `spec` depends on (module docstring)."""
    from tessera.ir import print_module
    from tessera.lowering.fallback import spilling_allowed

    digest = hashlib.sha256()
    digest.update(f"{spec}\0spilling={spilling_allowed()}\0".encode())
    digest.update(print_module(module, True).encode())
    for op in module.walk():
        digest.update(f"\0{op.location}".encode())
    return digest.hexdigest()


def lower_memoized(module: ModuleOp, spec: str, lower: Callable[[ModuleOp], None]) -> None:
    """`lower(module)` (which lowers `module` in place by `spec`), or its result from the active memo."""
    memo = _ACTIVE.get()
    if memo is None or "report" in spec:
        lower(module)
        return
    key = memo_key(module, spec)
    entry = memo.get(key)
    if entry is not None:
        memo.hits += 1
        stored, caught = entry
        _replace(module, stored.clone())
        warn_again(caught)
        return
    memo.misses += 1
    caught, _ = caught_warnings(lambda: lower(module))
    memo.put(key, module.clone(), caught)


def caught_warnings(run: Callable[[], object], kept: tuple[type[Exception], ...] = ()) -> tuple[tuple, Exception | None]:
    """`run()`, its warnings recorded (every one, whatever the filters) and then warned as the caller's filters
    say (an "error" filter raises there); returns them, to be warned again (`warn_again`) where its result is
    reused, and the exception of a type in `kept` that `run()` raised (None if it returned; any other
    propagates)."""
    caught: list = []
    error = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run()
            except kept as refusal:
                error = refusal
    finally:  # outside the block the caller's filters apply
        warn_again(tuple(caught))
    return tuple(caught), error


def warn_again(caught: tuple) -> None:
    """Warn each recorded warning of `caught` again, in order, as it was first warned."""
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _replace(module: ModuleOp, lowered: ModuleOp) -> None:
    """Give `module` the ops and attributes of `lowered`."""
    from tessera.lowering.fallback import take_body

    take_body(module, lowered)
    module.attributes.clear()
    module.attributes.update(lowered.attributes)
