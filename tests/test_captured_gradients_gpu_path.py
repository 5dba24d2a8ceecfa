"""Gradients of captured tensors on the GPU path (level None): `tessera.attention_backward(..., captured_grads=)` and
`tessera.runtime.autograd.attention` filling a learned table's `.grad` on CUDA tensors (docs/variant-gradients.md).

Without a GPU, through the fake driver (`LoadedPtxCuda`: the PTX the runtime loads, run in the PTX executor, as
tests/test_runtime.py's `FakeCuda` runs it) and bench/fake_cuda.py's pretend CUDA tensors, whose fresh memory
reads as NaN: the gradients of the GPU path are those of level "ptx" bit for bit (the same PTX, and the PTX
executor adds the atomics in one order), and within the float64 tolerance of `captured_grads_checks`. The default
suite runs autograd on CUDA tensors (head_dim 64: about 5 s of CPU, mostly compiling the kernels) and a training
step's kernels remembered without a lowering (a stub pipeline); `-m slow` the
matrix (a relative-position table, per-head scales, ALiBi slopes, a full [B, H, S, S] bias, GQA, causal masks,
head_dim 64 and 128); with a GPU, `gpu`-marked tests run on it (bench/gpu_plan.py GPU_TESTS). Skipped without
torch."""

from __future__ import annotations

import ctypes
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera  # noqa: E402
from tessera import toolchain  # noqa: E402
from tessera.interpreters.ptx.parse import parse_ptx  # noqa: E402
from tessera.numerics import BF16, round_to  # noqa: E402
from tessera.runtime import launch as launch_module  # noqa: E402
from tessera.runtime.driver import Driver  # noqa: E402
from tessera.runtime.flex import forget_device_inputs  # noqa: E402
from tessera.runtime.launch import numpy_to_torch  # noqa: E402
from tessera.runtime.launch_plan import forget_plans  # noqa: E402
from captured_grads_checks import (BF16_ROUNDING, F32_FLOOR, assert_assembles_under_every_ptxas,  # noqa: E402
                                   assert_captured_grads, eager_captured_grads)
from test_runtime import FakeCuda  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from fake_cuda import FakeCudaTorch, FakeResult  # noqa: E402 - bench/ is not a package


class LoadedPtxCuda(FakeCuda):
    """`FakeCuda` whose kernels are the PTX modules the runtime loads: it refuses cubins (as a driver without the
    binary's architecture does), so the runtime loads the PTX, whose entries this keeps and runs. A test need not
    know which kernels the runtime chooses (the backward's rungs, `flex.WARP_SPECIALIZED_FIRST`)."""

    def __init__(self):
        super().__init__(refuse_cubin=True)

    def cuModuleLoadData(self, address):
        result = super().cuModuleLoadData(address)
        if result[0] == FakeResult.CUDA_SUCCESS:
            text = ctypes.string_at(address).decode()
            for name in parse_ptx(text).entries:
                self.kernels[name] = SimpleNamespace(ptx=text)
        return result


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


@pytest.fixture
def fake_gpu(monkeypatch):
    """(driver API, torch with pretend CUDA tensors) installed in `tessera.runtime.launch`; no plan or device input
    kept before or after."""
    api = LoadedPtxCuda()
    fake = FakeCudaTorch(torch, api=api)
    driver = Driver(api)
    monkeypatch.setattr(launch_module, "get_driver", lambda: driver)
    monkeypatch.setattr(launch_module, "_torch", lambda: fake)
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: fake)  # is_torch_tensor's
    monkeypatch.setattr(toolchain, "find_ptxas", lambda *args, **kwargs: None)  # the fake loads the PTX: no cubin
    forget_plans()
    forget_device_inputs()
    yield api, fake
    forget_plans()
    forget_device_inputs()


