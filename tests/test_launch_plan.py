"""Launch plans (`tessera.runtime.launch_plan`): the host path of a launch on CUDA tensors, run for real against
the fake driver and pretend CUDA tensors of bench/fake_cuda.py (no GPU). A second call of one signature checks
nothing again and encodes no tensor map, and makes no driver call but the context and the launch (no copy, no
synchronisation); a call of another shape, stride, element type or device is checked again, with the diagnostic
an unplanned call gets; a tensor map is never reused for another address or shape, and an address the driver
would refuse is refused after a good call too. Counts, not times (bench/launch_overhead.py times them). The GEMM
kernel (about 1 s to compile); the backward's three kernels, plain and with modifiers, under -m slow (about 5 s
each). The backward kernels' writes (what the GPU path need not zero-fill) at Tile level."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.runtime import launch as launch_module
from tessera.runtime.compiler import compile_kernel
from tessera.runtime.driver import Driver
from tessera.runtime.flex import forget_device_inputs
from tessera.runtime.gemm import gemm_config
from tessera.runtime.launch_plan import forget_plans, signature

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from fake_cuda import FakeCudaApi, FakeCudaTorch  # noqa: E402 - bench/ is not a package

torch = pytest.importorskip("torch", reason="PyTorch not installed")
M = K = N = 128
CONTEXT_AND_LAUNCH = ["cuCtxSetCurrent", "cuLaunchKernelEx"]
"""The driver calls of a planned launch whose tensor maps are encoded already."""


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into one throwaway cache, never the user's."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


@pytest.fixture
def gpu(monkeypatch):
    """(fake driver API, fake torch, counter of `check_inputs` calls) installed in `tessera.runtime.launch`; no plan
    and no modifiers' device input (`flex.device_inputs`) kept before or after."""
    api, fake = FakeCudaApi(), FakeCudaTorch(torch)
    driver = Driver(api)
    checks = []
    check_inputs = launch_module.check_inputs

    def counted(*args, **kwargs):
        checks.append(args[1])
        return check_inputs(*args, **kwargs)

    monkeypatch.setattr(launch_module, "_torch", lambda: fake)
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: fake)  # is_torch_tensor's
    monkeypatch.setattr(launch_module, "get_driver", lambda: driver)
    monkeypatch.setattr(launch_module, "check_inputs", counted)
    forget_plans()
    forget_device_inputs()
    yield api, fake, checks
    forget_plans()
    forget_device_inputs()


@pytest.fixture(scope="module")
def kernel():
    return compile_kernel(gemm_config("bf16"))


def cuda(fake, *shape, dtype=torch.bfloat16, index: int = 0):
    return fake.cuda_like(torch.zeros(shape, dtype=dtype), index)


def calls_of(api, call) -> list[str]:
    """The driver calls `call()` makes."""
    before = len(api.calls)
    call()
    return api.names()[before:]


def test_a_second_call_of_one_signature_checks_nothing_again_and_encodes_nothing(gpu, kernel):
    api, fake, checks = gpu
    a, b = cuda(fake, M, K), cuda(fake, K, N)
    first = calls_of(api, lambda: launch_module.run(kernel, a, b))
    assert first.count("cuTensorMapEncodeTiled") == 2 and len(checks) == 1  # A's map and B's
    assert calls_of(api, lambda: launch_module.run(kernel, a, b)) == CONTEXT_AND_LAUNCH
    assert len(checks) == 1
    first, second = api.launches[-2:]
    assert first.grid == second.grid and first.stream == second.stream == 0x5EED
    # the parameters differ in C's address only: a fresh output each call
    assert len({x.data_ptr() for x in (launch_module.run(kernel, a, b), launch_module.run(kernel, a, b))}) == 2


