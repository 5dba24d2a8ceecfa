"""Captured arrays while a modifier is traced: the NumPy arrays (and torch tensors) it reads, each wrapped in an
`ArrayProxy` (`tessera.variants.rebinding` puts the proxies where the function reads its arrays).

Indexing a proxy with traced values records a gather from a kernel input (`tile.gather`, one index per dimension)
and the read itself, with the user's line; a constant index reads the value, a 0-d array is its number. What a
kernel input cannot hold (`array_problem`: an empty array, a dtype that is not a number, values outside i32 or
f32), a slice, a wrong number of indices, an attribute other than its shape and type (`.shape`, `len()`,
`.ndim`, `.size`, `.dtype`; a tensor's `.numel()` and `.dim()`), an assignment and a torch function other than a
search are refused by name."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.numerics import BF16, FP8_DTYPES
from tessera.variants import narrow_integers, torch_mods
from tessera.variants.callables import MASK_MOD_ARGS
from tessera.variants.nodes import BOOL, I32, I32_RANGE, CapturedArray, Node, Read
from tessera.variants.traced import Traced
from tessera.variants.tracing import ArrayOperand, Tracing


@dataclass
class Capture:
    """An array a modifier names, until it is indexed with a traced value: `name` as the user wrote it,
    `unique` the kernel input's name, `array` the NumPy array (a torch tensor's copy), `source` the array or tensor
    the function names; `captured` once checked."""

    name: str
    unique: str
    array: np.ndarray
    source: object = None
    captured: CapturedArray | None = None
    opaque: str | None = None
    """The first use of the array other than a gather at traced indices (a read at constant indices, a search's
    boundaries): its values are then constants of the kernel, which no gradient reaches."""


class ArrayProxy(ArrayOperand):
    """A captured NumPy array while tracing: indexing with traced values (and numbers) records a gather."""

    def __init__(self, tracing: Tracing, capture: Capture):
        self._tracing, self._capture = tracing, capture

    @property
    def name(self) -> str:
        return self._capture.name

    @property
    def array(self) -> np.ndarray:
        """The array's values (a search's boundaries read them: `Capture.opaque`)."""
        self._capture.opaque = self._capture.opaque or "its values read as a search's boundaries"
        return self._capture.array

    def captured(self) -> CapturedArray:
        """The kernel input, checked at its first traced read (so a refusal names that line)."""
        c = self._capture
        if c.captured is None:
            if c.array.dtype in (BF16, *FP8_DTYPES):  # a bf16 or 8-bit table: f32 holds its values exactly
                c.array = c.array.astype(np.float32)
            problem = array_problem(c.array)
            if problem:
                raise self._tracing.refuse(f"the captured array {c.name}: {problem}")
            boolean = c.array.dtype.kind == "b"
            c.captured = CapturedArray(c.unique, c.array.astype(np.int32) if boolean else c.array, boolean)
        return c.captured

    def __getitem__(self, index) -> Traced:
        t, arr, name = self._tracing, self._capture.array, self._capture.name
        index = index if isinstance(index, tuple) else (index,)
        if not any(isinstance(i, Traced) for i in index):  # a constant read: the value itself
            self._capture.opaque = self._capture.opaque or f"a read at constant indices {name}[{index}]"
            return arr[index if len(index) != 1 else index[0]]
        captured = self.captured()
        if len(index) != arr.ndim:
            raise t.refuse(f"{name}[...] with {len(index)} indices: a captured array of shape {arr.shape} takes "
                           "exactly one index per dimension")
        lifter = next(i for i in index if isinstance(i, Traced))
        nodes = []
        for i in index:
            if isinstance(i, slice) or i is Ellipsis or i is None:
                raise t.refuse(f"a slice of the captured array {name} (index it with one value per dimension)")
            n = lifter._lift(i)
            if n.dtype != I32:
                raise t.refuse(f"{name}[...] with a {n.dtype} index (indices are integers)")
            nodes.append(n)
        t.arrays.setdefault(id(captured), captured)
        node = Node("gather", tuple(nodes), captured.dtype, captured)
        t.reads.append(Read(captured, name, tuple(nodes), t.read_site()))
        if captured.boolean:
            node = Node("ne", (node, Node("const", (), I32, 0)), BOOL)
        value = Traced(t, node)
        value._narrow = narrow_integers.of_array(captured.array)  # NumPy keeps an int8 ... uint64 value's type
        return value

    def whole(self):
        """The array used as a value without an index: a 0-d array's number (a constant, as a constant index's
        read is); any other array is refused by name (it has no one value per score)."""
        arr, name = self._capture.array, self._capture.name
        if arr.ndim == 0:
            self._capture.opaque = self._capture.opaque or f"its value read as a number ({name} without an index)"
            return arr[()]
        raise self._tracing.refuse(f"the captured array {name} of shape {arr.shape} used as a whole (index it with "
                                   f"one value per dimension, such as {name}[{', '.join(MASK_MOD_ARGS[-arr.ndim:])}]; "
                                   "an array computed from it, outside the modifier)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """A NumPy ufunc of the array used whole (`np.exp(log_slopes)[h]`): of its number if 0-d, else refused by
        name (`whole`), as an operator's operand is."""
        return getattr(ufunc, method)(*(i.whole() if isinstance(i, ArrayProxy) else i for i in inputs), **kwargs)

    def searchsorted(self, v, side="left", sorter=None) -> Traced:
        """`array.searchsorted(v, side)`, NumPy's method: np.searchsorted (`tessera.variants.search_calls`)."""
        if not isinstance(v, Traced):
            self._capture.opaque = self._capture.opaque or f"a search of a constant in {self._capture.name}"
            return self._capture.array.searchsorted(v, side, sorter)
        return v._search("np.searchsorted", self, v, side, sorter)

    def to(self, *args, **kwargs) -> ArrayProxy:
        """`table.to(q_idx.device)` (a device: a torch.device, a string, an index): the same array, which the
        kernel reads where the launch puts it; a dtype (`.to(torch.float32)`) is refused by name."""
        torch = torch_mods.torch_module()
        for arg in (*args, *kwargs.values()):
            if not (isinstance(arg, (str, int)) or torch is not None and isinstance(arg, torch.device)) \
                    or isinstance(arg, bool):
                raise self._tracing.refuse(f".to({arg!r}) of the captured array {self._capture.name} (a device "
                                           "move reads the same array; convert its type outside the modifier)")
        return self

    def cpu(self) -> ArrayProxy:
        return self

    def cuda(self, *args, **kwargs) -> ArrayProxy:
        return self

    # Its shape and type: known when traced, and part of what a trace is kept by (`fingerprint.structure`: an
    # array by its identity, dtype and shape), so a modifier may size an index by them
    # (`table[np.clip(d, 0, len(table) - 1)]`) without its trace depending on the values. A torch tensor answers
    # as torch does (`.size()` and `.numel()` methods, a torch dtype), a NumPy array as NumPy does.
    @property
    def _source(self):
        c = self._capture
        return c.source if c.source is not None else c.array

    @property
    def shape(self):
        return self._source.shape

    @property
    def ndim(self) -> int:
        return self._source.ndim

    @property
    def dtype(self):
        return self._source.dtype

    @property
    def size(self):
        return self._source.size  # NumPy's number of elements; torch's bound method Tensor.size

    def __len__(self) -> int:
        if self._source.ndim == 0:
            raise self._tracing.refuse(f"len() of the 0-d captured array {self._capture.name}")
        return len(self._source)

    def __getattr__(self, name: str):
        if name in ("numel", "dim") and torch_mods.is_tensor(self._capture.source):
            return getattr(self._capture.source, name)
        raise self._tracing.refuse(f"the attribute .{name} of the captured array {self._capture.name}")

    def __setitem__(self, index, value):
        raise self._tracing.refuse(f"an assignment into the captured array {self._capture.name} (a modifier reads "
                                   "its arrays; it may not change them)")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        """A torch function of a captured tensor: torch.searchsorted / torch.bucketize of a traced value
        (`torch_mods.dispatch`); any other is refused by name."""
        everything = list(args) + list((kwargs or {}).values())
        proxy = next(a for a in everything if isinstance(a, ArrayProxy))
        traced = next((a for a in everything if isinstance(a, Traced)), None)
        if traced is not None and torch_mods.is_search(func):
            return torch_mods.dispatch(traced, func, tuple(args), dict(kwargs or {}))
        raise proxy._tracing.refuse(torch_mods.captured_call(func, proxy._capture.name))


