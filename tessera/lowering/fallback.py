"""The default pipeline's fallback: compile the largest configuration that fits instead of refusing.

`tessera.passes.DEFAULT_PIPELINE` warp-specializes a pipelined kernel: a producer warpgroup takes registers
from the consumers (their budget drops from 255 to 240 per thread at two consumer warpgroups). A kernel whose
consumers need more, or whose registers exceed even 255, is not refused at once: the configurations of
`tessera.passes.fallback_ladder()` are tried in order, each from the Tile IR,

    1. warp-specialized, two stages (`DEFAULT_PIPELINE` itself);
    2. two stages without a producer warpgroup (`PIPELINED_PIPELINE`: every thread computes, 255 registers);
    3. single-stage (`PTX_PIPELINE`: no ring, so no second stage's values live across the loop);
    4. single-stage spilling (`SPILL_PIPELINE`: `allocate-registers{spill=true}` accepts a peak over 255 per
       thread, the registers past it left to ptxas, which spills them to local memory),

and the first that compiles is kept. The spilling rung is the last resort, as Triton and FlexAttention would
compile such a kernel: the kernel runs, slower. A caller that has rungs of its own that fit without spilling
(`tessera.runtime.flex`: smaller key blocks, a head split) tries them first, each inside `without_spilling()`,
and lets the spilling rung be taken only for its last; the warning and note of a spilling kernel name the
rung and the registers it needs. (A kernel's warpgroup count is its tile's row count over 64, fixed by
the Tile IR, so fewer consumer warpgroups is no configuration a pipeline can choose.) The kernels of a
fallback say so: a `TesseraWarning` located at each kernel, and the attribute `sm90.pipeline_note` on each
Target IR kernel (`tessera.host.HostDescription.pipeline_note`, in `as_dict()` as `pipeline_note`), naming the
configuration kept and why the larger ones were refused. Only register budget refusals
(`tessera.regalloc.RegisterBudgetError`, which warp-specialize's `ConsumerBudgetError` is) lead to the next
configuration; so does a loop that `pipeline-loops` cannot pipeline (`PipelineLoopsError`: a loop that copies,
written in another shape than the pipelined Tile IR contract, such as compute after its trailing barrier), to
the first configuration without pipeline-loops (single-stage), which runs the loop as written, and so does a
kernel whose two stages need more shared memory than a thread block may have (`SharedMemoryError`:
`flash_attention(head_dim=128, block_n=224)`, whose Tile IR the interpreter runs; single-stage holds one K/V
tile). Any other
refusal of the first configuration is the kernel's error, reported as it is. When no configuration compiles,
`NoConfigurationFitsError` names every configuration tried and why each failed.

A configuration may name its form with dQ by `red.global.add` (`Configuration.red`: the warp-specialized one).
Where `convert-tile-to-sm90{atomic-add=auto}` gave the producer a bulk reduction (`reduction_slots.py`: its
staging slots and barriers cost the consumers the trip number at the add, one register, where `red` may need
none), the configuration is compiled again in that form, silently (it is the same configuration), and kept
(`_takes_red`) when
  - the bulk form is refused for registers (the consumers' budget), or
  - it compiles with fewer than `AUTO_BULK_HEADROOM` registers to spare under the consumers' budget: ptxas
    allocates the same code in more registers than the allocator counts, and the bulk reduction's register
    then costs a spill or moves (`AUTO_BULK_HEADROOM`); the `red` form is then kept unless its peak is
    higher and the newest ptxas found takes the bulk form without a spill (the backward's main kernel at head_dim
    128 with `mma-order=first-read` peaks at 223 with bulk and 225 with `red`, and ptxas 12.9 to 13.5 take the
    bulk form without a spill; its soft-cap form in program order peaks at 227 with bulk and 229 with `red`, and
    ptxas spills the bulk form: `red` then).

A configuration may also name its form with the wgmma groups in the builder's order (`Configuration.program`:
`convert-tile-to-sm90{mma-order=program}`; every configuration but the spilling one has it). Where the default
order (`mma-order=first-read`: a group issued before the wait for an earlier one it may precede, so that both
groups' accumulators are live at once) is refused for registers, that form is compiled, silently (the same
configuration), before the next configuration: a backward with a score_mod at head_dim 64 (128 x 128) needs 284
registers a thread with its dP group in flight across the score_mod's ops, and fits 240 in the builder's order;
the single-stage backward with three captured-gradient scatters at head_dim 64 needs 264 of 255 in the default
order and fits in the builder's.

A kernel that fits its budget (a warp-specialized kernel's: its consumers' setmaxnreg count; another's: what its
launch bounds give a thread at entry, 168 at 384 threads) with fewer than `CONSUMER_HEADROOM` registers to spare
at the allocator's peak is tight: the count is no closer than that to what ptxas needs, on either side. So is one
whose peak leaves fewer spare once the registers of its epilogue's global loads are added
(`spill_check.early_load_registers`: ptxas issues an epilogue's loads early, beside values the count has
retired; `gemm(block_m=192, beta=1.0, bias=True)` counts 135 of 160 and ptxas needs more than 168). Of a tight
kernel (and only of one) the fallback asks ptxas (`tessera.lowering.spill_check.ptxas_spill`: its PTX assembled
by the newest ptxas found, the answer cached by the PTX text); when ptxas spills it, the kernel is refused, the
refusal naming the spill and the ptxas, and the next configuration is tried, up to the spilling rung, whose note
names ptxas's spill. When ptxas does not spill it, or no ptxas is found, it is kept.

Each kernel of a module gets its own configuration: a module of several kernels is lowered kernel by kernel,
each from a copy of the module holding it alone (with every op that is no kernel), so a kernel that fits
warp-specialized keeps its pipeline beside a sibling that needs single-stage, and each note, warning and
refusal is its own kernel's.

Pipelines other than the default (a spec that differs in any pass or option) are applied as written, without
fallback: a user who names a configuration gets that configuration or its refusal.

A caller that only asks whether a module lowers on the first rung, and why not (`tessera.runtime.flex`, choosing
among its own configurations the first that lowers warp-specialized), asks `first_rung_refusal`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.ir.diagnostics import located, warn
from tessera.kernel_abi import is_kernel, is_target_kernel, kernels
from tessera.regalloc import SPILL_ATTR, RegisterBudgetError
from tessera.passes.allocate_registers import REGISTERS_ATTR, registers_at_entry
from tessera.passes.convert_tile_to_sm90.common import SharedMemoryError
from tessera.passes.pipeline_loops import PipelineLoopsError
from tessera.sm90 import facts

PIPELINE_LOOPS = "pipeline-loops"
"""The pass whose refusal (`PipelineLoopsError`: a loop that copies, of another shape than the pipelined Tile IR
contract) sends a kernel to the configurations without it, single-stage (module docstring)."""

PIPELINE_NOTE_ATTR = "sm90.pipeline_note"
"""On a Target IR kernel compiled by a fallback configuration: which one, and why the larger did not fit."""


AUTO_BULK_HEADROOM = 20
"""Registers per thread that a kernel given the producer's bulk reduction by `atomic-add=auto` must leave spare
under its consumers' budget (the setmaxnreg count; 255 without one) at the allocator's peak, else it is lowered
with `red` (module docstring). Measured, bench/backward_sass.py and the allocator's report: the head_dim 64
soft-cap backward (128 x 128, budget 240) peaks at 223 with bulk (222 with `red`: the bulk reduction keeps the
query block's trip number live across dS for its staging slot and barrier parity, where `red`'s dQ address comes
from the offset the late dPsum load keeps anyway); ptxas, which allocates the same code in more registers than
the allocator counts (R0-R237 of 240 with `red`), spilled 8 bytes there under 13.0 and 13.5, and since the dS
stores' addresses are XORs of one (`BackwardLowering._swizzled_pairs`) it takes the bulk form without a spill but
in 27 more SASS instructions per trip than `red` (2274 against 2247 under 13.0). The dense kernels peak at
214-218 of 240 with bulk (one less than with `red`), and bulk is their shorter form under 12.9 to 13.5."""


CONSUMER_HEADROOM = 8
"""Registers per thread (one setmaxnreg step): a kernel whose allocator peak (with its early loads,
`spill_check.early_load_registers`) leaves fewer spare under its budget (`_budget`) is tight, and the default
pipeline asks ptxas whether it spills before keeping it (module docstring). The allocator's count is within a
few registers of what ptxas needs, on either side (tests/test_regalloc_accuracy.py: a soft-cap's count is 3
under), so a tight count is no proof either way: `tests/user_kernels/gemm_swiglu_residual.mlir` counts 235 of
240 and every ptxas (12.9, 13.0, 13.5) spilled 4 bytes there (ptxas issues its 32 predicated bias loads and 64 residual loads early, each bit of their masks in a
register of its own), where two stages without a producer (255) assemble without a spill; the FP8 flash kernels
(`flash_attention(dtype="e4m3")`) count 144 of 144 at head_dim 64, 176 of 176 at 128, 198 of 200 at 256 (one
more causal) and every ptxas assembles them without a spill. The bf16 flash kernels leave 15 (225 of 240): no
ptxas is run for them."""


@dataclass(frozen=True)
class Configuration:
    """One configuration of the ladder: its name in diagnostics and the pipeline spec that compiles it."""

    name: str
    pipeline: str
    spills: bool = False
    """Whether it lets ptxas spill (`allocate-registers{spill=true}`): skipped inside `without_spilling()`."""
    red: str | None = None
    """The pipeline spec of the same configuration with dQ by `red.global.add` (`atomic-add=red`), compiled
    where auto's bulk reduction does not fit the registers (module docstring); None: no such form."""
    program: str | None = None
    """The pipeline spec of the same configuration with the wgmma groups in the builder's order
    (`convert-tile-to-sm90{mma-order=program}`), compiled where the default order does not fit the registers
    (module docstring); None: no such form."""
    program_red: str | None = None
    """`program`'s form with dQ by `red`."""


