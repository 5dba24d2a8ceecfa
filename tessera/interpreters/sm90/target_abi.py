"""A Target IR kernel as the CTA simulator launches it: its attributes and arguments, and their values.

A target kernel is a `func.func` with

    sm90.kernel = {threads = 256 : i64, smem_bytes = 98368 : i64}   threads per CTA (1-D), dynamic smem bytes
    tile.kernel, tile.grid                                          copied from the Tile kernel

and arguments, each carrying the `tile.dims`/`tile.role` of the Tile argument it implements and one of

    !sm90.tensormap {sm90.source = N, sm90.box = [..] (innermost first), sm90.swizzle = 128}
    i64             {sm90.source = N}        the address of tensor N's first byte
    index           {sm90.size = "seq_q"}    a named size

where N indexes the Tile-level argument list (inputs, outputs, scratch in order). `target_kernel` reads them
(ValueError names what is missing or wrong); `argument_values` gives each argument's value for a launch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IndexType, IntegerAttr, IntegerType, ModuleOp, StringAttr

from tessera.dialects import sm90
from tessera.dialects.tile_types import DimsAttr
from tessera.interpreters.sm90.global_memory import GlobalMemory
from tessera.interpreters.sm90.program import CompiledKernel
from tessera.interpreters.sm90.registers import full
from tessera.interpreters.sm90.tma import TensorMap
from tessera.kernel_abi import BOX_ATTR, DIMS_ATTR, GRID_ATTR, ROLE_ATTR, SIZE_ATTR, SOURCE_ATTR, SWIZZLE_ATTR
from tessera.target_kernel_abi import launch_attributes


@dataclass(frozen=True)
class TargetArg:
    """One argument of a target kernel: `kind` is "tensormap", "pointer" or "size"."""

    name: str
    kind: str
    source: int | None = None
    size: str | None = None
    box: tuple[int, ...] = ()
    swizzle: int = 0
    dims: DimsAttr | None = None
    role: str = "in"


@dataclass(frozen=True)
class TargetKernel:
    op: func.FuncOp
    name: str
    threads: int
    smem_bytes: int
    grid: DimsAttr
    args: tuple[TargetArg, ...]

    @cached_property
    def program(self) -> CompiledKernel:
        """The kernel compiled to closures (`program`): its structure checked once per launch, not per CTA."""
        return CompiledKernel.of(self.op)

    def grid_size(self, sizes: Mapping[str, int]) -> tuple[int, int, int]:
        grid = self.grid.evaluate(sizes)
        return tuple(grid) + (1,) * (3 - len(grid))  # type: ignore[return-value]


def _int_entry(entries: Mapping, key: str, where: str) -> int:
    value = entries.get(key)
    if not isinstance(value, IntegerAttr):
        raise ValueError(f"{where} needs an integer '{key}'")
    return value.value.data


def target_kernel(op: func.FuncOp, program: CompiledKernel | None = None) -> TargetKernel:
    """Read a target kernel's launch attributes and arguments; ValueError names what is missing or wrong.
    `program`: the kernel's `CompiledKernel.of` where the caller has it (its `program` then, not a second check
    of the kernel's structure)."""
    name = op.sym_name.data
    threads, smem_bytes = launch_attributes(op)
    grid = op.attributes.get(GRID_ATTR)
    if not isinstance(grid, DimsAttr):
        raise ValueError(f"@{name} needs '{GRID_ATTR} = #tile.dims<...>'")
    block_args = op.body.blocks.first.args if op.body.blocks else ()
    arg_attrs = op.arg_attrs.data if op.arg_attrs is not None else [DictionaryAttr({})] * len(op.function_type.inputs)
    args = []
    for i, (ty, attrs) in enumerate(zip(op.function_type.inputs.data, arg_attrs)):
        attrs = attrs.data
        arg_name = block_args[i].name_hint if i < len(block_args) and block_args[i].name_hint else f"arg{i}"
        where = f"@{name} argument {i} (%{arg_name})"
        dims = attrs.get(DIMS_ATTR)
        role = attrs.get(ROLE_ATTR, StringAttr("in"))
        common = {"name": arg_name, "dims": dims if isinstance(dims, DimsAttr) else None,
                  "role": role.data if isinstance(role, StringAttr) else "in"}
        if isinstance(ty, sm90.TensorMapType):
            box = attrs.get(BOX_ATTR)
            if not isinstance(box, ArrayAttr) or not all(isinstance(b, IntegerAttr) for b in box.data):
                raise ValueError(f"{where}: a tensor map needs '{BOX_ATTR} = [..]' (innermost first)")
            args.append(TargetArg(kind="tensormap", source=_int_entry(attrs, SOURCE_ATTR, where),
                                  box=tuple(b.value.data for b in box.data),
                                  swizzle=_int_entry(attrs, SWIZZLE_ATTR, where), **common))
        elif isinstance(ty, IntegerType) and ty.width.data == 64:
            args.append(TargetArg(kind="pointer", source=_int_entry(attrs, SOURCE_ATTR, where), **common))
        elif isinstance(ty, IndexType):
            size = attrs.get(SIZE_ATTR)
            if not isinstance(size, StringAttr):
                raise ValueError(f"{where}: an index argument needs '{SIZE_ATTR} = \"name\"'")
            args.append(TargetArg(kind="size", size=size.data, **common))
        else:
            raise ValueError(f"{where}: target kernel arguments are !sm90.tensormap, i64 or index, got {ty}")
    kernel = TargetKernel(op, name, threads, smem_bytes, grid, tuple(args))
    if program is not None:
        kernel.__dict__["program"] = program  # the cached_property's value (the dataclass is frozen)
    return kernel


