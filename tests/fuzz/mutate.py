"""Seeded text mutations of MLIR and PTX inputs: each takes the text and a `random.Random` and returns the
mutated text and a short description. They imitate half-edited files and other tools' output: lines dropped,
duplicated or swapped, truncation, stray characters, changed numbers, types, names and SSA values, hex float
literals, unterminated strings."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

Mutation = Callable[[str, random.Random], tuple[str, str]]

_NUMBER = re.compile(r"(?<![\w%.#])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")
_SSA = re.compile(r"%[A-Za-z_][\w.$]*|%\d+")
_IDENT = re.compile(r"\b[a-z_][\w]*(?:\.[a-z_]\w*)+\b")
_STRANGE = ["\"", "{", "}", "(", ")", "<", ">", "%", "@", "^", "#", ":", ",", "=", "!", "\\", "\u00e9", "\u0663",
            "\x00", "\t", "0x", "-", "..."]
_NUMBERS = ["0", "1", "-1", "3", "7", "63", "65", "127", "129", "255", "4096", "65536", "2147483648",
            "18446744073709551616", "1.5", "-0.0", "1e40", "3.4e38", "nan", "0x7fc00000", "0xff800000", "0x7F80"]
_TYPES = ["bf16", "f16", "f32", "f64", "i1", "i8", "i32", "i64", "index", "f8E4M3FN", "tf32", "i128", "u32",
          "b16", "pred"]
_HEX_FLOATS = ["0xff800000", "0x7f800000", "0x7fc00000", "0x80000000", "0x3f800000", "0xFC00", "0x7C00",
               "0xFF80", "0xfff0000000000000"]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def delete_line(text: str, rng: random.Random) -> tuple[str, str]:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    return "\n".join(lines[:i] + lines[i + 1:]), f"delete line {i + 1}"


def duplicate_line(text: str, rng: random.Random) -> tuple[str, str]:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    return "\n".join(lines[:i + 1] + lines[i:]), f"duplicate line {i + 1}"


def swap_lines(text: str, rng: random.Random) -> tuple[str, str]:
    lines = _lines(text)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines), f"swap lines {i + 1} and {j + 1}"


def truncate(text: str, rng: random.Random) -> tuple[str, str]:
    cut = rng.randrange(len(text) + 1)
    return text[:cut], f"truncate at byte {cut}"


def delete_span(text: str, rng: random.Random) -> tuple[str, str]:
    start = rng.randrange(len(text) + 1)
    end = min(len(text), start + rng.randint(1, 40))
    return text[:start] + text[end:], f"delete bytes {start}..{end}"


def insert_junk(text: str, rng: random.Random) -> tuple[str, str]:
    at = rng.randrange(len(text) + 1)
    junk = "".join(rng.choice(_STRANGE) for _ in range(rng.randint(1, 4)))
    return text[:at] + junk + text[at:], f"insert {junk!r} at byte {at}"


def unterminated_string(text: str, rng: random.Random) -> tuple[str, str]:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    tail = "".join(rng.choice("abc xyz\\%{}") for _ in range(rng.randint(20, 60)))
    lines[i] = lines[i] + ' "' + tail
    return "\n".join(lines), f"unterminated string on line {i + 1} ({len(tail)} characters)"


def _replace_match(text: str, rng: random.Random, pattern: re.Pattern, choices: list[str], what: str):
    matches = list(pattern.finditer(text))
    if not matches:
        return insert_junk(text, rng)
    m = rng.choice(matches)
    new = rng.choice(choices)
    return text[:m.start()] + new + text[m.end():], f"{what} {m.group()!r} -> {new!r} at byte {m.start()}"


def replace_number(text: str, rng: random.Random) -> tuple[str, str]:
    return _replace_match(text, rng, _NUMBER, _NUMBERS, "number")


def replace_type(text: str, rng: random.Random) -> tuple[str, str]:
    pattern = re.compile(r"\b(?:" + "|".join(_TYPES[:8]) + r")\b")
    return _replace_match(text, rng, pattern, _TYPES, "type")


def replace_ssa(text: str, rng: random.Random) -> tuple[str, str]:
    names = sorted(set(_SSA.findall(text)))
    if len(names) < 2:
        return insert_junk(text, rng)
    return _replace_match(text, rng, _SSA, names, "value")


def replace_name(text: str, rng: random.Random) -> tuple[str, str]:
    names = sorted(set(_IDENT.findall(text)))
    if len(names) < 2:
        return insert_junk(text, rng)
    return _replace_match(text, rng, _IDENT, names, "name")


def hex_float(text: str, rng: random.Random) -> tuple[str, str]:
    pattern = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?")
    return _replace_match(text, rng, pattern, _HEX_FLOATS, "float")


MUTATIONS: dict[str, Mutation] = {
    f.__name__: f for f in (delete_line, duplicate_line, swap_lines, truncate, delete_span, insert_junk,
                            unterminated_string, replace_number, replace_type, replace_ssa, replace_name, hex_float)
}
SEMANTIC = ("replace_number", "replace_type", "replace_ssa", "replace_name", "hex_float", "swap_lines",
            "delete_line", "duplicate_line")
"""Mutations that can leave a valid file with another meaning: an accepted one is validated across levels."""


def mutate(text: str, rng: random.Random, count: int = 1) -> tuple[str, list[str], list[str]]:
    """Apply `count` random mutations; returns the text, the mutations' names and their descriptions."""
    names, descriptions = [], []
    for _ in range(count):
        name = rng.choice(sorted(MUTATIONS))
        if text:
            text, description = MUTATIONS[name](text, rng)
        else:
            text, description = "", "empty input"
        names.append(name)
        descriptions.append(description)
    return text, names, descriptions
