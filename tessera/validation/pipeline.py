"""`validate`: walk a pass pipeline one pass at a time and prove each step on the same inputs.

The starting Tile IR is run first; then, after each pass, the kernel is run at the level the pass left it at
(Tile IR, Target IR) and its output compared with the previous level's (bit-exact within a level, the
reference tolerance across Tile -> Target and for outputs that atomic adds sum, whose rounding follows the order
the adds land in; see `compare`) and with the NumPy reference (`tessera.reference`).
The last level is the PTX printed from the final Target IR, run by the PTX executor. The walk stops at the
first pass that changes the result, makes the kernel fail in its interpreter (a hazard, a deadlock, a
register-file mismatch), breaks the IR's verifier, or fails itself. For a changed result, the old and the new
level are run once more on the block that writes the first diverging output element, recording its named
values, and the first diverging op is reported (`compare.first_divergence`). The PTX executor keeps no per-op
values, so a mismatch at the PTX level names the output element only.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.validation import levels
from tessera.validation.compare import (
    Divergence,
    Expectation,
    describe_elements,
    differing,
    first_divergence,
    first_index,
    format_index,
    max_difference,
)
from tessera.validation.levels import PTX, TARGET, TILE
from tessera.validation.recording import ValueTrace, target_recorders, tile_recorders
from tessera.validation.verdict import check_generated_inputs, check_outputs, reference_for

INPUT = "(input)"
PRINT_PTX = "(ptx)"


@dataclass
class LevelCheck:
    """One row of the table: the kernel after pass `position` (0: the input; len(pipeline)+1: the PTX)."""

    position: int
    pass_name: str
    level: str
    vs_previous: float | None
    vs_reference: float | None
    tolerance: float | None
    expectation: Expectation | None
    ok: bool
    note: str = ""
    failed: bool = False
    """The kernel raised at this level (a hazard, a refusal, a fault): no numbers to compare."""

    @property
    def verdict(self) -> str:
        """The table's last column: "ok", "MISMATCH" (numbers off) or "FAILED" (the run raised), with its note."""
        word = "ok" if self.ok else "FAILED" if self.failed else "MISMATCH"
        return word + (f" ({self.note})" if self.note else "")


@dataclass
class Mismatch:
    """Why the walk stopped: `kind` is "result" (the output changed), "failure" (the kernel failed at its
    level), "invalid" (the IR no longer verifies), "pass" (the pass itself raised) or "refused" (the Tile IR
    the pass produced is refused by the lowering that accepts the Tile IR before it)."""

    position: int
    pass_name: str
    level: str
    kind: str
    message: str
    divergence: Divergence | None = None
    element: tuple[int, ...] | None = None
    """The first diverging output element (kind "result")."""
    output: str | None = None
    """The name of the output `element` indexes, the first that is off (kind "result")."""

    @property
    def where(self) -> str:
        if self.pass_name == PRINT_PTX:
            return "the PTX printed from the final Target IR"
        if self.position == 0:
            return "the input kernel"
        return f"pass {self.position} '{self.pass_name}'"

    def __str__(self) -> str:
        if self.kind == "result":
            verb = "disagrees with the reference" if self.position == 0 else "changed the result"
            text = f"validate: {self.where} {verb}: {self.message}"
            if self.divergence is not None:
                text += f"; first diverging op: {self.divergence}"
            elif self.level == PTX:
                text += "; the PTX executor keeps no per-instruction values (compare the Target IR above)"
            else:
                text += "; no named value of the block diverges (the difference is in unnamed values)"
            return text
        if self.kind == "failure":
            return f"validate: {self.where} made the kernel fail at level {self.level}: {self.message}"
        if self.kind == "refused":
            return f"validate: {self.where} produced Tile IR that the lowering refuses: {self.message}"
        if self.kind == "invalid":
            return f"validate: {self.where} produced IR that does not verify: {self.message}"
        return f"validate: {self.where} failed: {self.message}"


