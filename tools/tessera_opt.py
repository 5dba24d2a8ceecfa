"""`tessera-opt`: xDSL's `xdsl-opt` driver with Tessera's dialect, passes and kernel checks.

    tessera-opt kernel.mlir -p PIPELINE [--print-op-generic] [-o out.mlir]
    tessera-opt invalid.mlir --split-input-file --verify-diagnostics | filecheck invalid.mlir
    tessera-opt kernel.mlir -p PIPELINE --validate [-d NAME=SIZE ...]

`--validate` first walks the pipeline one pass at a time and runs each kernel at every level it reaches on
generated inputs (`tessera.validate`); the table of levels goes to stderr, a mismatch names the pass and
the first diverging op and exits with status 1.

Bad input is a diagnostic on stderr and exit status 1, never a traceback; set TESSERA_DEBUG=1 to see the
traceback of an internal error.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from tessera.kernel_abi import verify_kernels


class UsageError(Exception):
    """A mistake on the command line or in the files it names (not in the IR): reported without a traceback."""


class _LocatedVerifyException(VerifyException):
    """A VerifyException whose message already shows where in the input it happened."""


class _LocatingParser(Parser):
    """A parser that gives a type or attribute failing its verifier while being parsed (`!tile.tile<4x4xf32,
    register, swizzle 64>`) the source location of its body; xDSL reports such errors without one."""

    def __init__(self, *args, line_offset: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.line_offset = line_offset

    def _parse_dialect_type_or_attribute_body(self, *args, **kwargs):  # private in xDSL 0.74 (pinned)
        start = self.pos
        try:
            return super()._parse_dialect_type_or_attribute_body(*args, **kwargs)
        except _LocatedVerifyException:
            raise
        except VerifyException as e:
            # `start` is the body's `<`; span it up to the matching `>`
            end = self._raw_scan_balanced(start + 1) + 1 if self.lexer.input.content[start] == "<" else start + 1
            span = Span(start, end, self.lexer.input, self.line_offset)
            raise _LocatedVerifyException(span.print_with_context(str(e)).rstrip("\n")) from e


class TesseraOptMain(xDSLOptMain):
    """`xdsl-opt` plus the `tile` dialect, the passes of `tessera.passes.PASSES` and, after parsing each chunk and
    after the pass pipeline, the kernel ABI checks of `tessera.kernel_abi` (skipped with `--disable-verify`).

    Errors surface as exceptions; `main` turns them into diagnostics and exit statuses."""

    @property
    def version_format(self) -> str:  # type: ignore[override]
        # The package's own version: the distribution is named `tessera-compiler`, and a distribution named
        # `tessera` is an unrelated project.
        from tessera import __version__

        return f"tessera-opt {__version__} (xdsl {{xdsl_version}})"

    def register_all_dialects(self) -> None:
        super().register_all_dialects()

        def get_tile():
            from tessera.dialects.tile import Tile

            return Tile

        def get_sm90():
            from tessera.dialects.sm90 import SM90

            return SM90

        self.ctx.register_dialect("tile", get_tile)
        self.ctx.register_dialect("sm90", get_sm90)

    def register_all_targets(self) -> None:
        from tessera.ptx import register

        super().register_all_targets()
        register(self)

    def register_all_passes(self) -> None:
        from tessera.passes import PASSES

        super().register_all_passes()
        for name, factory in PASSES.items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser) -> None:
        from tessera.tools.tessera_run import _parse_size

        super().register_all_arguments(arg_parser)
        arg_parser.add_argument("--validate", action="store_true",
                                help="run every kernel after each pass of the pipeline and compare the levels")
        arg_parser.add_argument("-d", "--dim", dest="dims", action="append", type=_parse_size, default=[],
                                metavar="NAME=SIZE", help="with --validate: a size of the generated inputs")
        arg_parser.add_argument("--seed", type=int, default=0, help="with --validate: seed of the generated inputs")

    def setup_pipeline(self) -> None:
        # Unknown passes and bad options raise ValueError, a malformed spec ArgSpecParseError (a BaseException).
        try:
            super().setup_pipeline()
        except (ValueError, TypeError, ArgSpecParseError) as e:
            raise UsageError(f"invalid pass pipeline '{self.args.passes}': {e}") from e

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except OSError as e:
            raise UsageError(f"cannot read '{self.args.input_file}': {e.strerror or e}") from e
        except ValueError as e:  # an input file extension without a frontend
            raise UsageError(f"{e} (use -f mlir)") from e

    def prepare_output(self) -> IO[str]:
        try:
            return super().prepare_output()
        except OSError as e:
            raise UsageError(f"cannot write '{self.args.output_file}': {e.strerror or e}") from e

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        # Replaces xDSL's "mlir" frontend (the only one): an input of only comments and blanks is an empty
        # module, as in mlir-opt, and types failing their verifier are located (see _LocatingParser).
        try:
            text = chunk.read().decode()
        except UnicodeDecodeError as e:
            raise UsageError(f"{self.get_input_name()} is not UTF-8 text ({e.reason} at byte {e.start})") from e
        implicit_module = not self.args.no_implicit_module
        if implicit_module and all(not line.strip() or line.lstrip().startswith("//") for line in text.splitlines()):
            module = ModuleOp([])
        else:
            parser = _LocatingParser(self.ctx, text, self.get_input_name(), line_offset=start_offset)
            module = parser.parse_module(implicit_module)
        if not self.args.disable_verify:
            # op verifiers first, as the kernel checks assume well-formed ops (the pipeline verifies ops once more)
            module.verify()
            verify_kernels(module)
        return module

    def apply_passes(self, prog: ModuleOp) -> None:
        if self.args.validate:
            self.validate(prog)
        super().apply_passes(prog)
        if self.pipeline.passes and not self.args.disable_verify:
            verify_kernels(prog)


    def validate(self, prog: ModuleOp) -> None:
        """Validate each Tile IR kernel of `prog` (not modified) through the pipeline; raises UsageError with
        the report's verdict on a mismatch."""
        from tessera.kernel_abi import kernels
        from tessera.validate import validate

        sizes = dict(self.args.dims)
        for op in kernels(prog):
            try:
                report = validate(prog, self.args.passes, sizes=sizes, seed=self.args.seed, kernel=op.sym_name.data)
            except ValueError as e:
                raise UsageError(f"--validate: {e}") from e
            print(report.table(), file=sys.stderr)
            if not report.ok:
                raise UsageError(str(report.mismatch))


def _diagnostic(e: BaseException) -> str:
    """The exception's message followed by its notes (xDSL puts the annotated IR of a verifier error there)."""
    return "\n".join([str(e), *getattr(e, "__notes__", ())]).rstrip("\n")


def main(args: Sequence[str] | None = None) -> int:
    """Run tessera-opt; returns the exit status (argparse errors exit with 2 through SystemExit)."""
    try:
        TesseraOptMain(description="Tessera's modular optimizer driver", args=args).run()
    except (ParseError, DiagnosticException) as e:
        print(_diagnostic(e), file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"tessera-opt: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if os.environ.get("TESSERA_DEBUG") == "1":
            traceback.print_exc()
        print(f"tessera-opt: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