_SPILLING = ContextVar("tessera_fallback_spilling", default=True)


@contextmanager
def without_spilling() -> Iterator[None]:
    """The default pipeline's ladder without its spilling rung for the block: a kernel that fits no other
    configuration raises `NoConfigurationFitsError`, so that the caller can try a rung of its own that may fit
    without spilling first (module docstring)."""
    token = _SPILLING.set(False)
    try:
        yield
    finally:
        _SPILLING.reset(token)


def spilling_allowed() -> bool:
    """Whether the default pipeline's ladder may take its spilling rung here (False inside `without_spilling()`):
    part of what a compiled kernel depends on, so of its cache key (`tessera.runtime.compiler.kernel_key`)."""
    return _SPILLING.get()


class NoConfigurationFitsError(RegisterBudgetError):
    """No configuration of the default pipeline fits the kernel's registers; the message names each one tried
    and why it failed."""


def apply_with_fallback(module: ModuleOp, ladder: Sequence[Configuration],
                        run: Callable[[str, ModuleOp], None]) -> None:
    """Lower `module` in place, each kernel with the first configuration of `ladder`
    (`tessera.passes.fallback_ladder()`, largest first) that compiles it, `run(spec, module)` applying a
    pipeline spec (module docstring)."""
    names = [fn.sym_name.data for fn in kernels(module)]
    if len(names) > 1:  # one kernel's refusal of a configuration says nothing of its siblings
        parts = [_alone(module, name) for name in names]
        for part in parts:
            apply_with_fallback(part, ladder, run)
        _take_parts(module, parts)
        return
    first, *rest = ladder
    try:
        trial = _fit(first, module, run)
    except (PipelineLoopsError, SharedMemoryError) as error:  # loops of another shape than pipelining takes, or
        # two stages past a thread block's shared memory: the rungs without pipelining
        _lower_down(module, first, error, [c for c in rest if PIPELINE_LOOPS not in c.pipeline], run)
        return
    except RegisterBudgetError as error:
        if first.program is None:
            _lower_down(module, first, error, rest, run)
            return
        try:  # the same configuration with the wgmma groups in the builder's order (module docstring)
            trial = _fit(Configuration(first.name, first.program, red=first.program_red), module, run)
        except RegisterBudgetError:
            _lower_down(module, first, error, rest, run)
            return
    take_body(module, trial)


