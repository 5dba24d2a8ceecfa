"""Every IR the pipelines produce survives being printed and read back: the text is a fixed point of
print(parse(.)), and the module read back computes exactly what the original computes.

Printed Target IR once read back wrong: xDSL printed the -inf splat that starts the softmax as
`dense<0xff800000>` and read it as the number 4286578688.0, so `tessera-opt -o t.mlir` then `tessera-opt
t.mlir -t ptx` gave a kernel whose output was all NaN (issue 21; `tessera.ir.hex_floats`). Each stage after each
pass of `tessera.passes`' pipelines (and the README's, which ends in allocate-registers) is checked on the
flash-attention and GEMM examples, at sizes small enough for a few seconds per pipeline, yet with a partial
key tile (masked with -inf) and a partial K step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.passes import PassPipeline

import inprocess
from tessera import find_kernel, passes
from tessera.ir import make_context, parse_module, print_module
from tessera.validation import levels

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "flash_attention": {"batch": 1, "heads": 1, "seq_q": 64, "seq_k": 130},
    "gemm": {"M": 130, "N": 24, "K": 72},
}
README_PIPELINE = passes.SPECIALIZED_PIPELINE + ",allocate-registers"
PIPELINES = {name: getattr(passes, name) for name in
             ("TARGET_PIPELINE", "PTX_PIPELINE", "PIPELINED_PIPELINE", "SPECIALIZED_PIPELINE")}
PIPELINES["README"] = README_PIPELINE


def pass_names(spec: str) -> list[str]:
    return [p.strip() for p in spec.split(",")]


# The pipelines that no other one extends: walking each pass by pass visits every prefix of every pipeline.
CHAINS = {name: spec for name, spec in PIPELINES.items()
          if not any(other != spec and pass_names(other)[:len(pass_names(spec))] == pass_names(spec)
                     for other in PIPELINES.values())}


def test_the_chains_cover_every_pipeline():
    for name, spec in PIPELINES.items():
        assert any(pass_names(chain)[:len(pass_names(spec))] == pass_names(spec) for chain in CHAINS.values()), name


def run(module, sig, inputs, sizes) -> list[np.ndarray]:
    return levels.run_level(module, levels.level_of(module, sig.name), sig, inputs, sizes)


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_stage_reads_back_to_the_same_kernel(example, chain):
    path = ROOT / "examples" / f"{example}.mlir"
    module = parse_module(path.read_text(), str(path))
    sig = find_kernel(module)
    sizes = EXAMPLES[example]
    inputs = levels.generate_inputs(sig, sizes, seed=0)
    pipeline = PassPipeline.parse_spec(passes.all_passes(), CHAINS[chain]).passes
    for position, pass_ in enumerate([None, *pipeline]):
        stage = "the input" if pass_ is None else f"pass {position} ({pass_.name})"
        if pass_ is not None:
            pass_.apply(make_context(), module)
        text = print_module(module)
        reread = parse_module(text, f"{example}-{position}.mlir")
        assert print_module(reread) == text, f"{stage}: the printed text is not a fixed point"
        original, again = run(module, sig, inputs, sizes), run(reread, sig, inputs, sizes)
        for a, b in zip(original, again):
            assert np.isfinite(a.astype(np.float32)).all(), f"{stage}: the original output is not finite"
            np.testing.assert_array_equal(b, a, err_msg=f"{stage}: the module read back computes another result")


def test_readme_two_step_compile_gives_the_one_step_ptx(tmp_path):
    """The README pipeline without allocate-registers to a file, then allocate-registers and PTX from that file,
    gives the PTX of the one-step compile (the reproduction of issue 21, whose two-step PTX was all NaN). Each
    tessera-opt runs in this process as its own process would (tests/inprocess.py)."""
    example = str(ROOT / "examples" / "flash_attention.mlir")
    before = ",".join(pass_names(README_PIPELINE)[:-1])
    assert pass_names(README_PIPELINE)[-1] == "allocate-registers"

    def opt(*args):
        return inprocess.run(["tessera-opt", *args])

    one = opt(example, "-p", README_PIPELINE, "-t", "ptx", "-o", str(tmp_path / "one.ptx"))
    assert one.returncode == 0, one.stderr
    first = opt(example, "-p", before, "-o", str(tmp_path / "t.mlir"))
    assert first.returncode == 0, first.stderr
    second = opt(str(tmp_path / "t.mlir"), "-p", "allocate-registers", "-t", "ptx", "-o", str(tmp_path / "two.ptx"))
    assert second.returncode == 0, second.stderr
    assert "dense<0xff800000>" in (tmp_path / "t.mlir").read_text()  # the -inf splat, in hex
    assert (tmp_path / "two.ptx").read_text() == (tmp_path / "one.ptx").read_text()
