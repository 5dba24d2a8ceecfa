"""Rebinding a modifier's captured arrays: a copy of the function (of a partial's function and arguments, of a
method's or callable object's instance) whose NumPy arrays and torch tensors read as `wrap(name, array)`.

The tracer wraps them in proxies that record gathers (`tessera.variants.captured`); the reference and the
host-side block mask in bounds-checked views (`tessera.variants.bounds_checks`). What is rebound: closure
cells, argument defaults, the module globals the code names, a user's helper functions it reads (and theirs),
tuples, lists and dicts of those, and an instance's attributes (its own, its class's, a torch module's buffers
and parameters). The copy is made on every call, so what it reads is the function's state at that call."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

import numpy as np

from tessera.variants import torch_mods
from tessera.variants.callables import (compiled_original, function_name, instance_attributes, is_user_function,
                                        method_parts, underlying)
from tessera.variants.tracing import ModTraceError


_CONSTANTS = "0-d tensors"
"""The memo's key of a callback given each 0-d tensor the function reads (a constant of the kernel)."""


def _rebound_value(name: str, value: object, wrap: Callable, memo: dict) -> object:
    """`value`, a variable a modifier reads, as `rebind_arrays` rebinds it: an array of at least one dimension
    wrapped, a user's function rebound, a tuple or list of them each rebound; anything else itself."""
    if (isinstance(value, np.ndarray) or torch_mods.is_tensor(value)) and value.ndim:  # 0-d: a constant
        return wrap(name, value)
    if torch_mods.is_tensor(value) and _CONSTANTS in memo:  # a 0-d tensor, seen (`captured_tensors_requiring_grad`)
        memo[_CONSTANTS](name, value)
    if _holds_arrays(value):  # `self` in a closure: a score_mod defined in a model's forward reads self.rel_bias[...]
        try:
            return _rebound_instance(value, wrap, memo)
        except ModTraceError:  # an object that cannot be copied: read as it is (its arrays are not captured)
            return value
    if is_user_function(value):
        return rebind_arrays(value, wrap, memo)
    if isinstance(value, (tuple, list)) and any(is_user_function(v) or isinstance(v, np.ndarray)
                                                or torch_mods.is_tensor(v) for v in value):
        return type(value)(_rebound_value(name, v, wrap, memo) for v in value)
    if isinstance(value, dict) and any(is_user_function(v) or isinstance(v, np.ndarray) or torch_mods.is_tensor(v)
                                       for v in value.values()):  # by key: a torch module's buffers, parameters
        return {key: _rebound_value(str(key), v, wrap, memo) for key, v in value.items()}
    return value


def _holds_arrays(value: object) -> bool:
    """Whether `value` is an object of the user's whose own attributes hold arrays or tensors of at least one
    dimension, or a torch module (its parameters and buffers): what a closure over `self` reads."""
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                          functools.partial, np.ndarray, np.generic, tuple, list, dict, str, bytes, int, float,
                          complex)) or \
            torch_mods.is_tensor(value):
        return False
    torch = torch_mods.torch_module()
    if torch is not None and isinstance(value, torch.nn.Module):
        return True
    return any((isinstance(v, np.ndarray) or torch_mods.is_tensor(v)) and v.ndim
               for v in instance_attributes(value).values())


def _rebound_instance(obj: object, wrap: Callable, memo: dict) -> object:
    """A copy of `obj` (a callable object's instance, a bound method's, or an object a closure reads: `self`)
    whose attributes read as `_rebound_value` makes them: its arrays (its own and its class's) wrapped, its
    Python methods bound to the copy with their arrays rebound too (`self.table[h]`, `self.helper(q_idx)` trace; a dict attribute of arrays
    is rebound by key: a torch module's buffers and parameters). A class whose instances cannot be made without
    its constructor (one of C) is refused by name."""
    if isinstance(obj, type):  # a classmethod's class
        return _rebound_class(obj, wrap, memo)
    cls, key = type(obj), ("instance", id(obj))
    if key in memo:
        return memo[key]
    made, call = cls, getattr(cls, "__call__", None)
    if is_user_function(call):  # a callable object read from a closure is called through the copy: its
        # __call__ rebound as well (a subclass of the object's class; the class itself is not changed)
        made = type(cls)(cls.__name__, (cls,), {"__call__": rebind_arrays(call, wrap, memo),
                                                "__module__": cls.__module__})
    try:
        clone = object.__new__(made)
    except TypeError:
        raise ModTraceError(f"a score_mod or mask_mod's instance of {cls.__qualname__} cannot be copied for "
                            "tracing (write the modifier as a function, or a class defined in Python)") from None
    memo[key] = clone
    state: dict[str, object] = {}
    for klass in reversed(cls.__mro__[:-1]):  # class attributes: arrays and methods
        for name, value in vars(klass).items():
            if isinstance(value, types.FunctionType) and not name.startswith("__"):
                state[name] = types.MethodType(rebind_arrays(value, wrap, memo), clone)
            elif isinstance(value, np.ndarray) or torch_mods.is_tensor(value):
                state[name] = _rebound_value(name, value, wrap, memo)
    own = instance_attributes(obj)
    state.update({name: _rebound_value(name, value, wrap, memo) for name, value in own.items()})
    for name, value in state.items():
        try:
            object.__setattr__(clone, name, value)
        except AttributeError:  # a method name on a class with __slots__: the class's own method is used
            pass
    return clone




