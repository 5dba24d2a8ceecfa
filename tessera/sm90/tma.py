"""Tensor maps (TMA descriptors) as built by `cuTensorMapEncodeTiled`, and the PTX rules for tensor copies.

Sources: [DRV] = CUDA Driver API 6.30 "Tensor Map Object Management", cuTensorMapEncodeTiled,
https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html (the enum values are the C
enums' implicit numbering there). [P#x] = PTX ISA 9.1 section 5.5, tensor-tensormap, tensor-tiled-mode-*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

from tessera.sm90.swizzle import SWIZZLE_CHUNK_BYTES, check_swizzle_mode

# region Enumerations [DRV]


class TensorMapDataType(IntEnum):
    """CUtensorMapDataType. (The packed 16U4/16U6 types, 13-15, are for later architectures and left out.)"""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12


TENSOR_MAP_ELEMENT_BYTES = {
    TensorMapDataType.UINT8: 1,
    TensorMapDataType.UINT16: 2,
    TensorMapDataType.UINT32: 4,
    TensorMapDataType.INT32: 4,
    TensorMapDataType.UINT64: 8,
    TensorMapDataType.INT64: 8,
    TensorMapDataType.FLOAT16: 2,
    TensorMapDataType.FLOAT32: 4,
    TensorMapDataType.FLOAT64: 8,
    TensorMapDataType.BFLOAT16: 2,
    TensorMapDataType.FLOAT32_FTZ: 4,
    TensorMapDataType.TFLOAT32: 4,
    TensorMapDataType.TFLOAT32_FTZ: 4,
}

_FLOAT_TYPES = frozenset(t for t in TensorMapDataType if t.name.startswith(("FLOAT", "BFLOAT", "TFLOAT")))


class TensorMapSwizzle(IntEnum):
    """CUtensorMapSwizzle: 16-byte chunks swizzled within a 32/64/128-byte span. Not the wgmma descriptor's
    codes (there 1 = 128B, 3 = 32B). The 128B_ATOM_* modes (4-6) are for later architectures."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3


class TensorMapInterleave(IntEnum):
    NONE = 0
    B16 = 1
    B32 = 2