def module_of(op: func.FuncOp) -> ModuleOp:
    """The module holding `op` (an empty one if none)."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, ModuleOp):
        parent = parent.parent_op()
    return parent if parent is not None else ModuleOp([])


def argument_values(kernel: TargetKernel, arrays: Sequence[np.ndarray], sizes: Mapping[str, int],
                     memory: GlobalMemory) -> list:
    """The per-thread (or, for tensor maps, shared) value of each kernel argument of a launch: `arrays` (the
    tensors by `sm90.source`) and `sizes`; ValueError names the argument that does not fit."""
    values = []
    for i, arg in enumerate(kernel.args):
        where = f"@{kernel.name} argument {i} (%{arg.name})"
        if arg.kind == "size":
            if arg.size not in sizes:
                raise ValueError(f"{where}: no size named '{arg.size}' (sizes: {', '.join(sizes) or 'none'})")
            values.append(full(IndexType(), kernel.threads, sizes[arg.size]))
            continue
        if not 0 <= arg.source < len(arrays):
            raise ValueError(f"{where}: sm90.source = {arg.source}, but there are {len(arrays)} tensors")
        array = arrays[arg.source]
        if arg.dims is not None:
            try:
                shape = arg.dims.evaluate(sizes)
            except (KeyError, ValueError) as error:
                raise ValueError(f"{where}: cannot evaluate tile.dims {arg.dims} with sizes {dict(sizes)}: "
                                 f"{error}") from None
            if tuple(array.shape) != tuple(shape):
                raise ValueError(f"{where}: tensor {arg.source} has shape {array.shape}, but tile.dims {arg.dims} "
                                 f"gives {shape}")
        if arg.kind == "pointer":
            try:
                address = memory.pointer(arg.source)
            except ValueError as error:
                raise ValueError(f"{where}: {error}") from None
            values.append(full(IntegerType(64), kernel.threads, address))
        else:
            try:
                values.append(TensorMap.encode(arg.name, array, arg.box, arg.swizzle))
            except ValueError as error:
                raise ValueError(f"{where}: cuTensorMapEncodeTiled would refuse this map: {error}") from None
    return values


__all__ = ["TargetArg", "TargetKernel", "argument_values", "module_of", "target_kernel"]