def _inputs(batch, heads, heads_k, seq_q, seq_k, head_dim, seed):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((batch, heads, seq_q, head_dim)), BF16).astype(BF16)
    k, v = (round_to(rng.standard_normal((batch, heads_k, seq_k, head_dim)), BF16).astype(BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16).astype(BF16), rng


def _causal(seq_q, seq_k):
    return lambda b, h, q, kv: q + (seq_k - seq_q) >= kv


def rel_alibi(seq_q, seq_k, heads, causal=True):
    """A relative-position table rel[q - kv + seq_k - 1] ([seq_q + seq_k - 1]) and ALiBi slopes[h] * (kv - q)."""
    def make(t):
        rel, slopes = t["rel"], t["slopes"]
        return (lambda s, b, h, q, kv: s + rel[q - kv + seq_k - 1] + slopes[h] * (kv - q),
                _causal(seq_q, seq_k) if causal else None)
    return lambda rng: {"rel": rng.standard_normal(seq_q + seq_k - 1), "slopes": -0.5 ** np.arange(1, heads + 1)}, make


def scale_bias(batch, heads, seq_q, seq_k, causal=False):
    """A per-head scale[h] of the score and a full [batch, heads, seq_q, seq_k] bias."""
    def make(t):
        scale, bias = t["scale"], t["bias"]
        return (lambda s, b, h, q, kv: s * scale[h] + bias[b, h, q, kv], _causal(seq_q, seq_k) if causal else None)
    return lambda rng: {"scale": 1 + 0.25 * rng.standard_normal(heads),
                        "bias": rng.standard_normal((batch, heads, seq_q, seq_k))}, make


def _gpu_and_ptx(case, shape, head_dim, seed, causal_flag=False):
    """The NumPy API's gradients on the GPU path (the fake driver installed) and at level "ptx", and the inputs."""
    tables, make = case
    q, k, v, do, rng = _inputs(*shape, head_dim, seed)
    arrays = {name: np.asarray(t, np.float32) for name, t in tables(rng).items()}
    score_mod, mask_mod = make(arrays)
    if causal_flag:  # the kernels' causal=True in place of the mask_mod (the reference keeps it)
        mask_mod = None
    options = dict(score_mod=score_mod, mask_mod=mask_mod, causal=causal_flag)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")  # the backward's rungs (a refused warp-specialized shape, spilling at 128)
        o, lse = tessera.attention(q, k, v, return_lse=True, level="tile", **options)
        on_gpu = tessera.attention_backward(q, k, v, o, lse, do, captured_grads=True, **options)
        at_ptx = tessera.attention_backward(q, k, v, o, lse, do, captured_grads=True, level="ptx", **options)
    return on_gpu, at_ptx, (q, k, v, do, o, make, arrays)


def _assert_bitwise_and_accurate(on_gpu, at_ptx, checked):
    q, k, v, do, o, make, arrays = checked
    for name, got, expected in zip(("dq", "dk", "dv"), on_gpu[:3], at_ptx[:3]):
        assert np.array_equal(np.asarray(got, np.float32), np.asarray(expected, np.float32)), name
    assert sorted(on_gpu[3]) == sorted(at_ptx[3]) == sorted(arrays)
    for name, grad in on_gpu[3].items():
        assert grad.dtype == np.float32 and grad.shape == arrays[name].shape
        assert np.array_equal(grad, at_ptx[3][name]), name
    assert_captured_grads(on_gpu[3], q, k, v, do, o, make, arrays)


def _on_device(fake, x, requires_grad=False):
    """A NumPy array or a CPU tensor copied into pretend device memory."""
    host = x if isinstance(x, torch.Tensor) else numpy_to_torch(np.asarray(x))
    return fake.empty(tuple(host.shape), dtype=host.dtype, device="cuda").copy_(host).requires_grad_(requires_grad)


def _captured_on_device(fake, array, dtype):
    """A learned tensor in pretend device memory (a leaf that requires grad: a pretend CUDA tensor cannot be an
    `nn.Parameter`, whose detach() must keep its class); the kernels read an f32 one where it is."""
    return _on_device(fake, torch.from_numpy(np.asarray(array, np.float32)).to(dtype), requires_grad=True)


def _keep_on_device(monkeypatch, fake):
    """autograd hands its Function's backward the incoming gradient and the saved output as plain tensors (made in
    its C++, where a pretend CUDA tensor's device is a Python property): put them in pretend device memory, as
    they are on a GPU, before `attention_backward` sees them."""
    from tessera.runtime import attention_backward as module

    backward = module.attention_backward

    def on_device(*tensors, **options):
        return backward(*(t if t.is_cuda else _on_device(fake, t.detach()) for t in tensors), **options)
    monkeypatch.setattr(module, "attention_backward", on_device)


def test_autograd_fills_the_grads_of_cuda_tensors_through_the_driver(fake_gpu, monkeypatch):
    """`loss.backward()` through `autograd.attention` on CUDA tensors (level None) fills the .grad of a relative-
    position table (f32) and of ALiBi slopes (bf16: the f32 sum rounded once, as FlexAttention casts), under a
    causal mask_mod with GQA: four launches (forward, preprocess, main, postprocess), the main kernel's two
    gradient outputs the only zero fills (dK and dV are stored whole), every output in memory that starts as
    NaN."""
    from tessera.runtime import autograd

    from tessera.runtime import flex

    api, fake = fake_gpu
    # the builder's 64 x 64 kernel, which the runtime takes after lowering the dense kernel's 128 x 128 blocks to
    # see them refused (389 registers of 240, 2.5 s of this test's CPU: the slow tests keep that step)
    monkeypatch.setattr(flex, "WARP_SPECIALIZED_FIRST", {})
    seq = 17
    tables, make = rel_alibi(seq, seq, heads=2)
    q, k, v, do, rng = _inputs(1, 2, 1, seq, seq, 64, seed=3)
    arrays = {name: np.asarray(t, np.float32) for name, t in tables(rng).items()}
    leaves = {"rel": _captured_on_device(fake, arrays["rel"], torch.float32),
              "slopes": _captured_on_device(fake, arrays["slopes"], torch.bfloat16)}
    arrays["slopes"] = leaves["slopes"].detach().float().numpy()  # the kernel reads the bf16 values
    qt, kt, vt = (_on_device(fake, x, requires_grad=True) for x in (q, k, v))
    score_mod, mask_mod = make(leaves)
    _keep_on_device(monkeypatch, fake)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the backward's rung warning (128 x 128 blocks refused)
        o = autograd.attention(qt, kt, vt, score_mod=score_mod, mask_mod=mask_mod)
        (o.float() * numpy_to_torch(np.asarray(do, np.float32))).sum().backward()
    assert len(api.launches) == 4 and fake.zero_fills == 2
    rel, slopes = leaves["rel"].grad, leaves["slopes"].grad
    assert rel.dtype == torch.float32 and slopes.dtype == torch.bfloat16 and qt.grad is not None
    assert_captured_grads({"rel": rel, "slopes": slopes}, q, k, v, do, o.detach().float().numpy(), make, arrays,
                          rounding={"slopes": BF16_ROUNDING})


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", (64, 128))
def test_relative_table_and_alibi_causal_gqa(fake_gpu, head_dim):
    """rel[q - kv + S - 1] and slopes[h] under a causal mask_mod, GQA 4:2, seq 40 x 40 (two key blocks): the GPU
    path's gradients are level "ptx"'s bit for bit (at head_dim 128 the main kernel takes the head split)."""
    on_gpu, at_ptx, checked = _gpu_and_ptx(rel_alibi(40, 40, heads=4), (1, 4, 2, 40, 40), head_dim, seed=5)
    _assert_bitwise_and_accurate(on_gpu, at_ptx, checked)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", (64, 128))
def test_per_head_scale_and_full_bias_causal(fake_gpu, head_dim):
    """scale[h] * score + bias[b, h, q, kv] with causal=True (bottom-right, seq_q 30 < seq_k 70), batch 2, GQA
    2:1: bit for bit level "ptx"'s."""
    on_gpu, at_ptx, checked = _gpu_and_ptx(scale_bias(2, 2, 30, 70, causal=True), (2, 2, 1, 30, 70), head_dim,
                                           seed=7, causal_flag=True)
    _assert_bitwise_and_accurate(on_gpu, at_ptx, checked)


def test_a_training_step_lowers_no_kernel_again(monkeypatch):
    """A learned table changed in place between steps (read at traced indices only) leaves the modifiers' keys as
    they were (`tessera.variants.trace.modifier_key`: its contents are not in them), so the backward's kernels are
    the ones kept (`flex._kept`) and the second step lowers nothing (it lowered the 128 x 128 candidate again, 0.2 s
    at head_dim 64, before the refusal was remembered by the module's text; then built the kernels again, before
    the keys left out what the trace never read). The pipeline is a stub: what is counted is how often it runs."""
    import tessera.passes
    from tessera.runtime import flex

    lowered = []

    class Lowering:
        def apply(self, ctx, module):
            lowered.append(module)

    monkeypatch.setattr(tessera.passes, "parse_pipeline", lambda spec: Lowering())
    monkeypatch.setattr(flex, "_FITS", {})
    rel = np.linspace(-1, 1, 33).astype(np.float32)
    options = dict(score_mod=lambda s, b, h, q, kv: s + rel[q - kv + 16], mask_mod=None, causal=False, scale=None,
                   level=None, head_dim=64, dtype="bf16", captured_grads=("score_mod_rel",))
    built = []
    for _ in range(2):
        kernels, sparse = flex.backward_kernels(None, **options)
        built.append(flex.warp_specialized_first(None, kernels, sparse, **options)[0])
        rel += 0.5  # the optimizer's step, in place
    assert built[0] is built[1] and len(lowered) == 1


@pytest.mark.slow
def test_the_captured_arrays_change_between_steps(fake_gpu):
    """A training step changes the learned table in place: the next call reads its new values (on the device
    again) and its gradient is the new one's, not the first call's added into (each call's outputs zeroed)."""
    seq = 17
    tables, make = rel_alibi(seq, seq, heads=2, causal=False)
    q, k, v, do, rng = _inputs(1, 2, 2, seq, seq, 64, seed=11)
    arrays = {name: np.asarray(t, np.float32) for name, t in tables(rng).items()}
    score_mod, _ = make(arrays)
    grads = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            o, lse = tessera.attention(q, k, v, score_mod=score_mod, return_lse=True, level="tile")
            *_, g = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, captured_grads=["rel"])
            exact = eager_captured_grads(q, k, v, do, make, arrays)["rel"]
            assert np.abs(g["rel"] - exact).max() <= 1e-2 * np.abs(exact).max() + F32_FLOOR
            grads.append(g["rel"])
            arrays["rel"] -= 0.5 * g["rel"]  # in place: the score_mod reads the same array
    assert not np.array_equal(grads[0], grads[1])


