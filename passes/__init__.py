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

from collections.abc import Callable

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


PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "assign-swizzle": _assign_swizzle,
    "convert-tile-to-sm90": _convert_tile_to_sm90,
    "rematerialize-constants": _rematerialize_constants,
    "warp-specialize": _warp_specialize,
    "allocate-registers": _allocate_registers,
    "pipeline-loops": _pipeline_loops,
    "overlap-softmax": _overlap_softmax,
    "peel-masked-iterations": _peel_masked_iterations,
}


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Tessera's passes together with xDSL's generic ones (canonicalize, cse, dce, ...)."""
    from xdsl.transforms import get_all_passes

    return {**get_all_passes(), **PASSES}


def apply_pipeline(module, spec: str) -> None:
    """Apply a pass pipeline written as for `tessera-opt -p` (e.g. 'canonicalize,cse') to `module` in place."""
    from xdsl.passes import PassPipeline

    from tessera.ir import make_context

    PassPipeline.parse_spec(all_passes(), spec).apply(make_context(), module)


TARGET_PIPELINE = "assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
"""Tile IR to sm_90a Target IR, single-stage (`tessera-opt -p` accepts it as written)."""

PIPELINED_PIPELINE = (
    "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations,"
    "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
)
"""K/V (and GEMM K) loops pipelined over two-slot rings, each trip's score mma issued before the previous
trip's P.V mma (overlap-softmax), masked iterations peeled off the steady state."""

SPECIALIZED_PIPELINE = PIPELINED_PIPELINE + ",warp-specialize"
"""PIPELINED_PIPELINE with a TMA producer warpgroup: the FlashAttention-3 structure, the full pipeline of the
README's main job (flash head_dim 128: a 497-instruction main loop, two wgmma groups in flight). Other options
(`warp-specialize{pingpong=true}`, more stages): bench/pipeline.py."""

PTX_PIPELINE = TARGET_PIPELINE + ",allocate-registers"
"""Tile IR to register-allocated Target IR, ready for the PTX printer: the deepest pipeline."""
