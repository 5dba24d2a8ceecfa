"""What every output of a kernel is held to: a reference and a tolerance, for any kernel.

- a kernel of a kind a builder makes ("attention", "gemm") is held to that kind's NumPy reference under its
  tolerance rule (`tessera.reference`), on its first output, as the builders' tests hold it;
- any other kernel ("custom", or any kind without a NumPy reference) is held to its own Tile IR run in
  float64 under the tolerance of where it rounds (`rounding.kernel_reference`), on every output.

`tessera.validate` and `tessera-run --check` use it, so no kernel goes without a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.ir.diagnostics import located
from tessera.kernel_abi import KernelSignature
from tessera.kernels.attention_mods import BACKWARD_BLOCK_LISTS, BACKWARD_RANKS, BLOCK_LISTS
from tessera.validation.rounding import KernelReference, kernel_reference

BUILDER_KINDS = ("attention", "gemm")
"""Kinds with a NumPy reference of their own (`tessera.reference`)."""


@dataclass
class Reference:
    """The reference of one kernel on one set of inputs (module docstring)."""

    sig: KernelSignature
    inputs: Sequence[np.ndarray]
    own: KernelReference | None = None
    """The kernel's own float64 reference (kinds without a NumPy reference)."""

    @property
    def source(self) -> str:
        return f"NumPy reference of kind '{self.sig.kind}'" if self.own is None else "its own Tile IR in float64"

    def judge(self, outputs: Sequence[np.ndarray]) -> tuple[float, float]:
        """(max error, tolerance) of `outputs` (the worst output for a kernel's own reference)."""
        if self.own is not None:
            return self.own.judge(outputs)
        from tessera import reference
        from tessera.numerics import numpy_dtype

        dtype = numpy_dtype(self.sig.inputs[0].type.element_type)
        check = reference.check_attention_kernel if self.sig.kind == "attention" else reference.check_gemm_kernel
        c = check(self.sig, outputs[0], self.inputs, dtype)
        return c.max_error, c.tolerance

    def beyond(self, outputs: Sequence[np.ndarray]) -> tuple[int, np.ndarray | None]:
        """(k, mask): the first output with elements beyond their tolerance and the mask of those elements
        (a kernel's own reference holds every element of every output); for a kind whose NumPy reference holds
        its first output as a whole, (0, None)."""
        if self.own is None:
            return 0, None
        masks = self.own.beyond(outputs)
        return next(((k, mask) for k, mask in enumerate(masks) if mask.any()), (0, masks[0] if masks else None))

    def output(self, k: int = 0) -> np.ndarray:
        """The float64 reference of the kernel's output `k` (a kind with a NumPy reference: its first)."""
        if self.own is not None:
            return self.own.outputs[k]
        from tessera import reference_attention, reference_gemm
        from tessera.numerics import numpy_dtype, round_to

        sig = self.sig
        dtype = numpy_dtype(sig.inputs[0].type.element_type)
        rounded = [round_to(np.asarray(x), dtype) for x in self.inputs]
        if sig.kind == "attention":
            q, k, v, *bias = rounded
            return reference_attention.attention(q, k, v, sig.causal, sig.scale, bias[0] if sig.bias else None)
        return reference_gemm.gemm_kernel(sig, rounded)

    def worst_element(self, output: np.ndarray, k: int = 0) -> tuple[int, ...]:
        """The index of output `k`'s element farthest from the reference."""
        ref = self.output(k)
        if ref.shape != np.shape(output) or ref.size == 0:
            return tuple(0 for _ in np.shape(output))
        with np.errstate(invalid="ignore"):
            diff = np.abs(np.asarray(output, np.float64) - ref)
        same = (np.asarray(output, np.float64) == ref) | (np.isnan(output) & np.isnan(ref))
        diff = np.where(same, 0.0, np.nan_to_num(diff, nan=np.inf))
        return tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))


def check_outputs(where: str, sig: KernelSignature) -> None:
    """ValueError, located at the kernel, unless kernel `sig` has an output: a kernel that writes nothing has
    nothing to compare with a reference, and a verdict on no elements would be "ok" whatever the kernel does."""
    if not sig.outputs:
        raise ValueError(f"{where}: " + located(sig.op, f"kernel @{sig.name}: no outputs (no argument with "
                                                        "tile.role = \"out\"): there is nothing to check"))


BLOCK_LIST_INPUTS = BLOCK_LISTS + BACKWARD_BLOCK_LISTS + BACKWARD_RANKS
"""The inputs of the block-sparse kernels with modifiers that hold a mask's block lists (the forward's, the
backward main kernel's work lists and their deterministic ranks): `check_generated_inputs` generates none."""


def check_generated_inputs(where: str | None, sig: KernelSignature) -> None:
    """ValueError, located at the kernel (prefixed with `where` unless None), unless kernel `sig` can run on
    generated inputs: a kernel whose grid is sized by a launch size that no argument's dimensions use
    (`tile.launch_sizes`, the packed and paged attention kernels' max_seqlen_q) indexes its tensors through
    int32 tables (cu_seqlens, page_table, cache_seqlens) whose values only the caller knows; random ones would
    send its reads and stores anywhere, and no verdict on them would mean anything. A launch size that an
    argument's dimensions use is a size like the others (`KernelSignature.size_names`), given with the rest.
    So is a kernel that declares what its index tables must hold (`tile.tables`, `tessera.index_tables`):
    random tables would break it, and the launch would refuse them. So does a block-sparse kernel built from
    a mask_mod: its loops walk the block lists it takes (`BLOCK_LIST_INPUTS`, made by `create_block_mask`), and
    random ones (negative counts, key blocks past the sequence) left its producer's TMA loads in flight at the
    CTA's end in the PTX executor, a hazard report of lists no mask makes."""
    grid_only = [n for n in sig.launch_sizes if n not in sig.size_names()]
    tables = sorted({sig.args[i].name for r in sig.tables for i in r.tables})
    if grid_only or tables:
        what = (f"sized by its launch ({', '.join(grid_only)}) and reads" if grid_only
                else f"declares ('tile.tables') what its index tables ({', '.join(tables)}) hold, and reads")
        message = located(sig.op, f"kernel @{sig.name}: {what} index tables that are not generated; run it with "
                                  "tessera.launch at each level on real tables and compare with tessera.reference "
                                  "(docs/serving.md)")
        raise ValueError(message if where is None else f"{where}: {message}")
    lists = [arg.name for arg in sig.inputs if arg.name in BLOCK_LIST_INPUTS]
    if lists:
        message = located(sig.op, f"kernel @{sig.name}: reads block lists ({', '.join(lists)}) that are not "
                                  "generated; run it with tessera.launch at each level on the lists of "
                                  "create_block_mask for its mask_mod (docs/variants-block-sparsity.md)")
        raise ValueError(message if where is None else f"{where}: {message}")


def reference_for(module: ModuleOp, sig: KernelSignature, inputs: Sequence[np.ndarray],
                  sizes: Mapping[str, int], seed: int = 0) -> Reference:
    """The reference of kernel `sig` (Tile IR in `module`) on `inputs` (module docstring); ValueError for a
    kernel without outputs (`check_outputs`)."""
    check_outputs("the reference", sig)
    if sig.kind in BUILDER_KINDS:
        return Reference(sig, inputs)
    return Reference(sig, inputs, kernel_reference(module, sig, inputs, sizes, seed))
