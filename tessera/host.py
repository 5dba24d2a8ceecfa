"""What a runtime needs to launch a compiled kernel, as data: the host-side description.

For each Target IR kernel: its name, block (threads, 1, 1), grid (from the named sizes), the dynamic shared
memory to request (the kernel's bytes plus 1023 to align its base to 1024, as the PTX does), and its
parameters in order — tensor maps (with the cuTensorMapEncodeTiled arguments each needs, for given sizes),
global pointers, and 32-bit sizes — each with the Tile IR argument it stands for, and how the kernel copies
each tensor it stages in shared memory (`copies`: "tma" through a tensor map, "ld.global" by every thread
where the rows need not start on 16 bytes). A kernel that declares a cluster (`tile.cluster`) is launched
with `cluster(sizes)`: its shape where it divides the grid, else clusters of one block, and `cluster_note`
says why (the kernel reads the shape it got from %cluster_nctarank). A kernel the default pipeline compiled
with a smaller configuration than it asked for (its registers did not fit) says which and why in
`pipeline_note` (`tessera.lowering.fallback`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tessera.cluster import CLUSTER_ATTR, kernel_cluster, launch_cluster
from tessera.interpreters.sm90.target_abi import TargetKernel, target_kernel
from tessera.index_tables import TABLES_ATTR, SequenceRange, parse_tables
from tessera.kernel_abi import COPY_ATTR, ELEMENT_ATTR, is_target_kernel
from tessera.lowering.fallback import PIPELINE_NOTE_ATTR
from tessera.numerics import numpy_dtype
from tessera.ptx import launch_smem_bytes
from tessera.sm90 import facts

_DATA_TYPE = {"bfloat16": facts.TensorMapDataType.BFLOAT16, "float16": facts.TensorMapDataType.FLOAT16,
              "float32": facts.TensorMapDataType.FLOAT32, "int32": facts.TensorMapDataType.INT32,
              # 8-bit floats move as bytes: the tensor map has no FP8 data type on sm_90 (FlashAttention-3's UINT8)
              "float8_e4m3fn": facts.TensorMapDataType.UINT8, "float8_e5m2": facts.TensorMapDataType.UINT8}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: kind "tensormap" (`.param .align 64 .b8 [128]`), "pointer" (`.u64`) or "size"
    (`.u32`); `source` is the index of the Tile IR argument it stands for, `size` the named size."""

    name: str
    kind: str
    source: int | None = None
    size: str | None = None
    copy: str | None = None
    """How the kernel copies this tensor into shared memory: "tma" (a tensor map), "ld.global" (a pointer
    read by every thread), None (not copied: read into registers or written)."""


