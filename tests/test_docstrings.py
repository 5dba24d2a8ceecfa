"""Every op and attribute of Tessera's dialects, and every pass, carries its own docstring (STYLE.md: the
semantics, the invariants, what it refuses), and every registered pass is the one its name says.

A class's `__doc__` is not inherited, so an op written without one fails here even when its base class has
one. The check reads the dialects as `tessera.ir.make_context` loads them, the passes as `tessera.passes.PASSES`
registers them, and every `ModulePass` defined in a module under `passes/` (registered or not)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from xdsl.passes import ModulePass

import tessera.passes
from tessera.dialects.attention import TesseraAttention
from tessera.dialects.sm90 import SM90
from tessera.dialects.stablehlo import CHLO, StableHLO
from tessera.dialects.tile import Tile
from tessera.passes import PASSES

DIALECTS = (Tile, SM90, StableHLO, CHLO, TesseraAttention)


def own_docstring(cls: type) -> str:
    return (cls.__dict__.get("__doc__") or "").strip()


def pass_classes() -> list[type[ModulePass]]:
    """Every ModulePass subclass defined in a module of the `tessera.passes` package."""
    found = []
    for info in pkgutil.walk_packages(tessera.passes.__path__, "tessera.passes."):
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, ModulePass) and obj.__module__ == module.__name__]
    return found


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_every_op_and_attribute_has_a_docstring(dialect):
    classes = [*dialect.operations, *dialect.attributes]
    assert classes
    assert [c.__name__ for c in classes if not own_docstring(c)] == []


def test_every_pass_has_a_docstring_and_its_registered_name():
    for name, factory in PASSES.items():
        cls = factory()
        assert cls.name == name and own_docstring(cls), name
    classes = pass_classes()
    assert {factory() for factory in PASSES.values()} <= set(classes)
    assert [c.__name__ for c in classes if not own_docstring(c)] == []