def kept_configuration(module: ModuleOp, name: str, ladder: Sequence[Configuration],
                       run: Callable[[str, ModuleOp], None]) -> tuple[Configuration, str]:
    """The configuration of `ladder` that `apply_with_fallback` keeps for kernel @`name` of `module`, and the
    pipeline spec of the form it kept (its `red` or `program` form, or its own), from lowering a copy (`module`
    is left as it is; the fallback's warning is given). `tessera.validate` walks that spec's passes: what
    a launch of the kernel runs. Raises what `apply_with_fallback` raises."""
    part = _alone(module, name)
    lowered = []  # (Target IR kernel, the spec that made it), for every run that completed

    def recording(spec: str, m: ModuleOp) -> None:
        run(spec, m)
        lowered.extend((fn, spec) for fn in walk_ops(m) if is_target_kernel(fn))

    apply_with_fallback(part, ladder, recording)
    kept = next(fn for fn in walk_ops(part) if is_target_kernel(fn))
    spec = next(spec for fn, spec in lowered if fn is kept)
    configuration = next(c for c in ladder if spec in (c.pipeline, c.red, c.program, c.program_red))
    return configuration, spec


def first_rung_refusal(module: ModuleOp, ladder: Sequence[Configuration],
                       run: Callable[[str, ModuleOp], None]) -> DiagnosticException | None:
    """None when `module` lowers with the first configuration of `ladder` (`tessera.passes.fallback_ladder()`:
    warp-specialized with two stages), in the default wgmma order or, where that order is refused for registers,
    in its form with the groups in the builder's order (`Configuration.program`); else that refusal (the
    builder's order's, when the default order was refused for registers). `run(spec, module)` applies a pipeline
    spec; each try lowers a copy, `module` is left as it is. Only the configuration's two orders are tried: not
    its form with dQ by `red`, nor ptxas on a tight kernel, nor a kernel at a time (module docstring), and every
    refusal, of registers or not, is returned."""
    first = ladder[0]
    try:
        try:
            run(first.pipeline, module.clone())
        except RegisterBudgetError:
            if first.program is None:
                raise
            run(first.program, module.clone())
    except DiagnosticException as error:
        return error
    return None


