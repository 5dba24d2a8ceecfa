"""PyTorch in score_mod / mask_mod: torch functions and captured tensors, accepted as the NumPy ones are.

FlexAttention users write their modifiers with torch (`torch.where`, `torch.tanh`, `torch.clamp`, tensors they
close over such as `doc_ids[q_idx] == doc_ids[kv_idx]`, methods such as `(q_idx - kv_idx).abs()`). With PyTorch
installed, such a function is traced and run like a NumPy one:

- tracing (`tessera.variants.trace`): torch calls whose arguments hold a traced value reach
  `Traced.__torch_function__`, which maps them in `dispatch` (`torch_op`: the same ops as the NumPy ufuncs;
  torch.where, torch.clamp, ... by name); tensor methods on a traced value (`TRACED_METHODS`) do the same; `torch.pow`
  and `**` are `Traced._power`, `.to(dtype)` / `.float()` / `.long()` ... `Traced.astype`, `torch.min(a, b)`
  and `torch.max(a, b)` elementwise, and a scalar `x.new_ones(())` / `new_zeros` / `new_full` / `full_like` /
  `ones_like` / `zeros_like` a constant (FlexAttention's own `and_masks` and `or_masks` start from
  `b.new_ones((), dtype=torch.bool)`); `.dtype` and `.device` of a traced value (`TRACED_ATTRIBUTES`) make
  constants like it; a captured tensor becomes a kernel input like a NumPy array (`as_numpy`: bool -> 0/1
  int32, as for NumPy; bfloat16 -> float32), a 0-d one a constant; `torch.searchsorted` / `bucketize` of a
  traced value in a captured tensor are np.searchsorted's search (`tessera.variants.searches`), other torch
  functions of a captured tensor are refused by name (`captured_call`);
- the reference and the host-side block mask (`trace.bounds_checked`, `host_callable`) call a function that
  uses torch (`uses_torch`), or one that calls tensor methods on its arguments (`wants_tensors`), with torch
  tensors made from the NumPy index grids (int64; the score float64), float64 where torch would take its
  default dtype (`float64_defaults`, for the calling thread only), and turn its result back into NumPy
  (`call_with_tensors`); captured tensors are bounds-checked as NumPy arrays are, and a 0-d one is a constant
  (as `torch.tensor(2.0)` made in the function is).

Torch is never imported here: only a function that names it (so the user imported it) makes it matter.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from tessera.variants import torch_activations


def torch_module():
    """The torch module if the process imported it, else None."""
    return sys.modules.get("torch")


def is_tensor(value: object) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(value, torch.Tensor)


def as_numpy(tensor) -> np.ndarray:
    """A captured tensor's values as a NumPy array (on the host, without grad); a float type NumPy lacks
    (bfloat16, the float8 types: a model's bias table) as float32, which holds each of its values exactly."""
    torch = torch_module()
    host = tensor.detach().cpu()
    if host.is_floating_point() and host.dtype not in (torch.float16, torch.float32, torch.float64):
        host = host.float()
    return host.numpy()


def _torch_valued(value: object, seen: set) -> bool:
    torch = torch_module()
    if torch is None:
        return False
    if value is torch or is_tensor(value):
        return True
    module = getattr(value, "__module__", None) or ""
    if isinstance(value, types.BuiltinFunctionType | types.ModuleType) or module.split(".")[0] == "torch":
        return getattr(value, "__name__", "").split(".")[0] == "torch" or module.split(".")[0] == "torch"
    if isinstance(value, types.FunctionType):
        return uses_torch(value, seen)
    if isinstance(value, (tuple, list)):
        return any(_torch_valued(v, seen) for v in value)
    if isinstance(value, torch.nn.Module):  # `self` of a model, read from a closure
        return True
    return any(is_tensor(v) for v in getattr(value, "__dict__", {}).values())  # an object holding tensors


def uses_torch(fn: Callable, seen: set | None = None) -> bool:
    """Whether `fn` (or a Python function it captures) names torch, a torch function or a torch tensor."""
    if torch_module() is None or not isinstance(fn, types.FunctionType):
        return False
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return False
    seen.add(id(fn))
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            pass
    names = [fn.__globals__[n] for n in fn.__code__.co_names if n in fn.__globals__]
    return any(_torch_valued(v, seen) for v in cells + names)


def call_with_tensors(fn: Callable, *args):
    """`fn(*args)` with each NumPy array argument as a torch tensor (integers as int64, floats as float64),
    the result back as a NumPy array. The call runs under `float64_defaults()`, so that an integer tensor times
    a Python float (`(h + 1) * 8.0`) and `torch.tensor(2.0)` are float64, as NumPy's are: the reference is
    float64 where the function does not convert to float32 itself (`.float()`). torch's process-wide default
    dtype is left alone (other threads may be running torch)."""
    torch = torch_module()
    converted = [torch.from_numpy(np.ascontiguousarray(a, np.float64 if a.dtype.kind == "f" else np.int64))
                 if isinstance(a, np.ndarray) else a for a in args]
    with float64_defaults():
        result = fn(*converted)
    return as_numpy(result) if is_tensor(result) else np.asarray(result)


_FLOAT_CONVERSIONS = ("float", "double", "half", "bfloat16")
"""Tensor methods that name their float type (`.float()`): their results keep it."""


@lru_cache(maxsize=None)
def _float64_defaults_mode() -> type:
    """The `TorchFunctionMode` class of `float64_defaults` (made once torch is loaded: it subclasses torch's)."""
    torch = torch_module()
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten, tree_map

    def integers(x):
        return x.double() if isinstance(x, torch.Tensor) and not x.is_floating_point() and x.dtype != torch.bool else x

    def floats(x):
        return torch.tensor(x, dtype=torch.float64) if type(x) is float else x

    def booleans(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.bool else x

    def defaulted(result) -> bool:  # a float tensor of the default dtype: no input named its type
        return isinstance(result, torch.Tensor) and result.dtype == torch.get_default_dtype() != torch.float64

    class Float64Defaults(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            leaves = tree_flatten((args, kwargs))[0]
            result = func(*args, **kwargs)
            if not defaulted(result) or "dtype" in kwargs or any(isinstance(x, torch.dtype) for x in leaves) \
                    or getattr(func, "__name__", "") in _FLOAT_CONVERSIONS \
                    or any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in leaves):
                return result
            if not any(isinstance(x, torch.Tensor) for x in leaves):  # a factory: torch.tensor(2.0), torch.ones(3)
                return func(*args, dtype=torch.float64, **kwargs)
            for step in (integers, floats, booleans):  # the first that gives a float64 result, as NumPy would
                changed = tree_map(step, (args, kwargs))
                if all(a is b for a, b in zip(tree_flatten(changed)[0], leaves)):
                    continue
                try:
                    again = func(*changed[0], **changed[1])
                except (TypeError, RuntimeError):  # e.g. torch.where's condition must stay bool
                    continue
                (args, kwargs), leaves, result = changed, tree_flatten(changed)[0], again
                if not defaulted(result):
                    break
            return result

    return Float64Defaults


def float64_defaults():
    """A context in which a torch call whose float result takes torch's default dtype (float32 unless the user
    changed it) because none of its inputs names a float type gives float64 instead, as NumPy does: a factory
    (`torch.tensor(2.0)`, `torch.ones(3)`) gets dtype=float64, and an operation on integer or bool tensors and
    Python numbers (`(h + 1) * 8.0`, `torch.exp2(h)`, `h / 3`, `torch.where(mask, 0.5, 1)`) is run again with
    its integer tensors, then its Python floats (as 0-d float64 tensors), then its bool tensors as float64
    until the result is float64. A call with an explicit dtype (`dtype=`, `.to(torch.float32)`, `.float()`)
    or a float tensor input is left as it is. A `TorchFunctionMode`: it holds for the calling thread only,
    unlike `torch.set_default_dtype`, which is process-wide."""
    return _float64_defaults_mode()()


def wants_tensors(error: BaseException) -> bool:
    """Whether `error` is a NumPy array asked for a method only torch tensors have (`.clamp`, `.abs()`,
    `.long()`, `.new_zeros` ...): the function was written for tensors."""
    torch = torch_module()
    return (torch is not None and isinstance(error, AttributeError) and isinstance(error.obj, np.ndarray)
            and hasattr(torch.Tensor, error.name or ""))


def host_callable(rebound: Callable, fn: Callable) -> Callable:
    """How the host (the reference, the block mask) calls the modifier `fn` (`rebound`: its bounds-checked
    copy) on NumPy index grids: with torch tensors made from them where `fn` names torch (`uses_torch`);
    otherwise on the NumPy grids, and again on tensors if it calls a method only tensors have on them (NATTEN's
    `q_x.clamp(...)` with `q_x = q_idx // W` names no torch, yet is written for tensors, as the tracer takes
    it)."""
    if torch_module() is None:
        return rebound
    if uses_torch(fn):
        return lambda *args: call_with_tensors(rebound, *args)

    def call(*args):
        try:
            return rebound(*args)
        except AttributeError as error:
            if not wants_tensors(error):
                raise
        return call_with_tensors(rebound, *args)
    return call


class CheckedTensor:
    """A captured tensor in the reference: indexing it with tensors checks every index against its shape
    (`check(index, shape)` raises), then reads the tensor."""

    def __init__(self, tensor, check: Callable):
        self.tensor, self.check = tensor, check

    def __getitem__(self, index):
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) == self.tensor.dim():
            self.check(tuple(as_numpy(i) if is_tensor(i) else i for i in idx), tuple(self.tensor.shape))
        return self.tensor[index]

    def __getattr__(self, name: str):
        return getattr(self.tensor, name)

    def __len__(self) -> int:  # (Python looks len() up on the class, past __getattr__)
        return len(self.tensor)

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        """A torch function of the tensor (`torch.searchsorted(offsets, q_idx)`): called on the tensor itself."""
        def unwrap(value):
            return value.tensor if isinstance(value, CheckedTensor) else value
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


def _ops() -> dict:
    """torch function -> the traced op name (those of the NumPy ufuncs)."""
    torch = torch_module()
    table = {
        "neg": ("neg", "negative"), "abs": ("abs", "absolute"), "exp": ("exp",), "exp2": ("exp2",),
        "log2": ("log2",), "log": ("log",), "tanh": ("tanh",), "sqrt": ("sqrt",), "reciprocal": ("reciprocal",),
        "not": ("logical_not", "bitwise_not"), "add": ("add",), "sub": ("sub", "subtract"),
        "mul": ("mul", "multiply"), "div": ("div", "divide", "true_divide"), "min": ("minimum", "fmin"),
        "max": ("maximum", "fmax"), "and": ("logical_and", "bitwise_and"), "or": ("logical_or", "bitwise_or"),
        "lt": ("lt", "less"), "le": ("le", "less_equal"), "gt": ("gt", "greater"), "ge": ("ge", "greater_equal"),
        "eq": ("eq",), "ne": ("ne", "not_equal"), "floordiv": ("floor_divide",), "mod": ("remainder",),
        "xor": ("logical_xor", "bitwise_xor"),
    }
    ops = {}
    for op, names in table.items():
        for name in names:
            for owner in (torch, torch.Tensor):
                if hasattr(owner, name):
                    ops[getattr(owner, name)] = op
    dunders = {"__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div", "__and__": "and",
               "__or__": "or", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge", "__eq__": "eq",
               "__ne__": "ne", "__neg__": "neg", "__abs__": "abs", "__invert__": "not", "__floordiv__": "floordiv",
               "__mod__": "mod", "__xor__": "xor"}
    for name, op in dunders.items():
        ops[getattr(torch.Tensor, name)] = op
    for name, op in {"__radd__": "add", "__rsub__": "sub", "__rmul__": "mul", "__rtruediv__": "div",
                     "__rand__": "and", "__ror__": "or", "__rfloordiv__": "floordiv", "__rmod__": "mod",
                     "__rxor__": "xor"}.items():
        ops[getattr(torch.Tensor, name)] = ("reflected", op)
    return ops


_OPS_CACHE: dict = {}


def torch_op(func) -> str | tuple | None:
    """The traced op of a torch function (None if it has none)."""
    if not _OPS_CACHE:
        _OPS_CACHE.update(_ops())
    return _OPS_CACHE.get(func)


TRACED_METHODS = ("abs", "neg", "exp", "exp2", "log", "log2", "tanh", "sqrt", "reciprocal", "clamp", "clip",
                  "clamp_min", "clamp_max", "floor", "ceil", "round", "trunc", "fix", "sign", "log1p", "expm1",
                  "square", "fmod", "minimum", "maximum", "logical_and", "logical_or", "logical_not", "where",
                  "remainder", "floor_divide", "pow", "to", "type", "float", "double", "int", "long", "bool",
                  "new_ones", "new_zeros", "new_full", "add", "sub", "mul", "div", "true_divide", "lt", "le", "gt",
                  "ge", "eq", "ne", "sigmoid", "relu", "rsqrt", "erf", "masked_fill")
"""Tensor methods a traced value answers (`(q_idx - kv_idx).abs()`, `score.clamp(-5, 5)`, `x.to(torch.long)`,
`b.new_ones((), dtype=torch.bool)` as FlexAttention's and_masks starts, `score.mul(0.5)`, `q_idx.ge(kv_idx)`,
`score.masked_fill(q_idx < kv_idx, -inf)`)."""

TRACED_ATTRIBUTES = {
    "dtype": lambda traced: getattr(torch_module(), {"f32": "float32", "i32": "int32", "bool": "bool"}[
        traced.node.dtype]),
    "device": lambda traced: torch_module().device("cpu"),
}
"""Tensor attributes a traced value answers, so that constants can be made like it (`torch.tensor(2.0,
dtype=score.dtype, device=score.device)`, `x.to(score.dtype)`): its torch dtype (the score float32, indices
int32 as FlexAttention passes them) and a device (the constant is a number of the kernel wherever it is made)."""

_ROUNDING_FUNCTIONS = {"floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc", "fix": "trunc"}
"""torch's rounding functions (and tensor methods), by the tracer's rounding (`Traced._round`): integers are
kept (torch.floor of an integer tensor is that tensor, as NumPy's), torch.round(x, decimals=d) as np.round."""

_EXPANDED_FUNCTIONS = {"sign": "sign", "log1p": "log1p", "expm1": "expm1", "square": "square"}
"""torch functions traced as NumPy's of the same name (`Traced._expanded`)."""

_CASTS = {"float": "float32", "double": "float64", "int": "int32", "long": "int64", "bool": "bool"}
"""Tensor methods that convert, by the NumPy dtype they convert to."""


def _numpy_dtype(dtype) -> object:
    """A torch dtype as the name NumPy knows it (torch.long -> "int64"); anything else unchanged."""
    torch = torch_module()
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype


def _scalar_constant(traced, name: str, size, value, dtype):
    """`x.new_ones(())`, `torch.full_like(x, c)`, ...: one value for every element, of `dtype` (a torch dtype,
    or None for x's); a size other than a scalar's is refused."""
    if size is not None and int(np.prod(tuple(size) if isinstance(size, (tuple, list)) else (size,))) != 1:
        raise traced._tracing.refuse(f"torch.{name} of size {tuple(size) if isinstance(size, (tuple, list)) else size} "
                                     "(a traced value broadcasts: use a scalar size ())")
    constant = traced._wrap(traced._lift(value))
    return constant.astype(_numpy_dtype(dtype)) if dtype is not None else constant.astype(
        {"f32": "float32", "i32": "int32", "bool": "bool"}[traced.node.dtype])


_SEARCHES = {"searchsorted": ("sorted_sequence", "input"), "bucketize": ("input", "boundaries")}
"""torch's searches, by their positional arguments: traced as np.searchsorted (`Traced._search`,
`tessera.variants.searches`); bucketize(input, boundaries, right=r) is searchsorted(boundaries, input, right=r)."""


def is_search(func) -> bool:
    """Whether `func` is torch.searchsorted or torch.bucketize."""
    torch = torch_module()
    return func in (torch.searchsorted, torch.bucketize)


def _search(traced, name: str, args: tuple, kwargs: dict):
    """torch.searchsorted(sorted_sequence, input, *, out_int32, right, side, sorter) or torch.bucketize(input,
    boundaries, *, out_int32, right) of a traced value: its count as an i32 value (out_int32 changes nothing;
    side='left' with right=True is refused, as torch refuses it; side wins over right=False; out= is refused)."""
    first, second = _SEARCHES[name]
    allowed = {first, second, "out_int32", "right"} | ({"side", "sorter"} if name == "searchsorted" else set())
    unknown = sorted(set(kwargs) - allowed)
    if unknown or len(args) > 2:
        extra = ", side=, sorter=" if "side" in allowed else ""
        raise traced._tracing.refuse(f"torch.{name} with the arguments {unknown or list(args[2:])} (supported: "
                                     f"{first}, {second}, right=, out_int32={extra})")
    values = dict(zip((first, second), args)) | kwargs
    right, side = bool(values.get("right", False)), values.get("side")
    if side == "left" and right:
        raise traced._tracing.refuse(f"torch.{name} with side='left' and right=True (opposites; torch refuses "
                                     "them too)")
    side = side or ("right" if right else "left")
    boundaries, value = (values["sorted_sequence"], values["input"]) if name == "searchsorted" else (
        values["boundaries"], values["input"])
    return traced._search(f"torch.{name}", boundaries, value, side, values.get("sorter"))


def captured_call(func, name: str) -> str:
    """The construct a refusal names for the torch function `func` called on the captured tensor `name`."""
    return (f"torch.{getattr(func, '__name__', func)} of the captured tensor {name} (a captured tensor is read by "
            f"indexing it with traced values, one per dimension: {name}[q_idx], {name}[h, kv_idx])")


def _custom_op(func):
    """(its name, the Python function it was defined from) for an operator made with `torch.library.custom_op`
    (attention-gym's `approx::tanh` for the soft-cap), None for any other torch function."""
    torch = torch_module()
    if not isinstance(func, torch._ops.OpOverload):
        return None
    qualified = func._schema.name  # "approx::tanh"
    try:
        from torch._library.custom_ops import OPDEFS  # (private: a torch without it refuses the op by name)
    except ImportError:
        OPDEFS = {}
    return f"torch.ops.{qualified.replace('::', '.')}", getattr(OPDEFS.get(qualified), "_init_fn", None)


def dispatch(traced, func, args: tuple, kwargs: dict):
    """A torch call on traced values (`Traced.__torch_function__`): the traced result, or a ModTraceError."""
    torch = torch_module()
    custom = _custom_op(func)
    if custom is not None:  # traced as its Python definition, as the reference runs it on the CPU
        if custom[1] is None:
            raise traced._tracing.refuse(f"{custom[0]} (an operator with no Python definition to trace)")
        return custom[1](*args, **kwargs)
    name = getattr(func, "__name__", repr(func))
    if func in (torch.where, torch.Tensor.where):
        cond, a, b = _positional(traced, name, args, kwargs, ("condition", "input", "other"))
        if func is torch.Tensor.where:  # a.where(cond, b)
            a, cond = cond, a
        return traced._where(cond, a, b)
    if func in (torch.clamp, torch.clip, torch.Tensor.clamp, torch.Tensor.clip):
        x, lo, hi = _positional(traced, name, args, kwargs, ("input", "min", "max"), optional=2)
        out = x
        if lo is not None:
            out = traced._apply("max", out, lo)
        if hi is not None:
            out = traced._apply("min", out, hi)
        return out
    if func in (torch.clamp_min, torch.Tensor.clamp_min, torch.clamp_max, torch.Tensor.clamp_max):
        x, bound = _positional(traced, name, args, kwargs, ("input", name.removeprefix("clamp_")))
        return traced._apply("max" if name == "clamp_min" else "min", x, bound)
    if func in (torch.pow, torch.Tensor.pow, torch.Tensor.__pow__, torch.float_power) and not kwargs:
        return traced._power(*args)
    if func is torch.Tensor.__rpow__:
        return traced._power(args[1], args[0])
    if func in (torch.min, torch.max, torch.Tensor.min, torch.Tensor.max):
        if len(args) != 2 or kwargs or isinstance(args[1], int):  # torch.min(x, dim): a reduction
            raise traced._tracing.refuse(f"torch.{name} of one tensor (a reduction; torch.{name}(a, b) of two is "
                                         "elementwise)")
        return traced._apply("min" if name == "min" else "max", *args)
    if func in (torch.Tensor.to, torch.Tensor.type):
        targets = [a for a in list(args[1:]) + [kwargs.get("dtype")] if isinstance(a, torch.dtype)]
        return args[0].astype(_numpy_dtype(targets[0])) if targets else args[0]  # .to(device): the same value
    if name in _CASTS and func is getattr(torch.Tensor, name):
        return args[0].astype(_CASTS[name])
    if func in (torch.Tensor.new_ones, torch.Tensor.new_zeros, torch.Tensor.new_full):
        size = args[1] if len(args) > 1 else kwargs.get("size", ())
        value = {"new_ones": 1, "new_zeros": 0}.get(name, args[2] if len(args) > 2 else kwargs.get("fill_value"))
        return _scalar_constant(traced, name, size, value, kwargs.get("dtype"))
    if func in (torch.full_like, torch.ones_like, torch.zeros_like):
        value = {"ones_like": 1, "zeros_like": 0}.get(name, args[1] if len(args) > 1 else kwargs.get("fill_value"))
        return _scalar_constant(traced, name, None, value, kwargs.get("dtype"))
    if func in (torch.div, torch.Tensor.div, torch.divide) and kwargs.get("rounding_mode") is not None:
        mode = kwargs["rounding_mode"]
        if mode not in ("floor", "trunc") or set(kwargs) != {"rounding_mode"}:
            raise traced._tracing.refuse(f"torch.{name} with rounding_mode={mode!r} (supported: 'floor', Python's "
                                         "//, and 'trunc', C's)")
        if mode == "floor":
            return traced._apply("floordiv", *args)
        # C's truncated division: trunc(a / b) in f32 (exact for the integers of indices, below 2^24), an
        # integer again where both operands are
        truncated = traced._round("trunc", traced._apply("div", *args))
        integers = all(isinstance(a, (int, np.integer)) or (hasattr(a, "node") and a.node.dtype == "i32")
                       for a in args[:2])
        return truncated.astype("int32") if integers else truncated
    if func in (torch.fmod, torch.Tensor.fmod) and not kwargs and len(args) == 2:
        return traced._fmod(*args)
    rounding = _ROUNDING_FUNCTIONS.get(name)
    if rounding is not None and func in (getattr(torch, name, None), getattr(torch.Tensor, name, None)):
        x, decimals = _positional(traced, name, args, kwargs, ("input", "decimals"), optional=1)
        return traced._round(rounding, x, decimals or 0)
    activation = torch_activations.traced_activation(torch, traced, func, name, args, kwargs)
    if activation is not None:  # torch.sigmoid, F.relu, F.softplus, F.gelu, torch.erf, ...
        return activation
    if func in (torch.masked_fill, torch.Tensor.masked_fill):  # not in place: torch.where(mask, value, x)
        x, mask, value = _positional(traced, name, args, kwargs, ("input", "mask", "value"))
        return traced._where(mask, value, x)
    expanded = _EXPANDED_FUNCTIONS.get(name)
    if expanded is not None and func in (getattr(torch, name, None), getattr(torch.Tensor, name, None)) \
            and not kwargs and len(args) == 1:
        return traced._expanded(expanded, args[0])
    if name in _SEARCHES and is_search(func):
        return _search(traced, name, args, kwargs)
    if func is torch.Tensor.__getitem__:  # torch.arange(4)[kv_idx % 4]
        raise traced._tracing.refuse("indexing with a traced value a tensor the function makes (a tensor it reads "
                                     "must be captured: a closure variable or a module global it names)")
    op = torch_op(func)
    if op is None or kwargs:
        what = f"torch.{name}" + (f" with keyword arguments {sorted(kwargs)}" if kwargs and op is not None else "")
        raise traced._tracing.refuse(f"{what} (supported: torch.where, torch.clamp/clip and the elementwise "
                                     "functions of the NumPy ufuncs the tracer takes: torch.tanh, torch.exp, "
                                     "torch.abs, torch.minimum, ...)")
    if isinstance(op, tuple):  # a reflected operator: other OP self
        return traced._apply(op[1], args[1], args[0])
    return traced._apply(op, *args)


def _positional(traced, name: str, args: tuple, kwargs: dict, names: tuple, optional: int = 0) -> list:
    values = list(args) + [None] * (len(names) - len(args))
    for key, value in kwargs.items():
        if key not in names:
            raise traced._tracing.refuse(f"torch.{name} with the keyword argument {key}")
        values[names.index(key)] = value
    if any(v is None for v in values[: len(names) - optional]):
        raise traced._tracing.refuse(f"torch.{name} without its {', '.join(names)}")
    return values