def test_a_new_address_gets_its_own_map_checked_and_encoded(gpu, kernel):
    api, fake, checks = gpu
    a, b = cuda(fake, M, K), cuda(fake, K, N)
    launch_module.run(kernel, a, b)
    other = cuda(fake, M, K)
    assert calls_of(api, lambda: launch_module.run(kernel, other, b)) == [
        "cuTensorMapEncodeTiled", "cuCtxSetCurrent", "cuLaunchKernelEx"]
    assert api.maps[-1][2] == other.data_ptr() and len(checks) == 1
    # 2 bytes past a 16-byte boundary: refused by the rule, as on a first call, before the driver is asked
    misaligned = cuda(fake, M * K + 8).narrow(0, 1, M * K).view(M, K)
    with pytest.raises(ValueError, match=r"gemm_bf16: tensor map A_map128 \(tensor 0\): cuTensorMapEncodeTiled would "
                                         r"refuse it: .*globalAddress must be 16-byte aligned"):
        calls_of(api, lambda: launch_module.run(kernel, fake.cuda_like(misaligned), b))
    assert calls_of(api, lambda: launch_module.run(kernel, a, b)) == CONTEXT_AND_LAUNCH  # both maps kept


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "device"])
def test_another_signature_is_checked_again(gpu, kernel, change):
    """One call plans; a call whose A differs in one of what the checks read is checked again and gets the
    diagnostic a call with nothing planned gets."""
    api, fake, checks = gpu
    a, b = cuda(fake, M, K), cuda(fake, K, N)
    launch_module.run(kernel, a, b)
    wide = cuda(fake, M, 2 * K)
    changed = {"shape": fake.cuda_like(a[: M // 2]),  # A's address, half its rows
               "stride": fake.cuda_like(wide[:, :K]),  # A's shape, rows 512 bytes apart
               "dtype": cuda(fake, M, K, dtype=torch.float16),
               "device": cuda(fake, M, K, index=1)}[change]
    if change == "device":
        b = cuda(fake, K, N, index=1)
    if change in ("shape", "stride"):
        before = len(api.maps)
        launch_module.run(kernel, changed, b)
        encoded, _ = api.maps[before:]  # A's map for its new dims or strides, B's in the new plan
        assert encoded[2] == changed.data_ptr() and list(encoded[3]) == list(reversed(changed.shape))
        assert list(encoded[4]) == [changed.stride(0) * 2]
    else:
        with pytest.raises(Exception) as planned:
            launch_module.run(kernel, changed, b)
        forget_plans()
        with pytest.raises(type(planned.value)) as unplanned:
            launch_module.run(kernel, changed, b)
        assert str(planned.value) == str(unplanned.value)
        assert {"dtype": "input tensor 0 (A_map128) must be bfloat16, got float16",
                "device": "no CUDA device 1: the driver sees 1 device(s)"}[change] in str(planned.value)
    assert len(checks) >= 2


def test_launch_sizes_are_told_apart_by_type():
    """bind_launch_sizes refuses True where it takes 1: the two are different signatures (and a size that cannot
    be hashed is not planned, so that the checks name it)."""
    assert signature([], {"seq_q": True}) != signature([], {"seq_q": 1}) == signature([], {"seq_q": 1})
    assert signature([], {"seq_q": [1]}) is None


def test_a_plan_is_kept_per_host_description(gpu, kernel):
    """A plan is its kernel's: another host description (an equal copy here) on tensors of the same signature is
    planned (checked) afresh."""
    api, fake, checks = gpu
    a, b = cuda(fake, M, K), cuda(fake, K, N)
    launch_module.run(kernel, a, b)
    launch_module.run(dataclasses.replace(kernel, host=dataclasses.replace(kernel.host)), a, b)
    assert len(checks) == 2


@pytest.mark.slow
def test_the_backward_copies_nothing_waits_for_nothing_and_encodes_each_map_once(gpu):
    """`tessera.attention_backward` on CUDA tensors: per call three launches, no copy between host and device, no
    synchronisation, no zero fill (the main kernel adds dQ into the preprocess's dq_accum); each tensor map
    encoded once per address (the fake's allocations reuse freed memory, as PyTorch's caching allocator does,
    not always in the same order); a second call plans nothing. The deterministic kernel's semaphores are zeroed."""
    import tessera

    api, fake, checks = gpu
    q, k, v, do = (cuda(fake, 1, 2, 200, 64) for _ in range(4))
    o, lse = cuda(fake, 1, 2, 200, 64), cuda(fake, 1, 2, 200, dtype=torch.float32)
    tessera.attention_backward(q, k, v, o, lse, do)
    planned = len(checks)
    fills = fake.zero_fills
    names = calls_of(api, lambda: tessera.attention_backward(q, k, v, o, lse, do))
    assert len(checks) == planned == 3
    assert names.count("cuLaunchKernelEx") == 3 and fake.zero_fills == fills == 0
    assert set(names) <= {"cuCtxSetCurrent", "cuLaunchKernelEx", "cuTensorMapEncodeTiled"}
    assert len(set(map(repr, api.maps))) == len(api.maps)  # no map encoded twice
    tessera.attention_backward(q, k, v, o, lse, do, deterministic=True)
    assert fake.zero_fills == 1  # its semaphores, which count from 0


@pytest.mark.slow
def test_the_modifiers_backward_zero_fills_nothing_it_does_not_add_into(gpu, monkeypatch):
    """`tessera.attention_backward` with a score_mod reading a captured array and a mask_mod (block lists) on CUDA
    tensors: per call three launches and nothing else (no zero fill: 7 before, every output and scratch buffer;
    the captured arrays and lists go to the device through the runtime's torch, once: a second call reuses
    them, a call after the array changed in place copies its new values); the main kernel adds into the preprocess's dq_accum (the same memory). Compiles the three head_dim 64
    kernels (about 5 s)."""
    import tessera

    api, fake, checks = gpu
    slopes = np.asarray([0.5, 0.25], np.float32)

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    q, k, v, do, o = (cuda(fake, 1, 2, 200, 64) for _ in range(5))
    lse = cuda(fake, 1, 2, 200, dtype=torch.float32)
    tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi, mask_mod=causal)
    planned, fills = len(checks), fake.zero_fills
    launched = []
    launch_on_tensors = launch_module.launch_on_tensors

    def recorded(kernel, *inputs, **options):
        launched.append((inputs, options, launch_on_tensors(kernel, *inputs, **options)))
        return launched[-1][2]

    monkeypatch.setattr(launch_module, "launch_on_tensors", recorded)
    names = calls_of(api, lambda: tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi, mask_mod=causal))
    assert names == CONTEXT_AND_LAUNCH * 3 and len(checks) == planned == 3 and fake.zero_fills == fills == 0
    (_, _, (_, _, dq_accum)), (inputs, main, _), _ = launched
    (given,) = main["into"].values()
    assert given is dq_accum and main["zeroed"] == launch_module.SCRATCH
    extra = inputs[6:]  # the slopes, Q_NUM_VISITS and Q_VISITS, on the device
    assert len(extra) == 3 and extra[0].is_cuda and extra[0].tolist() == slopes.tolist()
    tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi, mask_mod=causal)
    assert all(a is b for a, b in zip(launched[-2][0][6:], extra))  # not made nor copied again
    slopes[1] = 4.0  # changed in place: another fingerprint, its values on the device
    tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi, mask_mod=causal)
    assert launched[-2][0][6].tolist() == [0.5, 4.0] and fake.zero_fills == 0


