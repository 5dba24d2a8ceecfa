"""Wrong arguments to Tessera's public Python functions, one corrupted argument per call.

`api_call(name, variant)` builds a call of `name` (one of `cases.API_CALLS`) from a seeded choice of a
well-formed baseline and one bad value, makes it, and classifies the result: a TypeError or ValueError
(or an xDSL diagnostic) with a message is "diagnostic"; a return is "silent acceptance" (every call here is
wrong); any other exception is "traceback" (what the user sees is a raw error from deep inside)."""

from __future__ import annotations

import math
import random
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
_SIZES = dict(batch=1, heads=1, seq_q=5, seq_k=7)


def _flash_module():
    import tessera

    return tessera.parse_module((ROOT / "examples" / "flash_attention.mlir").read_text())


def _qkv(rng: np.random.Generator, d: int = 128):
    q = rng.standard_normal((1, 1, 5, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, 7, d)).astype(np.float32) for _ in range(2))
    return [q, k, v]


def _bad_arrays(rng: np.random.Generator, good: np.ndarray, sized: bool) -> list[tuple[str, object]]:
    """Wrong inputs in place of `good`; `sized`: the call states the sizes, so a shorter array is wrong too."""
    wrong_length = [("wrong length", good[..., :-1, :] if good.shape[-2] > 1 else np.concatenate([good, good], -2)),
                    ("empty", np.zeros((1, 1, 0, good.shape[-1]), np.float32))] if sized else []
    return wrong_length + [
        ("complex", good.astype(np.complex64) + 1j),
        ("masked", np.ma.masked_array(good, mask=np.zeros(good.shape, bool) | (rng.random(good.shape) < 0.5))),
        ("object", good.astype(object)),
        ("strings", good.astype(str)),
        ("rank 2", good.reshape(good.shape[-2], -1)),
        ("head_dim 100", np.zeros((*good.shape[:-1], 100), np.float32)),
        ("None", None),
        ("a string", "q"),
        ("bool", good > 0),
        ("datetime", np.zeros(good.shape, "datetime64[s]")),
    ]


