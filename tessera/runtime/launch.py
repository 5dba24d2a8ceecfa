"""Loading a compiled kernel on the GPU and launching it with arrays.

`run(kernel, *inputs)` takes the kernel's inputs in order and returns its outputs, in the inputs' kind:
- NumPy arrays (bf16 as `ml_dtypes.bfloat16`): copied to device buffers, launched on the default stream,
  waited for, copied back;
- PyTorch CUDA tensors: used in place through `data_ptr()` (strided inputs reached by tensor maps are
  allowed: their strides go into the maps), outputs allocated with torch, the launch issued on torch's
  current stream and not waited for, as a torch operation would be;
- PyTorch CPU tensors: through NumPy, returned as CPU tensors.
PyTorch is never imported here: a tensor is recognised only if the caller's torch is already loaded.

Every host-side check (sizes bound from the shapes, element types, tensor-map rules, grid limits) runs
before the driver is touched, so a wrong call fails the same way with or without a GPU. On CUDA tensors the
checks run once per signature (shapes, strides, element types, device, launch sizes: `plan_for`, whose plans
`tessera.runtime.launch_plan` keeps) and a tensor map is encoded once per address. `prepare` (`prepare_planned`
on CUDA tensors) does the per-call work once (encode the tensor maps, pack the parameters) and returns a launch
that only calls `cuLaunchKernelEx`, which is what the benchmarks time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tessera.host import HostDescription
from tessera.index_tables import check_tables
from tessera.host_arrays import (  # noqa: F401 - the runtime's names for them
    _torch,
    _torch_dtype,
    dtype_name,
    element_dtype,
    is_torch_tensor,
    numpy_to_torch,
    torch_to_numpy,
)
from tessera.runtime.arguments import (
    KernelTensor,
    ParameterBuffer,
    TensorView,
    bind_sizes,
    kernel_tensors,
    pack_parameters,
)
from tessera.runtime.compiler import CompiledKernel
from tessera.runtime.driver import CudaUnavailable, Device, Driver, get_driver
from tessera.runtime.launch_plan import LaunchPlan, keep_plan, kept_plan, made_plan, signature
from tessera.runtime.tensor_maps import TensorMapArguments, tensor_map_arguments
from tessera.runtime.variant_launch import check_compiled_launch
from tessera.sm90 import facts

NO_CLUSTER = (1, 1, 1)
"""The cluster of a kernel that declares none: launched without the cluster attribute. A kernel that declares one
(`tile.cluster`; its PTX says `.explicitcluster`) is launched with the attribute set to
`HostDescription.cluster(sizes)`, (1, 1, 1) included where its shape does not divide the grid."""
MAX_GRID = (2**31 - 1, 65535, 65535)
"""The largest grid, per dimension [CUDA C++ Programming Guide, table of technical specifications]."""

# region Arrays: NumPy and (optionally) PyTorch


def view_of(x, address: int | None = None) -> TensorView:
    """The TensorView of an array: a CUDA tensor's own address and strides; a host array's strides as if
    it were copied contiguously, at `address` (0 before it is)."""
    dtype = element_dtype(x)
    if dtype is None:
        raise ValueError(f"arrays of {dtype_name(x)} cannot be passed to a kernel")
    if is_torch_tensor(x) and x.is_cuda:
        size = x.element_size()
        return TensorView(x.data_ptr(), tuple(x.shape), tuple(s * size for s in x.stride()), dtype)
    return TensorView.contiguous(address or 0, tuple(x.shape), dtype)


# endregion

# region Launch shape and checks


def launch_shape(host: HostDescription, sizes: Mapping[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int],
                                                                            tuple[int, int, int], int]:
    """(grid, block, cluster, dynamic shared memory bytes) of a launch of `host`'s kernel over `sizes` (the
    cluster is `NO_CLUSTER` for a kernel that declares none)."""
    grid = host.grid(sizes)
    for axis, (extent, limit) in enumerate(zip(grid, MAX_GRID)):
        if not 1 <= extent <= limit:
            raise ValueError(f"@{host.kernel}: grid {grid} for sizes {dict(sizes)}: dimension {'xyz'[axis]} "
                             f"must be in [1, {limit}]")
    cluster = host.cluster(sizes) or NO_CLUSTER
    facts.check_cluster(grid, cluster)
    return grid, host.block, cluster, host.dynamic_smem_bytes


def check_inputs(host: HostDescription, inputs: Sequence, launch: Mapping[str, int] | None = None
                 ) -> tuple[dict[str, int], dict[int, TensorView]]:
    """Bind the sizes from `inputs` (the kernel's inputs in order) and `launch` (the kernel's launch sizes,
    `tessera.kernel_abi`) and check every tensor, its tensor maps and the grid, on the host. Returns the
    sizes and the views (outputs and host arrays at address 0)."""
    tensors = kernel_tensors(host)
    wanted = [t for t in tensors if t.role == "in"]
    if len(inputs) != len(wanted):
        raise ValueError(f"@{host.kernel} takes {len(wanted)} inputs ({', '.join(t.label for t in wanted)}), "
                         f"got {len(inputs)}")
    for tensor, x in zip(wanted, inputs):
        if element_dtype(x) != tensor.dtype:
            raise ValueError(f"@{host.kernel}: input {tensor.label} must be {tensor.dtype.name}, got {dtype_name(x)}")
    sizes = bind_sizes(host, {t.source: tuple(x.shape) for t, x in zip(wanted, inputs)}, launch)
    labels = {t.source: t.label for t in wanted}  # its index tables, where the host can read them (`tile.tables`)
    check_tables(f"@{host.kernel}", host.tables, {t.source: x for t, x in zip(wanted, inputs)}, labels.get, sizes)
    views = {t.source: view_of(x) for t, x in zip(wanted, inputs)}
    for tensor in tensors:
        if tensor.role != "in":
            views[tensor.source] = TensorView.contiguous(0, tensor.dims.evaluate(sizes), tensor.dtype)
    tensor_map_arguments(host, sizes, views)
    launch_shape(host, sizes)
    return sizes, views


def plan_for(kernel: CompiledKernel, inputs: Sequence, launch: Mapping[str, int] | None = None) -> LaunchPlan:
    """The launch plan of `kernel` on `inputs` (its inputs in order) with the launch sizes `launch`
    (`tessera.runtime.launch_plan`): the one kept for their signature when they are all CUDA tensors, else made
    after every check of `check_inputs` (which raises as ever) and kept when they are."""
    key = signature(inputs, launch) if all(is_torch_tensor(x) and x.is_cuda for x in inputs) else None
    if key is not None:
        plan = kept_plan(kernel.host, key)
        if plan is not None:
            return plan
    sizes, views = check_inputs(kernel.host, inputs, launch)
    plan = made_plan(kernel.host, sizes, views, launch_shape(kernel.host, sizes))
    if key is not None:
        keep_plan(key, plan)
    return plan


# endregion

# region Loading and launching

@dataclass(frozen=True)
class LoadedKernel:
    """A compiled kernel loaded into a device's primary context, with its dynamic shared memory allowed."""

    kernel: CompiledKernel
    device: Device
    module: object
    function: object