def test_backward_parts_times_what_launch_zeroed_calls(gpu, kernel):
    """bench/backward_parts.py (the GPU session's stage) wraps runtime functions by name: through the real
    `launch_zeroed` (which calls `launch_on_tensors`, as the backward does), its timers see the part's zero
    fills, its prepare and its kernel (a renamed function would leave them empty)."""
    import backward_parts

    api, fake, _ = gpu
    with backward_parts.instrumented(fake) as calls:
        backward_parts.new_call(calls)
        launch_module.launch_zeroed(kernel, cuda(fake, M, K), cuda(fake, K, N))
    (call,) = calls
    assert set(call["spans"]) == set(call["kernels"]) == {"gemm"} and {"gemm", "prepare[gemm]"} <= set(call["host"])
    assert launch_module.launch_on_tensors.__name__ == "launch_on_tensors"  # restored


@pytest.mark.parametrize("head_dim, heads_k, seq_q, seq_k, causal, deterministic", [
    (64, 2, 70, 90, False, False),     # the query-rows main kernel
    (64, 1, 90, 70, True, False),      # GQA, causal, more queries than keys
    (128, 2, 70, 130, True, True),     # the key-rows main kernel, its semaphores
], ids=["d64", "d64-gqa-causal", "d128-causal-deterministic"])
def test_the_backward_kernels_write_every_element_they_are_not_zeroed_for(rng, head_dim, heads_k, seq_q, seq_k,
                                                                          causal, deterministic):
    """The GPU path zero-fills none of the backward's buffers but the semaphores (`attention_backward._run_torch`):
    at Tile level, on outputs that start as NaN, the preprocess writes every element (dPsum, LSE2, dq_accum = 0 on
    the padding rows too), the main kernel every element of dK and dV (adding into the preprocess's dq_accum), the
    postprocess every element of dQ: the results are those of zeroed outputs, bit for bit."""

    from tessera.numerics import BF16
    from tessera.runtime.attention_backward import _builder_options, check_backward_arguments
    from tessera.runtime.compiler import KernelConfig, built_module

    q, o, do = (rng.standard_normal((1, 2, seq_q, head_dim)).astype(BF16) for _ in range(3))
    k, v = (rng.standard_normal((1, heads_k, seq_k, head_dim)).astype(BF16) for _ in range(2))
    lse = rng.standard_normal((1, 2, seq_q)).astype(np.float32)
    lse[0, 1, 3] = -np.inf  # a row that sees no key
    config = check_backward_arguments(q, k, v, o, lse, do, causal, None, deterministic, "tile")
    kernels = built_module(KernelConfig.of("attention_backward", **_builder_options(config)))

    assert_backward_writes_what_it_is_not_zeroed_for(kernels, [q, k, v, do], o, lse, [])


