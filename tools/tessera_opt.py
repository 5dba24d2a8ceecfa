"""`tessera-opt`: xDSL's `xdsl-opt` driver with Tessera's dialect, passes and kernel checks.

    tessera-opt kernel.mlir -p PIPELINE [--print-op-generic] [-o out.mlir]
    tessera-opt invalid.mlir --split-input-file --verify-diagnostics | filecheck invalid.mlir
    tessera-opt kernel.mlir -p PIPELINE --validate [-d NAME=SIZE ...]
    tessera-opt --help          (Tessera's passes, pipelines and targets; --all-passes: xDSL's too)

`--validate` first walks the pipeline one pass at a time and runs each kernel at every level it reaches on
generated inputs (`tessera.validate`); the table of levels goes to stderr, a mismatch names the pass and
the first diverging op and exits with status 1.

Bad input is a diagnostic on stderr and exit status 1, never a traceback; set TESSERA_DEBUG=1 to see the
traceback of an internal error.
"""

from __future__ import annotations

import inspect
import io
import os
import re
import sys
import traceback
import time
import warnings
from collections.abc import Callable, Sequence
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from tessera.ir.diagnostics import (
    LEVEL_NAMES,
    LocatedVerifyException,
    TesseraWarning,
    functions_by_level,
    internal_error_text,
    located,
    verify_module,
    with_context,
)
from tessera.ir.dominance import verify_dominance
from tessera.ir import verify as verify_ir
from tessera.kernel_abi import verify_kernels
from tessera.tools.arguments import UsageError, parse_seed, parse_size
from tessera.tools.streams import (
    STDIN_NAME,
    OutputFile,
    quiet_broken_pipe,
    read_standard_input,
    reads_standard_input,
)
from tessera.ir.parser import TesseraParser


def check_target_options(spec_text: str, targets: dict) -> None:
    """Raises UsageError where `-t NAME{OPTIONS}` gives options its target does not take (`-t "ptx{bogus=1}"`,
    `-t "ptx{fold_epilogue=maybe}"`) or names a target whose module is not installed (`-t llvm` without
    llvmlite), before any pass runs: xDSL would find out only when it prints the result, as an internal error."""
    spec = parse_spec(spec_text)
    entry = targets.get(spec.name)
    if entry is None or inspect.signature(entry).parameters:  # unknown (argparse said so) or a legacy printer
        return
    try:
        target = entry()
    except ImportError as e:  # xDSL's `llvm` target imports llvmlite, which xDSL does not depend on
        raise UsageError(f"target '{spec.name}' needs the Python module '{e.name}', which is not installed") from e
    try:
        target.from_spec(spec)
    except ValueError as e:
        raise UsageError(f"invalid target '{spec_text}': {e}") from e


def check_output_target(target: str, module: ModuleOp) -> None:
    """Raises a located LocatedVerifyException where `-t TARGET` is one of xDSL's other targets (`wgsl`, `csl`,
    `riscv-asm`, ...; `tessera.tools.opt_help.TESSERA_TARGETS` are Tessera's) and `module` holds Tile IR or
    Target IR: those printers know only their own dialects, and print nothing of a kernel (`-t wgsl`, `-t wat`,
    with exit status 0) or fail inside xDSL."""
    from tessera.tools.opt_help import TESSERA_TARGETS

    if target in TESSERA_TARGETS:
        return
    for level, functions in functions_by_level(module).items():
        if functions:
            raise LocatedVerifyException(located(functions[0], (
                f"-t {target} prints xDSL's own dialects, not {LEVEL_NAMES[level]}: use -t mlir, or -t ptx for "
                "a Target IR kernel")))


class PassCrash(Exception):
    """An unexpected exception inside a pass: an internal error, reported with the pass's name."""


def register_dialects(ctx: Context) -> None:
    """Register (lazily) every xDSL dialect and Tessera's own (tile, sm90, the StableHLO subset, tessera):
    what tessera-opt parses."""
    from xdsl.universe import Universe

    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, factory)

    def get_tile():
        from tessera.dialects.tile import Tile

        return Tile

    def get_sm90():
        from tessera.dialects.sm90 import SM90

        return SM90

    ctx.register_dialect("tile", get_tile)
    ctx.register_dialect("sm90", get_sm90)
    ctx.register_dialect("stablehlo", _stablehlo)
    ctx.register_dialect("chlo", _chlo)
    ctx.register_dialect("tessera", _tessera)


def _stablehlo():
    from tessera.dialects.stablehlo import StableHLO

    return StableHLO


def _chlo():
    from tessera.dialects.stablehlo import CHLO

    return CHLO


def _tessera():
    from tessera.dialects.attention import TesseraAttention

    return TesseraAttention


def opt_context() -> Context:
    """A context that parses what tessera-opt parses (tessera-run reads its input with it)."""
    ctx = Context()
    register_dialects(ctx)
    return ctx


_PTX_HEADER = re.compile(r"\s*(//[^\n]*\n\s*)*\.version\s")
"""A PTX module's first line (after comments): `.version 8.0`."""


