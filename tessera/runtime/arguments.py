"""The tensors a compiled kernel takes and the parameter buffer it is launched with, from its host-side
description (`tessera.host.HostDescription`). Pure host code: no driver, testable on a CPU.

A kernel's tensors are numbered as its Tile IR arguments (`sm90.source`): attention Q, K, V, O; GEMM A, B,
C. Each is reached through one or more parameters (a tensor map, a global pointer) whose Target IR argument
carries the tensor's named dimensions (`tile.dims`), role and element type; the named sizes are bound from
the inputs' shapes and every tensor is checked against them before anything is encoded or launched.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tessera.dialects.tile_types import DimsAttr
from tessera.host import HostDescription
from tessera.kernel_abi import (
    ELEMENT_ATTR, bind_launch_sizes, check_divisible, check_multiples, divisible_sizes, kernel_kind,
    launch_size_names, size_multiples,
)
from tessera.numerics import numpy_dtype
from tessera.sm90 import facts

SIZE_PARAM_LIMIT = 2**32
"""Named sizes are `.u32` parameters."""

_ROLE_NOUNS = {"in": "input", "out": "output", "scratch": "scratch buffer"}


@dataclass(frozen=True)
class KernelTensor:
    """One tensor of a kernel: its Tile IR argument index, the parameters standing for it, its role
    ("in", "out", "scratch"), named dimensions and element type."""

    source: int
    params: tuple[str, ...]
    role: str
    dims: DimsAttr
    dtype: np.dtype

    @property
    def label(self) -> str:
        return f"tensor {self.source} ({', '.join(self.params)})"


@dataclass(frozen=True)
class TensorView:
    """A tensor as a launch sees it: device address, shape (outermost first), byte strides (as NumPy and
    PyTorch order them, outermost first) and element type."""

    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def contiguous(cls, address: int, shape: Sequence[int], dtype) -> TensorView:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        strides = tuple(math.prod(shape[i + 1:]) * dtype.itemsize for i in range(len(shape)))
        return cls(int(address), shape, strides, dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Row-major without gaps (strides of extent-1 dimensions do not matter)."""
        row_major = TensorView.contiguous(self.address, self.shape, self.dtype).strides
        return all(d == 1 or s == r for d, s, r in zip(self.shape, self.strides, row_major))


def kernel_tensors(host: HostDescription) -> tuple[KernelTensor, ...]:
    """The tensors `host`'s kernel takes, by Tile IR argument index (read once per host description: every
    launch asks)."""
    known = _TENSORS.get(id(host))
    if known is not None and known[0] is host:
        return known[1]
    found = _read_tensors(host)
    if len(_TENSORS) >= TENSORS_KEPT:
        _TENSORS.pop(next(iter(_TENSORS)))
    _TENSORS[id(host)] = (host, found)  # the host itself is kept: its id names no other while it is here
    return found


TENSORS_KEPT = 256
"""Host descriptions whose tensors `kernel_tensors` keeps (the first kept is dropped for a new one)."""
_TENSORS: dict[int, tuple[HostDescription, tuple[KernelTensor, ...]]] = {}


def _read_tensors(host: HostDescription) -> tuple[KernelTensor, ...]:
    found: dict[int, KernelTensor] = {}
    for arg, attrs in zip(host.target.args, host.op.arg_attrs.data):
        if arg.source is None:
            continue
        dtype = numpy_dtype(attrs.data[ELEMENT_ATTR])
        known = found.get(arg.source)
        if known is None:
            found[arg.source] = KernelTensor(arg.source, (arg.name,), arg.role, arg.dims, dtype)
        elif (known.role, known.dims, known.dtype) != (arg.role, arg.dims, dtype):
            raise ValueError(f"@{host.kernel}: parameters {known.params[0]} and {arg.name} stand for tensor "
                             f"{arg.source} but disagree on its role, dims or element type")
        else:
            found[arg.source] = KernelTensor(arg.source, known.params + (arg.name,), known.role, known.dims, dtype)
    return tuple(found[s] for s in sorted(found))


