"""The arguments of `cuTensorMapEncodeTiled` for each tensor-map parameter of a compiled kernel, from its
host-side description and the tensors it is launched with. Pure host code: no driver, testable on a CPU.

The layout (data type, dims innermost first, box, swizzle, interleave, L2 promotion, OOB fill) is the host
description's (`HostDescription.tensor_maps`, itself from the Target IR kernel); a launch only supplies the
tensor's device address and, for a strided tensor (a transposed PyTorch view, say), its byte strides. The
result is checked against the driver's rules (`facts.TensorMapSpec.validate`) before the driver sees it, so a
refused map is reported with the rule, the kernel and the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera.host import HostDescription
from tessera.runtime.arguments import TensorView, check_views
from tessera.sm90 import facts


@dataclass(frozen=True)
class TensorMapArguments:
    """cuTensorMapEncodeTiled's arguments for parameter `param`, in the driver's order (see `positional`):
    dims innermost first, `global_strides` the byte strides of dims 1..rank-1, `element_strides` one per dim."""

    param: str
    data_type: facts.TensorMapDataType
    global_address: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: facts.TensorMapInterleave
    swizzle: facts.TensorMapSwizzle
    l2_promotion: facts.TensorMapL2Promotion
    oob_fill: facts.TensorMapFloatOOBFill

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    @classmethod
    def from_spec(cls, param: str, spec: facts.TensorMapSpec) -> TensorMapArguments:
        return cls(param, spec.dtype, spec.global_address, spec.global_dims, spec.global_strides, spec.box_dims,
                   spec.strides, spec.interleave, spec.swizzle, spec.l2_promotion, spec.oob_fill)

    def positional(self) -> tuple:
        """(tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
        interleave, swizzle, l2Promotion, oobFill), the enums as their integer values."""
        return (int(self.data_type), self.rank, self.global_address, self.global_dims, self.global_strides,
                self.box_dims, self.element_strides, int(self.interleave), int(self.swizzle),
                int(self.l2_promotion), int(self.oob_fill))

    def __str__(self) -> str:
        return (f"{self.param}: {self.data_type.name} rank {self.rank} at {self.global_address:#x}, "
                f"dims {self.global_dims}, strides {self.global_strides} B, box {self.box_dims}, "
                f"element strides {self.element_strides}, swizzle {self.swizzle.name}, "
                f"interleave {self.interleave.name}, L2 promotion {self.l2_promotion.name}, "
                f"OOB fill {self.oob_fill.name}")


def tensor_map_arguments(host: HostDescription, sizes: Mapping[str, int],
                         views: Mapping[int, TensorView]) -> dict[str, TensorMapArguments]:
    """The encode arguments of every tensor-map parameter of `host`'s kernel for tensors `views` (by Tile IR
    argument index) of the named `sizes`. ValueError names the kernel, the parameter and the broken rule."""
    check_views(host, sizes, views)
    try:
        specs = host.tensor_maps(sizes)
    except ValueError as error:
        raise ValueError(f"@{host.kernel}: cuTensorMapEncodeTiled would refuse a tensor map for sizes "
                         f"{dict(sizes)}: {error}") from None
    found = {}
    for param in host.params:
        if param.kind != "tensormap":
            continue
        spec, view = specs[param.name], views[param.source]
        where = f"@{host.kernel}: tensor map {param.name} (tensor {param.source})"
        if view.strides[-1] != view.dtype.itemsize and view.shape[-1] != 1:
            raise ValueError(f"{where}: the innermost dimension must be contiguous (byte stride "
                             f"{view.dtype.itemsize}), got {view.strides[-1]}")
        # Innermost first, as the driver wants them; an extent-1 dimension keeps the row-major stride, since
        # PyTorch may report any stride there and the driver checks it all the same.
        strides = tuple(row_major if extent == 1 else actual for extent, actual, row_major in
                        zip(reversed(view.shape[:-1]), reversed(view.strides[:-1]), spec.global_strides))
        spec = replace(spec, global_strides=strides, global_address=view.address)
        try:
            spec.validate()
        except ValueError as error:
            raise ValueError(f"{where}: cuTensorMapEncodeTiled would refuse it: {error}") from None
        found[param.name] = TensorMapArguments.from_spec(param.name, spec)
    return found
