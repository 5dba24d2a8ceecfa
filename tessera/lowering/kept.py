"""Lowered kernels kept across interpreter calls: `tessera.attention(..., level="target" | "ptx")` called again
for the same kernel lowers nothing a second time, as the GPU path compiles nothing a second time
(`tessera.runtime.compiler.compile_kernel` keeps each compiled kernel by its configuration).

A builder's entry point keeps the Tile IR modules it builds, each under a key of its own that says everything
the module is made of (`tessera.runtime.compiler.built_module`: the kernel configuration;
`tessera.runtime.flex`: the modifiers' fingerprints and the builder's options), and marks each one kept with
that key (`mark_kept`); a kept module is shared and never changed. `tessera.launch` and `tessera.interpret` at
levels "target" and "ptx" (`tessera.api.run_interpreted`) take the lowering of a kept module from here
(`kept_lowering`) instead of lowering a copy again. A module no one marked (a user's) is lowered on every call,
as before: the process-wide memo (`tessera.lowering.memo`) stays off by default.

The key of a lowering: the kept module's key, the pipeline spec, the variant the launch's sizes select (the
entries of `tile.specialize` they meet: the shape class), whether the default pipeline's fallback may spill
(`tessera.lowering.fallback.spilling_allowed()`) and the newest ptxas found (which the fallback asks of a tight
kernel, `tessera.lowering.spill_check`). Code the key cannot see is not in it, as for the memo: a block that
patches a pass, a hardware fact or the register allocator runs inside `unkept_lowering()`
(`tests/conftest.py` does so for every test that takes `monkeypatch`).

Kept per lowering (`KeptLowering`): the lowered Target IR module, the warnings its lowering gave (the
fallback's: warned again, in order, on every call that takes it, as the memo does) and what each level makes of
it, made once (`derived`): the Target IR kernel and its register allocation (level "target": the CTA simulator
reads them and writes nothing into them, and keeps its register layout on the allocation), the PTX text and the
host description it is launched by (level "ptx": the PTX executor keeps the parsed text and its decoded program
itself, by the text, `tessera.interpreters.ptx.launcher`). A lowering refused for registers
(`tessera.regalloc.RegisterBudgetError`, the fallback's `NoConfigurationFitsError` among them) is kept as that
refusal, raised again with its warnings, so that a caller that retries smaller configurations on it
(`tessera.runtime.flex`: smaller key blocks, a head split) does not lower the refused one again on every call;
any other error is not kept: the next call lowers again and raises again. `CAPACITY` lowerings are kept, the
least recently used dropped first.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from xdsl.dialects.builtin import ModuleOp

CAPACITY = 16
"""Lowerings kept: a flash attention module at Target IR takes about 1 MB of memory."""


class KeptLowering:
    """One kept lowering: the lowered module (shared: not to be changed), the warnings its lowering gave, and
    what the levels made of it (`derived`); or, `module` None, the register budget's refusal it raised."""

    def __init__(self, module: ModuleOp | None, caught: tuple, refusal: Exception | None = None) -> None:
        self.module = module
        self.caught = caught
        self.refusal = refusal
        self._derived: dict[Hashable, object] = {}

    def derived(self, key: Hashable, make: Callable[[], object]) -> object:
        """`make()` (of the lowered module), made at the first call with `key` and kept."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]


_KEPT: OrderedDict[Hashable, KeptLowering] = OrderedDict()
_MARKS: dict[int, tuple[weakref.ref, Hashable]] = {}
"""id(kept module) -> (a weak reference to it, its key); an entry goes with its module."""
_ON: ContextVar[bool] = ContextVar("tessera_kept_lowering", default=True)


def mark_kept(module: ModuleOp, key: Hashable) -> ModuleOp:
    """Mark `module` kept under `key` (hashable, naming everything the module is made of) and return it: its
    lowerings are kept from now on. The module must not be changed after."""
    _MARKS[id(module)] = (weakref.ref(module, lambda _, i=id(module): _MARKS.pop(i, None)), key)
    return module


def mark_built(built, key: Hashable):
    """`built` (a builder's result: a module, or kernels with `.modules`, a backward's three) with each of its
    modules marked kept (`mark_kept`) under `key` and its position."""
    modules = [built] if isinstance(built, ModuleOp) else getattr(built, "modules", ())
    for i, module in enumerate(modules):
        mark_kept(module, (key, i))
    return built


def kept_key(module: ModuleOp) -> Hashable | None:
    """The key `module` was marked kept under, or None."""
    mark = _MARKS.get(id(module))
    return mark[1] if mark is not None and mark[0]() is module else None


@contextmanager
def unkept_lowering() -> Iterator[None]:
    """Every kept module lowered afresh for the block, and nothing kept."""
    token = _ON.set(False)
    try:
        yield
    finally:
        _ON.reset(token)


def kept_lowering(module: ModuleOp, spec: str, variant: Hashable,
                  lower: Callable[[], ModuleOp]) -> KeptLowering | None:
    """The kept lowering of `module` (a kept module, `mark_kept`) by `spec` for the launch variant `variant`
    (module docstring), made by `lower()` (which returns the lowered module) where none is kept yet; None where
    `module` is not kept or keeping is off (`unkept_lowering`): the caller lowers it itself."""
    from tessera.lowering.memo import caught_warnings, warn_again
    from tessera.regalloc import RegisterBudgetError

    key = kept_key(module)
    if key is None or not _ON.get():
        return None
    key = (key, spec, variant, *_lowering_inputs())
    entry = _KEPT.get(key)
    if entry is not None:
        _KEPT.move_to_end(key)
        warn_again(entry.caught)
    else:
        lowered: list[ModuleOp] = []
        caught, refusal = caught_warnings(lambda: lowered.append(lower()), (RegisterBudgetError,))
        entry = _KEPT[key] = KeptLowering(lowered[0] if lowered else None, caught, refusal)
        while len(_KEPT) > CAPACITY:
            _KEPT.popitem(last=False)
    if entry.refusal is not None:
        raise entry.refusal.with_traceback(None)
    return entry


def _lowering_inputs() -> tuple:
    """What a lowering reads besides the module and spec: whether the fallback may spill, and the newest ptxas
    found (path and version; None without one)."""
    from tessera import toolchain
    from tessera.lowering.fallback import spilling_allowed

    found = toolchain.find_all_ptxas()
    return spilling_allowed(), (found[0].path, found[0].version) if found else None


def forget_kept() -> None:
    """Drop every kept lowering (the marks stay); for tests."""
    _KEPT.clear()