def _fit(first: Configuration, module: ModuleOp, run: Callable[[str, ModuleOp], None]) -> ModuleOp:
    """`module` (one kernel) lowered in a copy by `first` or its form with dQ by `red` (module docstring); its
    refusal raised."""
    trial = module.clone()
    try:
        run(first.pipeline, trial)
    except RegisterBudgetError:
        if not _takes_red(first, trial, refused=True):
            raise
        trial = module.clone()
        run(first.red, trial)
    else:
        if _takes_red(first, trial, refused=False):
            red = module.clone()
            try:
                run(first.red, red)
            except RegisterBudgetError:  # keep the bulk form, which fits
                pass
            else:
                if _peak(red) <= _peak(trial) or _bulk_spills(trial):  # else keep the bulk form, the shorter
                    trial = red
    spilled = _spilled_when_tight(trial)
    if spilled is not None:
        raise spilled
    return trial


def _spilled_when_tight(trial: ModuleOp) -> RegisterBudgetError | None:
    """The refusal of `trial` (one kernel, lowered) when it is tight, a kernel whose allocator peak, with the
    registers of its epilogue's global loads (`spill_check.early_load_registers`: ptxas issues them
    early), leaves fewer than `CONSUMER_HEADROOM` registers spare under its budget (`_budget`), and the newest
    ptxas found spills it (module docstring); None otherwise, without running ptxas unless tight."""
    from tessera.lowering import spill_check

    for fn in walk_ops(trial):
        if not is_target_kernel(fn) or REGISTERS_ATTR not in fn.attributes:
            continue
        budget, whose = _budget(fn)
        peak = fn.attributes[REGISTERS_ATTR].data["peak"].value.data
        if peak + spill_check.early_load_registers(fn) <= budget - CONSUMER_HEADROOM:
            continue
        spill = spill_check.ptxas_spill(trial)
        if spill is None:
            return None
        need = f"{whose} {peak} registers per thread leave {budget - peak} of their {budget}, and {spill}"
        return RegisterBudgetError(located(fn, f"@{fn.sym_name.data}: {need}"), summary=need)
    return None


