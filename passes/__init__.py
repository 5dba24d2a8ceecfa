"""Tessera's pass registry.

`PASSES` maps a pass name to a factory returning the pass class, the convention of xDSL's own registry. Each pass
lives in its own file of this package, has a kebab-case verb-noun name (`lower-tile-to-ptx`) and a `...Pass` class;
its factory imports that file lazily, so that `tessera-opt` starts fast:

    def _lower_tile_to_ptx() -> type[ModulePass]:
        from tessera.passes.lower_tile_to_ptx import LowerTileToPtxPass
        return LowerTileToPtxPass

    PASSES = {"lower-tile-to-ptx": _lower_tile_to_ptx}

`tessera-opt` registers every entry (`tessera-opt -p lower-tile-to-ptx`). Options are fields of a
`@dataclass(frozen=True)` pass; check their values in `__post_init__` and raise ValueError, so that a bad option
is reported as a pipeline error before any input is read.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

from xdsl.passes import ModulePass



def _assign_swizzle() -> type[ModulePass]:
    from tessera.passes.assign_swizzle import AssignSwizzlePass

    return AssignSwizzlePass


def _convert_tile_to_sm90() -> type[ModulePass]:
    from tessera.passes.convert_tile_to_sm90 import ConvertTileToSm90Pass

    return ConvertTileToSm90Pass


def _rematerialize_constants() -> type[ModulePass]:
    from tessera.passes.rematerialize_constants import RematerializeConstantsPass

    return RematerializeConstantsPass


def _compute_distinct_lanes() -> type[ModulePass]:
    from tessera.passes.compute_distinct_lanes import ComputeDistinctLanesPass

    return ComputeDistinctLanesPass


def _interleave_elementwise() -> type[ModulePass]:
    from tessera.passes.interleave_elementwise import InterleaveElementwisePass

    return InterleaveElementwisePass


def _slab_elementwise_chains() -> type[ModulePass]:
    from tessera.passes.slab_elementwise_chains import SlabElementwiseChainsPass

    return SlabElementwiseChainsPass


def _warp_specialize() -> type[ModulePass]:
    from tessera.passes.warp_specialize import WarpSpecializePass

    return WarpSpecializePass


def _allocate_registers() -> type[ModulePass]:
    from tessera.passes.allocate_registers import AllocateRegistersPass

    return AllocateRegistersPass


def _pipeline_loops() -> type[ModulePass]:
    from tessera.passes.pipeline_loops import PipelineLoopsPass

    return PipelineLoopsPass


def _overlap_softmax() -> type[ModulePass]:
    from tessera.passes.overlap_softmax import OverlapSoftmaxPass

    return OverlapSoftmaxPass


def _peel_masked_iterations() -> type[ModulePass]:
    from tessera.passes.peel_masked_iterations import PeelMaskedIterationsPass

    return PeelMaskedIterationsPass


def _rewrite_attention() -> type[ModulePass]:
    from tessera.passes.rewrite_attention import RewriteAttentionPass

    return RewriteAttentionPass


def _form_clusters() -> type[ModulePass]:
    from tessera.passes.form_clusters import FormClustersPass

    return FormClustersPass


def _hoist_invariant_descriptors() -> type[ModulePass]:
    from tessera.passes.hoist_invariant_descriptors import HoistInvariantDescriptorsPass

    return HoistInvariantDescriptorsPass


def _mask_by_mma() -> type[ModulePass]:
    from tessera.passes.mask_by_mma import MaskByMmaPass

    return MaskByMmaPass


def _mask_causal_by_mma() -> type[ModulePass]:
    from tessera.passes.mask_causal_by_mma import MaskCausalByMmaPass

    return MaskCausalByMmaPass


def _multicast_cluster_copies() -> type[ModulePass]:
    from tessera.passes.multicast_cluster_copies import MulticastClusterCopiesPass

    return MulticastClusterCopiesPass


PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "assign-swizzle": _assign_swizzle,
    "convert-tile-to-sm90": _convert_tile_to_sm90,
    "rematerialize-constants": _rematerialize_constants,
    "compute-distinct-lanes": _compute_distinct_lanes,
    "interleave-elementwise": _interleave_elementwise,
    "slab-elementwise-chains": _slab_elementwise_chains,
    "warp-specialize": _warp_specialize,
    "allocate-registers": _allocate_registers,
    "pipeline-loops": _pipeline_loops,
    "overlap-softmax": _overlap_softmax,
    "peel-masked-iterations": _peel_masked_iterations,
    "mask-by-mma": _mask_by_mma,
    "mask-causal-by-mma": _mask_causal_by_mma,
    "rewrite-attention": _rewrite_attention,
    "form-clusters": _form_clusters,
    "multicast-cluster-copies": _multicast_cluster_copies,
    "hoist-invariant-descriptors": _hoist_invariant_descriptors,
}


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Tessera's passes together with xDSL's generic ones (canonicalize, cse, dce, ...)."""
    from xdsl.transforms import get_all_passes

    return {**get_all_passes(), **PASSES}