def load_module(ctx: Context, text: str, name: str, line_offset: int = 0, implicit_module: bool = True,
                verify: bool = True) -> ModuleOp:
    """Parse `text` (named `name` in diagnostics) with Tessera's parser (`tessera.ir.parser`: source locations on
    every op, hex float literals as bit patterns, linear-time lexing), then verify it as every entry point
    does (`tessera.ir.verify`: dominance, ops located at the one that fails, the kernel ABI). An input of only
    comments and blanks is an empty module, as in mlir-opt. Raises ParseError or VerifyException, and
    UsageError for PTX text (a `.version` line first), which the MLIR parser would call a malformed ellipsis."""
    if implicit_module and all(not line.strip() or line.lstrip().startswith("//") for line in text.splitlines()):
        return ModuleOp([])
    if _PTX_HEADER.match(text):  # xDSL would say "Expected three consecutive '.' for an ellipsis"
        raise UsageError(f"{name} holds PTX (it starts with .version), not MLIR: run PTX with tessera-run on a "
                         "file named *.ptx (the PTX executor)")
    parser = TesseraParser(ctx, text, name, line_offset=line_offset)
    module = parser.parse_module(implicit_module)
    if verify:
        verify_ir(module, parser.value_names)
    return module


def parse_pipeline(spec: str) -> PassPipeline:
    """The pass pipeline `spec`, parsed by `tessera.passes.parse_pipeline` (the one parser); its PipelineError
    becomes a UsageError with the same message (the command line was wrong, exit 1)."""
    from tessera.passes import PipelineError
    from tessera.passes import parse_pipeline as parse

    try:
        return parse(spec)
    except PipelineError as e:
        raise UsageError(str(e)) from None


def run_pipeline(pipeline: PassPipeline, ctx: Context, module: ModuleOp, verify: bool = True,
                 after_pass: Callable[[ModulePass, ModuleOp], None] | None = None) -> None:
    """Apply `pipeline` to `module`, each pass by `tessera.passes.apply_pass` (which refuses a module of the
    other level than the pass transforms, `tessera.ir.diagnostics.check_pass_input`); after each pass, verify the ops (located) and, after the
    last, the kernel ABI. An exception that is not a diagnostic becomes a PassCrash naming the pass. The default
    pipeline falls back to smaller configurations where the kernels' registers do not fit
    (`tessera.lowering.fallback`)."""
    from tessera.passes import fallback_ladder, falls_back

    if falls_back(pipeline.passes):
        from tessera.lowering.fallback import apply_with_fallback  # imports the register allocator and sm90

        apply_with_fallback(module, fallback_ladder(), lambda spec, m: _run_passes(parse_pipeline(spec), ctx, m, verify, after_pass))
        return
    _run_passes(pipeline, ctx, module, verify, after_pass)


