"""Launches of a compiled kernel on PyTorch CUDA tensors, planned once per signature: the host work of a launch
that does not depend on where the tensors are.

A launch's host work splits in two. What depends only on the kernel and on the tensors' shapes, strides, element
types and device (their signature, with the launch sizes): the bound sizes and every check of
`launch.check_inputs` (ranks, sizes, the kernel's promises, element types, contiguity, the tensor-map rules on
dims and strides, the grid and cluster limits), the outputs' shapes and types, the grid, and the parameter
buffer's layout with the sizes written in (`arguments.ParameterLayout`). And what depends on the addresses: the
tensor maps (whose base must be 16-byte aligned) and the pointer parameters. `launch.plan_for` runs the first
once per (kernel, signature) and keeps the plan (`LaunchPlan`, `keep_plan`); a later call of that signature
gets the same verdict without running the checks, since they read nothing the signature does not hold.
`LaunchPlan.parameters` does the second on every call, encoding a tensor map only for an address that parameter
of that plan has not had (after the full check of every map at those addresses,
`tensor_maps.tensor_map_arguments`), so a map is never reused for another address, shape, stride or type. A
call that is not all CUDA tensors is not planned: it takes the unplanned path, whose checks name what is wrong.

The checks that read the tensors' contents (`variant_launch.check_compiled_launch`: a score_mod's reads, block
lists) depend on more than the signature and run on every call, outside the plan.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tessera.runtime.arguments import ParameterBuffer, ParameterLayout, TensorView, kernel_tensors
from tessera.runtime.tensor_maps import TensorMapArguments, tensor_map_arguments

PLANS_KEPT = 256
"""Plans kept (the least recently used is dropped for a new one): one per kernel and signature."""
MAPS_KEPT = 64
"""Encoded tensor maps kept per parameter of a plan, by address (the oldest dropped for a new one): a training
step's layers each launch on their own tensors, and PyTorch's caching allocator gives a call's outputs the
addresses the last call of that shape freed."""


def signature(inputs: Sequence, launch: Mapping[str, int] | None) -> tuple | None:
    """What the planned checks read of `inputs` (PyTorch CUDA tensors: the caller knows) and the launch sizes:
    each tensor's shape, strides, element type and device, each launch size's value and type (True is refused
    where 1 is taken); None when a launch size cannot be hashed (not planned: the checks say what is wrong)."""
    key = (tuple((tuple(x.shape), x.stride(), x.dtype, x.device) for x in inputs),
           tuple(sorted((name, type(value), value) for name, value in (launch or {}).items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass
class LaunchPlan:
    """A kernel's launch on tensors of one signature, checked: `sizes` bound, `views` every tensor's shape,
    byte strides and element type (at address 0), `inputs` the sources of the inputs in order, `made` the
    (source, shape, dtype) of each output and scratch buffer to allocate (row-major), `outputs` the sources of
    the outputs in argument order, the launch shape, the parameter layout, `map_sources` each tensor-map
    parameter's tensor. What it makes through a driver (the encoded maps, by parameter and address; the launch
    configuration and its description for errors, by stream) is kept for the last driver it was given."""

    host: object
    sizes: dict[str, int]
    views: dict[int, TensorView]
    inputs: tuple[int, ...]
    made: tuple[tuple[int, tuple[int, ...], np.dtype], ...]
    outputs: tuple[int, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem_bytes: int
    explicit_cluster: bool
    layout: ParameterLayout
    map_sources: dict[str, int]
    driver: object = None
    maps: dict[str, OrderedDict] = field(default_factory=dict)
    configs: dict[int, tuple[object, str]] = field(default_factory=dict)

    def _through(self, driver) -> None:
        with _LOCK:
            if self.driver is not driver:
                self.driver = driver
                self.maps.clear()
                self.configs.clear()

    def parameters(self, driver, addresses: Mapping[int, int]) -> tuple[ParameterBuffer,
                                                                        dict[str, TensorMapArguments]]:
        """The parameter buffer of a launch on the tensors at `addresses` (by Tile IR argument index) and the
        encode arguments of its tensor maps; maps not yet encoded at these addresses are checked and encoded
        through `driver` first."""
        self._through(driver)
        found: dict[str, tuple[TensorMapArguments, bytes]] = {}
        for name, source in self.map_sources.items():
            kept = self.maps.get(name, {}).get(addresses[source])
            if kept is None:
                found = self._encode(driver, addresses)
                break
            found[name] = kept
        buffer = self.layout.pack(addresses, {name: encoded for name, (_, encoded) in found.items()})
        return buffer, {name: arguments for name, (arguments, _) in found.items()}

    def _encode(self, driver, addresses: Mapping[int, int]) -> dict[str, tuple[TensorMapArguments, bytes]]:
        views = {source: replace(view, address=addresses[source]) for source, view in self.views.items()}
        found = {}
        for name, arguments in tensor_map_arguments(self.host, self.sizes, views).items():
            with _LOCK:
                kept = self.maps.setdefault(name, OrderedDict())
                address = addresses[self.map_sources[name]]
                if address not in kept:
                    if len(kept) >= MAPS_KEPT:
                        kept.popitem(last=False)
                    kept[address] = (arguments, driver.encode_tensor_map(arguments, self.host.kernel))
                found[name] = kept[address]
        return found

    def config(self, driver, stream: int) -> tuple[object, str]:
        """The driver's launch configuration on `stream` and its description (for an error), made once."""
        self._through(driver)
        known = self.configs.get(stream)
        if known is None:
            config = driver.launch_config(self.grid, self.block, self.cluster, self.smem_bytes, stream,
                                          self.explicit_cluster)
            detail = (f"grid {self.grid}, block {self.block}, cluster {self.cluster}, dynamic shared memory "
                      f"{self.smem_bytes} bytes, stream {stream:#x}")
            with _LOCK:
                known = self.configs.setdefault(stream, (config, detail))
        return known