class PipelineError(ValueError):
    """A pipeline spec that does not parse, names an unknown pass, or gives a pass a bad option."""


def parse_pipeline(spec: str):
    """The xDSL `PassPipeline` of a spec written as for `tessera-opt -p` (e.g. 'canonicalize,cse'): passes and
    named pipelines (`default-pipeline`) over Tessera's and xDSL's passes. The one parser of every entry point
    (the Python API, tessera-opt, tessera-run).

    A spec that does not parse, an unknown pass or a bad option raises PipelineError (a ValueError) whose message
    is `invalid pass pipeline '<spec as written>'`, the column where the parser stopped if it did, and the
    reason; TypeError when `spec` is not a string."""
    from xdsl.passes import PassPipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    if not isinstance(spec, str):
        raise TypeError(f"a pipeline is a string such as 'canonicalize,cse'; got {type(spec).__name__}")
    try:
        check_option_keys(spec)
        # ArgSpecParseError derives from BaseException in xDSL 0.74, so it must be named here.
        return PassPipeline.parse_spec(all_passes(), expand_named_pipelines(spec))
    except ArgSpecParseError as error:
        # xDSL's message is a header, the position and the spec with a caret, then the reason; keep both ends
        # (the position is in the spec as written unless it named a pipeline, whose passes the parser saw)
        lines = str(error).strip().splitlines()
        position = lines[1].rsplit(":", 1)[-1] if len(lines) > 1 else "?"
        where = f" at column {position}" if expand_named_pipelines(spec) == spec else ""
        raise PipelineError(f"invalid pass pipeline '{spec}'{where}: {lines[-1].strip()}") from None
    except (ValueError, TypeError) as error:
        raise PipelineError(f"invalid pass pipeline '{spec}': {str(error).strip()}{did_you_mean(spec)}") from None


def did_you_mean(spec: str) -> str:
    """` (did you mean 'NAME'?)` for the first element of `spec` that names neither a pass (`all_passes`) nor a
    named pipeline but is close to one (`default-pipline`, `assign-swizle`); '' where there is none. `parse_pipeline`
    appends it to xDSL's "Unrecognized passes", which names the misspelt pass but not the pass meant."""
    import difflib

    known = [*all_passes(), *named_pipelines()]
    for element in _ELEMENT_SEPARATOR.split(spec):
        name = element.split("{", 1)[0].strip()
        if name and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            if close:
                return f" (did you mean '{close[0]}'?)"
    return ""


def pipeline_name(variable: str) -> str:
    """The `-p` name of a `*_PIPELINE` string of this module: `DEFAULT_PIPELINE` -> `default-pipeline`."""
    return variable.lower().replace("_", "-")


