"""Shared fixtures: kernels are built once per configuration and reused across tests."""

from __future__ import annotations

import functools

import numpy as np
import pytest


@functools.lru_cache(maxsize=None)
def build_kernel(variant: str, **config):
    import tessera

    return getattr(tessera.kernels, variant)(**config)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