def run_filled(module, inputs, fill, given=None, **sizes) -> list:
    """The outputs (f32) of `module` in the Tile interpreter on `inputs`, its outputs first `fill` but those in
    `given` (by argument index), which start as given (scratch buffers start zeroed)."""
    from tessera import api
    from tessera.interpreters.launch import prepare_arguments, run_grid

    sig = api.find_kernel(module)
    arguments, bound = prepare_arguments(sig, inputs, sizes)
    for index, (array, arg) in enumerate(zip(arguments, sig.args)):
        if arg.role == "out":
            array[...] = fill
        if index in (given or {}):
            array[...] = given[index]
    run_grid(sig, module, arguments, bound)
    return [a.astype(np.float32) for a, arg in zip(arguments, sig.args) if arg.role == "out"]


def assert_backward_writes_what_it_is_not_zeroed_for(kernels, qkvdo, o, lse, extra, zeroed_outputs=()) -> list:
    """The backward's three `kernels` (`tessera.kernels.attention_backward`) on q, k, v, dO (`qkvdo`), O, LSE and
    the main kernel's `extra` inputs (captured arrays, block lists), as the GPU path launches them: each kernel's
    outputs starting as NaN give what zeroed ones give, bit for bit, but dq_accum (the preprocess's, handed to the
    main kernel) and the main kernel's outputs `zeroed_outputs` (by index among its outputs: the accumulators
    the launch zero-fills). dq_accum is 0 on every row after the preprocess. The main kernel's outputs."""
    def same(zeroed, unfilled):
        return len(zeroed) == len(unfilled) and all(np.array_equal(a, b) for a, b in zip(zeroed, unfilled))

    q, k, v, do = qkvdo
    zeroed, unfilled = (run_filled(kernels.preprocess, [o, do, lse], fill) for fill in (0, np.nan))
    assert same(zeroed, unfilled) and not unfilled[2].any()  # dq_accum = 0 on every row, the padding's too
    dpsum, lse2, dq_accum = unfilled
    main_inputs = [q, k, v, do, lse2, dpsum, *extra]
    given = {len(main_inputs): dq_accum, **{len(main_inputs) + i: 0 for i in zeroed_outputs}}
    zeroed, unfilled = (run_filled(kernels.main, main_inputs, fill, given) for fill in (0, np.nan))
    assert same(zeroed, unfilled)
    seq_q = q.shape[2]
    zeroed, post = (run_filled(kernels.postprocess, [unfilled[0]], fill, seq_q=seq_q) for fill in (0, np.nan))
    assert same(zeroed, post)
    return unfilled


def _soft_cap(s, b, h, q, kv):
    return 20 * np.tanh(s / 20)


def _causal_mask(b, h, q, kv):
    return q >= kv


