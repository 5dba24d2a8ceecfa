"""bench/harness.py's hold on the baselines a GPU benchmark times (the H200 session of 2026-11-30,
bench/results/2026-11-30-h200): a compiled baseline runs compiled or is refused by name, never eagerly past
dynamo's recompile limit; a baseline's output is checked as Tessera's is, a wrong one refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import harness  # noqa: E402 - bench/ is not a package

torch = pytest.importorskip("torch")


class _CpuTorch:
    """torch, its CUDA calls made no-ops: the harness's `measure` on CPU tensors (timing stubbed by the test)."""

    class cuda:  # noqa: N801 - torch's name
        synchronize = staticmethod(lambda: None)

    uint8 = None

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, **kwargs):
        return torch.empty(1)


def test_a_compiled_baseline_compiles_past_dynamos_default_limit_and_never_runs_eagerly(monkeypatch):
    """Past dynamo's recompile limit (its default 8; the forward grid compiles FlexAttention 12 times) its own
    compile runs the function eagerly, silently (shown at a limit of 1); `compile_strictly` raises the limit to
    `RECOMPILE_LIMIT` and, past it, the call raises and `first_compiled_call` refuses the row by name. Each
    row's note says how many graphs its first call compiled."""
    config = torch._dynamo.config
    monkeypatch.setattr(config, "recompile_limit", 1)
    monkeypatch.setattr(config, "fail_on_recompile_limit_hit", False)
    dynamos_own = torch.compile(lambda x: x - 1, backend="eager", dynamic=False)
    for n in (1, 2):  # the second shape is past the limit: dynamo runs it eagerly, without an error
        assert torch.equal(dynamos_own(torch.ones(n)), torch.zeros(n))

    strict = harness.compile_strictly(torch, lambda x: x - 1, backend="eager")
    assert config.recompile_limit == harness.RECOMPILE_LIMIT and config.fail_on_recompile_limit_hit

    def double(x):
        return x * 2 + 1

    compiled = harness.compile_strictly(torch, double, backend="eager")
    run = harness.first_compiled_call(torch, lambda: compiled(torch.ones(2)))
    assert run.note == "compiled (torch.compile, fullgraph): 1 new graph" and torch.equal(run(), double(torch.ones(2)))
    again = harness.first_compiled_call(torch, lambda: compiled(torch.ones(2)))
    assert again.note == "compiled (torch.compile, fullgraph): 0 new graphs"  # an earlier row's graph served

    monkeypatch.setattr(config, "recompile_limit", 1)  # a limit hit under compile_strictly: refused, never eager
    harness.first_compiled_call(torch, lambda: strict(torch.ones(1)))
    with pytest.raises(harness.Unsupported, match=r"^not compiled: FailOnRecompileLimitHit"):
        harness.first_compiled_call(torch, lambda: strict(torch.ones(2, 2)))


def test_measure_records_how_a_system_was_compiled(monkeypatch):
    """A build's function `note` (how it was compiled) reaches its record, beside its time."""
    def build(inputs):
        def run():
            return 1.0
        run.note = "compiled (torch.compile, fullgraph): 2 new graphs"
        return run

    monkeypatch.setattr(harness, "time_ms", lambda *args: 2.0)
    check = lambda outputs: ({name: 0.0 for name in outputs}, 1e-3, 1.0)  # noqa: E731
    (record,) = harness.measure(_CpuTorch(), [harness.System("Flex", build)], None, {}, 4e12, check,
                                type("Args", (), {"warmup": 1, "repeats": 1}))
    assert record.status == "ok" and record.tflops == 2000.0 and record.note.endswith("2 new graphs")


def test_a_16_bit_baseline_is_checked_like_tessera_and_a_wrong_product_is_refused(monkeypatch):
    """The H200's GEMM rows gave cuBLAS a max error of 1.0 against Tessera's 0.002 (status ok): its output is
    bf16, and half a bf16 ULP at |C| in [256, 512) is 1.0. Here on the CPU at K = 256 (|C| up to about 64): a
    bf16 product's error is its rounding (at most half a ULP of the largest |C|, plus the accumulation's), within
    the tolerance the check widens for it, and its record says so; the product of a transposed operand (the
    wrong layout the figure was suspected of) is WRONG, as is an f32 result off by a ULP of bf16."""
    import gemm

    monkeypatch.setattr(harness, "time_ms", lambda *args: 1.0)
    generator = torch.Generator().manual_seed(26)
    a, b = (torch.randn(256, 256, generator=generator).to(torch.bfloat16) for _ in range(2))

    def fixed(name, compute, rounding=0.0):
        return harness.System(name, lambda inputs: (lambda: compute(*inputs)), rounding)

    systems = [fixed("f32", lambda a, b: a.float() @ b.float()),
               gemm.cublas_system(torch),
               fixed("bf16 A^T B", lambda a, b: a.t() @ b, 2.0**-8),
               fixed("f32 + 2^-8 |C|", lambda a, b: (a.float() @ b.float()) * (1 + 2.0**-7))]
    records = harness.measure(_CpuTorch(), systems, (a, b), {"M": 256}, 1e12, gemm.gemm_check(torch, a, b),
                              type("Args", (), {"warmup": 1, "repeats": 1}))
    f32, bf16, transposed, scaled = records
    largest = float((a.double() @ b.double()).abs().max())
    half_ulp = 2.0 ** (int(torch.tensor(largest).log2().floor()) - 8)
    assert f32.status == "ok" and f32.max_error < 1e-3 and f32.note == ""
    assert bf16.status == "ok" and half_ulp / 2 < bf16.max_error <= half_ulp + f32.max_error
    assert bf16.note.startswith("its output type's rounding alone is up to ")
    assert transposed.status == "WRONG" and transposed.max_error > 10 and transposed.ms is None
    assert scaled.status == "WRONG"


def test_the_environment_names_the_driver_and_the_libraries(monkeypatch, tmp_path):
    """The versions a result is committed with: nvidia-smi's driver (a stand-in on PATH here; None without
    one), Triton's, NumPy's and ml_dtypes'."""
    import numpy as np

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 580.159.04\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    found = harness.versions()
    assert found["driver"] == "580.159.04" and found["numpy"] == np.__version__ and "triton" in found
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert harness.versions()["driver"] is None


@pytest.mark.slow
def test_the_forward_grids_flexattention_rows_all_run_compiled(monkeypatch):
    """bench/attention.py's FlexAttention over a grid of the forward stage's kind on the CPU (dynamo's eager
    backend: the same graphs and guards, no Inductor): head_dim 64/128/256, causal or not, two lengths and
    batches, so more compiles than dynamo's default limit of 8 (the H200 session's d64-causal and d256 rows ran
    eagerly past it). Every row runs compiled, says so, and matches SDPA (about 30 s of CPU: `-m slow`)."""
    import attention

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", False)
    system = attention.flex_system(torch, backend="eager")
    compiles = 0
    for head_dim in (128, 64, 256):
        for causal in (False, True):
            for seq, batch in ((128, 2), (256, 1)):
                q, k, v = (torch.randn(batch, 2, seq, head_dim) for _ in range(3))
                run = system.build((q, k, v, causal))
                assert run.note.startswith("compiled (torch.compile, fullgraph): ")
                compiles += int(run.note.split(": ")[1].split()[0])
                want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                assert torch.allclose(run(), want, atol=1e-5)
    assert compiles > 8
