"""What a Target IR kernel declares and the shared-memory layout its buffers keep, checked where every module is
verified (and read by the CTA simulator, `tessera.interpreters.sm90.target_abi`).

A Target IR kernel carries `sm90.kernel = {threads = N, smem_bytes = B}`: it is launched with N threads, a
positive multiple of the warp size and at most `facts.MAX_THREADS_PER_BLOCK`, and B bytes of dynamic shared
memory, at most `facts.MAX_SHARED_MEMORY_PER_BLOCK` (the PTX printer writes both into the launch line, the
driver launches no more). Each `sm90.shared_buffer` names a byte range [offset, offset + size) of the B bytes.
The invariants, which convert-tile-to-sm90's bump allocator meets by construction and a hand-written kernel may
not:

- every buffer lies within the B bytes: a buffer past them is read and written past the allocation on a GPU
  (the CTA simulator refused it only when it ran the kernel);
- two buffers overlap only as two declarations of one buffer (the same name, offset and size: passes that clone
  a region re-declare the buffers it uses); two different buffers sharing bytes corrupt each other.

And a TMA copy (`sm90.tma_load`, `sm90.tma_load_multicast`) of a tensor-map argument gives one coordinate per
dimension of its box (`sm90.box`): the PTX printer takes the copy's rank from its coordinates (a 1-D copy of a
2-D map, which the hardware faults on), the simulators from the map.

Each violation is a VerifyException located at the kernel or the buffer, naming the rule.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.sm90_base import TensorMapType
from tessera.dialects.sm90_cluster import TmaLoadMulticastOp
from tessera.dialects.sm90_memory import SharedBufferOp, TmaLoadOp
from tessera.ir.class_tests import subclass_test
from tessera.ir.diagnostics import located
from tessera.ir.kernel_marks import TARGET_KERNEL_ATTR, target_kernels_in
from tessera.ir.walk import walk_ops
from tessera.sm90 import facts

# Arguments of a Target IR kernel (see passes/convert_tile_to_sm90.py, tessera/interpreters/sm90/launch.py;
# tessera.kernel_abi re-exports them):
SOURCE_ATTR = "sm90.source"
"""Index of the Tile IR argument a tensor map or global pointer stands for."""
BOX_ATTR = "sm90.box"
"""A tensor map's box, innermost dimension first."""
SWIZZLE_ATTR = "sm90.swizzle"
"""A tensor map's shared-memory swizzle in bytes."""
SIZE_ATTR = "sm90.size"
"""The named size an index argument carries."""
ELEMENT_ATTR = "sm90.element_type"
"""The element type of the tensor a tensor map or pointer argument addresses."""
UNREAD_ATTR = "sm90.unread_tensors"
"""On a Target IR kernel: the Tile IR tensor arguments it has no argument for (its body neither reads nor writes
them, so convert-tile-to-sm90 gave them none), each a dictionary of `sm90.source`, `tile.dims`, `tile.role`,
`sm90.element_type` and `name`: a launch from the Target IR alone (tessera-run) still numbers every tensor of
the Tile IR kernel and takes their sizes."""
COPY_ATTR = "sm90.copy"
"""On a pointer argument: "ld.global" when the kernel copies that tensor into shared memory without TMA (its rows
need not start on 16 bytes); tensor-map arguments are the TMA copies."""

_is_shared_buffer = subclass_test(SharedBufferOp)
_is_tma_copy = subclass_test((TmaLoadOp, TmaLoadMulticastOp))


def _tensor_map_ranks(kernel: func.FuncOp) -> dict[SSAValue, int]:
    """{tensor-map argument: the number of sizes of its `sm90.box`} for the kernel's arguments that have one."""
    arg_attrs = kernel.arg_attrs.data if kernel.arg_attrs is not None else ()
    ranks = {}
    for arg, attrs in zip(kernel.body.blocks.first.args if kernel.body.blocks else (), arg_attrs):
        box = attrs.data.get(BOX_ATTR)
        if isinstance(arg.type, TensorMapType) and isinstance(box, ArrayAttr):
            ranks[arg] = len(box.data)
    return ranks


def launch_attributes(kernel: func.FuncOp) -> tuple[int, int]:
    """(threads, smem_bytes) of a Target IR kernel's `sm90.kernel`; ValueError naming the kernel and the rule
    where the attribute is not a dictionary of two integers within the launch limits."""
    where = f"@{kernel.sym_name.data}: '{TARGET_KERNEL_ATTR}'"
    info = kernel.attributes.get(TARGET_KERNEL_ATTR)
    if not isinstance(info, DictionaryAttr):
        raise ValueError(f"@{kernel.sym_name.data} is not a target kernel: it needs "
                         f"'{TARGET_KERNEL_ATTR} = {{threads = N, smem_bytes = B}}'")
    values = []
    for key in ("threads", "smem_bytes"):
        entry = info.data.get(key)
        if not isinstance(entry, IntegerAttr):
            raise ValueError(f"{where} needs an integer '{key}'")
        values.append(entry.value.data)
    threads, smem_bytes = values
    if not (0 < threads <= facts.MAX_THREADS_PER_BLOCK and threads % facts.WARP_SIZE == 0):
        raise ValueError(f"{where}: threads must be a positive multiple of {facts.WARP_SIZE} up to "
                         f"{facts.MAX_THREADS_PER_BLOCK}, got {threads}")
    if not 0 <= smem_bytes <= facts.MAX_SHARED_MEMORY_PER_BLOCK:
        raise ValueError(f"{where}: smem_bytes must be from 0 to the {facts.MAX_SHARED_MEMORY_PER_BLOCK} bytes of "
                         f"shared memory a block may use, got {smem_bytes}")
    return threads, smem_bytes


def verify_target_kernels(module: ModuleOp) -> None:
    """Check `launch_attributes` and the layout invariants above for every Target IR kernel of `module`; raises
    VerifyException."""
    for kernel in target_kernels_in(module):
        try:
            _, smem = launch_attributes(kernel)
        except ValueError as e:
            raise VerifyException(located(kernel, f"kernel {e}")) from None
        ranks = _tensor_map_ranks(kernel)
        seen: dict[tuple[str, int, int], SharedBufferOp] = {}
        for op in walk_ops(kernel):
            if _is_tma_copy(op) and (rank := ranks.get(op.tensor_map)) is not None and len(op.coords) != rank:
                raise VerifyException(located(op, (
                    f"'{op.name}' op a rank-{rank} tensor map (sm90.box of {rank} sizes) needs {rank} "
                    f"coordinates, got {len(op.coords)}")))
            if not _is_shared_buffer(op):
                continue
            name, start = op.sym.data, op.offset.value.data
            end = start + op.size.value.data
            if end > smem:
                raise VerifyException(located(op, (
                    f"shared buffer '{name}' [{start}, {end}) does not fit the kernel's {smem} bytes of shared "
                    f"memory ({TARGET_KERNEL_ATTR} smem_bytes)")))
            if (name, start, end) in seen:
                continue
            for other_name, other_start, other_end in seen:
                if start < other_end and other_start < end:
                    raise VerifyException(located(op, (
                        f"shared buffer '{name}' [{start}, {end}) overlaps shared buffer '{other_name}' "
                        f"[{other_start}, {other_end})")))
            seen[(name, start, end)] = op