def _rebound_class(cls: type, wrap: Callable, memo: dict) -> type:
    """For a classmethod modifier (`cls.widths[h]`, `cls.helper(q_idx)`): a subclass of `cls` whose array
    attributes read as `_rebound_value` makes them and whose classmethods and staticmethods are rebound, so that
    they trace; `cls` itself is not changed. A class that cannot be subclassed is refused by name."""
    key = ("class", id(cls))
    if key in memo:
        return memo[key]
    try:
        clone = type(cls)(cls.__name__, (cls,), {"__module__": cls.__module__})
    except TypeError:
        raise ModTraceError(f"a score_mod or mask_mod's class {cls.__qualname__} cannot be subclassed for tracing "
                            "(write the modifier as a function, or a class defined in Python)") from None
    memo[key] = clone
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if name.startswith("__"):
                continue
            if isinstance(value, (classmethod, staticmethod)) and isinstance(value.__func__, types.FunctionType):
                setattr(clone, name, type(value)(rebind_arrays(value.__func__, wrap, memo)))
            elif isinstance(value, np.ndarray) or torch_mods.is_tensor(value):
                setattr(clone, name, _rebound_value(name, value, wrap, memo))
    return clone


def global_names(code: types.CodeType) -> set[str]:
    """The global names `code` reads, and those of the code it nests (a def, a lambda, a generator expression or,
    before Python 3.12, a comprehension inside the modifier: each runs with the modifier's globals)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def rebind_arrays(fn: Callable, wrap: Callable[[str, np.ndarray], object], _memo: dict | None = None) -> Callable:
    """A copy of `fn` whose captured NumPy arrays and torch tensors (closure cells, argument defaults, and the
    module globals its code names) read as `wrap(name, array)`, except 0-d ones (constants, left as they are);
    Python functions it captures (a helper, the parts of a composed mask, also in a tuple or list) are rebound
    the same way, so compositions trace; a functools.partial is rebound as its function and the arguments it
    binds; a callable object (a class with a Python `__call__`) or a bound method as its function given a copy
    of the instance whose arrays are wrapped (`_rebound_instance`); a `torch.compile` wrapper as what it wraps.
    Everything else is unchanged."""
    fn = compiled_original(fn)
    if not isinstance(underlying(fn), types.FunctionType):
        raise ModTraceError(f"a score_mod or mask_mod must be a Python function (def, lambda, functools.partial "
                            f"of one, or an object whose class defines __call__ in Python); got "
                            f"{type(underlying(fn)).__name__}")
    memo = {} if _memo is None else _memo
    if id(fn) in memo:
        return memo[id(fn)]

    def rebound(name: str, value: object) -> object:
        return _rebound_value(name, value, wrap, memo)

    parts = method_parts(fn)
    if parts is not None:
        function, instance = parts
        memo[id(fn)] = bound = functools.partial(rebind_arrays(function, wrap, memo),
                                                 _rebound_instance(instance, wrap, memo))
        return bound
    if isinstance(fn, functools.partial):
        inner = rebind_arrays(fn.func, wrap, memo)
        args = [rebound(f"{function_name(fn)}_arg{i}", v) for i, v in enumerate(fn.args)]
        return functools.partial(inner, *args, **{k: rebound(k, v) for k, v in fn.keywords.items()})
    code = fn.__code__
    closure = None
    if fn.__closure__:
        cells = []
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell: leave it for Python to report
                cells.append(cell)
                continue
            cells.append(types.CellType(rebound(name, value)))
        closure = tuple(cells)
    glb = dict(fn.__globals__)
    defaults = fn.__defaults__
    if defaults:  # def mod(..., doc_ids=DOC): an argument's default is captured as a closure cell is
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
        defaults = tuple(rebound(name, value) for name, value in zip(names, defaults))
    copy = types.FunctionType(code, glb, fn.__name__, defaults, closure)
    memo[id(fn)] = copy  # before the globals: a recursive reference finds the copy
    for name in global_names(code):
        if name in glb:
            glb[name] = rebound(name, glb[name])
    copy.__kwdefaults__ = ({name: rebound(name, value) for name, value in fn.__kwdefaults__.items()}
                           if fn.__kwdefaults__ else fn.__kwdefaults__)
    copy.__qualname__ = fn.__qualname__
    return copy



def captured_tensors_requiring_grad(fn: Callable) -> dict[str, object]:
    """The torch tensors `fn` reads as captured arrays (`rebind_arrays`) that require grad, by the name it calls
    each (a learned table: `tessera.runtime.autograd.attention` gives it its gradient, or refuses it by name); a
    0-d one (a constant of the kernel, no gradient) is refused by name (ModTraceError)."""
    found: dict[str, object] = {}

    def note(name: str, array):
        if torch_mods.is_tensor(array) and array.requires_grad and all(t is not array for t in found.values()):
            found[name if name not in found else f"{name}_{len(found) + 1}"] = array
        return array

    constants: list[str] = []

    def constant(name: str, tensor) -> None:
        if tensor.requires_grad and name not in constants:
            constants.append(name)
    rebind_arrays(fn, note, {_CONSTANTS: constant})
    if constants:  # a constant of the kernel: its .grad would stay unset
        raise ModTraceError(f"'{function_name(fn)}' reads {', '.join(constants)}, a 0-d tensor that requires grad: "
                            "its value is a constant of the kernel, which no gradient reaches (make it a 1-D tensor "
                            "read at a traced index, such as scale[h], or pass it detached)")
    return found