def load(kernel: CompiledKernel, device: int = 0, driver: Driver | None = None) -> LoadedKernel:
    """Load `kernel` on device `device` (once per driver and device)."""
    driver = driver or get_driver()
    dev = driver.device(device)
    loaded = driver.loaded.get((kernel.key, device))
    if loaded is None:
        module, function = driver.load_function(kernel.name, kernel.cubin, kernel.ptx)
        driver.set_dynamic_smem(function, kernel.name, kernel.host.dynamic_smem_bytes, dev)
        loaded = driver.loaded[(kernel.key, device)] = LoadedKernel(kernel, dev, module, function)
    return loaded


@dataclass
class PreparedLaunch:
    """One launch with everything encoded: calling it issues cuLaunchKernelEx and nothing else. It keeps
    the parameter buffer and the arrays it was made from alive."""

    loaded: LoadedKernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem_bytes: int
    stream: int
    parameters: ParameterBuffer
    tensor_maps: dict[str, TensorMapArguments]
    driver: Driver
    keep: tuple = ()
    explicit_cluster: bool = False
    """The kernel declares a cluster (`.explicitcluster`): the attribute is set even for (1, 1, 1)."""
    config: object = field(default=None, repr=False)
    """The driver's launch configuration (made here when not given: `LaunchPlan.config` gives a kept one)."""
    detail: str | None = field(default=None, repr=False)
    """The launch as a CudaError from cuLaunchKernelEx describes it."""

    def __post_init__(self) -> None:
        if self.config is None:
            self.config = self.driver.launch_config(self.grid, self.block, self.cluster, self.smem_bytes,
                                                    self.stream, self.explicit_cluster)
            self.detail = (f"grid {self.grid}, block {self.block}, cluster {self.cluster}, dynamic shared memory "
                           f"{self.smem_bytes} bytes, stream {self.stream:#x}")

    def __call__(self) -> None:
        self.driver.launch(self.loaded.function, self.loaded.kernel.name, self.config, self.parameters.address,
                           self.detail)


