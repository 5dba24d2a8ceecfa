"""By-value parameter structs: the `Params` of CUTLASS 3 and FlashAttention-3 kernels.

Such a kernel takes one parameter, `.param .align 128 .b8 name_param_0[N]` (a `__grid_constant__` struct),
holding device pointers and tensor maps (`CUtensorMap`, 128 bytes, 64-byte aligned) at fixed offsets; the
kernel reads scalars with `ld.param` and reaches a map by the generic address of a byte inside the parameter
(`mov` of the parameter's address, `cvta.param`, `add`).

    ParamStruct(data, {0: TensorMapArg.encode(a, ...), 128: TensorMapArg.encode(b, ...), 264: d})

`data` is the struct's bytes as the host built them (N bytes). At each offset of `fields`:
- an array: it is placed in global memory and its device address patched into the 8 bytes there (the offset
  must be 8-byte aligned); after the run the array is updated in place;
- a `TensorMapArg`: the 128 bytes there are the tensor map the TMA instructions find by address (the offset
  within the parameter space must be 64-byte aligned); its array is placed in global memory and updated in
  place too.
Fields must not overlap each other or the end of the struct. `launch` returns, for a ParamStruct argument,
the dict {offset: updated array}.

A *launch description* (JSON; what `tessera-run kernel.ptx --arg struct:FILE` reads, and what
tests/ptx_library/build.py records from CUTLASS's and FA3's own host code) says the same in a file a user
writes from the library's host code:

    {"params": "<the struct's bytes in hex>",
     "tensors": {"A": "f16[256,128]=random", "D": "f32[256,256]=zeros", ...},
     "fields": [{"offset": 8, "kind": "pointer", "tensor": "D"},
                {"offset": 128, "kind": "tensormap", "tensor": "A", "tensor_offset": 0, "dtype": 6,
                 "dims": [128, 256], "strides": [256], "box": [64, 128], "element_strides": [1, 1],
                 "interleave": 0, "swizzle": 3, "l2_promotion": 2, "oob_fill": 0}],
     "grid": [x, y, z], "block": [x, y, z], "cluster": [x, y, z], "shared_bytes": N}

A tensor is `TYPE[D0,...]=INIT` as for `--arg` (see `cli`); a tensor map field holds cuTensorMapEncodeTiled's
arguments (the enums as their CUDA values; globalAddress = the tensor's address + `tensor_offset` bytes).
The launch geometry is optional.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from tessera.sm90 import facts


_NUMPY_TENSOR_MAP_TYPES = {
    np.dtype(np.uint8): facts.TensorMapDataType.UINT8, np.dtype(np.uint16): facts.TensorMapDataType.UINT16,
    np.dtype(np.uint32): facts.TensorMapDataType.UINT32, np.dtype(np.int32): facts.TensorMapDataType.INT32,
    np.dtype(np.uint64): facts.TensorMapDataType.UINT64, np.dtype(np.int64): facts.TensorMapDataType.INT64,
    np.dtype(np.float16): facts.TensorMapDataType.FLOAT16, np.dtype(np.float32): facts.TensorMapDataType.FLOAT32,
    np.dtype(np.float64): facts.TensorMapDataType.FLOAT64,
    np.dtype(ml_dtypes.bfloat16): facts.TensorMapDataType.BFLOAT16,
    np.dtype(ml_dtypes.float8_e4m3fn): facts.TensorMapDataType.UINT8,  # 8-bit floats move as bytes
    np.dtype(ml_dtypes.float8_e5m2): facts.TensorMapDataType.UINT8,
}


@dataclass(frozen=True)
class TensorMapArg:
    """A tensor-map argument: `spec` holds cuTensorMapEncodeTiled's arguments (dims, byte strides, box,
    element strides innermost first, swizzle, interleave, L2 promotion, OOB fill); its globalAddress is the
    address of `array` (an array, or the index of an array argument of the launch) plus `offset` bytes."""

    array: np.ndarray | int
    spec: facts.TensorMapSpec
    offset: int = 0

    @classmethod
    def tiled(cls, array: np.ndarray | int, box: tuple[int, ...], swizzle: int = 0, *, shape=None, dtype=None,
              oob_fill: facts.TensorMapFloatOOBFill = facts.TensorMapFloatOOBFill.NONE) -> TensorMapArg:
        """The map of a row-major tensor (`array`'s shape and dtype, or `shape`/`dtype` when `array` is an
        index) with `box` (innermost first) and a swizzle of 0/32/64/128 bytes."""
        shape = array.shape if shape is None else shape
        dtype = np.dtype(array.dtype if dtype is None else dtype)
        if dtype not in _NUMPY_TENSOR_MAP_TYPES:
            raise ValueError(f"no CUtensorMapDataType for {dtype}")
        dims = tuple(int(d) for d in reversed(shape))
        strides = tuple(math.prod(dims[:i]) * dtype.itemsize for i in range(1, len(dims)))
        spec = facts.TensorMapSpec(_NUMPY_TENSOR_MAP_TYPES[dtype], dims, strides, tuple(box),
                                   swizzle=facts.tensor_map_swizzle(swizzle), oob_fill=oob_fill)
        return cls(array, spec)

    @classmethod
    def strided(cls, view: np.ndarray, box: tuple[int, ...], swizzle: int = 0) -> TensorMapArg:
        """The map of `view`, a NumPy view of a larger row-major array (a slice, rows of a padded pitch,
        permuted outer dimensions): the launch places the whole base array in global memory (the result entry
        is the base array after the run), globalAddress is the view's first element and globalStrides its
        byte strides. The innermost dimension must be contiguous and every stride positive (TMA's rule)."""
        base = view
        while isinstance(base.base, np.ndarray):
            base = base.base
        if not base.flags.c_contiguous:
            raise ValueError("the base array of a strided tensor map must be row-major contiguous")
        if view.ndim == 0 or view.strides[-1] != view.itemsize or any(s <= 0 for s in view.strides[:-1]):
            raise ValueError(f"a tensor map needs a contiguous innermost dimension and positive strides, got byte "
                             f"strides {view.strides}")
        dtype = np.dtype(view.dtype)
        if dtype not in _NUMPY_TENSOR_MAP_TYPES:
            raise ValueError(f"no CUtensorMapDataType for {dtype}")
        offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        spec = facts.TensorMapSpec(_NUMPY_TENSOR_MAP_TYPES[dtype], tuple(int(d) for d in reversed(view.shape)),
                                   tuple(int(s) for s in reversed(view.strides[:-1])), tuple(box),
                                   swizzle=facts.tensor_map_swizzle(swizzle))
        return cls(base, spec, offset)

    @classmethod
    def encode(cls, array: np.ndarray | int, data_type, global_dim, global_strides, box_dim, element_strides=None,
               interleave=0, swizzle=0, l2_promotion=0, oob_fill=0, offset: int = 0) -> TensorMapArg:
        """The map cuTensorMapEncodeTiled(map, data_type, rank, globalAddress, global_dim, global_strides,
        box_dim, element_strides, interleave, swizzle, l2_promotion, oob_fill) builds, with globalAddress the
        address of `array` (an array, or the index of an array argument) plus `offset` bytes. Every argument is
        as the driver takes it: innermost dimension first, `global_strides` the rank - 1 byte strides of
        dimensions 1.., the enums as their CUDA values (or the `facts.TensorMap*` enums), rank up to 5. The
        launch checks it as the driver does (`facts.TensorMapSpec.validate`) and that it stays inside the
        array."""
        spec = facts.TensorMapSpec(
            facts.TensorMapDataType(data_type), tuple(int(d) for d in global_dim),
            tuple(int(s) for s in global_strides), tuple(int(b) for b in box_dim),
            None if element_strides is None else tuple(int(e) for e in element_strides),
            swizzle=facts.TensorMapSwizzle(swizzle), oob_fill=facts.TensorMapFloatOOBFill(oob_fill),
            interleave=facts.TensorMapInterleave(interleave), l2_promotion=facts.TensorMapL2Promotion(l2_promotion))
        return cls(array, spec, int(offset))


@dataclass(frozen=True)
class ParamStruct:
    """A `.b8` array parameter given as host bytes plus arrays and tensor maps at byte offsets (see the module
    docstring)."""

    data: bytes
    fields: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise TypeError(f"ParamStruct data must be bytes, got {type(self.data).__name__}")
        if not isinstance(self.fields, dict):
            raise TypeError(f"ParamStruct fields must be a dict {{offset: array | TensorMapArg}}, got "
                            f"{type(self.fields).__name__}")

    def checked_fields(self, where: str, param_offset: int) -> list[tuple[int, int, object]]:
        """[(offset, size, value)] sorted by offset, each checked: an integer offset inside the struct, an array
        (8 bytes, 8-aligned) or a tensor map (128 bytes at a 64-aligned parameter address), no overlaps."""
        checked = []
        for offset, value in self.fields.items():
            if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
                raise TypeError(f"{where}: field offsets must be integers, got {offset!r}")
            offset = int(offset)
            if isinstance(value, TensorMapArg):
                size, align = facts.TENSOR_MAP_BYTES, facts.TENSOR_MAP_ALIGNMENT
                if (param_offset + offset) % align:
                    raise ValueError(f"{where}: the tensor map at offset {offset} is not {align}-byte aligned in the "
                                     f"parameter space (the parameter starts at {param_offset})")
            elif isinstance(value, np.ndarray):
                size, align = 8, 8
                if offset % align:
                    raise ValueError(f"{where}: the pointer at offset {offset} is not 8-byte aligned")
            else:
                raise TypeError(f"{where}: the field at offset {offset} must be an array or a TensorMapArg, got "
                                f"{type(value).__name__}")
            if offset < 0 or offset + size > len(self.data):
                raise ValueError(f"{where}: the {size}-byte field at offset {offset} is outside the "
                                 f"{len(self.data)}-byte struct")
            checked.append((offset, size, value))
        checked.sort(key=lambda f: f[0])
        for (a, size, _), (b, _, _) in zip(checked, checked[1:]):
            if a + size > b:
                raise ValueError(f"{where}: the fields at offsets {a} and {b} overlap")
        return checked

    def arrays(self) -> list[np.ndarray]:
        """The arrays the struct refers to (directly or through its tensor maps)."""
        return [getattr(v, "array", v) for v in self.fields.values()
                if isinstance(getattr(v, "array", v), np.ndarray)]


@dataclass(frozen=True)
class Description:
    """A launch description loaded by `load_description`: the struct, its tensors by name, and the launch
    geometry it gives (None where it gives none)."""

    struct: ParamStruct
    tensors: dict
    grid: tuple | None = None
    block: tuple | None = None
    cluster: tuple | None = None
    shared_bytes: int | None = None


_FIELD_KEYS = {"pointer": {"offset", "kind", "tensor"},
               "tensormap": {"offset", "kind", "tensor", "tensor_offset", "dtype", "dims", "strides", "box",
                             "element_strides", "interleave", "swizzle", "l2_promotion", "oob_fill"}}


def load_description(description: dict, make_tensor, where: str = "the launch description") -> Description:
    """The `Description` of a launch description (a dict, as parsed from JSON; see the module docstring).
    `make_tensor(name, spec)` makes the array of each tensor (e.g. `cli._array`'s `TYPE[SHAPE]=INIT` forms, or
    given arrays). Raises ValueError naming the entry that is wrong."""
    if not isinstance(description, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(description).__name__}")
    unknown = set(description) - {"params", "tensors", "fields", "grid", "block", "cluster", "shared_bytes", "kernel"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        data = bytes.fromhex(description.get("params", ""))
    except (TypeError, ValueError):
        raise ValueError(f"{where}: \"params\" must be the struct's bytes as a hex string") from None
    tensors = {}
    for name, spec in dict(description.get("tensors", {})).items():
        tensors[name] = make_tensor(name, spec)
    fields = {}
    for i, entry in enumerate(description.get("fields", [])):
        here = f"{where}: field {i}"
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind not in _FIELD_KEYS:
            raise ValueError(f"{here}: \"kind\" must be \"pointer\" or \"tensormap\"")
        extra, missing = set(entry) - _FIELD_KEYS[kind], {"offset", "tensor"} - set(entry)
        if extra or missing:
            raise ValueError(f"{here}: " + (f"unknown key(s) {', '.join(sorted(extra))}" if extra else
                                            f"missing {', '.join(sorted(missing))}"))
        if entry["tensor"] not in tensors:
            raise ValueError(f"{here}: no tensor named {entry['tensor']!r} (tensors: {', '.join(tensors) or 'none'})")
        array = tensors[entry["tensor"]]
        if kind == "pointer":
            fields[int(entry["offset"])] = array
            continue
        try:
            fields[int(entry["offset"])] = TensorMapArg.encode(
                array, entry["dtype"], entry["dims"], entry.get("strides", ()), entry["box"],
                entry.get("element_strides"), entry.get("interleave", 0), entry.get("swizzle", 0),
                entry.get("l2_promotion", 0), entry.get("oob_fill", 0), entry.get("tensor_offset", 0))
        except KeyError as error:
            raise ValueError(f"{here}: a tensor map needs {error.args[0]!r}") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{here}: {error}") from None
    geometry = {}
    for key in ("grid", "block", "cluster"):
        if key in description:
            geometry[key] = tuple(int(v) for v in description[key])
    if "shared_bytes" in description:
        geometry["shared_bytes"] = int(description["shared_bytes"])
    return Description(ParamStruct(data, fields), tensors, **geometry)


__all__ = ["Description", "ParamStruct", "load_description"]