def _whole_operand(op: Callable, reflected: bool = False) -> Callable:
    """An operator of ArrayProxy (`table * 2`, `2 * table`, `-table`) as `op` of the array used whole (`whole`:
    a 0-d array's number, else refused by name); beside a traced operand NotImplemented, so that the traced
    value's own operator runs (which takes the array whole the same way)."""
    def apply(self, *others):
        if any(isinstance(o, Traced) for o in others):
            return NotImplemented
        return op(*others, self.whole()) if reflected else op(self.whole(), *others)
    return apply


_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
for _name in (*_BINARY, "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert"):
    setattr(ArrayProxy, f"__{_name}__", _whole_operand(getattr(operator, f"__{_name}__")))
for _name in _BINARY:
    setattr(ArrayProxy, f"__r{_name}__", _whole_operand(getattr(operator, f"__{_name}__"), reflected=True))


def array_problem(array: np.ndarray) -> str | None:
    """Why `array` cannot be a kernel input (f32 for floats, i32 for integers and booleans), or None."""
    if array.dtype.kind not in "fiub":
        return f"its dtype {array.dtype} is not a number or a boolean"
    if array.ndim == 0 or array.size == 0:
        return f"its shape {array.shape} is empty (a non-empty array of at least one dimension)"
    if array.dtype.kind in "iu" and (int(array.min()) < I32_RANGE[0] or int(array.max()) > I32_RANGE[1]):
        return (f"its values [{int(array.min())}, {int(array.max())}] do not fit i32 (the kernel reads integer "
                "arrays as i32)")
    if array.dtype.kind == "f" and array.dtype.itemsize > 4:  # (narrower floats all fit f32: no pass over them)
        finite = np.isfinite(array)
        largest = float(np.max(np.abs(array), where=finite, initial=0.0))
        if largest > float(np.finfo(np.float32).max):
            return f"its value {largest!r} overflows f32 (the kernel reads float arrays as f32)"
    return None

