"""The launch checks of a kernel built from score_mod / mask_mod, for its compiled form on the GPU
(`check_compiled_launch`).

A fresh launch of such a module (`tessera.launch`, `tessera.interpret`) proves the modifiers' reads inside their
arrays for the launch's sizes (`tessera.variants.index_ranges.check_launch`) and its block lists made for them
(`tessera.variants.launch_lists.check_lists_at_launch`). A kernel compiled already (`tessera.runtime.flex.
compiled_forward`, `compile_module`), launched with `tessera.launch(compiled, ...)`, `tessera.runtime.launch.run`,
`prepare_torch` or `launch_zeroed`, skipped both: lists made for other lengths, or q longer than a table the
score_mod reads, ran (a silently wrong O, reads outside the table). Every one of those paths now calls this with
the sizes it bound, before it touches a GPU: the compiled kernel carries the module it was compiled from
(`CompiledKernel.module`), whose checks run as a fresh launch's would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tessera.runtime.arguments import kernel_tensors
from tessera.variants.index_ranges import check_launch
from tessera.variants.launch_lists import check_lists_at_launch
from tessera.variants.launch_values import check_captured_values


def check_compiled_launch(where: str, kernel, inputs: Sequence, sizes: Mapping[str, int]) -> None:
    """The launch checks of the module `kernel` (a `CompiledKernel`) was compiled from, at the bound `sizes` on
    `inputs` (its inputs in order, NumPy arrays or torch tensors): IndexRangeError / ValueError naming the read or
    the list, as `tessera.launch` of the module raises. Nothing for a kernel compiled from a builder's name
    (`compile_kernel`: no modifiers) or a module with no checks registered."""
    module = getattr(kernel, "module", None)
    if module is None:
        return
    from tessera import api

    sig = api.find_kernel(module, kernel.name)
    wanted = [t for t in kernel_tensors(kernel.host) if t.role == "in"]
    named = {sig.args[t.source].name: x for t, x in zip(wanted, inputs)}
    bound = dict(sizes)
    check_captured_values(where, module, named)
    check_launch(where, module, bound)
    check_lists_at_launch(where, module, bound, named)
