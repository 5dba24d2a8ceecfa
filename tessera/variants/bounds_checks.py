"""Bounds-checked modifiers: `bounds_checked(fn, kind)` is `fn` with its captured arrays in views that check each
integer index against the array's shape, raising `ModTraceError` naming the function and the array where the
kernel's gather would read 0 (a negative index, which NumPy would wrap, too).

The float64 reference (`tessera.reference_attention.attention_mods`) and the host-side block mask
(`tessera.variants.block_mask`) call modifiers through this, on NumPy index grids or, for a modifier written
for torch, on tensors (`tessera.variants.torch_mods`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from tessera.variants import torch_mods
from tessera.variants.callables import compiled_original, function_name, method_parts, underlying
from tessera.variants.rebinding import rebind_arrays
from tessera.variants.tracing import ModTraceError


def bounds_checked(fn: Callable, kind: str) -> Callable:
    """`fn` with its captured arrays bounds-checked: an integer index outside an array (negative ones too,
    which NumPy would wrap) raises ModTraceError naming the function and the array, as the kernel's gathers
    would read 0 there. The reference and the host-side block mask call modifiers through this (a
    `torch.compile`d modifier as the function it wraps, as the tracer reads it)."""
    fn = compiled_original(fn)

    def wrap(name: str, array):
        check = _index_check(fn, kind, name)
        if torch_mods.is_tensor(array):
            return torch_mods.CheckedTensor(array, check)
        return array.view(_make_checked(check))

    rebound = rebind_arrays(fn, wrap)
    if _holds_tensors(fn):  # an object holding tensors (a torch module) is written for tensors
        return lambda *args: torch_mods.call_with_tensors(rebound, *args)
    return torch_mods.host_callable(rebound, underlying(fn))  # torch functions take the grids as tensors


def _holds_tensors(fn: Callable) -> bool:
    """Whether the instance a modifier is called on (a callable object's, a bound method's, through partials)
    holds a torch tensor: as an attribute, or in a dict attribute (a torch module's buffers and parameters)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    parts = method_parts(fn)
    if parts is None or torch_mods.torch_module() is None:
        return False
    values = list(getattr(parts[1], "__dict__", {}).values())
    values += [v for d in values if isinstance(d, dict) for v in d.values()]
    return any(torch_mods.is_tensor(v) for v in values)


def _index_check(fn: Callable, kind: str, name: str) -> Callable:
    """A check of one index per dimension against an array's shape, raising ModTraceError naming the array. A
    constant index (a Python or NumPy integer, `slopes[-1]`) is NumPy's, as the tracer reads it: in [-n, n)."""
    def check(idx: tuple, shape: tuple) -> None:
        if not all(isinstance(i, (np.ndarray, int, np.integer)) for i in idx):
            return
        for axis, (i, n) in enumerate(zip(idx, shape)):
            if not isinstance(i, np.ndarray) and -n <= i < n:
                continue
            i = np.asarray(i)
            if i.size and (i.min() < 0 or i.max() >= n):
                bad = int(i.min()) if i.min() < 0 else int(i.max())
                raise ModTraceError(f"{kind} '{function_name(fn)}' reads {name} at index {bad} of dimension "
                                    f"{axis}, outside its shape {shape}")
    return check


def _make_checked(check: Callable) -> type:
    class Checked(np.ndarray):
        def __getitem__(self, index):
            idx = index if isinstance(index, tuple) else (index,)
            base = self.view(np.ndarray)
            if len(idx) == base.ndim:
                check(idx, base.shape)
            return np.asarray(base[index])

    return Checked
