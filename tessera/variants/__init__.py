"""FlexAttention-style attention variants: a user's `score_mod(score, b, h, q_idx, kv_idx)` and
`mask_mod(b, h, q_idx, kv_idx)`, plain Python over NumPy, traced into Tile IR (`trace`, whose docstring maps the
tracer's modules; the score_mod's derivative: `derivative`), and the host-side block mask that classifies each
(query block, key block) as empty, partial or full (`block_mask`); `index_ranges` proves the hooks' reads of
captured arrays in bounds for a launch, `launch_lists` the block lists a launch is given against the mask_mod's
blocks at its sizes, and `fingerprint` keys what is kept between calls.

The kernels that use them are `tessera.kernels.flash_attention(..., score_mod=, mask_mod=)` and
`tessera.kernels.attention_backward(...)`; the entry points are `tessera.attention` and
`tessera.attention_backward` (`docs/attention-variants.md`)."""

from tessera.variants.block_mask import EMPTY, FULL, PARTIAL, BlockMask, create_block_mask
from tessera.variants.derivative import score_derivative
from tessera.variants.index_ranges import IndexRangeError, check_index_ranges
from tessera.variants.trace import trace_mod
from tessera.variants.tracing import ModTraceError

__all__ = ["EMPTY", "FULL", "PARTIAL", "BlockMask", "IndexRangeError", "ModTraceError", "check_index_ranges",
           "create_block_mask", "score_derivative", "trace_mod"]
