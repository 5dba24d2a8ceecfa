"""What a score_mod / mask_mod's trace depends on, as a hashable key: `fingerprint(fn)`, or None where it cannot be
told (then nothing traced from it is kept); and its two levels, `structure(fn)` (arrays without their contents)
and `digest(array)` (one array's contents), by which `tessera.variants.trace.trace_mod` keeps its traces.

Tracing calls the function on traced values, so its graph is fixed by its code and by every value the code reads:
closure cells, argument defaults, the module globals its code names (and its nested code's), a functools.partial's
function and arguments, a method's or callable object's instance attributes and class, and, through them, the
user's helper functions and theirs, as `tessera.variants.rebinding` finds them. Arrays enter the graph as kernel
inputs; their contents matter only where the trace reads them (a constant index reads a value into the kernel,
the boundaries of a search may be unrolled into compares, the proof that reads stay in bounds reads the index
arrays). So `fingerprint` keys an array by its identity (the trace holds the array itself, the kernel input the
launch passes), dtype, shape and a digest of its bytes, and `structure` by its identity, dtype and shape only,
returning the arrays it met (in the order it met them, each once) beside the key: the trace cache digests just
those whose contents the trace used (none for a learned table read at traced indices, `Trace.free`), so that a
training step that changes such a table in place neither hashes it nor traces again. Two names of one array are
keyed by its first (one kernel input, not two). A number is keyed by its type and repr (0.0 and -0.0 differ), a
library's function, class or module (NumPy's, math's, torch's, Tessera's, the builtins) by identity, except a
library's closure (torch's `and_masks(causal, window)`), keyed as a user's function is, by what it closes over.
Anything else the function reads (an object of the user's, a module of the user's whose attributes it may read,
a torch module) makes the fingerprint None: a value it cannot key could change between calls without the key
changing.

So a closure cell rebound or a global the function reads reassigned changes both keys, and an array changed in
place changes `fingerprint` (and the digest `trace_mod` checks where the trace used its contents): a cache keyed
by them is never served stale (`tessera.variants.trace.trace_mod`, `tessera.runtime.flex`).
"""

from __future__ import annotations

import functools
import hashlib
import types
from collections.abc import Callable, Hashable

import numpy as np

from tessera.variants import torch_mods
from tessera.variants.callables import instance_attributes, is_user_function, method_parts
from tessera.variants.rebinding import global_names

LIBRARIES = ("numpy", "math", "builtins", "operator", "functools", "torch", "tessera", "ml_dtypes")
"""Top-level modules whose functions, classes and submodules are keyed by identity (a user does not change them
between calls)."""
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


class _Same:
    """An object in a key by its identity: the key holds it, so that its id is not reused while the key lives."""

    __slots__ = ("obj",)

    def __init__(self, obj: object):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


class _Unkeyable(Exception):
    """A value the fingerprint cannot key (the fingerprint is None)."""


def fingerprint(fn: Callable) -> Hashable | None:
    """The key of everything `fn`'s trace depends on, arrays with their contents (module docstring), or None."""
    found = _key(_Walk(contents=True), fn)
    return None if found is None else found[0]


def structure(fn: Callable) -> tuple[Hashable, list, set[int]] | None:
    """(the key of `fn`'s code and values with each array by its identity, dtype and shape but not its contents,
    the arrays met: NumPy arrays and torch tensors, each once, in the order met, the ids of those the tracer may
    read without its proxy: 0-d, or in a container of containers), or None where `fingerprint` is None. Equal keys
    meet their arrays in one order."""
    walk = _Walk(contents=False)
    found = _key(walk, fn)
    return None if found is None else (*found, walk.unwrapped)


def digest(array) -> bytes:
    """A digest of the bytes of `array` (a NumPy array or a torch tensor; a CUDA tensor is copied to the host)."""
    if torch_mods.is_tensor(array):
        array = torch_mods.as_numpy(array)
    return hashlib.blake2b(np.ascontiguousarray(array).view(np.uint8).data).digest()


def _key(walk: _Walk, fn: Callable) -> tuple[Hashable, list] | None:
    try:
        key = walk.value(fn)
        hash(key)
    except (_Unkeyable, TypeError):  # TypeError: a library's object that is not hashable
        return None
    return key, walk.arrays