def _bulk_spills(trial: ModuleOp) -> bool:
    """Whether the newest ptxas found spills `trial` (one kernel, lowered; False without a ptxas)."""
    from tessera.lowering import spill_check

    return spill_check.ptxas_spill(trial) is not None


def _peak(lowered: ModuleOp) -> int:
    """The allocator's peak of the kernel of `lowered` (one kernel, register-allocated)."""
    return max((fn.attributes[REGISTERS_ATTR].data["peak"].value.data for fn in walk_ops(lowered)
                if is_target_kernel(fn) and REGISTERS_ATTR in fn.attributes), default=0)


def _consumer_budget(fn) -> int | None:
    """The registers per thread a Target IR kernel's consumer warpgroups take (its largest `setmaxnreg.inc`);
    None without one (not warp-specialized)."""
    from tessera.dialects import sm90

    budgets = [op.count.value.data for op in walk_ops(fn)
               if isinstance(op, sm90.SetMaxNRegOp) and op.action.data == "inc"]
    return max(budgets, default=None)


def _budget(fn) -> tuple[int, str]:
    """The registers per thread ptxas has for the Target IR kernel `fn`'s computing threads, and whose they are
    (as a refusal names them): its consumers' setmaxnreg budget, else what its launch bounds give each thread
    at entry (`allocate_registers.registers_at_entry`: 168 at 384 threads), at most 255."""
    consumers = _consumer_budget(fn)
    if consumers is not None:
        return consumers, "the consumer warpgroups'"
    at_entry = registers_at_entry(fn)
    return min(at_entry or facts.MAX_REGISTERS_PER_THREAD, facts.MAX_REGISTERS_PER_THREAD), "the threads'"


def _takes_red(configuration: Configuration, trial: ModuleOp, refused: bool) -> bool:
    """Whether `configuration` is to be compiled again with dQ by `red` (module docstring): it has that form,
    `trial` (the module it lowered, or began to lower when `refused` for registers) holds auto's bulk
    reduction, and it was refused or leaves less than `AUTO_BULK_HEADROOM` registers spare."""
    from tessera.dialects.sm90_reductions import BulkReduceAddOp

    if configuration.red is None:
        return False
    for fn in walk_ops(trial):
        if not (is_target_kernel(fn) and any(map(subclass_test(BulkReduceAddOp), walk_ops(fn)))):
            continue
        if refused or REGISTERS_ATTR not in fn.attributes:
            return True
        budget = _consumer_budget(fn) or facts.MAX_REGISTERS_PER_THREAD
        if fn.attributes[REGISTERS_ATTR].data["peak"].value.data > budget - AUTO_BULK_HEADROOM:
            return True
    return False


def _lower_down(module: ModuleOp, first: Configuration,
                refusal: RegisterBudgetError | PipelineLoopsError | SharedMemoryError,
                rest: Sequence[Configuration], run: Callable[[str, ModuleOp], None]) -> None:
    """Lower `module` (one kernel) in place with the first configuration of `rest` that compiles it, `first`
    having refused it with `refusal`; NoConfigurationFitsError naming each configuration when none does."""
    failures = [(first, refusal)]
    for configuration in rest:
        if configuration.spills and not spilling_allowed():
            continue
        trial = module.clone()
        with warnings.catch_warnings(record=True) as caught:  # a refused configuration's warnings are moot
            warnings.simplefilter("always")
            try:
                try:
                    run(configuration.pipeline, trial)
                except RegisterBudgetError:
                    if configuration.program is None:
                        raise
                    trial = module.clone()  # the same configuration in the builder's wgmma order (module docstring)
                    run(configuration.program, trial)
            except DiagnosticException as error:
                failures.append((configuration, error))
                continue
        spilled = None if configuration.spills else _spilled_when_tight(trial)
        if spilled is not None:  # ptxas spills what the count let pass: a smaller configuration may not
            failures.append((configuration, spilled))
            continue
        for warning in caught:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        take_body(module, trial)
        _note(module, configuration, failures)
        return
    tile = kernels(module)
    listing = "\n".join(f"  {configuration.name}: {_reason(error)}" for configuration, error in failures)
    raise NoConfigurationFitsError(located(tile[0] if len(tile) == 1 else None,
                                           f"no configuration of the default pipeline fits, tried:\n{listing}"))