def _run_passes(pipeline: PassPipeline, ctx: Context, module: ModuleOp, verify: bool,
                after_pass: Callable[[ModulePass, ModuleOp], None] | None) -> None:
    from tessera.passes import apply_pass

    for pass_ in pipeline.passes:
        try:
            apply_pass(pass_, module, ctx)  # refuses input of the other level first
        except (DiagnosticException, ParseError, UsageError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise PassCrash(f"pass '{pass_.name}': {internal_error_text(e).removeprefix('internal error: ')}") from e
        if verify:
            verify_module(module)
        if after_pass is not None:
            after_pass(pass_, module)
    if pipeline.passes and verify:
        verify_dominance(module)
        verify_kernels(module)


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
        register_dialects(self.ctx)

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
        from tessera.tools.opt_help import add_help_listings

        # xDSL's parser takes its name from sys.argv[0]: `python -m tessera.tools.tessera_opt` would be tessera_opt.py
        arg_parser.prog = "tessera-opt"
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument("--validate", action="store_true",
                                help="run every kernel after each pass of the pipeline and compare the levels")
        arg_parser.add_argument("-d", "--dim", dest="dims", action="append", type=parse_size, default=[],
                                metavar="NAME=SIZE", help="with --validate: a size of the generated inputs")
        arg_parser.add_argument("--seed", type=parse_seed, default=0, help="with --validate: seed of the generated inputs")
        arg_parser.add_argument("--rewrite-report", action="store_true",
                                help="print what rewrite-attention found, what it became and why near misses were "
                                     "not rewritten (on stderr)")
        add_help_listings(arg_parser, self.available_passes, self.available_targets)

    def setup_pipeline(self) -> None:
        self.pipeline = parse_pipeline(self.args.passes)
        check_target_options(self.args.target, self.available_targets)

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        # No file or `-` is standard input (`tessera.tools.streams`: a closed one is a UsageError).
        if reads_standard_input(self.args.input_file):
            return io.BytesIO(read_standard_input()), "mlir"
        return super().get_input_stream()

    def get_input_name(self) -> str:
        return STDIN_NAME if reads_standard_input(self.args.input_file) else self.args.input_file

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except OSError as e:
            raise UsageError(f"cannot read '{self.args.input_file}': {e.strerror or e}") from e
        except ValueError as e:  # an input file extension without a frontend
            if str(self.args.input_file).lower().endswith(".ptx"):
                raise UsageError(f"{self.args.input_file} is PTX, and tessera-opt reads MLIR: run PTX with "
                                 f"tessera-run {self.args.input_file} (the PTX executor)") from e
            raise UsageError(f"{e} (use -f mlir)") from e

    def prepare_output(self) -> IO[str]:
        # `-o FILE` is written after a successful run (`tessera.tools.streams.OutputFile`): FILE may be the input.
        if self.args.output_file is None:
            return sys.stdout
        self.output_file = OutputFile(self.args.output_file)
        return self.output_file

    def run(self) -> None:
        self.output_file: OutputFile | None = None
        super().run()
        if self.output_file is not None:
            self.output_file.commit()

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        # Replaces xDSL's "mlir" frontend (the only one): see load_module.
        try:
            text = chunk.read().decode()
        except UnicodeDecodeError as e:
            raise UsageError(f"{self.get_input_name()} is not UTF-8 text ({e.reason} at byte {e.start})") from e
        return load_module(self.ctx, text, self.get_input_name(), start_offset,
                           implicit_module=not self.args.no_implicit_module, verify=not self.args.disable_verify)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        check_output_target(parse_spec(self.args.target).name, prog)
        return super().output_resulting_program(prog)

    def apply_passes(self, prog: ModuleOp) -> None:
        if self.args.validate:
            self.validate(prog)
        start = time.perf_counter()

        def after_pass(pass_: ModulePass, module: ModuleOp) -> None:
            nonlocal start
            if self.args.time_passes:
                print(f"Pass {pass_.name} took {time.perf_counter() - start} seconds")
            if self.args.print_between_passes and pass_ is not self.pipeline.passes[-1]:
                print(f"IR after {pass_.name}:")
                Printer(stream=sys.stdout).print_op(module)
                print("\n\n\n")
            start = time.perf_counter()

        from tessera.graph.rewrite_report import take_reports

        take_reports()
        run_pipeline(self.pipeline, self.ctx, prog, verify=not self.args.disable_verify, after_pass=after_pass)
        if self.args.rewrite_report:
            reports = take_reports()
            if not reports:
                print("tessera-opt: --rewrite-report: the pipeline has no rewrite-attention pass", file=sys.stderr)
            for report in reports:
                print(report.text(), file=sys.stderr)

    def validate(self, prog: ModuleOp) -> None:
        """Validate each Tile IR kernel of `prog` (not modified) through the pipeline; raises UsageError with
        the report's verdict on a mismatch."""
        from tessera.kernel_abi import kernels
        from tessera.validate import validate

        names = [name for name, _ in self.args.dims]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise UsageError(f"--validate: size{'s' if len(duplicates) > 1 else ''} "
                             f"{', '.join(repr(n) for n in duplicates)} given more than once")
        sizes = dict(self.args.dims)
        if not kernels(prog):  # a plain function or a model graph: a run with nothing validated is no verdict
            raise UsageError(f"--validate: {self.get_input_name()} holds no Tile IR kernel to validate (a model "
                             "graph is checked with tessera-run --compare)")
        for op in kernels(prog):
            try:
                report = validate(prog, self.args.passes, sizes=sizes, seed=self.args.seed, kernel=op.sym_name.data)
            except ValueError as e:
                raise UsageError(f"--validate: {e}") from e
            print(report.table(), file=sys.stderr)
            if not report.ok:
                raise UsageError(str(report.mismatch))


def format_diagnostic(e: BaseException, prog: str = "tessera-opt") -> str:
    """The exception's message (with the source line it locates) followed by its notes (xDSL puts the annotated
    IR of some errors there); a diagnostic without a message is an internal error, said so."""
    if not str(e).strip():
        return f"{prog}: {internal_error_text(e)}"
    return "\n".join([with_context(str(e)), *getattr(e, "__notes__", ())]).rstrip("\n")


def print_warnings(prog: str) -> None:
    """Show each TesseraWarning as one line on stderr, `PROG: warning: message` (others as Python does)."""
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, TesseraWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("always", TesseraWarning)


def main(args: Sequence[str] | None = None) -> int:
    """Run tessera-opt; returns the exit status (argparse errors exit with 2 through SystemExit)."""
    with warnings.catch_warnings():
        print_warnings("tessera-opt")
        try:
            TesseraOptMain(description="Tessera's modular optimizer driver", args=args).run()
        except (ParseError, DiagnosticException) as e:
            print(format_diagnostic(e), file=sys.stderr)
            return 1
        except UsageError as e:
            print(f"tessera-opt: error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # the reader of standard output stopped early (`| head`)
            return quiet_broken_pipe()
        except PassCrash as e:
            if os.environ.get("TESSERA_DEBUG") == "1":
                traceback.print_exc()
            print(f"tessera-opt: internal error in {e}", file=sys.stderr)
            return 1
        except Exception as e:
            if os.environ.get("TESSERA_DEBUG") == "1":
                traceback.print_exc()
            print(f"tessera-opt: {internal_error_text(e)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
