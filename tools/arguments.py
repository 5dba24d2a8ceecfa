"""The command-line argument types that tessera-opt and tessera-run share (argparse `type=` functions): each
refuses what Python's int() would accept but a user did not mean (signs, `_`, other scripts' digits); and
`UsageError`, the tools' error for a mistake on the command line or in the files it names."""

from __future__ import annotations

import argparse
import re

from tessera.arguments import MAX_SIZE  # the largest named size, the same as the Python API's



class UsageError(Exception):
    """A mistake on the command line or in the files it names (not in the IR): reported without a traceback."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECIMAL = re.compile(r"[0-9]+")


def parse_size(text: str) -> tuple[str, int]:
    """`NAME=SIZE` with NAME an ASCII identifier and SIZE plain ASCII decimal digits (no sign, no `_`, no other
    script's digits, all of which Python's int() would accept) from 1 to MAX_SIZE."""
    name, sep, value = text.partition("=")
    if not sep or not _NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (NAME a plain identifier such as seq_q), got '{text}'")
    limit = f"from 1 to {MAX_SIZE}, as Target IR computes indices in 32 bits"
    if re.fullmatch(r"-[0-9]+", value) or _DECIMAL.fullmatch(value) and int(value) == 0:
        raise argparse.ArgumentTypeError(f"size '{name}' must be positive ({limit}), got {value}")
    if not _DECIMAL.fullmatch(value):
        raise argparse.ArgumentTypeError(f"size '{name}' must be written in plain decimal digits 0-9, got '{value}'")
    size = int(value)
    if size > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size '{name}' = {size} is over the limit ({limit})")
    return name, size


def parse_seed(text: str) -> int:
    """A seed: plain ASCII decimal digits (a non-negative integer, as NumPy's generators take)."""
    if not _DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a seed in plain decimal digits 0-9, got '{text}'")
    return int(text)


def parse_workers(text: str) -> int:
    """`--workers N`: plain ASCII decimal digits, N >= 1 (processes that run the CTAs in parallel)."""
    if not _DECIMAL.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 1 in plain decimal digits, got '{text}'")
    return int(text)