def bind_sizes(host: HostDescription, shapes: Mapping[int, Sequence[int]],
               launch: Mapping[str, int] | None = None) -> dict[str, int]:
    """The named sizes, bound from the shapes of the input tensors (`shapes` by source), and the kernel's
    launch sizes from `launch` (`tessera.kernel_abi`); ValueError names the tensor and dimension that
    disagree, a size no input defines, or a launch size not given."""
    sizes: dict[str, int] = {}
    for tensor in kernel_tensors(host):
        if tensor.role != "in":
            continue
        if tensor.source not in shapes:
            raise ValueError(f"@{host.kernel}: no array for input {tensor.label}")
        shape = tuple(int(d) for d in shapes[tensor.source])
        if len(shape) != len(tensor.dims):
            raise ValueError(f"@{host.kernel}: input {tensor.label} must have rank {len(tensor.dims)} "
                             f"({tensor.dims}), got shape {shape}")
        for axis, (expr, actual) in enumerate(zip(tensor.dims, shape)):
            what = f"@{host.kernel}: input {tensor.label}, dimension {axis} ({expr})"
            if actual <= 0:
                raise ValueError(f"{what}: sizes must be positive, got {actual}")
            if expr.is_constant:
                if actual != expr.value.data:
                    raise ValueError(f"{what}: the kernel is compiled for {expr.value.data}, got {actual}")
            elif expr.is_name and sizes.setdefault(expr.symbol.data, actual) != actual:
                raise ValueError(f"{what}: '{expr.symbol.data}' is {sizes[expr.symbol.data]} elsewhere, got {actual}")
    check_divisible(host.kernel, divisible_sizes(host.op), sizes, kernel_kind(host.op))
    check_multiples(host.kernel, size_multiples(host.op), sizes)
    # launch sizes first: one that a tensor's dimensions use is a kernel parameter too (`tessera.kernel_abi`)
    sizes = bind_launch_sizes(host.kernel, launch_size_names(host.op), sizes, launch or {})
    for param in host.params:
        if param.kind == "size" and param.size not in sizes:
            raise ValueError(f"@{host.kernel}: parameter {param.name} needs the size '{param.size}', which no input "
                             f"defines (sizes: {', '.join(sizes) or 'none'})")
        if param.kind == "size" and not 0 <= sizes[param.size] < SIZE_PARAM_LIMIT:
            raise ValueError(f"@{host.kernel}: size {param.size} = {sizes[param.size]} does not fit the kernel's "
                             f"32-bit parameter {param.name}")
    return sizes


def check_views(host: HostDescription, sizes: Mapping[str, int], views: Mapping[int, TensorView]) -> None:
    """Every tensor has a view of the shape its dims give and the kernel's element type; tensors reached
    through a plain pointer are row-major (the kernel computes their addresses itself)."""
    pointer_sources = {p.source for p in host.params if p.kind == "pointer"}
    for tensor in kernel_tensors(host):
        view = views.get(tensor.source)
        if view is None:
            raise ValueError(f"@{host.kernel}: no array for {_ROLE_NOUNS.get(tensor.role, tensor.role)} "
                             f"{tensor.label}")
        shape = tensor.dims.evaluate(sizes)
        if tuple(view.shape) != tuple(shape):
            raise ValueError(f"@{host.kernel}: {tensor.label} must have shape {shape} ({tensor.dims}), "
                             f"got {tuple(view.shape)}")
        if view.dtype != tensor.dtype:
            raise ValueError(f"@{host.kernel}: {tensor.label} must be {tensor.dtype.name}, got {view.dtype.name}")
        if tensor.source in pointer_sources and not view.is_contiguous:
            raise ValueError(f"@{host.kernel}: {tensor.label} is addressed by the kernel as a row-major array and "
                             f"must be contiguous, got byte strides {view.strides}")