@pytest.mark.parametrize("case", ["causal-soft-cap-head-split", "gqa-mask-empty-key-blocks", "captured-bias-grads"])
def test_the_modifiers_backward_kernels_write_every_element_they_are_not_zeroed_for(rng, case):
    """The GPU path of `tessera.attention_backward` with score_mod/mask_mod (`flex._backward_on_gpu`) zero-fills
    only the captured arrays' gradients (added into by scatter-adds) and the semaphores: at Tile level, on outputs
    that start as NaN, its three kernels give the zeroed outputs' results bit for bit. A causal soft-cap with
    the main kernel split over head_dim (each thread block stores its slice of dK and dV); a GQA mask_mod under
    which the last key blocks are seen by no query (empty work lists: dK = dV = 0 stored); a captured bias
    whose gradient is accumulated (its output given zeroed, the rest NaN)."""

    from tessera.numerics import BF16
    from tessera.runtime import flex
    from tessera.runtime.captured_gradients import captured_gradient_names

    heads_k, seq_q, seq_k, causal, score_mod, mask_mod, grads, split = {
        "causal-soft-cap-head-split": (2, 70, 90, True, _soft_cap, None, (), 2),
        "gqa-mask-empty-key-blocks": (1, 70, 200, False, None, _causal_mask, (), None),
        "captured-bias-grads": (2, 40, 70, False, "bias", None, ("bias",), None)}[case]
    q, o, do = (rng.standard_normal((1, 2, seq_q, 64)).astype(BF16) for _ in range(3))
    k, v = (rng.standard_normal((1, heads_k, seq_k, 64)).astype(BF16) for _ in range(2))
    lse = (rng.standard_normal((1, 2, seq_q)) + 4).astype(np.float32)
    if score_mod == "bias":
        bias = rng.standard_normal((2, seq_q, seq_k)).astype(np.float32)

        def score_mod(s, b, h, q, kv):
            return s + bias[h, q, kv]
        grads = tuple(captured_gradient_names("test", score_mod, None, True).values())
    kernels, sparse = flex.backward_kernels(q, score_mod=score_mod, mask_mod=mask_mod, causal=causal, scale=None,
                                            level="tile", head_dim=64, dtype="bf16", head_split=split,
                                            captured_grads=grads)
    extra = flex._captured(score_mod, mask_mod)
    if sparse:
        c = kernels.config.attention
        extra += flex.kept_block_mask(mask_mod, 1, 2, seq_q, seq_k, c.block_m, c.block_n).backward_inputs(heads_k)
        assert not extra[-2][..., -1, :].any()  # the last key block: no query block visits it
    _, dk, dv, *dcaptured = assert_backward_writes_what_it_is_not_zeroed_for(
        kernels, [q, k, v, do], o, lse, extra, zeroed_outputs=range(3, 3 + len(grads)))
    assert len(dcaptured) == len(grads) and all(np.isfinite(x).all() for x in (dk, dv, *dcaptured))
    if sparse:
        assert not dk[:, :, 128:].any() and not dv[:, :, 128:].any()  # keys no query sees (causal mask: q < 70)


def test_given_outputs_are_checked(gpu, kernel):
    """`launch_on_tensors(..., into=)` takes an output of the kernel's shape, element type and device, contiguous,
    and refuses anything else by name (C of the GEMM is tensor 2: f32 [M, N])."""
    api, fake, _ = gpu
    a, b = cuda(fake, M, K), cuda(fake, K, N)
    c = cuda(fake, M, N, dtype=torch.float32)
    (out,) = launch_module.launch_on_tensors(kernel, a, b, into={2: c})
    assert out is c and api.names()[-1] == "cuLaunchKernelEx"
    wrong = {"shape": (cuda(fake, M, N + 8, dtype=torch.float32), r"got a float32 tensor of shape \(128, 136\)"),
             "dtype": (cuda(fake, M, N), r"got a bfloat16 tensor"),
             "layout": (fake.cuda_like(cuda(fake, N, M, dtype=torch.float32).t()), r"got .*, not contiguous"),
             "device": (cuda(fake, M, N, dtype=torch.float32, index=1), r"got .* on cuda:1")}
    for given, message in wrong.values():
        with pytest.raises(ValueError, match=r"@gemm_bf16: tensor 2 must be a contiguous float32 tensor of shape "
                                             rf"\(128, 128\) on cuda:0, {message}"):
            launch_module.launch_on_tensors(kernel, a, b, into={2: given})
    with pytest.raises(ValueError, match=r"no output or scratch buffer 0 to give \(its outputs and scratch "
                                         r"buffers: 2\)"):
        launch_module.launch_on_tensors(kernel, a, b, into={0: c})


@pytest.mark.slow
def test_the_overhead_benchmark_counts_the_driver_calls_of_each_entry_point():
    """bench/launch_overhead.py through the public entry points at its shapes (the head_dim 128 kernels: about
    15 s to compile): a planned call's driver calls are one context and one launch per kernel, and nothing is
    zero-filled."""
    import launch_overhead

    results = launch_overhead.measure(calls=2, repeats=1)
    expected = {"forward": (1, 0), "backward": (3, 0), "backward_mods": (3, 0), "gemm": (1, 0)}
    for name, (kernels, fills) in expected.items():
        row = results[name]
        calls = row["driver_calls"]
        assert calls["cuCtxSetCurrent"] == calls["cuLaunchKernelEx"] == kernels
        # a map of an intermediate whose memory came back in another order may be encoded
        assert set(calls) <= {"cuCtxSetCurrent", "cuLaunchKernelEx", "cuTensorMapEncodeTiled"}
        assert row["zero_fills"] == fills and row["planned_speedup"] > 0
        assert {"check", "lookup", "plan", "prepare", "launch", "allocate"} <= set(row["stages_us"])


