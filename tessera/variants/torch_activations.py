"""torch's activation functions in a modifier (`torch.sigmoid`, `F.relu`, `F.softplus`, `F.gelu`, `torch.erf`,
...), traced as compositions of the NumPy operations the tracer takes, so that their derivatives come from the
same chain rule (`tessera.variants.derivative`). `tessera.variants.torch_mods.dispatch` asks `traced_activation`
for each torch call; NumPy has no such functions, so nothing here serves NumPy modifiers. Torch is passed in,
never imported."""

from __future__ import annotations

import math

import numpy as np

from tessera.numerics import ERFC_FIT as _ERFC_FIT


def erf(x):
    """erf(x) to within 1.2e-7 of its magnitude: sign(x) (1 - erfc(|x|)) from `tessera.numerics.ERFC_FIT` (one
    exp, one reciprocal, a degree-9 polynomial; erf(0) = 0)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = _ERFC_FIT[-1]
    for c in reversed(_ERFC_FIT[:-1]):
        poly = c + t * poly
    return np.sign(x) * (1.0 - t * np.exp(poly - z * z))


def _sigmoid(x):
    return 0.5 * np.tanh(0.5 * x) + 0.5  # tanh's form: no exp(-x) overflowing, no inf / inf in d/dx


COMPOSED = {
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "log_sigmoid": lambda x: np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x))),  # torch's form: no overflow
    "silu": lambda x: x * _sigmoid(x),
    "erf": erf,
    "expit": _sigmoid,
    "softsign": lambda x: x / (1.0 + np.abs(x)),
}
"""Functions of one tensor (`inplace=False` allowed): torch.sigmoid (`torch.special.expit`), torch.relu,
torch.rsqrt, `F.logsigmoid` (torch's builtin log_sigmoid), `F.silu`, torch.erf, `F.softsign`; each also as
`F.<name>`, a tensor method and `torch.special.<name>` where torch has one."""

_FUNCTIONAL_NAMES = {"log_sigmoid": "logsigmoid"}
"""The `torch.nn.functional` name of a builtin whose own name differs."""


def _numbers(traced, name: str, args: tuple, kwargs: dict, defaults: dict) -> tuple:
    """(x, then each of `defaults`' parameters) of a call `name(x, ...)` whose other parameters are numbers."""
    names = ["input", *defaults]
    if len(args) > len(names) or set(kwargs) - set(names):
        raise traced._tracing.refuse(f"torch.{name} with these arguments (takes {', '.join(names)})")
    values = dict(zip(names, args), **kwargs)
    if "input" not in values:
        raise traced._tracing.refuse(f"torch.{name} without its input")
    rest = [values.get(n, d) for n, d in defaults.items()]
    if not all(isinstance(v, (int, float, str, np.integer, np.floating)) for v in rest):
        raise traced._tracing.refuse(f"torch.{name} with a {' or '.join(defaults)} that is not a constant")
    if values.get("inplace"):
        raise traced._tracing.refuse(f"torch.{name} with inplace=True (a modifier returns a new value)")
    return (values["input"], *rest)


def _softplus(traced, name, args, kwargs):
    """F.softplus(x, beta=1, threshold=20) as torch computes it: x where beta x > threshold, else
    log1p(exp(beta x)) / beta."""
    x, beta, threshold = _numbers(traced, name, args, kwargs, {"beta": 1.0, "threshold": 20.0})
    scaled = x * beta
    return np.where(scaled > threshold, x, np.log1p(np.exp(scaled)) / beta)


def _gelu(traced, name, args, kwargs):
    """F.gelu(x, approximate="none"): x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (`erf`); approximate="tanh":
    x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, torch's two forms."""
    x, approximate = _numbers(traced, name, args, kwargs, {"approximate": "none"})
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if approximate != "none":
        raise traced._tracing.refuse(f"torch.gelu with approximate={approximate!r} ('none' or 'tanh')")
    return 0.5 * x * (1.0 + erf(x * math.sqrt(0.5)))


def _leaky_relu(traced, name, args, kwargs):
    x, slope, _ = _numbers(traced, name, args, kwargs, {"negative_slope": 0.01, "inplace": False})
    return np.where(x >= 0, x, x * slope)


def _hardtanh(traced, name, args, kwargs):
    x, lo, hi, _ = _numbers(traced, name, args, kwargs, {"min_val": -1.0, "max_val": 1.0, "inplace": False})
    return np.minimum(np.maximum(x, lo), hi)


def _elu(traced, name, args, kwargs):
    """F.elu(x, alpha=1): x where x > 0, else alpha (exp(x) - 1), as torch (by expm1)."""
    x, alpha, _ = _numbers(traced, name, args, kwargs, {"alpha": 1.0, "inplace": False})
    return np.where(x > 0, x, alpha * np.expm1(x))


_WITH_KEYWORDS = {"softplus": _softplus, "gelu": _gelu, "leaky_relu": _leaky_relu, "hardtanh": _hardtanh,
                  "elu": _elu}


def traced_activation(torch, traced, func, name: str, args: tuple, kwargs: dict):
    """The traced value of the torch activation `func` (named `name`) of `args`, or None if it is none of them
    (or is called with other arguments than a tensor and `inplace=False`, which the caller refuses by name)."""
    name = name.removeprefix("special_")  # torch.special.erf's own name
    owners = (torch, torch.Tensor, torch.special)
    candidates = [getattr(owner, name, None) for owner in owners]
    candidates.append(getattr(torch.nn.functional, _FUNCTIONAL_NAMES.get(name, name), None))
    if not any(func is c for c in candidates if c is not None):
        return None
    if name in _WITH_KEYWORDS:
        return _WITH_KEYWORDS[name](traced, name, args, kwargs)
    composed = COMPOSED.get(name)
    if composed is None or kwargs not in ({}, {"inplace": False}) or len(args) != 1:
        return None
    return composed(args[0])