@dataclass
class ValidationReport:
    kernel: str
    pipeline: str
    sizes: dict[str, int]
    checks: list[LevelCheck] = field(default_factory=list)
    mismatch: Mismatch | None = None
    reference: str = ""
    """What the levels are held to: the kind's NumPy reference, or the kernel's own Tile IR in float64."""
    configuration: str = ""
    """The default pipeline's configuration walked, where its fallback keeps another than the first for this
    kernel (`tessera.lowering.fallback`): its name; empty otherwise."""

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def table(self) -> str:
        def number(x):
            return "-" if x is None else f"{x:.3e}"

        rows = [("#", "pass", "level", "vs previous", "vs reference", "tolerance", "ok")]
        for c in self.checks:
            rows.append((str(c.position), c.pass_name, c.level, number(c.vs_previous), number(c.vs_reference),
                         number(c.tolerance), c.verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows]
        sizes = " ".join(f"{k}={v}" for k, v in self.sizes.items())
        against = f" (reference: {self.reference})" if self.reference else ""
        fallen = f" (the default pipeline compiles it {self.configuration})" if self.configuration else ""
        return "\n".join([f"validate @{self.kernel} [{sizes}]{against}{fallen}", *lines])

    def __str__(self) -> str:
        verdict = str(self.mismatch) if self.mismatch else "validate: every level agrees"
        return f"{self.table()}\n{verdict}"


class ValidationError(Exception):
    """For callers that want a mismatch as an exception (`raise ValidationError(report)`); carries the
    report, and its message is the mismatch's."""

    def __init__(self, report: ValidationReport):
        super().__init__(str(report.mismatch))
        self.report = report


def _record(module: ModuleOp, level: str, sig, inputs, sizes, block) -> ValueTrace:
    trace = ValueTrace()
    factory = tile_recorders(block, trace) if level == TILE else target_recorders(block, trace)
    levels.run_level(module, level, sig, inputs, sizes, factory)
    return trace


def _expectation(old_level: str, new_level: str) -> Expectation:
    return Expectation.CLOSE if {old_level, new_level} == {TILE, TARGET} else Expectation.EXACT


def _summed_outputs(sig) -> frozenset[int]:
    """The outputs (by their number) that a `tile.atomic_add` or `tile.scatter_add` adds into: the sum of their
    contributions is rounded in an order the hardware picks (and each level's schedule: the CTA simulator adds a
    CTA's after another's, the PTX executor a batch of CTAs' instruction by instruction), so no level promises
    another's bits for them; each is held to the reference's tolerance, as across Tile -> Target."""
    from tessera.interpreters.grid_writes import summed_arguments

    positions = [i for i, arg in enumerate(sig.args) if arg.role == "out"]
    added = summed_arguments(sig)
    return frozenset(k for k, i in enumerate(positions) if i in added)


def validate(module: ModuleOp, pipeline: str, *, sizes: Mapping[str, int] | None = None, seed: int = 0,
             kernel: str | None = None, ptx: bool = True) -> ValidationReport:
    """Validate every pass of `pipeline` (a `tessera-opt -p` spec) on `module`'s kernel (which is not
    modified); see the module docstring. `sizes` override the defaults of `levels.DEFAULT_SIZES`; inputs are
    drawn with `seed`. With `ptx`, the PTX of the final Target IR is run too (reported as skipped when there
    is no PTX executor). Returns the report; `report.mismatch` says which pass broke what. A kernel whose
    grid is sized by a launch size no argument uses (`tile.launch_sizes`: packed and paged attention) is
    refused by name: its tables are not generated (`verdict.check_generated_inputs`)."""
    from tessera import find_kernel
    from tessera.arguments import check_module, check_seed, check_sizes, check_string
    from tessera.ir.diagnostics import located
    from tessera.kernel_abi import check_multiples, specialized
    from tessera.passes import apply_pass, parse_pipeline

    where = "tessera.validate.validate"
    check_module(where, module)
    check_string(where, "pipeline", pipeline)
    check_string(where, "kernel", kernel, optional=True)
    check_seed(where, seed)
    if not isinstance(ptx, bool):
        raise TypeError(f"{where}: ptx must be True or False; got {type(ptx).__name__}")
    passes = parse_pipeline(pipeline).passes if pipeline else ()
    module = module.clone()
    sig = find_kernel(module, kernel)
    check_generated_inputs(where, sig)  # packed and paged attention: real tables only
    check_outputs(where, sig)
    bound = levels.default_sizes(sig, check_sizes(where, sizes, sig.size_names()))
    try:  # sizes the kernel does not take (`tile.multiples`: grouped heads), refused before anything runs
        check_multiples(sig.name, sig.multiples, bound)
    except ValueError as error:
        message = str(error).replace(f"kernel @{sig.name} ", f"kernel @{sig.name}: ", 1)
        raise ValueError(f"{where}: {located(sig.op, message)}") from None
    # The variant a launch with these sizes runs (`tile.specialize`, docs/any-shape.md): the fast one would
    # be refused for sizes it does not meet (a GEMM with K = 65 has rows of 130 bytes, no TMA).
    module = specialized(module, sig, bound)
    sig = find_kernel(module, sig.name)
    summed = _summed_outputs(sig)
    inputs = levels.generate_inputs(sig, bound, seed)
    report = ValidationReport(sig.name, pipeline, bound)
    passes = _fallen_back(module, sig.name, passes, report)
    try:
        judge = reference_for(module, sig, inputs, bound, seed)
    except Exception as error:  # noqa: BLE001 - the input kernel itself fails: that is the finding
        report.checks.append(LevelCheck(0, INPUT, levels.level_of(module, sig.name), None, None, None, None, False,
                                        failed=True))
        report.mismatch = Mismatch(0, INPUT, levels.level_of(module, sig.name), "failure",
                                   f"{type(error).__name__}: {error}")
        return report
    report.reference = judge.source

    def run(mod, level):
        return levels.run_level(mod, level, sig, inputs, bound)

    def check(position, name, level, old_module, old_level, old_outputs, new_module) -> list | None:
        """Run the new level; append its row; on a mismatch set report.mismatch and return None."""
        try:
            outputs = run(new_module, level)
        except levels.PtxExecutorMissing as error:
            report.checks.append(LevelCheck(position, name, level, None, None, None, None, True,
                                            f"skipped: {error}"))
            return old_outputs
        except Exception as error:  # noqa: BLE001 - any failure of the kernel is the finding
            report.checks.append(LevelCheck(position, name, level, None, None, None, None, False, failed=True))
            report.mismatch = Mismatch(position, name, level, "failure", f"{type(error).__name__}: {error}")
            return None
        error, tolerance = judge.judge(outputs)
        expectation = None if old_outputs is None else _expectation(old_level, level)
        vs_previous = None if old_outputs is None else max(
            max_difference(n, o) for n, o in zip(outputs, old_outputs))
        changed = expectation is Expectation.EXACT and any(
            k not in summed and max_difference(n, o) > 0 for k, (n, o) in enumerate(zip(outputs, old_outputs)))
        within = error <= tolerance
        ok = within and not changed
        report.checks.append(LevelCheck(position, name, level, vs_previous, error, tolerance, expectation, ok))
        if ok:
            return outputs
        # The output that is off and its elements: those that changed from the previous level when it is
        # expected to be exact, else those beyond their tolerance (the reference's verdict); the first of them
        # named, or the element with the largest error.
        if changed:
            off = [differing(n, o, Expectation.EXACT) & (k not in summed)
                   for k, (n, o) in enumerate(zip(outputs, old_outputs))]
            k = next(i for i, mask in enumerate(off) if mask.any())
            mask = off[k]
        else:
            k, mask = judge.beyond(outputs)
        out, out_arg = outputs[k], sig.outputs[k]
        index = None if mask is None else first_index(mask)
        if index is None:
            index = judge.worst_element(out, k)
        old_value = None if old_outputs is None else float(np.asarray(old_outputs[k][index], np.float64))
        ref_value = float(judge.output(k)[index])
        detail = []
        if old_value is not None:
            detail.append(f"was {old_value:.6g}")
        detail.append(f"reference {ref_value:.6g}")
        message = f"{format_index(out_arg.name, index)} = {float(np.asarray(out[index], np.float64)):.6g}"
        message += f" ({', '.join(detail)})" if detail else ""
        if mask is not None and mask.any():
            message += f"; {describe_elements(out_arg.name, mask)} " + \
                ("changed" if changed else "beyond their tolerance")
        if not within:
            message += f"; max error vs reference {error:.3e} > tolerance {tolerance:.3e}"
        divergence = None
        if level != PTX and old_module is not None:
            try:
                block = levels.writer_block(sig, start, inputs, bound, k, index)
                divergence = first_divergence(_record(new_module, level, sig, inputs, bound, block),
                                              _record(old_module, old_level, sig, inputs, bound, block),
                                              _expectation(old_level, level))
            except Exception:  # noqa: BLE001 - the search is a diagnosis; the mismatch stands without it
                divergence = None
        report.mismatch = Mismatch(position, name, level, "result", message, divergence, index, out_arg.name)
        return None

    start = module.clone()
    level = levels.level_of(module, sig.name)
    outputs = check(0, INPUT, level, None, None, None, module)
    if outputs is None:
        return report
    previous, previous_level = module.clone(), level
    tile_levels = [(0, INPUT, previous)]
    for position, p in enumerate(passes, start=1):
        try:
            apply_pass(p, module)
        except Exception as error:  # noqa: BLE001
            report.mismatch = Mismatch(position, p.name, previous_level, "pass", f"{type(error).__name__}: {error}")
            if previous_level == TILE:
                _blame_tile_pass(report, tile_levels, p, sig, inputs, bound, judge)
            return report
        try:
            module.verify()
        except Exception as error:  # noqa: BLE001
            report.mismatch = Mismatch(position, p.name, previous_level, "invalid", str(error).splitlines()[0])
            return report
        level = levels.level_of(module, sig.name)
        outputs = check(position, p.name, level, previous, previous_level, outputs, module)
        if outputs is None:
            if previous_level == TILE and level == TARGET:
                _blame_tile_pass(report, tile_levels, p, sig, inputs, bound, judge)
            return report
        previous, previous_level = module.clone(), level
        if level == TILE:
            tile_levels.append((position, p.name, previous))
    if ptx and level == TARGET:
        check(len(passes) + 1, PRINT_PTX, PTX, previous, TARGET, outputs, module)
    return report


def _fallen_back(module: ModuleOp, name: str, passes, report: ValidationReport):
    """The passes to walk: those of the configuration the default pipeline keeps for kernel @`name`, where
    `passes` are the default pipeline's and its fallback keeps another (`tessera.lowering.fallback`: a kernel
    too big for warp specialization compiles single-stage, and a launch runs that), noted in `report`; else
    `passes`. A kernel that no configuration compiles (or a pass that fails) walks the default passes, to the one
    that refuses it (or fails)."""
    from tessera.lowering.fallback import kept_configuration
    from tessera.passes import apply_passes, fallback_ladder, falls_back, parse_pipeline

    if not falls_back(passes):
        return passes
    ladder = fallback_ladder()
    try:
        with warnings.catch_warnings():  # the fallback's warning: the report's header says it
            warnings.simplefilter("ignore")
            configuration, spec = kept_configuration(
                module, name, ladder, lambda spec, m: apply_passes(parse_pipeline(spec).passes, m))
    except Exception:  # noqa: BLE001 - no configuration compiles it, or a pass fails: the walk finds where
        return passes
    if configuration is ladder[0]:
        return passes
    report.configuration = configuration.name
    return parse_pipeline(spec).passes


def _blame_tile_pass(report: ValidationReport, tile_levels, boundary, sig, inputs, sizes, judge) -> None:
    """The Tile interpreter does not model shared-memory addresses, swizzles or alignment, so a Tile pass
    that breaks them shows only once lowered (or is refused by the lowering). When the Tile -> Target pass
    `boundary` changed the result or failed, lower each earlier Tile level with it, latest first: if some
    level lowers to a Target kernel whose output is right, the Tile pass after it is blamed instead (with the
    first diverging op between the two lowerings when both ran). If no earlier level lowers right, `boundary`
    stays blamed."""
    from tessera.passes import apply_pass

    mismatch = report.mismatch
    later = None  # the lowering of the level after the one being tried (None: it was refused)
    for k in range(len(tile_levels) - 1, -1, -1):
        position, name, tile_module = tile_levels[k]
        lowered = tile_module.clone()
        try:
            apply_pass(boundary, lowered)
            if levels.level_of(lowered, sig.name) != TARGET:
                return
            outputs = levels.run_level(lowered, TARGET, sig, inputs, sizes)
        except Exception:  # noqa: BLE001 - refused or failed: look further back
            later = None
            continue
        error, tolerance = judge.judge(outputs)
        if k == len(tile_levels) - 1 or error > tolerance:
            later = lowered
            continue
        blamed_position, blamed_name, _ = tile_levels[k + 1]
        divergence = None
        if later is not None:
            try:
                output = [o.name for o in sig.outputs].index(mismatch.output) if mismatch.output else 0
                block = levels.writer_block(sig, tile_levels[0][2], inputs, sizes, output, mismatch.element or ())
                divergence = first_divergence(_record(later, TARGET, sig, inputs, sizes, block),
                                              _record(lowered, TARGET, sig, inputs, sizes, block), Expectation.CLOSE)
            except Exception:  # noqa: BLE001
                pass
        if mismatch.kind == "pass":
            report.mismatch = Mismatch(blamed_position, blamed_name, TARGET, "refused",
                                       f"'{boundary.name}' refuses it ({mismatch.message}), but lowers the Tile IR "
                                       "before it")
            return
        note = (f" [seen once lowered by '{boundary.name}': the Tile IR before pass {blamed_position} lowers "
                "right, after it not; the Tile interpreter does not model shared-memory addresses or swizzles]")
        report.mismatch = Mismatch(blamed_position, blamed_name, TARGET, mismatch.kind,
                                   mismatch.message + note, divergence, mismatch.element, mismatch.output)
        return