def named_pipelines() -> dict[str, str]:
    """The pipelines a spec may name as one element (`tessera-opt -p default-pipeline`, or
    `-p 'default-pipeline,cse'`), as MLIR registers named pass pipelines: `pipeline_name(V)` -> V for each
    `*_PIPELINE` string of this module."""
    return {pipeline_name(name): value for name, value in globals().items()
            if name.endswith("_PIPELINE") and isinstance(value, str)}


_ELEMENT_SEPARATOR = re.compile(r",(?![^{]*})")  # commas outside {options}


_OPTION_GROUP = re.compile(r"\{([^{}]*)\}")
_OPTION_KEY = re.compile(r"(?:^|\s)([\w-]+)\s*=")


def check_option_keys(spec: str) -> None:
    """ValueError where one pass of `spec` is given an option twice (`pipeline-loops{stages=2 stages=3}`, or
    `atomic-add` and `atomic_add`, the same field): xDSL's parser keeps the last one silently."""
    for group in _OPTION_GROUP.findall(spec):
        keys = [key.replace("-", "_") for key in _OPTION_KEY.findall(re.sub(r'"[^"]*"', '""', group))]
        if twice := sorted({key for key in keys if keys.count(key) > 1}):
            raise ValueError(f"option '{twice[0].replace('_', '-')}' is given more than once in {{{group}}}")


def expand_named_pipelines(spec: str) -> str:
    """`spec` with each element that is exactly a named pipeline's name (`named_pipelines`) replaced by that
    pipeline's passes; every other element (a pass, a pass with options, a malformed one) left as written."""
    if "-pipeline" not in spec:
        return spec
    named = named_pipelines()
    elements = _ELEMENT_SEPARATOR.split(spec)
    for element in elements:
        name = element.split("{", 1)[0].strip()
        if name in named and name != element.strip():
            raise ValueError(f"the named pipeline '{name}' takes no options; spell its passes out to give them "
                             f"options: {named[name]}")
    return ",".join(named.get(element.strip(), element) for element in elements)


def apply_pipeline(module, spec: str) -> None:
    """Apply a pass pipeline written as for `tessera-opt -p` to `module` in place (`parse_pipeline` says
    what a bad spec raises; what a pass refuses on this input is its own diagnostic). The default pipeline
    falls back to smaller configurations where the kernels' registers do not fit (`tessera.lowering.fallback`).
    Inside `tessera.lowering.memo.memoized_lowering()` a module lowered before by the same spec is not lowered
    again."""
    from tessera.lowering.fallback import apply_with_fallback
    from tessera.lowering.memo import lower_memoized

    pipeline = parse_pipeline(spec)

    def lower(module) -> None:
        with without_cyclic_gc():
            if falls_back(pipeline.passes):
                apply_with_fallback(module, fallback_ladder(),
                                    lambda configuration, m: apply_passes(parse_pipeline(configuration).passes, m))
                return
            apply_passes(pipeline.passes, module)

    lower_memoized(module, spec, lower)


def apply_pass(pass_: ModulePass, module, ctx=None) -> None:
    """Apply one pass to `module` in place, first refusing a module of the other level than the pass transforms
    (`tessera.ir.diagnostics.check_pass_input`: a PassInputError naming the pass and the level, located at the
    first kernel; a TesseraWarning where the module has nothing of either level). The one way every entry point
    applies a pass (`apply_pipeline`, `tessera.validate`, tessera-opt, tessera-run): a Target IR pass given Tile
    IR (`warp-specialize`, `allocate-registers`) or a Tile IR pass given Target IR (`pipeline-loops`, a second
    `convert-tile-to-sm90`) would otherwise do nothing, silently, and the output lack what was asked for."""
    from tessera.ir import make_context
    from tessera.ir.diagnostics import check_pass_input

    check_pass_input(pass_, module)
    pass_.apply(make_context() if ctx is None else ctx, module)


