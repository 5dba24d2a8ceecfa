"""What a score_mod / mask_mod may be, and how messages name it: a function, a functools.partial of one, a bound
method, a callable object whose class defines `__call__` in Python, or a torch module (its `forward`).

`underlying` finds the Python function such a modifier calls (its code is what the tracer's messages locate),
`method_parts` splits a method or callable object into that function and its instance (whose arrays
`tessera.variants.rebinding` captures by attribute name), `function_name` is the name messages use and
`is_user_function` tells a user's helper (rebound and traced through) from a library's function;
`compiled_original` sees through `torch.compile`."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from tessera.variants import torch_mods

SCORE_MOD_ARGS = ("score", "b", "h", "q_idx", "kv_idx")
"""A score_mod's arguments, in order."""
MASK_MOD_ARGS = ("b", "h", "q_idx", "kv_idx")
"""A mask_mod's arguments, in order."""


def compiled_original(fn: object) -> object:
    """What `torch.compile` wrapped (`@torch.compile` keeps the function as `_torchdynamo_orig_callable`,
    `torch.compile(module)` the module as `_orig_mod`), through nested compiles; `fn` itself otherwise. A
    modifier is traced, and the reference calls it, as the function the user wrote: FlexAttention compiles
    the modifiers inside its own kernel, and the wrapper's machinery is no helper to trace through (walking
    it for arrays overflowed the stack)."""
    while True:
        original = getattr(fn, "_torchdynamo_orig_callable", None)
        if original is None and torch_mods.torch_module() is not None:
            original = getattr(fn, "_orig_mod", None) if isinstance(fn, torch_mods.torch_module().nn.Module) else None
        if original is None or not callable(original):
            return fn
        fn = original


def underlying(fn: Callable) -> Callable:
    """The function a functools.partial (of a partial ...), a bound method, a callable object or a
    `torch.compile` wrapper (`compiled_original`) calls; `fn` itself otherwise."""
    while True:
        fn = compiled_original(fn)
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif method_parts(fn) is not None:
            fn = method_parts(fn)[0]
        else:
            return fn


def method_parts(fn: object) -> tuple[types.FunctionType, object] | None:
    """(function, instance) of a bound method of a Python function, of a callable object whose class defines
    `__call__` in Python (`class Bias: def __call__(self, score, b, h, q_idx, kv_idx)`), or of a torch module
    (its class's `forward`; hooks are not run); None otherwise."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return fn.__func__, fn.__self__
    torch = torch_mods.torch_module()
    if torch is not None and isinstance(fn, torch.nn.Module):  # a module is called through its forward
        forward = getattr(type(fn), "forward", None)
        return (forward, fn) if isinstance(forward, types.FunctionType) else None
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType) and not isinstance(fn, type):
        return call, fn
    return None


def function_name(fn: Callable) -> str:
    """How messages name a modifier: its qualified name (a functools.partial's function's)."""
    inner = underlying(fn)
    return getattr(inner, "__qualname__", repr(inner))


def is_user_function(value: object) -> bool:
    """Whether `value` is (a partial, method or callable object of) a Python function outside NumPy and Tessera:
    a helper of the user's, whose captured arrays are captured too. A torch function counts only where it closes
    over something (FlexAttention's `and_masks(...)` closes over the user's mask_mods); one that does not
    (`F.relu`, passed as `activation=F.relu`) is torch's own, which the tracer knows by identity, so it must reach
    it uncopied."""
    if isinstance(value, functools.partial) or method_parts(value) is not None:
        return is_user_function(underlying(value))
    if not isinstance(value, types.FunctionType):
        return False
    library = (getattr(value, "__module__", None) or "").split(".")[0]
    return library not in ("numpy", "tessera", "builtins") and (library != "torch" or value.__closure__ is not None)


def instance_attributes(obj: object) -> dict[str, object]:
    """An instance's own attributes: its __dict__ and the slots of its classes that are set."""
    own = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(obj, name) and name not in ("__dict__", "__weakref__"):
                own[name] = getattr(obj, name)
    return own
