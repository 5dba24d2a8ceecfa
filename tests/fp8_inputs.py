"""The FP8 attention tests' inputs: q, k, v drawn from a seeded normal times `spread` and rounded to e4m3, and
three per-(batch, kv-head) descale factors in [0, 2) (FA3's test draw)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn


def fp8_inputs(seed, batch, heads, heads_k, seq_q, seq_k, d, spread=3.0):
    """(q, k, v, [descale_q, descale_k, descale_v]): q [batch, heads, seq_q, d], k and v [batch, heads_k, seq_k,
    d] in e4m3, the descales [batch, heads_k] float32."""
    rng = np.random.default_rng(seed)
    q, k, v = ((rng.standard_normal((batch, h, s, d)) * spread).astype(E4M3)
               for h, s in ((heads, seq_q), (heads_k, seq_k), (heads_k, seq_k)))
    descales = [(rng.random((batch, heads_k)) * 2).astype(np.float32) for _ in range(3)]
    return q, k, v, descales