def apply_passes(passes, module) -> None:
    """Apply `passes` (a parsed pipeline's `.passes`) to `module` in place, in order, each by `apply_pass`
    with one context."""
    from tessera.ir import make_context

    ctx = make_context()
    for pass_ in passes:
        apply_pass(pass_, module, ctx)


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (and restored after it, if it was on). A pipeline
    allocates hundreds of thousands of IR objects that live until it ends, and the collector's passes over
    them were about 5-9% of a flash attention compile; what becomes garbage meanwhile is collected once the
    collector runs again (reference counting frees everything outside cycles at once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def allocated(pipeline: str) -> str:
    """The register-allocated form of a pipeline that ends in Target IR: `pipeline` followed by
    `allocate-registers` (unchanged if it already ends with it). Every `*_PIPELINE` below stops at Target IR
    except the two allocated forms, `DEFAULT_PIPELINE` and `PTX_PIPELINE`, which are derived by this."""
    return pipeline if pipeline.split(",")[-1].strip() == "allocate-registers" else pipeline + ",allocate-registers"


TARGET_PIPELINE = "assign-swizzle,convert-tile-to-sm90,canonicalize,compute-distinct-lanes,cse,slab-elementwise-chains,rematerialize-constants"
"""Tile IR to sm_90a Target IR, single-stage: one K/V (or K) tile in flight, 256 threads, no producer
warpgroup, no setmaxnreg. The simplest kernel, for tests and comparison; not the default (`DEFAULT_PIPELINE`)."""

PIPELINED_PIPELINE = (
    "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations{branch=true},mask-by-mma,"
    "mask-causal-by-mma,convert-tile-to-sm90,canonicalize,compute-distinct-lanes,cse,slab-elementwise-chains,"
    "rematerialize-constants"
)
"""Tile IR to Target IR with the K/V (and GEMM K) loops pipelined over two-slot rings, each trip's score mma
issued before the previous trip's P.V mma (overlap-softmax), the masks run only on the trips that need them,
under a warp-uniform branch in the one loop (peel-masked-iterations{branch=true}: the key-block body printed
once, not again as a masked tail loop), a bounds mask of keys past a tensor's end added by the tensor core
(mask-by-mma: one wgmma of a bias tile, no select per score), and a causal diagonal's mask too where every row
of the query block sees key 0 (mask-causal-by-mma: four wgmmas per warpgroup reading windows of a table written
once; the select kept for the other blocks)."""

SPECIALIZED_PIPELINE = PIPELINED_PIPELINE + ",warp-specialize,multicast-cluster-copies,hoist-invariant-descriptors"
"""PIPELINED_PIPELINE with a TMA producer warpgroup and setmaxnreg budgets: the FlashAttention-3 structure
(flash head_dim 128: a 479-instruction main loop under ptxas 13.0, two wgmma groups in flight), ending in Target IR. Other
options (`warp-specialize{pingpong=true}`, more stages): bench/pipeline.py. `multicast-cluster-copies` leaves
kernels without a `tile.cluster` unchanged; a clustered kernel's shared refills become TMA multicasts.
`hoist-invariant-descriptors` computes the Q operand's wgmma descriptors once where the budgets allow."""

PINGPONG_PIPELINE = allocated(SPECIALIZED_PIPELINE.replace(",warp-specialize,", ",warp-specialize{pingpong=true},", 1))
"""`DEFAULT_PIPELINE` with the consumer warpgroups taking turns at the tensor core (`warp-specialize{pingpong=true}`):
each issues its k-step's wgmmas after the other has committed its own, so one warpgroup's wait for its group
overlaps the other's wgmmas. The GEMM's "-pingpong" schedules (`tessera.kernels.gemm.GEMM_SCHEDULES`); no
fallback (a kernel whose registers do not fit is refused)."""

DEFAULT_PIPELINE = allocated(SPECIALIZED_PIPELINE)
"""The full pipeline: `SPECIALIZED_PIPELINE` then `allocate-registers`, from Tile IR to register-allocated
Target IR ready for the PTX printer. Where a kernel's registers do not fit it, it falls back to two stages
without a producer warpgroup, then to single-stage, with a warning (`tessera.lowering.fallback`). The default of every entry point: `tessera.compile` (every target),
`tessera.interpret(level="target"|"ptx")`, `tessera.attention` and `tessera.runtime`, `tessera-run --level
target`, and the README's main job (`tessera-opt -p default-pipeline`: each `*_PIPELINE` string here is a
pipeline `-p` takes by its kebab-case name, `named_pipelines`)."""

PROGRAM_ORDER_PIPELINE = allocated(SPECIALIZED_PIPELINE.replace("convert-tile-to-sm90",
                                                                 "convert-tile-to-sm90{mma-order=program}", 1))
"""`DEFAULT_PIPELINE` with each block's wgmma groups in the builder's order and every group retired at a barrier
(`convert-tile-to-sm90{mma-order=program}`: the placement before FlashAttention-3's, for comparison: the GPU
session's backward rows `gpu_plan.backward_order_rows`); no fallback (a kernel whose registers do not fit is
refused)."""

PTX_PIPELINE = allocated(TARGET_PIPELINE)
"""The single-stage `TARGET_PIPELINE` with registers allocated: a named option (the slower kernel), kept for
the tests that compare it with `DEFAULT_PIPELINE`."""


SPILL_PIPELINE = TARGET_PIPELINE.replace("convert-tile-to-sm90", "convert-tile-to-sm90{mma-order=program}", 1) \
    + ",allocate-registers{spill=true}"
"""`PTX_PIPELINE` letting ptxas spill the registers past 255 a thread (`allocate-registers{spill=true}`), with the
wgmma groups in the builder's order (`mma-order=program`: no group issued ahead of a wait, so fewer accumulators
live at once and the least to spill): the default pipeline's last rung (`fallback_ladder`), never taken unless
asked for otherwise."""


@cache
def fallback_ladder() -> tuple:
    """The default pipeline's configurations, largest first (`tessera.lowering.fallback`): warp-specialized
    with two stages (and its forms with dQ by `red`, where auto's bulk reduction does not fit the registers, and
    with the wgmma groups in the builder's order, where the default order does not), two stages without a
    producer warpgroup, single-stage (each also in the builder's order where the default order does not fit),
    then single-stage spilling."""
    from tessera.lowering.fallback import Configuration

    return (
        Configuration("warp-specialized with two stages", DEFAULT_PIPELINE,
                      red=_with_options(DEFAULT_PIPELINE, "atomic-add=red"),
                      program=PROGRAM_ORDER_PIPELINE,
                      program_red=_with_options(DEFAULT_PIPELINE, "atomic-add=red mma-order=program")),
        Configuration("two stages without a producer warpgroup", allocated(PIPELINED_PIPELINE),
                      program=_with_options(allocated(PIPELINED_PIPELINE), "mma-order=program")),
        Configuration("single-stage", PTX_PIPELINE, program=_with_options(PTX_PIPELINE, "mma-order=program")),
        Configuration("single-stage spilling past 255 registers", SPILL_PIPELINE, spills=True),
    )


def _with_options(pipeline: str, options: str) -> str:
    """`pipeline` with convert-tile-to-sm90 given `options` (it has none in the pipelines here)."""
    return pipeline.replace("convert-tile-to-sm90", f"convert-tile-to-sm90{{{options}}}", 1)


@cache
def _default_passes() -> tuple:
    return tuple(parse_pipeline(DEFAULT_PIPELINE).passes)


def falls_back(passes) -> bool:
    """Whether a pipeline of these passes is the default one (and so falls back to `fallback_ladder()`)."""
    passes = tuple(passes)
    # The pass count first: building the default pipeline to compare with imports every pass (a quarter second
    # of every `tessera-opt` start-up, with or without -p).
    if len(passes) != len(_ELEMENT_SEPARATOR.split(DEFAULT_PIPELINE)):
        return False
    return passes == _default_passes()
