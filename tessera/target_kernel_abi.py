"""The shared-memory layout of a Target IR kernel, checked where every module is verified.

A Target IR kernel (`sm90.kernel = {threads = N, smem_bytes = B}`) declares the bytes of dynamic shared memory
it is launched with, and each `sm90.shared_buffer` names a byte range [offset, offset + size) of them. The
invariants, which convert-tile-to-sm90's bump allocator meets by construction and a hand-written kernel may not:

- B is at most `facts.MAX_SHARED_MEMORY_PER_BLOCK` (the driver launches no more);
- every buffer lies within the B bytes: the PTX printer's launch size comes from B, so a buffer past it is read
  and written past the allocation on a GPU (the CTA simulator refused it only when it ran the kernel);
- two buffers overlap only as two declarations of one buffer (the same name, offset and size: passes that clone
  a region re-declare the buffers it uses); two different buffers sharing bytes corrupt each other.

Each violation is a VerifyException located at the buffer, naming the kernel and the rule.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.sm90_memory import SharedBufferOp
from tessera.ir.class_tests import subclass_test
from tessera.ir.diagnostics import located
from tessera.ir.kernel_marks import TARGET_KERNEL_ATTR, target_kernels_in
from tessera.ir.walk import walk_ops
from tessera.sm90 import facts

_is_shared_buffer = subclass_test(SharedBufferOp)


def declared_smem_bytes(kernel: func.FuncOp) -> int | None:
    """The kernel's `sm90.kernel` smem_bytes, or None where the attribute does not give an integer (the
    interpreters and the PTX printer refuse that kernel by name)."""
    info = kernel.attributes.get(TARGET_KERNEL_ATTR)
    entry = info.data.get("smem_bytes") if isinstance(info, DictionaryAttr) else None
    return entry.value.data if isinstance(entry, IntegerAttr) else None


def verify_shared_layout(module: ModuleOp) -> None:
    """Check the invariants above for every Target IR kernel of `module`; raises VerifyException."""
    for kernel in target_kernels_in(module):
        smem = declared_smem_bytes(kernel)
        if smem is None:
            continue
        if smem > facts.MAX_SHARED_MEMORY_PER_BLOCK:
            raise VerifyException(located(kernel, (
                f"kernel @{kernel.sym_name.data}: '{TARGET_KERNEL_ATTR}' smem_bytes = {smem} exceeds the "
                f"{facts.MAX_SHARED_MEMORY_PER_BLOCK} bytes of shared memory a block may use")))
        seen: dict[tuple[str, int, int], SharedBufferOp] = {}
        for op in walk_ops(kernel):
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
