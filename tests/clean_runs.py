"""The other direction of the race detector: correct kernels that other compilers and libraries wrote, each a run
that checks its own answer, to be run with races on under any schedule (`bench/races.py --clean`,
tests/test_ptx_clean_adversarial.py). A report on any of them is a false report: Triton's PTX samples
(tests/ptx_samples/external, through the cases of tests/test_ptx_external.py, each run with the executor options
given) and the CUTLASS and FlashAttention-3 configurations tests/ptx_library/build.py built here (skipped when
not built), each on a shape with several k-blocks or key blocks per CTA."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

import test_ptx_external as external
from test_ptx_library import ATTENTION, BACKWARD, GEMMS
from ptx_library.build import CONFIGS
from ptx_library.library import (attention_reference, backward_reference, built, gemm_reference, launch_backward,
                                 launch_library)

EXTERNAL = {  # name: (test function of test_ptx_external, its arguments besides rng)
    "vector add": ("test_vector_add", ()), "softmax": ("test_softmax", ()),
    "integer ops": ("test_integer_division_remainder_and_wide_multiply", ()), "atomics": ("test_atomics", ()),
    "layer norm backward (locks)": ("test_layer_norm_backward_takes_its_locks_in_turn", ()),
    "min/max atomics": ("test_half_double_and_float_min_max_atomics", ()),
    "TMA matmul": ("test_matmul_tma_descriptors", ()),
    "dot e4m3": ("test_single_dot_every_wgmma_type", ("triton_dot_fp8",)),
    "dot s8": ("test_single_dot_every_wgmma_type", ("triton_dot_int8",)),
    "mma.sync dot": ("test_small_dot_runs_on_mma_sync", ()),
    "TMA reduce": ("test_tma_reduce_add_from_every_program", ()),
    "flash attention": ("test_flash_attention_forward", ()),
}
"""Triton's samples whose runs check their answers (the fp8 conversions and the refusals are not launches of a
kernel with memory traffic)."""


@contextmanager
def _options(**options):
    """`launch` in test_ptx_external's runs takes `options` (schedule, seed, races) besides its own."""
    plain = external.launch

    def launch(*args, **kw):
        return plain(*args, **{**kw, **options})

    external.launch = launch
    try:
        yield
    finally:
        external.launch = plain


def external_runs() -> Iterator[tuple[str, Callable[..., None]]]:
    """(name, run(**launch options)) of each Triton sample: raises on a report or a wrong answer."""
    for name, (test, args) in EXTERNAL.items():
        def run(test=test, args=args, **options):
            with _options(**options):
                getattr(external, test)(*args, np.random.default_rng(0))
        yield name, run


def _gemm(config: str, **options) -> None:
    tensors, _, _ = launch_library(config, (256, 256, 192, 1), 2, **options)
    np.testing.assert_allclose(tensors["D"], gemm_reference(tensors), rtol=1e-5, atol=1e-4)


def _forward(config: str, **options) -> None:
    tensors, _, _ = launch_library(config, (1, 1, 200, 333, CONFIGS[config]["HDIM"]), 2, **options)
    out, lse = attention_reference(tensors, causal=bool(CONFIGS[config]["IS_CAUSAL"]))
    np.testing.assert_allclose(tensors["O"].astype(np.float64), out, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(tensors["LSE"], lse, atol=1e-4, rtol=1e-5)


def _backward(config: str, **options) -> None:
    tensors = launch_backward(config, (1, 1, 200, 160, CONFIGS[config]["HDIM"]), 1, **options)
    for name, want in zip(("dQ", "dK", "dV"), backward_reference(tensors)):
        np.testing.assert_allclose(tensors[name].astype(np.float64), want, atol=2e-3, rtol=2e-3, err_msg=name)


def library_runs() -> Iterator[tuple[str, Callable[..., None]]]:
    """(name, run(**launch options)) of each built plain CUTLASS GEMM and FA3 forward and backward configuration
    (the variants, FP8, bias-ReLU, stream-K, soft-cap, local, packed GQA, have their own adversarial runs in
    tests/test_ptx_library.py). The schedule's seed is `schedule_seed` there: `seed` draws the inputs."""
    checks = {**dict.fromkeys(GEMMS, _gemm), **dict.fromkeys(ATTENTION, _forward),
              **dict.fromkeys(BACKWARD, _backward)}
    for config, check in checks.items():
        if not built(config):
            continue

        def run(config=config, check=check, seed=None, **options):
            check(config, schedule_seed=seed, **options)
        yield config, run
