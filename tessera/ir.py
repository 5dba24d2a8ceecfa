"""Building an xDSL context that knows Tessera's dialects, and parsing/printing modules with it."""

from __future__ import annotations

import io

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, scf, vector
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from tessera.kernel_abi import verify_kernels


def make_context() -> Context:
    """A context with builtin, func, arith, math, scf, vector and Tessera's own dialects (tile, sm90) loaded."""
    from tessera.dialects.sm90 import SM90
    from tessera.dialects.tile import Tile

    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, scf.Scf, vector.Vector, Tile, SM90):
        ctx.load_dialect(dialect)
    return ctx


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify a module (ops, then kernel signatures), every op carrying its source location (see
    `tessera.diagnostics`). Raises ParseError or VerifyException (located at the op that fails)."""
    from tessera.diagnostics import LocatingParser, verify_module

    module = LocatingParser(make_context(), text, name).parse_module()
    verify_module(module)
    verify_kernels(module)
    return module


def print_module(module: ModuleOp, generic: bool = False) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=generic).print_op(module)
    stream.write("\n")
    return stream.getvalue()