class TensorMapL2Promotion(IntEnum):
    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class TensorMapFloatOOBFill(IntEnum):
    """NONE fills out-of-bound elements with zeros; NAN_REQUEST_ZERO_FMA with the special "OOB-NaN"
    [P#tensor-tiled-mode-oob-access]; the latter only for floating-point data types."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


_SWIZZLE_BY_BYTES = {0: TensorMapSwizzle.NONE, 32: TensorMapSwizzle.B32, 64: TensorMapSwizzle.B64,
                     128: TensorMapSwizzle.B128}


def tensor_map_swizzle(mode: int) -> TensorMapSwizzle:
    """The CUtensorMapSwizzle for a swizzle of `mode` bytes (0/32/64/128)."""
    check_swizzle_mode(mode)
    return _SWIZZLE_BY_BYTES[mode]


def tensor_map_swizzle_bytes(swizzle: TensorMapSwizzle) -> int:
    """The span in bytes of a CUtensorMapSwizzle (0 for NONE)."""
    return next(b for b, s in _SWIZZLE_BY_BYTES.items() if s == swizzle)


# endregion

# region cuTensorMapEncodeTiled rules [DRV; P#tensor-tiled-mode-bounding-box]

TENSOR_MAP_BYTES = 128
"""A tensor map is a 128-byte opaque object [P#tensor-tensormap] ..."""
TENSOR_MAP_ALIGNMENT = 64
"""... whose address must be 64-byte aligned [DRV]."""
TENSOR_MAP_MAX_RANK = 5
TENSOR_MAP_MAX_DIM = 2**32
TENSOR_MAP_STRIDE_LIMIT = 2**40
TENSOR_MAP_MAX_BOX = 256
TENSOR_MAP_MAX_ELEMENT_STRIDE = 8
TENSOR_MAP_GLOBAL_ALIGNMENT = 16
"""globalAddress and globalStrides: multiples of 16 bytes (32 with INTERLEAVE_32B) [DRV]."""

TENSORMAP_REPLACE_ELEMTYPE = {
    0: TensorMapDataType.UINT8, 1: TensorMapDataType.UINT16, 2: TensorMapDataType.UINT32,
    3: TensorMapDataType.INT32, 4: TensorMapDataType.UINT64, 5: TensorMapDataType.INT64,
    6: TensorMapDataType.FLOAT16, 7: TensorMapDataType.FLOAT32, 8: TensorMapDataType.FLOAT32_FTZ,
    9: TensorMapDataType.FLOAT64, 10: TensorMapDataType.BFLOAT16, 11: TensorMapDataType.TFLOAT32,
    12: TensorMapDataType.TFLOAT32_FTZ,
}
"""`tensormap.replace.tile.elemtype`'s new_val [P#data-movement-and-conversion-instructions-tensormap-replace,
its table of .elemtype values: .u8, .u16, .u32, .s32, .u64, .s64, .f16, .f32, .f32.ftz, .f64, .bf16, .tf32,
.tf32.ftz in order from 0] as the CUtensorMapDataType it names: not CUDA's numbering (there FLOAT64 is 8 and
BFLOAT16 9). 13-15 (.b4x16, .b4x16_p64, .b6x16_p32) are sm_100's packed types. Triton 3.9 writes these
(`TMA_ELEMENT_TYPES` in its TMAUtilities)."""
TENSORMAP_REPLACE_SWIZZLE = {0: TensorMapSwizzle.NONE, 1: TensorMapSwizzle.B32, 2: TensorMapSwizzle.B64,
                             3: TensorMapSwizzle.B128}
"""`.swizzle_mode`: no swizzle, 32B, 64B, 128B [P, same section]; 4 (96B) and the atom modes are sm_100's."""
TENSORMAP_REPLACE_INTERLEAVE = {0: TensorMapInterleave.NONE, 1: TensorMapInterleave.B16,
                                2: TensorMapInterleave.B32}
"""`.interleave_layout`: no interleave, 16B, 32B [P, same section]."""
TENSORMAP_REPLACE_FILL = {0: TensorMapFloatOOBFill.NONE, 1: TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA}
"""`.fill_mode`: zero fill, OOB-NaN fill [P, same section]."""

TMA_SMEM_ALIGNMENT = 128
"""Shared-memory address of a TMA copy: 128-byte aligned (CUDA C++ Programming Guide, TMA section; the PTX ISA
itself states 16 bytes for a bounding box [P#tensor-tiled-mode-bounding-box]). A swizzled destination also
needs the swizzle period, `swizzled_buffer_alignment`, for base offset 0."""


@dataclass(frozen=True)
class TensorMapSpec:
    """The arguments of cuTensorMapEncodeTiled. Dimensions are innermost first; `global_strides` are the
    byte strides of dimensions 1..rank-1 (dimension 0 is contiguous)."""

    dtype: TensorMapDataType
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    swizzle: TensorMapSwizzle = TensorMapSwizzle.NONE
    oob_fill: TensorMapFloatOOBFill = TensorMapFloatOOBFill.NONE
    interleave: TensorMapInterleave = TensorMapInterleave.NONE
    l2_promotion: TensorMapL2Promotion = TensorMapL2Promotion.NONE
    global_address: int = field(default=0, compare=False)

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    @property
    def element_bytes(self) -> int:
        return TENSOR_MAP_ELEMENT_BYTES[self.dtype]

    @property
    def strides(self) -> tuple[int, ...]:
        """elementStrides, all ones when not given."""
        return self.element_strides if self.element_strides is not None else (1,) * self.rank

    @property
    def box_bytes(self) -> int:
        """Bytes one tiled copy writes to shared memory (the complete-tx count of a load): ceil(boxDim[i] /
        elementStrides[i]) elements along dimension i, dimension 0 unstrided without interleave [DRV]."""
        counts = [math.ceil(b / s) for b, s in zip(self.box_dims, self.strides)]
        if self.interleave == TensorMapInterleave.NONE:
            counts[0] = self.box_dims[0]
        return math.prod(counts) * self.element_bytes

    def box_byte_offsets(self, coords) -> tuple:
        """Where a tiled copy of the box at `coords` (innermost first) reads or writes, as NumPy arrays: the
        byte offset from the tensor's address of each box element, in shared-memory order (innermost
        dimension contiguous; element (c0 + i0, c1 + i1, ...) at (c0 + i0) * element bytes + sum (ck + ik * ek) *
        globalStrides[k - 1]), and whether it lies inside the tensor (outside, a load fills and a store skips).
        Along dimension k >= 1 the box is traversed with elementStrides[k] = ek, ceil(boxDim[k] / ek) elements
        (`box_bytes`); dimension 0 is traversed unstrided without interleave."""
        import numpy as np

        byte_strides = (self.element_bytes,) + tuple(self.global_strides)
        offsets, valid = np.zeros((), np.int64), np.ones((), bool)
        for dim in reversed(range(self.rank)):
            step = 1 if dim == 0 and self.interleave == TensorMapInterleave.NONE else self.strides[dim]
            index = coords[dim] + step * np.arange(math.ceil(self.box_dims[dim] / step), dtype=np.int64)
            inside = (index >= 0) & (index < self.global_dims[dim])
            offsets = offsets[..., None] + np.where(inside, index, 0) * byte_strides[dim]
            valid = valid[..., None] & inside
        return offsets.reshape(-1), valid.reshape(-1)

    def validate(self) -> None:
        """Raise ValueError naming the first cuTensorMapEncodeTiled requirement this spec breaks."""
        rank, e = self.rank, self.element_bytes
        if not 1 <= rank <= TENSOR_MAP_MAX_RANK:
            raise ValueError(f"tensorRank must be in [1, {TENSOR_MAP_MAX_RANK}], got {rank}")
        if self.interleave != TensorMapInterleave.NONE and rank < 3:
            raise ValueError(f"tensorRank must be >= 3 with interleave {self.interleave.name}, got {rank}")
        for name, values, want in (("globalStrides", self.global_strides, rank - 1),
                                   ("boxDim", self.box_dims, rank), ("elementStrides", self.strides, rank)):
            if len(values) != want:
                raise ValueError(f"{name} needs {want} entries for rank {rank}, got {len(values)}")
        align = 2 * TENSOR_MAP_GLOBAL_ALIGNMENT if self.interleave == TensorMapInterleave.B32 \
            else TENSOR_MAP_GLOBAL_ALIGNMENT
        if self.global_address % align:
            raise ValueError(f"globalAddress must be {align}-byte aligned, got {self.global_address:#x}")
        for d in self.global_dims:
            if not 1 <= d <= TENSOR_MAP_MAX_DIM:
                raise ValueError(f"globalDim must be non-zero and <= 2^32, got {d}")
        for s in self.global_strides:
            if s % align or not 0 <= s < TENSOR_MAP_STRIDE_LIMIT:
                raise ValueError(f"globalStrides must be multiples of {align} and < 2^40 bytes, got {s}")
        for b in self.box_dims:
            if not 1 <= b <= TENSOR_MAP_MAX_BOX:
                raise ValueError(f"boxDim must be non-zero and <= {TENSOR_MAP_MAX_BOX}, got {b}")
        inner = self.box_dims[0] * e
        if self.interleave == TensorMapInterleave.NONE and inner % SWIZZLE_CHUNK_BYTES:
            raise ValueError(f"boxDim[0] * elementSize must be a multiple of 16 bytes, got {inner}")
        for s in self.strides:
            if not 1 <= s <= TENSOR_MAP_MAX_ELEMENT_STRIDE:
                raise ValueError(f"elementStrides must be in [1, {TENSOR_MAP_MAX_ELEMENT_STRIDE}], got {s}")
        if self.interleave == TensorMapInterleave.B32 and self.swizzle != TensorMapSwizzle.B32:
            raise ValueError("interleave INTERLEAVE_32B requires swizzle SWIZZLE_32B")
        span = tensor_map_swizzle_bytes(self.swizzle)
        if self.interleave == TensorMapInterleave.NONE and span and inner > span:
            raise ValueError(f"with swizzle {span}B the inner box dimension boxDim[0] * elementSize must be "
                             f"<= {span} bytes, got {inner}")
        if self.oob_fill == TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA and self.dtype not in _FLOAT_TYPES:
            raise ValueError(f"oobFill NAN_REQUEST_ZERO_FMA needs a floating-point data type, got {self.dtype.name}")


# endregion

# region Issue of a bulk copy by several lanes [SASS]

BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS = True
"""A `cp.async.bulk{.tensor}` executed by several lanes of one warp issues one copy per distinct set of operand
values among the warp's active lanes, not one per lane. The PTX ISA does not say how many lanes may execute it;
ptxas compiles it to the uniform datapath (UTMALDG / UTMASTG / UBLKCP read uniform registers): operands equal
in every lane give one instruction, operands that differ give a loop (R2UR of one lane's values, the copy,
`BRA.U.ANY` back while lanes are left) that issues the copy once per distinct value. CUTLASS's sm90 epilogue
issues its TMA stores from all 32 lanes of one warp and relies on it. Checked against ptxas' SASS in
tests/test_sm90_facts.py; the PTX executor issues bulk copies so (`tessera.interpreters.ptx.bulk_copy`)."""

# endregion