@dataclass(frozen=True)
class HostDescription:
    kernel: str
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    params: tuple[Param, ...]
    op: func.FuncOp

    @cached_property
    def target(self) -> TargetKernel:
        """The Target IR kernel's launch attributes and arguments (`target_kernel`), read once: a launch asks
        for them on every call (the op is the compiled kernel's, never changed after compiling)."""
        return target_kernel(self.op)

    @cached_property
    def tables(self) -> tuple[SequenceRange, ...]:
        """What the kernel's index tables must hold (`tile.tables`, kept from its Tile IR by convert-tile-to-sm90;
        `tessera.index_tables`): every launch checks the tables it can read against it."""
        ranges = parse_tables(self.op.attributes.get(TABLES_ATTR))
        inputs = {a.source for a in self.target.args if a.source is not None and a.role == "in"}
        if not isinstance(ranges, str) and any(i not in inputs for r in ranges for i in r.tables):
            ranges = f"'{TABLES_ATTR}' names an argument that is not one of the kernel's inputs {sorted(inputs)}"
        if isinstance(ranges, str):
            raise ValueError(f"@{self.kernel}: {ranges}")
        return ranges

    @property
    def copies(self) -> dict[int, str]:
        """{Tile IR argument index: "tma" or "ld.global"} for every tensor the kernel stages in shared memory."""
        return {p.source: p.copy for p in self.params if p.copy is not None}

    def grid(self, sizes: Mapping[str, int]) -> tuple[int, int, int]:
        return self.target.grid_size(sizes)

    @property
    def clustered(self) -> bool:
        """Whether the kernel declares a cluster (`tile.cluster`): its PTX says `.explicitcluster`, so every
        launch gives a cluster shape (`cluster`), (1, 1, 1) included."""
        return CLUSTER_ATTR in self.op.attributes

    def cluster(self, sizes: Mapping[str, int]) -> tuple[int, int, int] | None:
        """The cluster shape to launch with for these sizes: the declared one where it divides the grid, else
        (1, 1, 1) (`cluster_note` says why); None for a kernel that declares no cluster (launched without)."""
        if not self.clustered:
            return None
        return launch_cluster(kernel_cluster(self.op), self.grid(sizes))[0]

    def cluster_note(self, sizes: Mapping[str, int]) -> str | None:
        """Why a clustered kernel falls back to clusters of one block for these sizes (e.g. an odd number of
        query blocks for clusters of two), or None."""
        if not self.clustered:
            return None
        return launch_cluster(kernel_cluster(self.op), self.grid(sizes))[1]

    @property
    def pipeline_note(self) -> str | None:
        """Which smaller configuration the default pipeline compiled the kernel with, and why the larger ones
        did not fit (`tessera.lowering.fallback`); None for a kernel compiled as its pipeline says."""
        note = self.op.attributes.get(PIPELINE_NOTE_ATTR)
        return note.data if note is not None else None

    def tensor_maps(self, sizes: Mapping[str, int]) -> dict[str, facts.TensorMapSpec]:
        """The cuTensorMapEncodeTiled arguments of each tensor-map parameter for row-major tensors of the
        given sizes: data type, dims and byte strides (innermost first), box, element strides, swizzle,
        interleave none, OOB fill none (zeros)."""
        maps = {}
        for arg, block_arg, attrs in zip(self.target.args, self.op.body.blocks.first.args, self.op.arg_attrs.data):
            if arg.kind != "tensormap":
                continue
            dtype = numpy_dtype(attrs.data[ELEMENT_ATTR])
            dims = tuple(reversed(arg.dims.evaluate(sizes)))
            e = dtype.itemsize
            strides = tuple(math.prod(dims[:i]) * e for i in range(1, len(dims)))
            spec = facts.TensorMapSpec(_DATA_TYPE[dtype.name], dims, strides, tuple(arg.box),
                                       swizzle=facts.tensor_map_swizzle(arg.swizzle))
            spec.validate()
            maps[arg.name] = spec
        return maps

    def as_dict(self, sizes: Mapping[str, int] | None = None) -> dict:
        out = {"kernel": self.kernel, "block": self.block, "dynamic_smem_bytes": self.dynamic_smem_bytes,
               "params": [asdict(p) for p in self.params], "copies": self.copies}
        if self.clustered:
            out["declared_cluster"] = kernel_cluster(self.op)
        if self.pipeline_note is not None:
            out["pipeline_note"] = self.pipeline_note
        if sizes is not None:
            out["grid"] = self.grid(sizes)
            if self.clustered:
                out["cluster"] = self.cluster(sizes)
                out["cluster_note"] = self.cluster_note(sizes)
            out["tensor_maps"] = {k: asdict(v) for k, v in self.tensor_maps(sizes).items()}
        return out


def describe(module: ModuleOp) -> list[HostDescription]:
    """The host-side description of every Target IR kernel of `module` (e.g. `tessera.compile(m, "target")`)."""
    found = []
    for op in module.walk():
        if is_target_kernel(op):
            kernel = target_kernel(op)
            params = tuple(Param(a.name, a.kind, a.source, a.size, _copy_path(a.kind, attrs.data))
                           for a, attrs in zip(kernel.args, op.arg_attrs.data))
            found.append(HostDescription(kernel.name, (kernel.threads, 1, 1), launch_smem_bytes(op), params, op))
    return found


def _copy_path(kind: str, attrs) -> str | None:
    if kind == "tensormap":
        return "tma"
    path = attrs.get(COPY_ATTR)
    return path.data if path is not None else None
