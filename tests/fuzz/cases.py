"""The fuzzing cases: seeded, reproducible from (seed, index) alone.

A `Case` is one run of one tool on one input. Kinds:
- "mlir": a mutated example or lit input through `tessera-opt` (a pipeline from the project's own) or
  `tessera-run` (small sizes, sometimes `--check` or `--level target`);
- "flags": an unmodified example with odd sizes and flags (`-d foo=3`, `-d n=+3`, `5_0`, non-ASCII digits,
  duplicates, bad pipelines, levels, kernels);
- "ptx": a mutated PTX test kernel through `tessera-run kernel.ptx` with its launch arguments;
- "api": wrong arguments to a public Python function (`tessera.interpret`, `compile`, `parse_module`,
  `attention`, `tessera.ptx.launch`), built in the worker by `api_call`.

`must_refuse` marks a case whose input is wrong by construction: accepting it is a finding ("silent
acceptance"). `validate` marks an accepted semantic MLIR mutant to run through `tessera-opt --validate`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from .mutate import SEMANTIC, mutate

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("mlir", "flags", "ptx", "api")
WEIGHTS = (0.45, 0.15, 0.2, 0.2)


@dataclass(frozen=True)
class Case:
    index: int
    kind: str
    tool: str  # "tessera-opt", "tessera-run" or "api"
    argv: tuple[str, ...] = ()
    """Tool arguments; "{input}" stands for the path of `text` written to a file."""
    text: str | None = None
    suffix: str = ".mlir"
    description: str = ""
    must_refuse: bool = False
    validate_argv: tuple[str, ...] | None = None
    """If set and the case is accepted: `tessera-opt` arguments that validate the mutant across levels."""
    api: tuple[str, int] | None = None
    sizes: dict = field(default_factory=dict, hash=False, compare=False)

    def label(self) -> str:
        return f"#{self.index} {self.kind}: {self.description}"


# region Corpus

def _mlir_corpus() -> list[tuple[Path, str, list[str]]]:
    """(path, text, the pipelines of its RUN lines) for the examples and every lit input."""
    files = sorted(ROOT.glob("examples/*.mlir")) + sorted((ROOT / "tests" / "lit").rglob("*.mlir"))
    corpus = []
    for path in files:
        text = path.read_text()
        pipelines = re.findall(r"RUN:.*?-p[ =]'([^']*)'", text) + re.findall(r"RUN:.*?-p[ =]([\w,-]+)", text)
        corpus.append((path, text, pipelines))
    return corpus


_PIPELINES_CHEAP = ("", "assign-swizzle", "assign-swizzle,pipeline-loops{stages=2}",
                    "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations",
                    "assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants")
_PIPELINE_FULL = ("assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations,"
                  "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,warp-specialize,allocate-registers")
_SIZES = {"batch": (1, 2), "heads": (1, 2), "seq_q": (1, 5, 64, 130), "seq_k": (1, 7, 64, 129),
          "M": (1, 7, 64, 129), "N": (8, 64, 136), "K": (8, 64, 72)}


def _dim_names(text: str) -> list[str]:
    names: list[str] = []
    for group in re.findall(r"#tile\.dims<([^>]*)>", text):
        for name in re.findall(r"\b[A-Za-z_]\w*\b", group):
            if name != "ceildiv" and name not in names:
                names.append(name)
    return names


def _size_flags(names: list[str], rng: random.Random) -> tuple[list[str], dict]:
    sizes = {n: rng.choice(_SIZES.get(n, (1, 3, 64))) for n in names}
    return [f"--dim={n}={v}" for n, v in sizes.items()], sizes


# endregion

# region Generators


def _mlir_case(index: int, rng: random.Random, corpus) -> Case:
    path, text, pipelines = rng.choice(corpus)
    mutated, names, descriptions = mutate(text, rng, rng.choice((1, 1, 1, 2, 3)))
    where = path.relative_to(ROOT)
    size_flags, sizes = _size_flags(_dim_names(text), rng)
    if rng.random() < 0.65:
        choices = list(_PIPELINES_CHEAP) + pipelines
        pipeline = rng.choice(choices)
        argv = ["{input}"] + (["-p", pipeline] if pipeline else [])
        if rng.random() < 0.08:
            argv = ["{input}", "-p", _PIPELINE_FULL, "-t", "ptx"]
        validate = None
        if any(n in SEMANTIC for n in names) and sizes and "examples" in str(where):
            validate = ("{input}", "--validate", "-p", "assign-swizzle,convert-tile-to-sm90,canonicalize,cse",
                        *size_flags)
        return Case(index, "mlir", "tessera-opt", tuple(argv), mutated, ".mlir",
                    f"{where}: {'; '.join(descriptions)} | tessera-opt {' '.join(argv[1:])}",
                    validate_argv=validate)
    argv = ["{input}", *size_flags]
    if rng.random() < 0.5:
        argv.append("--check")
    if rng.random() < 0.1:
        argv += ["--level", "target"]
    return Case(index, "mlir", "tessera-run", tuple(argv), mutated, ".mlir",
                f"{where}: {'; '.join(descriptions)} | tessera-run {' '.join(argv[1:])}", sizes=sizes)


_BAD_VALUES = ("+3", "5_0", "\u0663", "\uff13", " 3", "3 ", "0", "-1", "1e3", "0x10", "", "3.0", "99999999999999999999",
               "2147483648", "3;4", "nan")
_BAD_FLAGS = (("-p", "assign-swizzle{stages=}"), ("-p", "no-such-pass"), ("-p", "assign-swizzle,,"), ("-p", "{"),
              ("--level", "ptxx"), ("--kernel", "nope"), ("--lower", "assign-swizzle"), ("--lower", "cse"),
              ("--seed", "x"), ("--seed", "-5"), ("-p", "allocate-registers"), ("-p", "warp-specialize"))


def _flags_case(index: int, rng: random.Random) -> Case:
    path = rng.choice(sorted(ROOT.glob("examples/*.mlir")))
    text = path.read_text()
    names = _dim_names(text)
    flags, sizes = _size_flags(names, rng)
    choice = rng.randrange(4)
    if choice == 0:  # a size written oddly
        i = rng.randrange(len(flags))
        flags[i] = f"--dim={names[i]}={rng.choice(_BAD_VALUES)}"
        what = f"size {flags[i]}"
    elif choice == 1:  # an unknown size name
        flags.append(f"--dim={rng.choice(['foo', 'seq', 'Batch', 'm'])}=3")
        what = f"unknown {flags[-1]}"
    elif choice == 2:  # a size given twice
        i = rng.randrange(len(flags))
        flags.append(f"--dim={names[i]}={sizes[names[i]] + 1}")
        what = f"duplicate {flags[-1]}"
    else:  # a bad flag
        flag = rng.choice(_BAD_FLAGS)
        flags += list(flag)
        what = f"flag {' '.join(flag)}"
    # Every one of these is wrong; "-p allocate-registers" on Tile IR does nothing, which must be said, not run.
    must_refuse = True
    return Case(index, "flags", "tessera-run", ("{input}", *flags), text, ".mlir",
                f"{path.relative_to(ROOT)}: {what}", must_refuse=must_refuse)


_PTX_LAUNCHES = {
    "vector_add.ptx": ("--grid", "2", "--block", "128", "--arg", "f32[700]=random", "--arg", "f32[700]=random",
                       "--arg", "f32[700]=zeros", "--arg", "u32=700"),
    "transpose_2d.ptx": ("--grid", "2,1", "--block", "32,8", "--arg", "u32[40,33]=zeros",
                         "--arg", "u32[33,40]=arange", "--arg", "u32=33", "--arg", "u32=40"),
    "warp_shuffle_reduce.ptx": ("--grid", "1", "--block", "64", "--arg", "s32[100]=random",
                                "--arg", "s32[800]=zeros", "--arg", "u32=100"),
    "softmax_row.ptx": ("--grid", "3", "--block", "128", "--shared-bytes", "64", "--arg", "f32[3,100]=random",
                        "--arg", "bf16[3,100]=zeros", "--arg", "f32[3,2]=zeros", "--arg", "u32=100",
                        "--arg", "u32=100", "--arg", "u32=100"),
    "divergent_branches.ptx": ("--grid", "1", "--block", "64", "--arg", "u32[64]=arange", "--arg", "u32[256]=zeros",
                               "--arg", "u32[64]=zeros", "--arg", "u32=64"),
}


PTX_MAX_STEPS = 100_000


def _ptx_case(index: int, rng: random.Random) -> Case:
    name = rng.choice(sorted(_PTX_LAUNCHES))
    text = (ROOT / "tests" / "ptx_kernels" / name).read_text()
    mutated, _, descriptions = mutate(text, rng, rng.choice((1, 1, 2)))
    argv = ["{input}", *_PTX_LAUNCHES[name]]
    if rng.random() < 0.15:  # odd launch shapes and arguments
        i = rng.randrange(1, len(argv) - 1, 2)
        argv[i + 1] = rng.choice(("0", "65536,65536,65536", "2048", "1,1,1,1", "-3", "x", "f32[0]=zeros",
                                  "f32[1000000000000]=zeros", "u32=-1", "f99[3]=random"))
        descriptions.append(f"{argv[i]} {argv[i + 1]}")
    # The test kernels finish in under 10,000 steps: a mutant that loops is stopped at a tenth of the default
    # budget (a few seconds), and the stop is a diagnostic naming where each warp is.
    argv += ["--max-steps", str(PTX_MAX_STEPS)]
    return Case(index, "ptx", "tessera-run", tuple(argv), mutated, ".ptx",
                f"tests/ptx_kernels/{name}: {'; '.join(descriptions)}")


API_CALLS = ("interpret", "compile", "parse_module", "print_module", "find_kernel", "attention", "ptx_launch")


def _api_case(index: int, rng: random.Random) -> Case:
    name = rng.choice(API_CALLS)
    variant = rng.randrange(1 << 30)
    return Case(index, "api", "api", description=f"{name} variant {variant}", must_refuse=True, api=(name, variant))


def generate(seed: int, count: int, kinds: tuple[str, ...] = KINDS) -> list[Case]:
    """`count` cases from `seed` (the same seed and count give the same cases)."""
    corpus = _mlir_corpus()
    cases = []
    for index in range(count):
        rng = random.Random(f"{seed}:{index}")
        kind = rng.choices(KINDS, WEIGHTS)[0]
        while kind not in kinds:
            kind = rng.choices(KINDS, WEIGHTS)[0]
        if kind == "mlir":
            cases.append(_mlir_case(index, rng, corpus))
        elif kind == "flags":
            cases.append(_flags_case(index, rng))
        elif kind == "ptx":
            cases.append(_ptx_case(index, rng))
        else:
            cases.append(_api_case(index, rng))
    return cases


# endregion
