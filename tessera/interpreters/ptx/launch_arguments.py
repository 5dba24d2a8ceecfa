"""`launch`'s arguments checked and marshalled (see `launcher`): the kinds of `launch`'s own arguments, grid, block
and cluster shapes against the driver's limits and the entry's directives, scalar parameters to their bytes
(range-checked), `TensorMapArg`s to tensor-map objects over their placed arrays, and the host memory a launch
needs (`limits.check_memory`), all before anything is allocated.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tessera.interpreters.ptx.tma_boxes import TensorMapObject
from tessera.interpreters.ptx.params import ParamStruct, TensorMapArg
from tessera.interpreters.ptx.state import fail
from tessera.interpreters.ptx.syntax import Module
from tessera.interpreters.ptx.types import ptx_type
from tessera.sm90 import facts


def map_object(where: str, name: str, value: TensorMapArg, args: list, buffers: dict, source: str) -> TensorMapObject:
    """The tensor map `value` over its array already placed in global memory (`buffers`), checked as
    cuTensorMapEncodeTiled checks it, against the array's extent, and for what the executor implements."""
    target = args[value.array] if isinstance(value.array, (int, np.integer)) else value.array
    base, array = buffers[id(target)]
    spec = replace(value.spec, global_address=base + value.offset)
    try:
        spec.validate()
    except ValueError as error:
        raise ValueError(f"{where}: cuTensorMapEncodeTiled would refuse this map: {error}") from None
    if spec.interleave != facts.TensorMapInterleave.NONE:
        raise fail(source, None, f"{where}: tensor maps with interleave {spec.interleave.name} are not supported by "
                                 "the PTX executor")
    extent = value.offset + spec.element_bytes + sum((d - 1) * s for d, s in
                                                     zip(spec.global_dims, (spec.element_bytes,) +
                                                         tuple(spec.global_strides)))
    if extent > array.nbytes:
        raise ValueError(f"{where}: the tensor map spans {extent} bytes, its array has {array.nbytes}")
    return TensorMapObject(name, spec, base + value.offset)