def prepare(kernel: CompiledKernel, views: Mapping[int, TensorView], sizes: Mapping[str, int], stream: int = 0,
            device: int = 0, driver: Driver | None = None, keep: tuple = ()) -> PreparedLaunch:
    """Load `kernel`, encode its tensor maps for `views` (device tensors by Tile IR argument index) and pack
    its parameters."""
    driver = driver or get_driver()
    host = kernel.host
    grid, block, cluster, smem = launch_shape(host, sizes)
    arguments = tensor_map_arguments(host, sizes, views)
    loaded = load(kernel, device, driver)
    encoded = {name: driver.encode_tensor_map(a, kernel.name) for name, a in arguments.items()}
    parameters = pack_parameters(host, sizes, views, encoded)
    return PreparedLaunch(loaded, grid, block, cluster, smem, stream, parameters, arguments, driver, keep,
                          host.clustered)


def usable_device(inputs: Sequence) -> int:
    """The ordinal of the device `run` launches on for `inputs` (a CUDA tensor's device, else 0), once the
    driver has found it able to run Tessera's kernels; raises CudaUnavailable (no bindings, driver, device or
    sm_90a) otherwise. Entry points call it before compiling, so that nothing is compiled without a GPU."""
    cuda = [x for x in inputs if is_torch_tensor(x) and x.is_cuda]
    ordinal = 0
    if cuda:
        device = cuda[0].device
        ordinal = device.index if device.index is not None else _torch().cuda.current_device()
    try:
        get_driver().device(ordinal, current=False)  # the launch makes its context current (`load`)
    except CudaUnavailable as error:
        raise CudaUnavailable(f"{error}; {CPU_ALTERNATIVE}") from None
    return ordinal


CPU_ALTERNATIVE = ("to run on the CPU instead, pass level='tile', 'target' or 'ptx' (the same kernel in the Tile "
                   "interpreter, the CTA simulator or the PTX executor)")
"""What a `CudaUnavailable` from an entry point adds: every entry point runs its kernels on the CPU with
`level=` (`tessera.launch`, `tessera.attention`, `tessera.gemm`, ...)."""


def run(kernel: CompiledKernel, *inputs, stream: int | None = None, sizes: Mapping[str, int] | None = None):
    """Run `kernel` on `inputs` (its inputs in order: all NumPy arrays, or all PyTorch tensors on one
    device) and return its output, or a tuple of its outputs, of the inputs' kind (see the module docstring).
    `sizes` gives the kernel's launch sizes (`tessera.kernel_abi`), if it has any."""
    kinds = {"torch-cuda" if is_torch_tensor(x) and x.is_cuda else "torch" if is_torch_tensor(x)
             else "numpy" if isinstance(x, np.ndarray) else type(x).__name__ for x in inputs}
    if len(kinds) > 1 or not kinds <= {"torch-cuda", "torch", "numpy"}:
        raise ValueError(f"@{kernel.name}: inputs must be all NumPy arrays or all PyTorch tensors on one device, "
                         f"got {', '.join(sorted(kinds))}")
    if kinds == {"torch"}:
        outputs = _run_numpy(kernel, [torch_to_numpy(x) for x in inputs], stream or 0, sizes)
        return _one_or_tuple([numpy_to_torch(o) for o in outputs])
    if kinds == {"torch-cuda"}:
        return _one_or_tuple(_run_torch(kernel, inputs, stream, sizes))
    return _one_or_tuple(_run_numpy(kernel, list(inputs), stream or 0, sizes))