class ParameterBuffer:
    """A kernel's parameters as cuLaunchKernel(Ex) takes them: an array of pointers to each parameter's value
    (at `address`), followed by the values, in one host buffer (`storage`). The driver copies the values at
    launch."""

    def __init__(self, storage: ctypes.Array, lengths: Sequence[int]):
        self.storage, self.lengths = storage, tuple(lengths)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.storage)

    def value_bytes(self, index: int) -> bytes:
        """The bytes parameter `index` points to (what the driver will copy)."""
        (pointer,) = struct.unpack_from("<Q", self.storage, 8 * index)
        return ctypes.string_at(pointer, self.lengths[index])


_VALUE_BYTES = {"tensormap": facts.TENSOR_MAP_BYTES, "pointer": 8, "size": 4}
"""The bytes of each kind of parameter's value: `.param .align 64 .b8 [128]`, `.u64`, `.u32`."""


class ParameterLayout:
    """Where each parameter of `host`'s kernel launched over `sizes` sits in its `ParameterBuffer` (the array of
    pointers first, then every value 8-byte aligned), with the named sizes written once into a template; `pack`
    copies the template and writes a launch's device addresses, encoded tensor maps and the pointers to the
    values. ValueError names a size that does not fit its `.u32` parameter and a parameter of unknown kind."""

    def __init__(self, host: HostDescription, sizes: Mapping[str, int]):
        self.kernel = host.kernel
        offsets, lengths, self.pointers, self.maps = [], [], [], []
        total = 8 * max(len(host.params), 1)
        for param in host.params:
            if param.kind not in _VALUE_BYTES:
                raise ValueError(f"@{host.kernel}: parameter {param.name} has unknown kind '{param.kind}'")
            offsets.append(total)
            lengths.append(_VALUE_BYTES[param.kind])
            total += -(-lengths[-1] // 8) * 8
        self.offsets, self.lengths = tuple(offsets), tuple(lengths)
        self.template = bytearray(total)
        self._storage = ctypes.c_char * total
        self._header = struct.Struct(f"<{len(offsets)}Q")
        for param, offset in zip(host.params, offsets):
            if param.kind == "size":
                value = sizes[param.size]
                if not 0 <= value < SIZE_PARAM_LIMIT:
                    raise ValueError(f"@{host.kernel}: size {param.size} = {value} does not fit the 32-bit "
                                     f"parameter {param.name}")
                struct.pack_into("<I", self.template, offset, value)
            elif param.kind == "pointer":
                self.pointers.append((offset, param.source))
            else:
                self.maps.append((offset, param.name))

    def pack(self, addresses: Mapping[int, int], tensor_maps: Mapping[str, bytes]) -> ParameterBuffer:
        """The buffer of a launch on the tensors at `addresses` (device addresses by Tile IR argument index)
        with the encoded `tensor_maps` (128 bytes each, by parameter name)."""
        values = bytearray(self.template)
        for offset, source in self.pointers:
            struct.pack_into("<Q", values, offset, addresses[source])
        for offset, name in self.maps:
            encoded = tensor_maps[name]
            if len(encoded) != facts.TENSOR_MAP_BYTES:
                raise ValueError(f"@{self.kernel}: tensor map {name} is {len(encoded)} bytes, "
                                 f"not {facts.TENSOR_MAP_BYTES}")
            values[offset:offset + facts.TENSOR_MAP_BYTES] = encoded
        storage = self._storage.from_buffer(values)  # the same memory, kept alive by the array
        base = ctypes.addressof(storage)
        self._header.pack_into(values, 0, *(base + offset for offset in self.offsets))
        return ParameterBuffer(storage, self.lengths)


def pack_parameters(host: HostDescription, sizes: Mapping[str, int], views: Mapping[int, TensorView],
                    tensor_maps: Mapping[str, bytes]) -> ParameterBuffer:
    """The parameter buffer of `host`'s kernel: each tensor map's 128 encoded bytes (`.param .align 64 .b8
    [128]`), each pointer's device address (`.u64`), each named size (`.u32`)."""
    layout = ParameterLayout(host, sizes)
    return layout.pack({source: views[source].address for _, source in layout.pointers}, tensor_maps)