def triple(value, what: str) -> tuple[int, int, int]:
    """`value` (an integer, or 1 to 3 integers x, y, z) as (x, y, z), each >= 1."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        values: tuple = (value,)
    elif isinstance(value, (tuple, list)):
        values = tuple(value)
    else:
        raise TypeError(f"{what} must be an integer or 1 to 3 integers (x, y, z); got {type(value).__name__} "
                        f"{value!r}")
    if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in values):
        raise TypeError(f"{what} must be an integer or 1 to 3 integers (x, y, z); got {value!r}")
    if not 1 <= len(values) <= 3 or any(int(v) < 1 for v in values):
        raise ValueError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return tuple(int(v) for v in values) + (1,) * (3 - len(values))  # type: ignore[return-value]


def check_arguments(ptx, kernel, args, shared_bytes, source) -> None:
    """`launch`'s first checks, before the PTX is parsed: the kinds of its own arguments (TypeError naming the
    parameter: PTX text or a parsed Module, an entry name, an integer `shared_bytes`, `args` as a list or
    tuple; grid and block are checked by `triple`), and no masked, complex or object array among `args`."""
    if not isinstance(ptx, (str, Module)):
        raise TypeError(f"ptx must be PTX text (a str) or a parsed Module; got {type(ptx).__name__}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be the name of an entry (a str); got {type(kernel).__name__} {kernel!r}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str naming the PTX in messages; got {type(source).__name__}")
    if isinstance(shared_bytes, (bool, np.bool_)) or not isinstance(shared_bytes, (int, np.integer)):
        raise TypeError(f"shared_bytes must be an integer; got {type(shared_bytes).__name__} {shared_bytes!r}")
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"args must be a list or tuple of the entry's arguments; got {type(args).__name__}")
    for i, value in enumerate(args):
        if isinstance(value, np.ma.MaskedArray):
            raise ValueError(f"argument {i} is a masked array; the kernel would ignore the mask (pass "
                             "np.ma.filled(x, fill) or x.data)")
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            raise TypeError(f"argument {i} is an array of Python objects, which has no bytes to copy to the "
                            "device; pass an array of numbers")
        if isinstance(value, np.ndarray) and value.dtype.kind == "c":
            raise TypeError(f"argument {i} has complex element type {value.dtype}, which PTX has no type for; pass "
                            "x.view(np.float32) (or float64) to mean its interleaved real and imaginary parts")


def check_block(entry, block, source) -> None:
    threads = math.prod(block)
    directives = entry.directives
    if "reqntid" in directives:
        want = triple(directives["reqntid"], ".reqntid")
        if want != block:
            raise ValueError(f"entry {entry.name} requires block {want} (.reqntid), got {block}")
    if "maxntid" in directives:
        limit = triple(directives["maxntid"], ".maxntid")
        if threads > math.prod(limit):
            raise ValueError(f"entry {entry.name} allows at most {math.prod(limit)} threads (.maxntid), got {threads}")


def cluster_shape(entry, grid, cluster, non_portable: bool) -> tuple[tuple[int, int, int], bool]:
    """(cluster shape, explicit): the launch's `cluster` or the entry's `.reqnctapercluster` (which must agree
    when both are given), checked against the grid and the cluster size limits (`facts.check_cluster`);
    explicit when either gives one, or the entry says `.explicitcluster`."""
    directives = entry.directives
    required = triple(directives["reqnctapercluster"], ".reqnctapercluster") \
        if "reqnctapercluster" in directives else None
    given = triple(cluster, "cluster") if cluster is not None else None
    if required and given and required != given:
        raise ValueError(f"entry {entry.name} requires clusters of {required} (.reqnctapercluster), got cluster "
                         f"{given}")
    shape = given or required or (1, 1, 1)
    explicit = given is not None or required is not None
    if "explicitcluster" in directives and not explicit:
        raise ValueError(f"entry {entry.name} must be launched with a cluster shape (.explicitcluster)")
    if "maxclusterrank" in directives and math.prod(shape) > int(directives["maxclusterrank"][0]):
        raise ValueError(f"entry {entry.name} allows at most {directives['maxclusterrank'][0]} CTAs per cluster "
                         f"(.maxclusterrank), got {math.prod(shape)}")
    facts.check_cluster(grid, shape, non_portable)
    return shape, explicit


def scalar_bytes(param, value, index: int) -> bytes:
    t = ptx_type(param.type)
    where = f"argument {index} ({param.name}, .{param.type})"
    if t is None or t.kind in ("pred", "x2"):
        raise ValueError(f"{where}: parameters of this type are not supported")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: expected a number, got {type(value).__name__}")
    if t.kind == "f":
        return np.asarray(value, t.dtype).tobytes()
    if isinstance(value, (float, np.floating)):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    value = int(value)
    # A .u/.b parameter takes the two's complement of a negative value: LLVM (Triton, clang) declares every
    # integer parameter .u32/.u64/.b32 whatever its signedness, and the driver copies the bytes.
    low, high = -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    if t.kind != "s":
        high = (1 << t.bits) - 1
    if not low <= value <= high:
        raise ValueError(f"{where}: {value} is out of range [{low}, {high}]")
    return (value & ((1 << t.bits) - 1)).to_bytes(t.bits // 8, "little")


def host_memory(ptx: Module, entry, args: list, ctas: int, threads: int, shared_bytes: int,
                 local_bytes: int) -> list[tuple[str, int]]:
    """The host bytes a launch needs, in parts for `limits.check_memory`: each array (its copy in global memory,
    the chunk it is copied from and the result), module .global/.const data, and the state of a batch of `ctas`
    CTAs of `threads` threads (registers, local memory, return stacks and about a hundred bytes of bookkeeping
    per thread, shared memory per CTA)."""
    arrays = {id(a): a for a in args if isinstance(a, np.ndarray)}
    arrays.update({id(a): a for s in args if isinstance(s, ParamStruct) for a in s.arrays()})
    arrays.update({id(a.array): a.array for a in args if isinstance(a, TensorMapArg) and isinstance(a.array, np.ndarray)})
    parts = [(f"array {a.dtype}{list(a.shape)}, copied into global memory and back", 3 * a.nbytes)
             for a in arrays.values()]
    parts += [(f"module variable {v.name}", 2 * v.element_bytes * (v.count or 0))
              for v in ptx.variables if v.space in ("global", "const")]
    register_bytes = sum(t.storage.itemsize if t is not None else 8 for t in map(ptx_type, entry.registers.values()))
    per_thread = register_bytes + max(local_bytes, 1) + 8 * max(entry.call_depth, 1) + 128
    parts.append((f"a batch of {ctas} CTA(s) of {threads} threads (registers, shared and local memory)",
                  ctas * (threads * per_thread + max(shared_bytes, 1))))
    return parts
