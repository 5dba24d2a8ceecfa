"""The captured arrays a launch passes, held to the values the kernel was built for (`check_captured_values`).

A kernel built with `flash_attention(score_mod=, mask_mod=)` or `attention_backward(score_mod=, mask_mod=)` takes
the arrays its modifiers capture as inputs beside q, k and v, and the caller passes them to `tessera.launch` /
`tessera.interpret`. Where the trace used an array's contents (every array of a mask_mod, whose values make the
block lists; a score_mod's integer index arrays, whose values the bounds proof reads; a table read at constant
indices or searched, whose values are the kernel's constants), the launch's checks (`index_ranges.check_launch`,
`launch_lists.check_lists_at_launch`) hold for the values traced, not the ones passed: a window array passed with
other widths ran against lists made for the traced ones, an O of neither mask, and an index array of other values
read past its table unchecked (0 there). Such an input is refused by name before the kernel runs. A score_mod's
learned table, read only at traced indices (`Trace.learned`), takes any values: that is how a training step
passes its new ones. A CUDA tensor is not read back to the host (the GPU path passes the trace's own values,
`tessera.runtime.flex`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tessera.variants import torch_mods
from tessera.variants.index_ranges import registered_traces


def check_captured_values(where: str, module, inputs: Mapping[str, object]) -> None:
    """ValueError naming the input, the array and the modifier where an input of `module` (a kernel a builder
    registered, `index_ranges.check_at_launch`) for a captured array whose contents the trace used holds other
    values than those (`inputs`: the launch's arrays by the kernel's argument names, NumPy arrays or torch
    tensors); nothing for any other module."""
    for trace, kind in registered_traces(module):
        for captured in trace.arrays:
            given = inputs.get(captured.name)
            if given is None or trace.learned(captured) is not None or getattr(given, "is_cuda", False):
                continue
            expected = trace.kernel_input(captured)
            host = torch_mods.as_numpy(given) if torch_mods.is_tensor(given) else np.asarray(given)
            if host is expected or host.shape != expected.shape:  # a shape the kernel's dims refuse elsewhere
                continue
            if not np.array_equal(host.astype(expected.dtype), expected, equal_nan=expected.dtype.kind == "f"):
                named = next((r.name for r in trace.reads if r.array.name == captured.name), captured.name)
                raise ValueError(
                    f"{where}: input {captured.name} holds other values than the array {named} the {kind} "
                    f"'{trace.name}' was traced with: the kernel was built for those (its constants, the proof of "
                    "its reads and its block lists); build the kernel again from the modifier, or pass that array")
