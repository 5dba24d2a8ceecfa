"""Building an xDSL context that knows Tessera's dialects, and parsing, verifying and printing modules with it."""

from __future__ import annotations

import io
from collections.abc import Mapping

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, scf, vector
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.printer import Printer

from tessera.ir.dominance import verify_dominance
from tessera.kernel_abi import verify_kernels
from tessera.ir.parser import TesseraParser


def make_context() -> Context:
    """A context with builtin, func, arith, math, scf, vector and Tessera's own dialects (tile, sm90, the
    StableHLO subset and `tessera`, `dialects/stablehlo.py` and `dialects/attention.py`) loaded."""
    from tessera.dialects.attention import TesseraAttention
    from tessera.dialects.sm90 import SM90
    from tessera.dialects.stablehlo import CHLO, StableHLO
    from tessera.dialects.tile import Tile

    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, scf.Scf, vector.Vector, Tile, SM90, StableHLO,
                    CHLO, TesseraAttention):
        ctx.load_dialect(dialect)
    return ctx


def verify(module: Operation, names: Mapping[SSAValue, str] | None = None) -> None:
    """Tessera's verification of a module, which every entry point runs on its input: SSA dominance (which
    xDSL does not check; `tessera.ir.dominance`), then the op verifiers (each error located at the op that fails,
    `tessera.ir.diagnostics.verify_module`), then the kernel ABI (`tessera.kernel_abi`). Raises a
    VerifyException (DiagnosticException) for the first violation. `names`: the values' names in the source
    (`TesseraParser.value_names`), for the diagnostics."""
    from tessera.ir.diagnostics import verify_module

    # dominance first: it needs only the IR's structure, and says more than xDSL's isolated-from-above check
    verify_dominance(module, names)
    verify_module(module)
    verify_kernels(module)


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse (with `tessera.ir.parser.TesseraParser`) and verify (`verify`) a module. Raises ParseError or
    VerifyException."""
    parser = TesseraParser(make_context(), text, name)
    module = parser.parse_module()
    verify(module, parser.value_names)
    return module


def print_module(module: ModuleOp, generic: bool = False) -> str:
    """The module as MLIR text (custom syntax, or generic with `generic=True`), ending in a newline;
    `parse_module` reads it back to an equal module."""
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=generic).print_op(module)
    stream.write("\n")
    return stream.getvalue()