@pytest.mark.slow
def test_the_gpu_paths_main_kernel_at_head_dim_64_assembles_without_spilling():
    """The main kernel the GPU path takes at head_dim 64 for a relative table and ALiBi slopes under a causal
    mask_mod (64 x 64, warp-specialized: the 128 x 128 candidate is refused) has one red.global.add.f32 per
    register of each scatter, and every ptxas found assembles it without a warning or a spill (at head_dim 128 the
    head split: tests/test_captured_gradients_head_split.py)."""
    from tessera.runtime import flex

    tables, make = rel_alibi(40, 40, heads=4)
    score_mod, mask_mod = make({n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(0)).items()})
    options = dict(score_mod=score_mod, mask_mod=mask_mod, causal=False, scale=None, level=None, head_dim=64,
                   dtype="bf16", captured_grads=("score_mod_rel", "score_mod_slopes"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels, sparse = flex.backward_kernels(None, **options)
        kernels, _, refused, taken = flex.warp_specialized_first(None, kernels, sparse, **options)
        ptx = tessera.compile(kernels.main, target="ptx")
    assert taken == "with 64 x 64 blocks" and len(refused) == 1
    assert not [w for w in caught if "fell back" in str(w.message)]
    # two scatters in each of the work lists' two loops (full and partial pairs), 32 registers a thread each
    assert ptx.count("red.global.add.f32") == 2 * 2 * 64 * 64 // 128
    assert_assembles_under_every_ptxas(ptx)


# region on a GPU (bench/gpu_plan.py GPU_TESTS runs these; tests/conftest.py skips them without one)

@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", (64, 128))
def test_autograd_fills_learned_tables_on_the_gpu(head_dim):
    """On the GPU: a relative-position table and bf16 ALiBi slopes (nn.Parameters on cuda) under a causal
    mask_mod, GQA 4:2, seq 300 x 300 (three key blocks at head_dim 64; at 128 the head split, where only the first
    of a key block's two thread blocks scatters): .grad within the float64 tolerance (the slopes' within bf16's
    rounding of it)."""
    from tessera.runtime import autograd

    seq = 300
    tables, make = rel_alibi(seq, seq, heads=4)
    q, k, v, do, rng = _inputs(1, 4, 2, seq, seq, head_dim, seed=13)
    arrays = {name: np.asarray(t, np.float32) for name, t in tables(rng).items()}
    leaves = {"rel": torch.nn.Parameter(torch.from_numpy(arrays["rel"]).cuda()),
              "slopes": torch.nn.Parameter(torch.from_numpy(arrays["slopes"]).to(torch.bfloat16).cuda())}
    arrays["slopes"] = leaves["slopes"].detach().float().cpu().numpy()
    qt, kt, vt = (numpy_to_torch(np.asarray(x)).cuda().requires_grad_(True) for x in (q, k, v))
    score_mod, mask_mod = make(leaves)
    o = autograd.attention(qt, kt, vt, score_mod=score_mod, mask_mod=mask_mod)
    (o.float() * numpy_to_torch(np.asarray(do, np.float32)).cuda()).sum().backward()
    rel, slopes = leaves["rel"].grad, leaves["slopes"].grad
    assert rel.is_cuda and rel.dtype == torch.float32 and slopes.dtype == torch.bfloat16
    assert_captured_grads({"rel": rel.cpu(), "slopes": slopes.cpu()}, q, k, v, do, o.detach().float().cpu().numpy(),
                          make, arrays, rounding={"slopes": BF16_ROUNDING})

# endregion