def _alone(module: ModuleOp, name: str) -> ModuleOp:
    """A copy of `module` without its kernels other than @`name` (every op that is no kernel is kept)."""
    part = module.clone()
    for op in list(part.body.block.ops):
        if is_kernel(op) and op.sym_name.data != name:
            op.detach()
            op.erase()
    return part


def _take_parts(module: ModuleOp, parts: Sequence[ModuleOp]) -> None:
    """Replace the ops of `module` with its kernels lowered one by one (`parts`, in the kernels' order, each from
    `_alone`): each part's kernels, and the ops that are no kernel once, from the first part."""
    lowered = ModuleOp([])
    for i, part in enumerate(parts):
        for op in list(part.body.block.ops):
            if i == 0 or is_target_kernel(op) or is_kernel(op):
                op.detach()
                lowered.body.block.add_op(op)
    take_body(module, lowered)


def _reason(error: Exception) -> str:
    """The message of a refusal without the `file:line:col: kernel @name:` prefix (the listing is located at
    the kernel already)."""
    return _LOCATION.sub("", str(error).strip(), count=1)


_LOCATION = re.compile(r"^(\S+:\d+:\d+: )?(kernel )?@[\w.$-]+: ")


def _note(module: ModuleOp, configuration: Configuration, failures: list) -> None:
    """Warn at each Target IR kernel of `module` and record the note on it (each refusal in a few words)."""
    refused = "; ".join(f"{c.name}: {getattr(e, 'summary', None) or _reason(e)}" for c, e in failures)
    for fn in module.walk():
        if is_target_kernel(fn):
            if configuration.spills:
                spilled = fn.attributes[SPILL_ATTR].value.data if SPILL_ATTR in fn.attributes else 0
                needed = fn.attributes[REGISTERS_ATTR].data["peak"].value.data
                # past 255, or past fewer at the kernel's launch bounds (allocate-registers)
                spills = (f"{spilled} past the {needed - spilled} a thread can hold left to ptxas, which spills them "
                          f"to local memory{_ptxas_says(module)}" if spilled else _ptxas_spills_within_budget(module))
                note = (f"compiled {configuration.name}: {needed} registers per thread needed, {spills} (no "
                        f"configuration fits without spilling: {refused})")
            else:
                note = f"compiled {configuration.name}, the largest configuration that fits (refused: {refused})"
            fn.attributes[PIPELINE_NOTE_ATTR] = StringAttr(note)
            warn(located(fn, f"the default pipeline fell back: {note}"))


def _ptxas_says(module: ModuleOp) -> str:
    """What ptxas spills of a kernel (of `module`, lowered) allocated past its budget, in the note's words: the
    registers past it say nothing of the bytes (128x256 GEMM with beta and bias: 8 registers, 132 bytes of spill
    stores), so the note gives ptxas's count where a ptxas is found (`spill_check.ptxas_spill`, cached)."""
    from tessera.lowering import spill_check

    spill = spill_check.ptxas_spill(module)
    return f" ({spill})" if spill is not None else ""


def _ptxas_spills_within_budget(module: ModuleOp) -> str:
    """How the spilling rung's note names a kernel (of `module`, lowered) allocated within its budget: ptxas may
    spill it all the same (a count within the budget but with ptxas's early loads past it, module docstring)."""
    from tessera.lowering import spill_check

    spill = spill_check.ptxas_spill(module)
    return "none past its budget" + (f", and {spill}" if spill is not None else "")


def take_body(module: ModuleOp, lowered: ModuleOp) -> None:
    """Replace the ops of `module` with those of `lowered` (its lowered copy; `lowered` is left empty)."""
    for op in list(module.body.block.ops):
        op.detach()
        op.erase()
    for op in list(lowered.body.block.ops):
        op.detach()
        module.body.block.add_op(op)