@pytest.mark.slow
def test_the_backward_on_cuda_tensors_runs_right_through_its_ptx(monkeypatch, rng):
    """The GPU path of `tessera.attention_backward` end to end on the CPU: pretend CUDA tensors whose fresh memory
    reads as NaN (nothing zero-filled but semaphores: the kernels must write what they read), the planned
    launches with the preprocess's dq_accum handed to the main kernel, and the three kernels' PTX run by the
    tests' fake driver in the PTX executor; twice (the second call planned, in memory the first one freed),
    against the float64 gradient. GQA and causal, head_dim 64."""


    import tessera
    from tessera.numerics import BF16
    from tessera.reference import check_attention_backward
    from tessera.runtime.attention_backward import check_backward_arguments, kernel_configs
    from tessera.runtime.launch import numpy_to_torch
    from test_runtime import FakeCuda

    q, do = (rng.standard_normal((1, 2, 70, 64)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, 50, 64)).astype(BF16) for _ in range(2))
    o, lse = tessera.attention(q, k, v, causal=True, return_lse=True, level="tile")
    config = check_backward_arguments(q, k, v, o, lse, do, True, None, False, None)
    api = FakeCuda([compile_kernel(c) for c in kernel_configs(config)])
    fake = FakeCudaTorch(torch, api=api)
    driver = Driver(api)
    monkeypatch.setattr(launch_module, "_torch", lambda: fake)
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: fake)  # is_torch_tensor's
    monkeypatch.setattr(launch_module, "get_driver", lambda: driver)
    forget_plans()

    def on_device(x):
        host = numpy_to_torch(np.asarray(x))
        return fake.empty(tuple(host.shape), dtype=host.dtype, device="cuda").copy_(host)

    tensors = [on_device(x) for x in (q, k, v, o, lse, do)]
    for _ in range(2):
        grads = tessera.attention_backward(*tensors, causal=True)
        comparisons = check_attention_backward([g.float().numpy() for g in grads], q, k, v, o, do, BF16, True)
        assert all(c.ok for c in comparisons), comparisons
        del grads
    assert len(api.launches) == 6
    forget_plans()


@pytest.mark.gpu
def test_the_modifiers_backward_on_cuda_tensors_reads_nothing_it_did_not_write(monkeypatch):
    """On the GPU: `tessera.attention_backward` with score_mod/mask_mod (GQA, block lists, a captured array) on
    CUDA tensors whose every fresh float buffer starts as NaN (the runtime's torch.empty filled), twice (the second
    call on the device inputs kept): dK and dV are those of the NumPy path (every output zeroed) bit for bit, dQ
    (added by atomics, in no fixed order) within the float64 reference's tolerance."""
    import tessera
    from tessera import reference
    from tessera.numerics import BF16
    from tessera.runtime.launch import numpy_to_torch
    from test_attention_mods_gpu import GPU_SHAPE, inputs, softcap_alibi, window

    real = torch

    class Poisoned:
        """torch, but `empty` on a CUDA device gives float tensors filled with NaN."""

        def __getattr__(self, name):
            return getattr(real, name)

        def empty(self, *shape, **options):
            made = real.empty(*shape, **options)
            return made.fill_(float("nan")) if made.is_cuda and made.is_floating_point() else made

    q, k, v, do = inputs(**GPU_SHAPE)
    o, lse = tessera.attention(q, k, v, score_mod=softcap_alibi, mask_mod=window, return_lse=True)
    expected = tessera.attention_backward(q, k, v, o, lse, do, score_mod=softcap_alibi, mask_mod=window)
    monkeypatch.setattr(launch_module, "_torch", lambda: Poisoned())
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: Poisoned())  # is_torch_tensor's
    tensors = [numpy_to_torch(np.asarray(x)).cuda() for x in (q, k, v, o, lse, do)]
    for _ in range(2):
        grads = [g.float().cpu().numpy() for g in tessera.attention_backward(*tensors, score_mod=softcap_alibi,
                                                                              mask_mod=window)]
        assert np.array_equal(grads[1], expected[1].astype(np.float32))
        assert np.array_equal(grads[2], expected[2].astype(np.float32))
        checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, softcap_alibi, window)
        assert all(c.ok for c in checks), [str(c) for c in checks]