class _Walk:
    """One fingerprint: objects seen so far by id, so that a value read twice (an array, a recursive function)
    is keyed once and then by its ordinal; with `contents`, arrays by their bytes' digest too; `arrays` those
    met, and `unwrapped` the ids of those met where the tracer may read them without its proxy
    (`tessera.variants.rebinding` wraps the arrays a function reads, in tuples, lists and dicts of them, but not
    in containers of containers, nor 0-d ones): their contents are always keyed (`Trace.free` excludes them)."""

    def __init__(self, contents: bool):
        self.seen: dict[int, int] = {}
        self.contents = contents
        self.arrays: list = []
        self.unwrapped: set[int] = set()
        self.nested = 0
        """How many containers (tuples, lists, dicts) deep the value walked is, inside its variable."""

    def value(self, value: object) -> Hashable:
        if isinstance(value, _SCALARS):
            return type(value).__name__, repr(value)
        if (isinstance(value, np.ndarray) or torch_mods.is_tensor(value)) and (self.nested > 1 or value.ndim == 0):
            self.unwrapped.add(id(value))  # (before `seen`: an array met wrapped first may be read raw here)
        if id(value) in self.seen:
            return "same", self.seen[id(value)]
        self.seen[id(value)] = len(self.seen)
        if isinstance(value, np.ndarray) or torch_mods.is_tensor(value):
            return self.array(value)
        if isinstance(value, (tuple, list, dict)):
            self.nested += 1
            try:
                if isinstance(value, dict):
                    return "dict", tuple((self.value(k), self.value(v)) for k, v in value.items())
                return type(value).__name__, tuple(self.value(v) for v in value)
            finally:
                self.nested -= 1
        if isinstance(value, functools.partial):
            return "partial", self.value(value.func), self.value(value.args), self.value(value.keywords)
        torch = torch_mods.torch_module()
        if torch is not None and isinstance(value, torch.nn.Module):  # parameters, buffers, hooks: not keyed
            raise _Unkeyable
        if isinstance(value, types.FunctionType) and (is_user_function(value) or value.__closure__):
            return self.function(value)  # a library's closure too (torch's and_masks(...)): what it closes over
        if _is_library(value):
            return "library", value
        parts = method_parts(value)
        if parts is not None:
            function, instance = parts
            return "method", self.value(function), self.instance(instance)
        raise _Unkeyable

    def array(self, value) -> Hashable:
        """A NumPy array or torch tensor: its identity, dtype and shape, with `contents` its bytes' digest."""
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise _Unkeyable
            dtype = value.dtype.str
        else:
            dtype = str(value.dtype)
        self.arrays.append(value)
        key = ("array", _Same(value), dtype, tuple(value.shape))
        return (*key, digest(value)) if self.contents else key

    def function(self, fn: types.FunctionType) -> Hashable:
        """A user's function: its code (and the file it is in) and the values it reads (closure cells, defaults,
        keyword defaults, the globals its code names)."""
        nested, self.nested = self.nested, 0  # its variables, as `rebinding` rebinds them
        try:
            return self._function(fn)
        finally:
            self.nested = nested

    def _function(self, fn: types.FunctionType) -> Hashable:
        code = fn.__code__
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(self.value(cell.cell_contents))
            except ValueError:  # an empty cell
                cells.append(("empty",))
        glb = fn.__globals__
        named = tuple((name, self.value(glb[name]) if name in glb else ("absent",))
                      for name in sorted(global_names(code)))
        return ("function", code, code.co_filename, tuple(cells), self.value(fn.__defaults__),
                self.value(fn.__kwdefaults__), named)

    def instance(self, obj: object) -> Hashable:
        """A method's or callable object's instance: its class (the Python functions and values of each class of
        its MRO) and its own attributes (its __dict__ and slots)."""
        nested, self.nested = self.nested, 0  # its attributes, as `rebinding` rebinds them
        try:
            return self._instance(obj)
        finally:
            self.nested = nested

    def _instance(self, obj: object) -> Hashable:
        cls = type(obj)
        classes = []
        for klass in cls.__mro__[:-1]:
            members = tuple((name, self.value(v)) for name, v in vars(klass).items()
                            if not (name.startswith("__") and name != "__call__"))
            classes.append((klass, members))
        return "instance", tuple(classes), self.value(instance_attributes(obj))


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, type, type(np.where))


def _is_library(value: object) -> bool:
    """Whether `value` is a module, function, ufunc or class of one of `LIBRARIES`."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
    elif isinstance(value, np.ufunc):
        module = "numpy"
    elif isinstance(value, _FUNCTIONS):
        module = getattr(value, "__module__", None) or ""
    else:
        return False
    return module.split(".")[0] in LIBRARIES and not is_user_function(value)
