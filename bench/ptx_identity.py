"""Save or compare the PTX of every kernel configuration, instruction lines only (comment lines ignored), so
that a change meant to speed up the compiler is shown not to change a single emitted instruction.

    python bench/ptx_identity.py save DIR      # write DIR/<configuration>.ptx for every configuration
    python bench/ptx_identity.py check DIR     # compile again and compare with DIR, line by line

Configurations (`CONFIGS`): flash, two- and three-pass attention at head_dim 64/128/256, causal or not, GEMM, and
the forward's other tiles, inputs and layouts and the backward's main kernel, each through the default full
pipeline (`passes.SPECIALIZED_PIPELINE` and allocate-registers). A line is a comment when it starts, after
indentation, with `//`; every other line must be byte-identical (`check` also says whether the comments are).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tessera
from tessera.passes import SPECIALIZED_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

PIPELINE = SPECIALIZED_PIPELINE + ",allocate-registers"
CONFIGS = [(v, dict(head_dim=d, causal=c)) for v in ("flash_attention", "two_pass_attention", "three_pass_attention")
           for d in (64, 128, 256) for c in (False, True)] + [("gemm", {})] + [
    ("flash_attention", dict(head_dim=128, causal=c, block_n=128)) for c in (False, True)] + [
    ("flash_attention", dict(head_dim=64, dtype="f16")), ("flash_attention", dict(head_dim=128, dtype="e4m3")),
    ("flash_attention_paged", dict(head_dim=128)), ("flash_attention_varlen", dict(head_dim=128))] + [
    ("attention_backward_main", dict(head_dim=d, causal=c)) for d in (64, 128) for c in (False, True)]
"""Every builder's default and the forward's 128 x 128 tile, f16 and fp8 inputs, the paged and varlen forwards and
the backward's main kernel: what a change to a pass shared by all of them must leave as it was."""


def configuration_name(variant: str, config: dict) -> str:
    return "_".join([variant, *(f"{k}{int(v) if isinstance(v, bool) else v}" for k, v in config.items())])


def compile_ptx_text(variant: str, config: dict) -> str:
    """The PTX of one configuration through the full pipeline."""
    module = getattr(tessera.kernels, variant)(**config)
    apply_pipeline(module, PIPELINE)
    return print_ptx(module, registers=allocated_registers)


def instruction_lines(ptx: str) -> list[str]:
    """Every line of `ptx` that is not a comment line."""
    return [line for line in ptx.splitlines() if not line.lstrip().startswith("//")]


def first_difference(expected: list[str], got: list[str]) -> tuple[int, str, str]:
    """(line number from 1, expected line, got line) where two line lists first differ (`<end>` past one's end)."""
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    return (first + 1, expected[first] if first < len(expected) else "<end>",
            got[first] if first < len(got) else "<end>")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("save", "check"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--only", help="only configurations whose name contains this")
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    failures = 0
    for variant, config in CONFIGS:
        name = configuration_name(variant, config)
        if args.only and args.only not in name:
            continue
        ptx = compile_ptx_text(variant, config)
        path = args.directory / f"{name}.ptx"
        if args.mode == "save":
            path.write_text(ptx)
            print(f"{name}: {len(ptx.splitlines())} lines saved")
            continue
        saved = path.read_text()
        expected, got = instruction_lines(saved), instruction_lines(ptx)
        if expected == got:
            same = "byte for byte" if saved == ptx else "comment lines differ"
            print(f"{name}: identical instructions ({len(got)} lines; {same})")
            continue
        failures += 1
        line, want, have = first_difference(expected, got)
        print(f"{name}: DIFFERS at instruction line {line}: {want!r} != {have!r}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
