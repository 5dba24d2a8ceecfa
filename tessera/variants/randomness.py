"""Random draws inside a modifier, refused by name while it is traced (`watching_draws`).

A modifier is traced once: a number it draws (`np.random.rand()`, `random.random()`, `torch.rand(())`, a
Generator's `rng.normal()`) is a Python number or a 0-d tensor at that moment, which the tracer would take as a
constant of the kernel, while the float64 reference draws anew on each of its calls: the kernel would be silently
other than the function. The kernel has no random numbers, so `watching_draws` records the first call, while the
modifier runs, of a random source: a method of Python's `random.Random` (the `random` module's functions), of
NumPy's `RandomState` (`np.random.*`), `Generator` or `BitGenerator`, a `torch.Generator`'s, or one of torch's
sampling functions and in-place samplers (`TORCH_SAMPLERS`), and the tracer refuses the modifier naming it and the
line of the modifier that drew it. NumPy's samplers are Cython methods, which Python's profiler does not see
called: a draw from NumPy's global state, Python's or torch's default generator, or a generator the modifier holds
(a closure variable, an argument default, a global it names, a partial's argument, its instance's attribute) is
also told by that generator's state having changed, located at the first line of the modifier naming a random source (its first line if none).
A table drawn outside the modifier and captured is a kernel input like any.
"""

from __future__ import annotations

import dis
import functools
import pickle
import random
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from tessera.variants import torch_mods
from tessera.variants.callables import instance_attributes, method_parts, underlying
from tessera.variants.rebinding import global_names

TORCH_SAMPLERS = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal", "bernoulli",
    "multinomial", "poisson", "binomial", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
    "geometric_", "cauchy_", "log_normal_", "dropout", "manual_seed", "seed"})
"""torch's functions and tensor methods that draw from its random generators (by name)."""

_SOURCES = (random.Random, np.random.RandomState, np.random.Generator, np.random.BitGenerator)
"""Python's and NumPy's generators (their methods draw)."""


def _random_source(function: object) -> str | None:
    """How a refusal names `function` (a C function being called) where it draws random numbers; else None."""
    owner = getattr(function, "__self__", None)
    name = getattr(function, "__name__", "?")
    if isinstance(owner, _SOURCES):
        return f"{type(owner).__module__.split('.')[0]}'s {type(owner).__name__}.{name}"
    torch = torch_mods.torch_module()
    if torch is None or name not in TORCH_SAMPLERS:
        return None
    if isinstance(owner, (torch.Tensor, torch.Generator)) or getattr(function, "__module__", None) == "torch" \
            or owner is None and "torch" in (getattr(function, "__qualname__", "") + str(function)):
        return f"torch.{name}"
    return None


def _held_generators(fn: Callable) -> dict[str, object]:
    """The random generators `fn` holds by name: its underlying function's closure cells, argument defaults and
    the globals its code names, a partial's bound arguments, a method's or callable object's instance
    attributes (`self.rng`), besides the global ones of Python, NumPy and torch."""
    inner = underlying(fn)
    values: list[tuple[str, object]] = []
    while isinstance(fn, functools.partial):
        values += [(f"argument {i}", v) for i, v in enumerate(fn.args)] + list(fn.keywords.items())
        fn = fn.func
    parts = method_parts(fn)
    if parts is not None:
        values += [(f"self.{name}", v) for name, v in instance_attributes(parts[1]).items()]
    held: dict[str, object] = {"Python's random": random._inst, "NumPy's np.random": np.random.mtrand._rand}
    torch = torch_mods.torch_module()
    if torch is not None:
        held["torch's default generator"] = torch.random.default_generator
    kinds = _SOURCES + ((torch.Generator,) if torch is not None else ())
    if not isinstance(inner, types.FunctionType):
        return held
    code = inner.__code__
    values += [(n, _contents(c)) for n, c in zip(code.co_freevars, inner.__closure__ or ())]
    values += [(n, inner.__globals__[n]) for n in global_names(code) if n in inner.__globals__]
    values += list(zip(code.co_varnames[code.co_argcount - len(inner.__defaults__ or ()):code.co_argcount],
                       inner.__defaults__ or ()))
    held.update({name: value for name, value in values if isinstance(value, kinds)})
    return held


def _contents(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a variable the enclosing function never assigned): no generator
        return None


def _state(generator: object) -> bytes:
    if isinstance(generator, np.random.Generator):
        return pickle.dumps(generator.bit_generator.state)
    if isinstance(generator, np.random.RandomState):
        return pickle.dumps(generator.get_state(legacy=False))
    if isinstance(generator, np.random.BitGenerator):
        return pickle.dumps(generator.state)
    if isinstance(generator, random.Random):
        return pickle.dumps(generator.getstate())
    return bytes(generator.get_state().numpy())  # a torch.Generator


def _naming_line(fn: Callable, names: set[str]) -> str:
    """file:line of the first instruction of `fn`'s code loading one of `names` (its first line if none)."""
    code = underlying(fn).__code__
    for instruction in dis.get_instructions(code):
        # Python 3.13's paired loads (LOAD_FAST_LOAD_FAST `score, rng`) name two variables, as a tuple
        loaded = instruction.argval if isinstance(instruction.argval, tuple) and "FAST" in instruction.opname \
            else (instruction.argval,)
        if any(isinstance(name, str) and name in names for name in loaded) and instruction.positions \
                and instruction.positions.lineno:
            return f"{code.co_filename}:{instruction.positions.lineno}"
    return f"{code.co_filename}:{code.co_firstlineno}"


@contextmanager
def watching_draws(fn: Callable, where: Callable[[], str]) -> Iterator[list[tuple[str, str]]]:
    """While the block runs (the modifier `fn`'s traced call, on this thread), record the first random draw in
    the list it yields: (its source, the modifier's line: `where()` when the profiler sees the call, else
    `_naming_line`)."""
    draws: list[tuple[str, str]] = []
    held = _held_generators(fn)
    before = {name: _state(g) for name, g in held.items()}
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event == "c_call" and not draws:
            source = _random_source(arg)
            if source is not None:
                draws.append((source, where()))
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(profile)
    try:
        yield draws
    finally:
        sys.setprofile(previous)
        changed = [name for name, g in held.items() if _state(g) != before[name]]
        if changed and not draws:
            names = {"random", "rng", "generator", *TORCH_SAMPLERS, *held}
            draws.append((f"{changed[0]}, whose state it changed", _naming_line(fn, names)))