def _one_or_tuple(outputs: list):
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _others(kernel: CompiledKernel) -> list[KernelTensor]:
    return [t for t in kernel_tensors(kernel.host) if t.role != "in"]


def prepare_torch(kernel: CompiledKernel, *inputs, stream: int | None = None,
                  sizes: Mapping[str, int] | None = None) -> tuple[PreparedLaunch, list]:
    """A prepared launch of `kernel` on PyTorch CUDA tensors `inputs` (its inputs in order, used in place)
    into output tensors allocated here: (launch, outputs). Calling the launch issues the kernel on `stream`
    (default: torch's current stream of the inputs' device) and writes the outputs."""
    _cuda_device(kernel, inputs, "prepare_torch takes PyTorch CUDA tensors")
    return _on_tensors(kernel, inputs, sizes, stream, zeroed=False)


def _cuda_device(kernel: CompiledKernel, inputs: Sequence, refusal: str):
    """The one device of `inputs`, all PyTorch CUDA tensors; ValueError (`refusal` for other arrays) otherwise."""
    if not all(is_torch_tensor(x) and x.is_cuda for x in inputs):
        raise ValueError(f"@{kernel.name}: {refusal}")
    devices = {x.device for x in inputs}
    if len(devices) != 1:
        raise ValueError(f"@{kernel.name}: inputs must be on one device, got {', '.join(map(str, devices))}")
    return next(iter(devices))


def _on_tensors(kernel: CompiledKernel, inputs: Sequence, sizes: Mapping[str, int] | None, stream: int | None,
                zeroed: bool | str, into: Mapping[int, object] | None = None) -> tuple[PreparedLaunch, list]:
    """`prepare_torch` and `launch_on_tensors`: the checks (planned, `launch_plan`; the compiled module's every
    call), then the outputs and scratch buffers given (`into`, checked) or allocated on the inputs' device
    (zeroed: `torch.zeros`, a fill on the stream) and the launch prepared (`prepare_planned`)."""
    torch = _torch()
    plan = plan_for(kernel, inputs, sizes)
    check_compiled_launch(f"@{kernel.name}", kernel, inputs, plan.sizes)  # before the GPU is asked
    device = _cuda_device(kernel, inputs, "launches on the GPU take PyTorch CUDA tensors")
    if stream is None:
        stream = torch.cuda.current_stream(device).cuda_stream
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    into = into or {}
    unknown = set(into) - {source for source, _, _ in plan.made}
    if unknown:
        raise ValueError(f"@{kernel.name}: no output or scratch buffer {', '.join(map(str, sorted(unknown)))} to give "
                         f"(its outputs and scratch buffers: {', '.join(str(source) for source, _, _ in plan.made)})")
    made = {}
    for source, shape, dtype in plan.made:
        if source in into:
            made[source] = _given(kernel, source, into[source], shape, dtype, device)
        else:
            zero = source not in plan.outputs if zeroed == SCRATCH else zeroed
            made[source] = (torch.zeros if zero else torch.empty)(shape, dtype=_torch_dtype(dtype), device=device)
    tensors = {**dict(zip(plan.inputs, inputs)), **made}
    launch = prepare_planned(kernel, plan, tensors, stream, ordinal, keep=(tuple(inputs), tuple(made.values())))
    return launch, [made[source] for source in plan.outputs]


def _given(kernel: CompiledKernel, source: int, x, shape: tuple[int, ...], dtype: np.dtype, device):
    """`x`, given as the kernel's tensor `source`, if it is the contiguous CUDA tensor on `device` of the shape
    and element type the kernel writes there; ValueError naming what differs otherwise."""
    if not (is_torch_tensor(x) and x.is_cuda and x.device == device and tuple(x.shape) == tuple(shape)
            and element_dtype(x) == dtype and x.is_contiguous()):
        got = type(x).__name__
        if is_torch_tensor(x):
            got = f"a {dtype_name(x)} tensor of shape {tuple(x.shape)} on {x.device}"
            got += "" if x.is_contiguous() else ", not contiguous"
        raise ValueError(f"@{kernel.name}: tensor {source} must be a contiguous {dtype.name} tensor of shape "
                         f"{tuple(shape)} on {device}, got {got}")
    return x


