"""Traced values: what a score_mod / mask_mod computes on while it is traced. Python's operators and NumPy's
ufuncs and functions on a `Traced` record `Node`s (`tessera.variants.nodes`) in place of computing.

The arithmetic follows NumPy's: its promotions (i32 beside f32 is f32, a boolean beside a number is 1 or 0), its
floor division and modulus, its comparisons (booleans), `&`, `|`, `~` of booleans as logic and of integers as
bitwise ops (`tessera.variants.bitwise`). Powers (`tessera.variants.powers`), rounding and the divisions that
round (`tessera.variants.rounding`) and searches (`tessera.variants.search_calls`) have modules of their own;
the ufunc tables are `tessera.variants.ufuncs`. What has no traced form (Python control flow on a traced value,
int(), float(), math's functions, iteration, an unknown attribute or ufunc) is refused by name
(`Tracing.refuse`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import numpy as np

from tessera.variants import bitwise, narrow_integers, powers, rounding, search_calls, searches, torch_mods, ufuncs
from tessera.variants.nodes import BOOL, COMPARES, F32, I32, Node
from tessera.variants.tracing import UNCAPTURED, ArrayOperand, Tracing


class Traced:
    """A traced value: Python operators and NumPy ufuncs/functions on it record nodes (module docstring)."""

    __array_priority__ = 1000
    _narrow: narrow_integers.Narrow | None = None
    """Set on a value read from a captured int8/int16/uint8/uint16/uint32/uint64 array and on what NumPy computes
    from it in that dtype (`tessera.variants.narrow_integers`)."""

    def __init__(self, tracing: Tracing, node: Node):
        self._tracing, self.node = tracing, node

    # -- building --------------------------------------------------------------------------------------
    def _wrap(self, node: Node) -> Traced:
        return Traced(self._tracing, node)

    def _lift(self, value: object) -> Node:
        if isinstance(value, Traced):
            return value.node
        if isinstance(value, (bool, np.bool_)):
            return Node("const", (), BOOL, bool(value))
        if isinstance(value, (int, np.integer)):
            if not -2**31 <= int(value) < 2**31:
                raise self._tracing.refuse(f"the integer constant {value} (outside i32)")
            return Node("const", (), I32, int(value))
        if isinstance(value, (float, np.floating)):
            if value != value:  # Tile IR's tile.fill holds no NaN: refused here, not by its verifier mid-build
                raise self._tracing.refuse("a NaN constant (a kernel's constants hold no NaN; hide a key with "
                                           "-inf or a mask_mod)")
            return Node("const", (), F32, float(value))
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return self._lift(value[()])
        if torch_mods.is_tensor(value) and value.dim() == 0:
            return self._lift(value.item())
        if isinstance(value, ArrayOperand):  # a captured array named without an index
            return self._lift(value.whole())
        raise self._tracing.refuse(f"an operand of type {type(value).__name__} (only traced values and numbers)")

    def _convert(self, node: Node, dtype: str) -> Node:
        if node.dtype == dtype:
            return node
        if node.op == "const":
            return Node("const", (), dtype, float(node.value) if dtype == F32 else node.value)
        return Node("to_f32", (node,), F32)

    def _apply(self, op: str, *operands: object) -> Traced:
        """`op` of `operands` as NumPy computes it; a value that NumPy keeps in a narrow integer type stays marked
        with its type and values, and one that would wrap there is refused (`narrow_integers.result`)."""
        return self._narrowed(op, operands, lambda: self._apply_op(op, *operands))

    def _apply_op(self, op: str, *operands: object) -> Traced:
        nodes = [self._lift(o) for o in operands]
        t = self._tracing
        if op in ("and", "or", "not", "xor") and any(n.dtype != BOOL for n in nodes):
            return self._bitwise(op, nodes)
        if op in ("and", "or", "not"):
            if any(n.dtype != BOOL for n in nodes):
                raise t.refuse(f"'{op}' (&, |, ~) of non-boolean values (bitwise integer ops are not supported)")
            return self._wrap(Node(op, tuple(nodes), BOOL))
        if op == "pos":
            return self._wrap(nodes[0])
        if op in ("eq", "ne", "xor") and all(n.dtype == BOOL for n in nodes):  # (a == b), a != b, a ^ b
            a, b = nodes
            differ = Node("or", (Node("and", (a, Node("not", (b,), BOOL)), BOOL),
                                 Node("and", (Node("not", (a,), BOOL), b), BOOL)), BOOL)
            return self._wrap(Node("not", (differ,), BOOL) if op == "eq" else differ)
        if op in ("add", "mul") and len(nodes) == 2 and all(n.dtype == BOOL for n in nodes):  # as NumPy's bools
            return self._wrap(Node("or" if op == "add" else "and", tuple(nodes), BOOL))
        if any(n.dtype == BOOL for n in nodes):
            if len(nodes) < 2 or all(n.dtype == BOOL for n in nodes):
                raise t.refuse(f"'{op}' of a boolean value (use np.where to turn a condition into numbers)")
            # NumPy's promotion: beside a number a boolean is 1 or 0 (`score + 0.5 * (kv_idx == 0)`)
            one, zero = Node("const", (), I32, 1), Node("const", (), I32, 0)
            nodes = [Node("select", (n, one, zero), I32) if n.dtype == BOOL else n for n in nodes]
        if op in ufuncs.FLOORED:
            return self._wrap(rounding.floored_division(self, op, nodes))
        if op in ("eq", "ne") and all(id(n) in t.searches for n in nodes):  # searchsorted(a, q) == ...(a, kv)
            (first, table, flipped), (second, _, flipped_too) = (t.searches[id(n)] for n in nodes)
            if first.same_boundaries(second) and flipped == flipped_too:  # bounds gathered at one count
                bounds = searches.count_bounds(first)
                if bounds is None:
                    kept = first.table or table(first.c)
                    first, second = (dataclasses.replace(x, table=kept) for x in (first, second))
                kept_bounds = None if bounds is None else table(bounds)
                equal = Node("eq", tuple(nodes), BOOL, searches.SearchedEqual(first, second, kept_bounds))
                return self._wrap(equal if op == "eq" else Node("not", (equal,), BOOL))
        dtype = F32 if op in ufuncs.FLOAT_ONLY or any(n.dtype == F32 for n in nodes) else I32
        nodes = [self._convert(n, dtype) for n in nodes]
        return self._wrap(Node(op, tuple(nodes), BOOL if op in COMPARES else dtype))

    def _truth(self, x: object) -> Traced:
        """x as a boolean: itself, or x != 0 of a number."""
        node = self._lift(x)
        if node.dtype == BOOL:
            return self._wrap(node)
        return self._wrap(Node("ne", (node, Node("const", (), node.dtype, 0.0 if node.dtype == F32 else 0)), BOOL))

    def _integers(self, symbol: str, nodes: list[Node]) -> list[object]:
        """The operands of a bitwise op as `bitwise` takes them: a constant as a Python int, a traced value as
        a Traced, a boolean as 1 or 0 (as NumPy promotes it); a float is refused, as NumPy refuses it."""
        if any(n.dtype == F32 for n in nodes):
            raise self._tracing.refuse(f"'{symbol}' of a float value (bitwise ops take integers and booleans)")
        one, zero = Node("const", (), I32, 1), Node("const", (), I32, 0)
        nodes = [Node("select", (n, one, zero), I32) if n.dtype == BOOL and n.op != "const" else n for n in nodes]
        return [int(n.value) if n.op == "const" else self._wrap(n) for n in nodes]

    def _bitwise(self, op: str, nodes: list[Node]) -> Traced:
        """&, |, ^, ~ of integers (`tessera.variants.bitwise`: each of the kernel's arithmetic ops)."""
        operands = self._integers(bitwise.SYMBOLS.get(op, "~"), nodes)
        if op == "not":
            return bitwise.invert(operands[0])
        a, b = operands
        if isinstance(a, int):
            a, b = b, a
        if isinstance(a, int):  # two constants (a constant traced value beside a number)
            return self._wrap(self._lift({"and": a & b, "or": a | b, "xor": a ^ b}[op]))
        result = bitwise.binary(op, a, b, self._tracing.refuse)
        return result if isinstance(result, Traced) else self._wrap(self._lift(result))

    def _narrowed(self, op: str, operands: tuple, build: Callable[[], Traced]) -> Traced:
        """`build()`, the value of `op` on `operands`, marked with its narrow integer type where NumPy keeps one
        (`narrow_integers.result`, which refuses an op that would wrap there)."""
        narrow = narrow_integers.result(op, operands, lambda x: x._narrow if isinstance(x, Traced) else None,
                                        lambda x: self._lift(x).dtype, self._tracing.refuse)
        out = build()
        if narrow is not None:
            out = self._wrap(out.node)
            out._narrow = narrow
        return out

    def _shift(self, op: str, x: object, n: object) -> Traced:
        """x << n, x >> n (np.left_shift, np.right_shift) of integers by a constant (`bitwise.shift`)."""
        return self._narrowed(op, (x, n), lambda: self._shift_op(op, x, n))

    def _shift_op(self, op: str, x: object, n: object) -> Traced:
        a, b = self._integers(bitwise.SYMBOLS[op], [self._lift(x), self._lift(n)])
        if isinstance(a, int) and isinstance(b, int):
            return self._wrap(self._lift(a << b if op == "lshift" else a >> b))
        if isinstance(a, int):
            a = self._wrap(self._lift(a))
        return bitwise.shift(op, a, b, self._tracing.refuse)

    # -- the functions of their own modules (torch_mods calls them as methods too) ---------------------
    def _fmod(self, a: object, b: object) -> Traced:
        return rounding.fmod(self, a, b)

    def _round(self, op: str, x: object, decimals: object = 0) -> Traced:
        return rounding.round_value(self, op, x, decimals)

    def _search(self, function: str, boundaries: object, value: object, side: object = "left",
                sorter: object = None, digitize: bool = False) -> Traced:
        return search_calls.search_call(self, function, boundaries, value, side, sorter, digitize)

    def _power(self, base: object, exponent: object) -> Traced:
        return self._narrowed("pow", (base, exponent), lambda: powers.power(self, base, exponent))

    def _where(self, cond: object, a: object, b: object) -> Traced:
        return self._narrowed("where", (a, b), lambda: self._where_op(cond, a, b))

    def _where_op(self, cond: object, a: object, b: object) -> Traced:
        c = self._lift(cond)
        if c.dtype != BOOL:
            raise self._tracing.refuse("np.where with a condition that is not boolean")
        x, y = self._lift(a), self._lift(b)
        if BOOL in (x.dtype, y.dtype):
            if x.dtype != y.dtype:
                raise self._tracing.refuse("np.where mixing a boolean with a number")
            picked = Node("and", (c, x), BOOL), Node("and", (Node("not", (c,), BOOL), y), BOOL)
            return self._wrap(Node("or", picked, BOOL))
        dtype = F32 if F32 in (x.dtype, y.dtype) else I32
        return self._wrap(Node("select", (c, self._convert(x, dtype), self._convert(y, dtype)), dtype))

    def _expanded(self, name: str, x: object) -> Traced:
        """np.<name>(x) for one of the NumPy functions traced as a few ops (`ufuncs.EXPANDED`: square, sign, log1p,
        expm1), for `torch_mods`."""
        return ufuncs.EXPANDED[getattr(np, name)](self, x)

    def clip(self, min=None, max=None) -> Traced:  # noqa: A002 (the names of ndarray.clip and Tensor.clip)
        """x.clip(min, max), NumPy's and torch's method, as np.clip (either bound may be None or left out)."""
        return self._clip(self, min, max)

    def _clip(self, x: object, lo: object, hi: object) -> Traced:
        """np.clip(x, lo, hi): the max with lo, then the min with hi (so lo > hi gives hi, as NumPy's); a bound
        None is no bound."""
        out = self._wrap(self._lift(x))
        out = out if lo is None else out._apply("max", out, lo)
        return out if hi is None else out._apply("min", out, hi)

    def _clip_call(self, args: tuple, kwargs: dict) -> Traced:
        """np.clip as NumPy takes it: the bounds by position, as a_min= / a_max=, or as NumPy 2's min= / max=,
        either None or left out for no bound; `out=` an array and ufunc keywords are refused."""
        try:
            bound = inspect.signature(np.clip).bind(*args, **kwargs).arguments
        except TypeError as error:
            raise self._tracing.refuse(f"np.clip with these arguments ({error})") from None
        named = {**bound.pop("kwargs", {}), **bound}  # NumPy 1.26 takes min= / max= into **kwargs
        extra = sorted(k for k in set(named) - {"a", "a_min", "a_max", "min", "max"} if named[k] is not None)
        if extra:
            raise self._tracing.refuse(f"np.clip with {', '.join(e + '=' for e in extra)} (takes a, a_min, a_max)")
        lo = named.get("a_min", named.get("min"))
        hi = named.get("a_max", named.get("max"))
        return self._clip(named["a"], lo, hi)

    def astype(self, dtype, *args, **kwargs) -> Traced:
        """x.astype(dtype) as NumPy converts: a float to an integer truncates toward zero (`tile.cast`,
        cvt.rzi), an integer to a float converts (exact below 2^24), a boolean to a number is 1 or 0, a number
        to a boolean is x != 0. Every float type is traced as f32 and every signed integer as i32; float16,
        unsigned integers (except from a boolean) and other kinds are refused by name, and so is int8 or int16
        (NumPy and torch wrap there, the kernel would not) except of a boolean or of a value read from a narrow
        integer array whose values fit (`narrow_integers.cast`)."""
        t = self._tracing
        try:
            target = np.dtype(dtype)
        except TypeError:
            raise t.refuse(f".astype({dtype!r}) (a NumPy dtype: int, float, bool, np.int32, np.float32, ...)") \
                from None
        node = self.node
        kind = {"f": F32, "i": I32, "b": BOOL}.get(target.kind)
        if target.kind == "u" and node.dtype == BOOL:
            kind = I32
        if kind is None or (kind == F32 and target.itemsize < 4):
            raise t.refuse(f".astype({target}) (traced as f32, i32 or bool: float32/64, signed integers, bool)")
        narrow = narrow_integers.cast(target, self._narrow, node.dtype, t.refuse) if kind == I32 else None
        if narrow is not None:
            out = self._wrap(self.astype(np.int32).node)
            out._narrow = narrow
            return out
        if kind == node.dtype:
            return self._wrap(node)  # a new value: not marked narrow (`_narrow`) for a wide integer type
        if node.dtype == BOOL:
            one, zero = (Node("const", (), kind, 1.0 if kind == F32 else 1),
                         Node("const", (), kind, 0.0 if kind == F32 else 0))
            return self._wrap(Node("select", (node, one, zero), kind))
        if kind == BOOL:
            return self._wrap(Node("ne", (node, Node("const", (), node.dtype, 0.0 if node.dtype == F32 else 0)),
                                   BOOL))
        if kind == F32:
            return self._wrap(self._convert(node, F32))
        return self._wrap(Node("to_i32", (node,), I32))

    # -- NumPy protocols -------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise self._tracing.refuse(f"np.{ufunc.__name__}.{method}" if method != "__call__" else
                                       f"np.{ufunc.__name__} with keyword arguments {sorted(kwargs)}")
        if ufunc in (np.power, np.float_power) and len(inputs) == 2:
            return self._power(*inputs)
        if ufunc in ufuncs.EXPANDED:
            return ufuncs.EXPANDED[ufunc](self, inputs[0])
        if ufunc in ufuncs.ROUNDING and len(inputs) == 1:
            return self._round(ufuncs.ROUNDING[ufunc], inputs[0])
        if ufunc is np.fmod and len(inputs) == 2:
            return self._fmod(*inputs)
        if ufunc in ufuncs.LOGICAL:  # of numbers, their truth (x != 0), as NumPy takes it; &, |, ^ of them are bitwise
            inputs = tuple(self._truth(x) for x in inputs)
        if ufunc in (np.left_shift, np.right_shift) and len(inputs) == 2:
            return self._shift("lshift" if ufunc is np.left_shift else "rshift", *inputs)
        op = ufuncs.UNARY.get(ufunc) or ufuncs.BINARY.get(ufunc)
        if op is None:
            raise self._tracing.refuse(f"np.{ufunc.__name__} (supported: {', '.join(sorted(ufuncs.ufunc_names()))}, "
                                       "np.where, np.clip)")
        return self._apply(op, *inputs)

    def __array_function__(self, func, types_, args, kwargs):
        if func is np.where and len(args) == 3 and not kwargs:
            return self._where(*args)
        if func is np.clip:
            return self._clip_call(args, kwargs)
        if func in (np.round, np.around) and set(kwargs) <= {"decimals"} and 1 <= len(args) <= 2:
            return self._round("round", args[0], args[1] if len(args) == 2 else kwargs.get("decimals", 0))
        if func is np.fix and not kwargs and len(args) == 1:
            return self._round("trunc", args[0])
        if func in (np.searchsorted, np.digitize):
            try:
                bound = inspect.signature(func).bind(*args, **kwargs).arguments
            except TypeError as error:
                raise self._tracing.refuse(f"np.{func.__name__} with these arguments ({error})") from None
            if func is np.digitize:
                return self._search("np.digitize", bound["bins"], bound["x"], bound.get("right", False),
                                    digitize=True)
            return self._search("np.searchsorted", bound["a"], bound["v"], bound.get("side", "left"),
                                bound.get("sorter"))
        raise self._tracing.refuse(f"np.{func.__name__} (supported: np.where(c, a, b), np.clip(x, lo, hi), "
                                   "np.round(x, decimals), np.fix, np.searchsorted, np.digitize and the ufuncs)")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        """torch calls on traced values (`tessera.variants.torch_mods`)."""
        everything = list(args) + list((kwargs or {}).values())
        traced = next(a for a in everything if isinstance(a, Traced))
        return torch_mods.dispatch(traced, func, tuple(args), dict(kwargs or {}))

    # -- operators -------------------------------------------------------------------------------------
    def __add__(self, o): return self._apply("add", self, o)
    def __radd__(self, o): return self._apply("add", o, self)
    def __sub__(self, o): return self._apply("sub", self, o)
    def __rsub__(self, o): return self._apply("sub", o, self)
    def __mul__(self, o): return self._apply("mul", self, o)
    def __rmul__(self, o): return self._apply("mul", o, self)
    def __truediv__(self, o): return self._apply("div", self, o)
    def __rtruediv__(self, o): return self._apply("div", o, self)
    def __neg__(self): return self._apply("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self._apply("abs", self)
    def __lt__(self, o): return self._apply("lt", self, o)
    def __le__(self, o): return self._apply("le", self, o)
    def __gt__(self, o): return self._apply("gt", self, o)
    def __ge__(self, o): return self._apply("ge", self, o)
    def __eq__(self, o): return self._apply("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return self._apply("ne", self, o)  # type: ignore[override]
    def __and__(self, o): return self._apply("and", self, o)
    def __rand__(self, o): return self._apply("and", o, self)
    def __or__(self, o): return self._apply("or", self, o)
    def __ror__(self, o): return self._apply("or", o, self)
    def __invert__(self): return self._apply("not", self)
    def __floordiv__(self, o): return self._apply("floordiv", self, o)
    def __rfloordiv__(self, o): return self._apply("floordiv", o, self)
    def __mod__(self, o): return self._apply("mod", self, o)
    def __rmod__(self, o): return self._apply("mod", o, self)
    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self

    def _refuse_op(name: str):  # noqa: N805 - builds methods
        def method(self, *args):
            raise self._tracing.refuse(f"the operator {name} on a traced value")
        return method

    def __pow__(self, o): return self._power(self, o)
    def __rpow__(self, o): return self._power(o, self)

    def __xor__(self, o): return self._apply("xor", self, o)
    def __rxor__(self, o): return self._apply("xor", o, self)

    def __lshift__(self, o): return self._shift("lshift", self, o)
    def __rlshift__(self, o): return self._shift("lshift", o, self)
    def __rshift__(self, o): return self._shift("rshift", self, o)
    def __rrshift__(self, o): return self._shift("rshift", o, self)

    __matmul__ = __rmatmul__ = _refuse_op("@")

    def __bool__(self):
        raise self._tracing.refuse("Python control flow on a traced value (if, and, or, not, bool(): "
                                   "data-dependent branches; use np.where, &, |, ~)")

    def __index__(self):
        raise self._tracing.refuse(UNCAPTURED)

    def __setitem__(self, index, value):
        raise self._tracing.refuse("an assignment into a traced value (score[...] = ...: in-place writes; "
                                   "return np.where(condition, value, score) or torch.where)")

    def __int__(self):
        raise self._tracing.refuse("int() of a traced value (write x.astype(int))")

    def __float__(self):
        raise self._tracing.refuse("float() of a traced value (math.sqrt, math.log, math.exp, ... take Python "
                                   "numbers: on a traced value write np.sqrt, np.log, np.exp, ...)")

    def _math_rounding(self, name: str):
        raise self._tracing.refuse(f"math.{name} of a traced value (it takes one Python number, and fails on the "
                                   f"NumPy index grids of the reference too: write np.{name})")

    def __floor__(self): return self._math_rounding("floor")
    def __ceil__(self): return self._math_rounding("ceil")
    def __trunc__(self): return self._math_rounding("trunc")

    def __round__(self, ndigits=None):
        raise self._tracing.refuse("round() of a traced value (NumPy arrays have no round(): write np.round)")

    def __iter__(self):
        raise self._tracing.refuse("iteration over a traced value")

    def __len__(self):
        raise self._tracing.refuse("len() of a traced value (it stands for one value per score)")

    def __hash__(self):  # (a dict keyed by the head: {0: 4, 1: 9}[h])
        raise self._tracing.refuse("a traced value as a dict key or set member (a table by the index: make it a "
                                   "NumPy array, np.array([...])[h])")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        torch = torch_mods.torch_module()
        if torch is not None and name in torch_mods.TRACED_METHODS:  # a tensor method: (q_idx - kv_idx).abs()
            method = getattr(torch.Tensor, name)
            return lambda *args, **kwargs: torch_mods.dispatch(self, method, (self, *args), kwargs)
        if torch is not None and name in torch_mods.TRACED_ATTRIBUTES:  # torch.tensor(2.0, dtype=score.dtype)
            return torch_mods.TRACED_ATTRIBUTES[name](self)
        raise self._tracing.refuse(f"the attribute .{name} of a traced value")