def _call(name: str, pick: random.Random, rng: np.random.Generator):
    """(function, args, kwargs, what was corrupted)."""
    import tessera
    from xdsl.dialects.builtin import ModuleOp

    module = _flash_module()
    bad_modules = [("None", None), ("a string", "module"), ("an int", 3), ("bytes", b"x"), ("a list", [module]),
                   ("an empty module", ModuleOp([]))]
    if name in ("interpret", "compile", "find_kernel", "print_module"):
        arguments = dict(interpret=["module", "inputs", "level", "kernel", "pipeline", "size"],
                         compile=["module", "target", "pipeline"], find_kernel=["module", "kernel"],
                         print_module=["module"])[name]
        slot = pick.choice(arguments)
        inputs = _qkv(rng)
        kwargs: dict = dict(_SIZES) if name == "interpret" else {}
        args: list = [module]
        what = slot
        if slot == "module":
            label, args[0] = pick.choice(bad_modules)
            what = f"module = {label}"
        elif slot == "inputs":
            i = pick.randrange(3)
            label, inputs[i] = pick.choice(_bad_arrays(rng, inputs[i], sized=True))
            what = f"input {i} {label}"
        elif slot == "level":
            kwargs["level"] = pick.choice(["ptxx", 3, "TILE", ""])
            what = f"level = {kwargs['level']!r}"
        elif slot == "kernel":
            kwargs["kernel"] = pick.choice(["nope", 3, ""])
            what = f"kernel = {kwargs['kernel']!r}"
        elif slot == "pipeline":
            kwargs["pipeline"] = pick.choice(["no-such-pass", 3, "{", "assign-swizzle{x=1}", "cse,,"])
            what = f"pipeline = {kwargs['pipeline']!r}"
        elif slot == "target":
            kwargs["target"] = pick.choice(["sass", 3, ""])
            what = f"target = {kwargs['target']!r}"
        else:  # size
            key, value = pick.choice([("seq_q", "5"), ("seq_q", True), ("foo", 3), ("seq_q", -1), ("seq_q", 2.5),
                                      ("seq_q", 6), ("seq_k", None), ("batch", 10 ** 12)])
            kwargs[key] = value
            what = f"{key} = {value!r}"
        if name == "interpret":
            return tessera.interpret, [*args, *inputs], kwargs, what
        if name == "compile":
            kwargs.pop("level", None)
            return tessera.compile, args, kwargs, what
        if name == "find_kernel":
            if slot != "kernel" and slot != "module":
                kwargs, what = {"kernel": "nope"}, "kernel = 'nope'"
            return tessera.find_kernel, args, {k: v for k, v in kwargs.items() if k == "kernel"}, what
        if slot == "module" and isinstance(args[0], ModuleOp):  # an empty module prints fine
            args[0], what = None, "module = None"
        return tessera.print_module, args if slot == "module" else [None], {}, what
    if name == "parse_module":
        label, text = pick.choice([("None", None), ("an int", 3), ("a list", ["func.func @f() {}"]),
                                   ("unterminated string", 'func.func @f() attributes {a = "' + "x" * 40),
                                   ("a module", module)])
        return tessera.parse_module, [text], {}, f"text = {label}"
    if name == "attention":
        inputs = _qkv(rng)
        kwargs = {}
        slot = pick.choice(["inputs", "scale", "causal"])
        if slot == "inputs":
            i = pick.randrange(3)
            label, inputs[i] = pick.choice(_bad_arrays(rng, inputs[i], sized=False))
            what = f"input {i} {label}"
        elif slot == "scale":
            kwargs["scale"] = pick.choice([1e39, -1e39, math.inf, math.nan, "0.1", 1j])
            what = f"scale = {kwargs['scale']!r}"
        else:
            kwargs["causal"] = pick.choice(["yes", 2, None, np.array([True, False])])
            what = f"causal = {kwargs['causal']!r}"
        return tessera.attention, inputs, kwargs, what
    # ptx_launch
    from tessera.ptx import launch

    text = (ROOT / "tests" / "ptx_kernels" / "vector_add.ptx").read_text()
    a, b, c = (np.ones(100, np.float32) for _ in range(3))
    call = dict(ptx=text, kernel="add_kernel", grid=(1, 1, 1), block=(128, 1, 1), args=[a, b, c, np.uint32(100)])
    key, value = pick.choice([("ptx", None), ("ptx", 3), ("kernel", "nope"), ("grid", (65536, 65536, 65536)),
                              ("grid", (0, 1, 1)), ("grid", (2 ** 31, 1, 1)), ("block", (2048, 1, 1)),
                              ("block", (-1, 1, 1)), ("block", "128"), ("args", [a, b]),
                              ("args", [a.astype(np.complex64), b, c, np.uint32(100)]),
                              ("args", [a, b, c, "100"]), ("args", None)])
    call[key] = value
    return launch, [], call, f"{key} = {value!r}"[:80]


def api_call(name: str, variant: int) -> tuple[str, str]:
    """Make the call; returns (outcome, message)."""
    from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

    pick = random.Random(variant)
    rng = np.random.default_rng(variant)
    try:
        function, args, kwargs, what = _call(name, pick, rng)
    except Exception:
        return "traceback", "the harness could not build the call:\n" + traceback.format_exc()
    label = f"{name}: {what}"
    try:
        function(*args, **kwargs)
    except _refusals(DiagnosticException, ParseError, VerifyException) as e:
        message = str(e).strip()
        if type(e) is TypeError and not _raised_by_tessera(e):
            return "traceback", f"{label}: a raw TypeError from {_raiser(e)}: {message}"
        return ("diagnostic", f"{label}: {type(e).__name__}: {message}") if message else \
            ("empty message", f"{label}: {type(e).__name__} without a message")
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # xDSL's ArgSpecParseError is a BaseException
        return "traceback", f"{label}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
    return "silent acceptance", f"{label}: accepted"


def _raiser(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    return frames[-1].filename if frames else "?"


def _raised_by_tessera(e: BaseException) -> bool:
    """Whether the exception was raised in Tessera's own code (an argument check), not by NumPy, xDSL or
    Python deep inside."""
    raiser = Path(_raiser(e)).resolve()
    return any(raiser.is_relative_to(ROOT / d) for d in ("tessera", "dialects", "passes", "tools"))


def _refusals(*extra):
    return (TypeError, ValueError, *extra)