_PLANS: OrderedDict[tuple, LaunchPlan] = OrderedDict()
_LOCK = threading.Lock()
"""Held while the kept plans, or a plan's maps and configurations, change (threads may launch at once)."""


def kept_plan(host, key: tuple) -> LaunchPlan | None:
    """The plan kept for `host`'s kernel on tensors of signature `key` (`signature`), or None."""
    with _LOCK:
        plan = _PLANS.get((id(host), key))
        if plan is None or plan.host is not host:  # the plan holds its host: an id names no other while it is kept
            return None
        _PLANS.move_to_end((id(host), key))
    return plan


def keep_plan(key: tuple, plan: LaunchPlan) -> None:
    """Keep `plan` for tensors of signature `key` (dropping the least recently used past `PLANS_KEPT`)."""
    with _LOCK:
        if len(_PLANS) >= PLANS_KEPT:
            _PLANS.popitem(last=False)
        _PLANS[(id(plan.host), key)] = plan


def made_plan(host, sizes: Mapping[str, int], views: Mapping[int, TensorView], launch_shape: tuple) -> LaunchPlan:
    """The plan of `host`'s kernel for the bound `sizes` and the checked `views` of its tensors, launched with
    `launch_shape` (grid, block, cluster, dynamic shared memory bytes)."""
    tensors = kernel_tensors(host)
    others = [t for t in tensors if t.role != "in"]
    return LaunchPlan(
        host, dict(sizes), {source: replace(view, address=0) for source, view in views.items()},
        tuple(t.source for t in tensors if t.role == "in"),
        tuple((t.source, views[t.source].shape, t.dtype) for t in others),
        tuple(t.source for t in others if t.role == "out"), *launch_shape, host.clustered,
        ParameterLayout(host, sizes), {p.name: p.source for p in host.params if p.kind == "tensormap"})


def forget_plans() -> None:
    """Drop every kept plan (and with them the encoded tensor maps)."""
    with _LOCK:
        _PLANS.clear()
