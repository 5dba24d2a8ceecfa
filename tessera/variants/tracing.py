"""The state every part of the tracer shares while one score_mod / mask_mod is traced (`Tracing`), the error it
raises (`ModTraceError`), and `ArrayOperand`, what the traced values' operators see of a captured array.

A refusal names the modifier, the file:line of the innermost frame running its code, and the construct
(`Tracing.refuse`); a read of a captured array records the line of the user's code that wrote it
(`Tracing.read_site`), which `tessera.variants.index_ranges` names when it cannot prove the read in bounds."""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable

import numpy as np

from tessera.variants import searches
from tessera.variants.callables import function_name, underlying
from tessera.variants.nodes import CapturedArray, Count, Read

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The tessera package's directory: frames under it are not the user's (`Tracing.read_site`)."""
UNCAPTURED = ("indexing with a traced value an array that is not a captured NumPy array of the function (a "
              "closure variable or a module global it names, or one of the functions it calls; a list, tuple or "
              "range is none: make it np.array(...))")


class ModTraceError(ValueError):
    """A score_mod or mask_mod that cannot be traced: the message names the function, file:line and the
    construct."""


class Tracing:
    """The state of one `trace_mod` call: the function (for messages) and the arrays seen so far: `arrays` the
    kernel inputs by id (first use first), `reads` the reads the function wrote, `searched` and `searches` the
    boundaries' inputs and the searches by their count's node id, `counts` those counts' ranges."""

    def __init__(self, fn: Callable, kind: str):
        self.fn, self.kind = fn, kind
        self.arrays: dict[int, CapturedArray] = {}
        self.names: set[str] = set()
        self.searched: dict[tuple, CapturedArray] = {}
        self.searches: dict[int, tuple[searches.Search, Callable, bool]] = {}
        self.reads: list[Read] = []
        self.counts: dict[int, Count] = {}

    def unique_name(self, name: str) -> str:
        """A kernel input's name for an array the user calls `name`: `{kind}_{name}`, then _2, _3, ..."""
        unique, n = f"{self.kind}_{name}", 1
        while unique in self.names:
            n += 1
            unique = f"{self.kind}_{name}_{n}"
        self.names.add(unique)
        return unique

    def where(self) -> str:
        """file:line of the innermost frame running the modifier's code (or the function's first line)."""
        code = underlying(self.fn).__code__
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is code:
                return f"{code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return f"{code.co_filename}:{code.co_firstlineno}"

    def read_site(self) -> str:
        """file:line of the innermost frame outside Tessera, NumPy and torch (the line of the user's code that
        reads an array, in the modifier or in a function it calls)."""
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not (name.startswith(_PACKAGE) or any(f"{os.sep}{lib}{os.sep}" in name for lib in ("numpy", "torch"))):
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return self.where()

    def refuse(self, construct: str) -> ModTraceError:
        """The error refusing `construct`, located at the modifier's line running now."""
        name = function_name(self.fn)
        return ModTraceError(f"{self.kind} '{name}' at {self.where()}: cannot trace {construct}")



class ArrayOperand(abc.ABC):
    """A captured array as an operand of a traced value's operators and functions (`tessera.variants.captured.
    ArrayProxy` is the one kind): named without an index it is its 0-d value (`whole`), and np.searchsorted /
    np.digitize search it (`name`, `array`, and `captured()`, the kernel input, checked at its first traced read).
    Its own class here so that the traced values need not import the proxies that build them."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The array's name as the modifier calls it."""

    @property
    @abc.abstractmethod
    def array(self) -> np.ndarray:
        """The NumPy array (a torch tensor's copy)."""

    @abc.abstractmethod
    def captured(self) -> CapturedArray:
        """The kernel input that holds the array."""

    @abc.abstractmethod
    def whole(self) -> object:
        """The array used as a value without an index."""