def prepare_planned(kernel: CompiledKernel, plan: LaunchPlan, tensors: Mapping[int, object], stream: int,
                    device: int = 0, driver: Driver | None = None, keep: tuple = ()) -> PreparedLaunch:
    """`prepare` for a planned launch (`plan_for`) on `tensors` (CUDA tensors by Tile IR argument
    index): the parameters packed for their addresses (tensor maps encoded only for addresses not seen), the
    kept launch configuration, the kernel loaded."""
    driver = driver or get_driver()
    parameters, maps = plan.parameters(driver, {source: x.data_ptr() for source, x in tensors.items()})
    config, detail = plan.config(driver, stream)
    return PreparedLaunch(load(kernel, device, driver), plan.grid, plan.block, plan.cluster, plan.smem_bytes, stream,
                          parameters, maps, driver, keep, plan.explicit_cluster, config, detail)


def _run_torch(kernel: CompiledKernel, inputs: Sequence, stream: int | None,
               sizes: Mapping[str, int] | None = None) -> list:
    launch, outputs = prepare_torch(kernel, *inputs, stream=stream, sizes=sizes)
    launch()
    return outputs


def _run_numpy(kernel: CompiledKernel, inputs: list, stream: int,
               launch: Mapping[str, int] | None = None) -> list[np.ndarray]:
    sizes, _ = check_inputs(kernel.host, inputs, launch)
    check_compiled_launch(f"@{kernel.name}", kernel, inputs, sizes)
    driver = get_driver()
    driver.device(0)
    wanted = [t for t in kernel_tensors(kernel.host) if t.role == "in"]
    hosts = {t.source: np.ascontiguousarray(x) for t, x in zip(wanted, inputs)}
    for tensor in _others(kernel):
        hosts[tensor.source] = np.zeros(tensor.dims.evaluate(sizes), tensor.dtype)
    addresses: dict[int, int] = {}
    try:
        for source, array in hosts.items():
            addresses[source] = driver.alloc(array.nbytes)
            if source in {t.source for t in wanted}:
                driver.copy_to_device(addresses[source], array.ctypes.data, array.nbytes)
            else:
                driver.zero(addresses[source], array.nbytes)
        views = {s: TensorView.contiguous(addresses[s], a.shape, a.dtype) for s, a in hosts.items()}
        prepare(kernel, views, sizes, stream, 0, driver)()
        driver.synchronize(stream, kernel.name)
        outputs = [t for t in _others(kernel) if t.role == "out"]
        for tensor in outputs:
            array = hosts[tensor.source]
            driver.copy_to_host(array.ctypes.data, addresses[tensor.source], array.nbytes)
        return [hosts[t.source] for t in outputs]
    finally:
        for address in addresses.values():
            driver.free(address)


# endregion


def launch_on_tensors(kernel, *inputs, zeroed: bool | str = True, into: Mapping[int, object] | None = None,
                      **launch: int) -> list:
    """Launch `kernel` on CUDA tensors `inputs` (on torch's current stream of their device) and return its outputs
    in argument order. Its outputs and scratch buffers are those given in `into` (by Tile IR argument index; the
    caller vouches for their contents, which the kernel may add into) or allocated here: zeroed on the stream
    with `zeroed` True (for a kernel that adds into them or leaves elements unwritten), the scratch buffers only
    with `zeroed=SCRATCH`, else left as allocated (for a kernel that writes every element). `launch`: the
    kernel's launch sizes."""
    prepared, outputs = _on_tensors(kernel, inputs, launch, None, zeroed, into)
    prepared()
    return outputs


SCRATCH = "scratch"
"""`launch_on_tensors(..., zeroed=SCRATCH)`: only the kernel's scratch buffers zeroed (semaphores count from 0)."""


def launch_zeroed(kernel, *inputs, **launch: int) -> list:
    """Launch `kernel` on CUDA tensors `inputs` (on torch's current stream of their device) into outputs and
    scratch buffers allocated zeroed; its outputs in argument order. `launch`: the kernel's launch sizes."""
    return launch_on_tensors(kernel, *inputs, **launch)
