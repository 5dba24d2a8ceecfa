"""A thin, lazy wrapper over the CUDA driver API of `cuda-bindings` (`INSTALL_HINT` says how to install it).

Nothing here is imported by `import tessera`, and nothing here imports the bindings until a driver call is
made, so a machine without a GPU, a driver or the bindings can import the runtime and test its host side.

- `Driver.call(name, *args, kernel=...)`: one driver call; a CUresult other than CUDA_SUCCESS raises
  `CudaError` naming the call, the kernel and the error (name, number, the driver's description).
- `Driver.device(ordinal)`: cuInit, the device, its primary context (the one PyTorch uses, so buffers and
  streams are shared), and the properties a launch checks. A missing binding, driver library or device, or
  a device that cannot run sm_90a code, raises `CudaUnavailable` saying which.
- module loading (cubin, else PTX through the driver's JIT), `cuFuncSetAttribute` for the dynamic
  shared-memory limit, `cuTensorMapEncodeTiled`, `cuLaunchKernelEx` with cluster dimensions, memory.

The bindings' layout changed: `from cuda.bindings import driver` (cuda-bindings >= 12.6, cuda-python >= 12.6)
and `from cuda import cuda` before that; both are accepted.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.sm90 import facts

SM90A_CAPABILITY = (9, 0)
"""sm_90a code runs on compute capability 9.0 only (H100, H200, GH200): the `a` features are not forward
compatible [P#ptx-module-directives-target]."""

INSTALL_HINT = "pip install cuda-bindings, or from a Tessera checkout pip install '.[cuda]'"
"""What installs the bindings: `cuda-bindings` from PyPI, which the `cuda` extra of pyproject.toml names (the
distribution tessera-compiler is installed from its source, not from PyPI)."""
DRIVER_REQUIREMENT = ("they call the NVIDIA driver (libcuda.so.1), which pip does not install: cuda-bindings 13.x "
                      "needs driver 580.65.06 or later, 12.x driver 525.60.13 or later (pip install "
                      "'cuda-bindings>=12.8,<13' for an older driver)")
"""The drivers the bindings run on, from the installation pages of cuda-bindings 12.9 and 13 (Linux)."""


class CudaUnavailable(RuntimeError):
    """No GPU runtime here: the bindings, the driver library or a device is missing, or the device cannot
    run sm_90a code. The message says which; tests and benchmarks skip on it."""


class CudaError(RuntimeError):
    """A driver call returned an error. `call` is the driver function, `kernel` the Tessera kernel it was
    made for (or None), `code`/`name`/`description` the CUresult as the driver names and explains it,
    `detail` what Tessera knows about the arguments (a tensor map's fields, a module's origin)."""

    def __init__(self, call: str, code: int, name: str, description: str, kernel: str | None = None,
                 detail: str | None = None):
        self.call, self.code, self.name, self.description = call, code, name, description
        self.kernel, self.detail = kernel, detail
        where = f" for kernel {kernel}" if kernel else ""
        message = f"{call} failed{where}: {name} ({code}): {description}"
        if detail:
            message += f"\n  {detail}"
        super().__init__(message)


def load_bindings():
    """The driver module of cuda-bindings; CudaUnavailable when neither layout is installed."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise CudaUnavailable(f"the CUDA driver bindings are not installed: {INSTALL_HINT}; "
                                  f"{DRIVER_REQUIREMENT}") from None
    return driver


@dataclass(frozen=True)
class Device:
    """A device made current through its primary context, and what launches check against."""

    ordinal: int
    handle: object
    context: object
    name: str
    capability: tuple[int, int]
    multiprocessors: int
    max_dynamic_smem_bytes: int
    """CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: the most dynamic shared memory a kernel can opt in to."""


class Driver:
    """Driver calls with their errors turned into exceptions. `api` is the bindings' driver module (loaded on
    first use); tests pass a fake object with the same functions."""

    def __init__(self, api=None):
        self._api = api
        self._devices: dict[int, Device] = {}
        self.loaded: dict = {}
        """Kernels loaded through this driver, by (cache key, device ordinal) (see `launch.load`)."""

    @property
    def api(self):
        if self._api is None:
            self._api = load_bindings()
        return self._api

    # region Calls and errors

    def call(self, name: str, *args, kernel: str | None = None, detail: str | None = None):
        """Call the driver function `name`; return its outputs (None, one value, or a tuple) or raise CudaError."""
        result = getattr(self.api, name)(*args)
        if not isinstance(result, tuple):
            result = (result,)
        code, values = result[0], result[1:]
        if int(code) != 0:
            raise self.error(name, code, kernel, detail)
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def error(self, call: str, code, kernel: str | None = None, detail: str | None = None) -> CudaError:
        """The CudaError for `code`, named and explained by the driver where it can (cuGetErrorName and
        cuGetErrorString need the driver library), else by the bindings' CUresult enum."""
        number = int(code)
        name = self._describe("cuGetErrorName", code) or getattr(code, "name", None)
        if name is None:
            enum = getattr(self.api, "CUresult", None)
            try:
                name = enum(number).name if enum is not None else None
            except ValueError:
                name = None
        description = self._describe("cuGetErrorString", code) or "no description from the driver"
        return CudaError(call, number, name or "CUDA_ERROR_UNKNOWN_CODE", description, kernel, detail)

    def _describe(self, function: str, code) -> str | None:
        try:
            status, text = getattr(self.api, function)(code)
        except Exception:  # noqa: BLE001 - no driver library, or a binding without this function
            return None
        if int(status) != 0 or not text:
            return None
        return text.decode() if isinstance(text, bytes) else str(text)

    # endregion

    # region Device and context

    def device(self, ordinal: int = 0, current: bool = True) -> Device:
        """Initialise the driver, make the primary context of device `ordinal` current in this thread and
        return it; CudaUnavailable when there is no usable sm_90a device. `current=False`: a device found before
        is returned without a driver call (for asking whether it is usable; a launch makes it current)."""
        known = self._devices.get(ordinal)
        if known is not None:
            if current:
                self.call("cuCtxSetCurrent", known.context)
            return known
        api = self.api
        try:
            self.call("cuInit", 0)
        except CudaError as error:
            raise CudaUnavailable(f"no CUDA device: cuInit returned {error.name} ({error.description})") from None
        except Exception as error:  # noqa: BLE001 - the bindings raise their own errors when libcuda is absent
            raise CudaUnavailable(f"no CUDA driver: {type(error).__name__}: {error} (the bindings are installed; "
                                  f"{DRIVER_REQUIREMENT})") from None
        count = self.call("cuDeviceGetCount")
        if not 0 <= ordinal < count:
            raise CudaUnavailable(f"no CUDA device {ordinal}: the driver sees {count} device(s)")
        handle = self.call("cuDeviceGet", ordinal)
        raw_name = self.call("cuDeviceGetName", 256, handle)
        name = (raw_name.split(b"\0")[0].decode() if isinstance(raw_name, bytes) else str(raw_name)).strip()
        attribute = api.CUdevice_attribute
        capability = (self.call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle),
                      self.call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle))
        if capability != SM90A_CAPABILITY:
            raise CudaUnavailable(f"device {ordinal} ({name}) has compute capability {capability[0]}.{capability[1]}; "
                                  f"Tessera's kernels are sm_90a code, which runs on compute capability 9.0 "
                                  f"(H100, H200) only")
        context = self.call("cuDevicePrimaryCtxRetain", handle)
        self.call("cuCtxSetCurrent", context)
        device = Device(
            ordinal, handle, context, name, capability,
            self.call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle),
            self.call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, handle),
        )
        self._devices[ordinal] = device
        return device

    # endregion

    # region Modules and functions

    def load_function(self, kernel: str, cubin: bytes | None, ptx: str):
        """Load the module (the cubin if there is one, else the PTX through the driver's JIT) and return
        (module, function) for the entry `kernel`. A cubin the driver cannot use (made by a newer ptxas than
        the driver knows, say) falls back to the PTX; if both fail, the error names both."""
        first: CudaError | None = None
        if cubin is not None:
            try:
                module = self._load_image(cubin, kernel, "loading the cubin from ptxas")
            except CudaError as error:
                first = error
            else:
                return module, self.call("cuModuleGetFunction", module, kernel.encode(), kernel=kernel)
        detail = "loading the PTX through the driver's JIT (sm_90a, PTX ISA 8.0)"
        if first is not None:
            detail += f"; the cubin was refused first: {first.name}: {first.description}"
        elif cubin is None:
            detail += ("; no cubin because no ptxas was found (pip install nvidia-cuda-nvcc gives ptxas' own "
                       "messages)")
        module = self._load_image(ptx.encode(), kernel, detail)
        return module, self.call("cuModuleGetFunction", module, kernel.encode(), kernel=kernel)

    def _load_image(self, image: bytes, kernel: str, detail: str):
        # By address, which every version of the bindings takes; the buffer ends in the NUL that PTX
        # text needs (and that a cubin ignores).
        buffer = ctypes.create_string_buffer(image)
        return self.call("cuModuleLoadData", ctypes.addressof(buffer), kernel=kernel, detail=detail)

    def set_dynamic_smem(self, function, kernel: str, nbytes: int, device: Device) -> None:
        """Let `function` launch with `nbytes` of dynamic shared memory (above the 48 KiB default)."""
        if nbytes > device.max_dynamic_smem_bytes:
            raise CudaError("cuFuncSetAttribute", 1, "CUDA_ERROR_INVALID_VALUE",
                            f"the kernel needs {nbytes} bytes of dynamic shared memory, device {device.ordinal} "
                            f"({device.name}) allows {device.max_dynamic_smem_bytes}", kernel)
        attribute = self.api.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.call("cuFuncSetAttribute", function, attribute, nbytes, kernel=kernel,
                  detail=f"MAX_DYNAMIC_SHARED_SIZE_BYTES = {nbytes}")

    # endregion

    # region Tensor maps and launches

    def encode_tensor_map(self, arguments, kernel: str) -> bytes:
        """cuTensorMapEncodeTiled for a `tensor_maps.TensorMapArguments`; the 128 bytes of the map."""
        api = self.api
        u64, u32 = api.cuuint64_t, api.cuuint32_t
        a = arguments
        tensor_map = self.call(
            "cuTensorMapEncodeTiled",
            api.CUtensorMapDataType(int(a.data_type)), a.rank, a.global_address,
            [u64(d) for d in a.global_dims], [u64(s) for s in a.global_strides],
            [u32(b) for b in a.box_dims], [u32(e) for e in a.element_strides],
            api.CUtensorMapInterleave(int(a.interleave)), api.CUtensorMapSwizzle(int(a.swizzle)),
            api.CUtensorMapL2promotion(int(a.l2_promotion)), api.CUtensorMapFloatOOBfill(int(a.oob_fill)),
            kernel=kernel, detail=f"tensor map {a}",
        )
        return ctypes.string_at(tensor_map.getPtr(), facts.TENSOR_MAP_BYTES)

    def launch_config(self, grid: Sequence[int], block: Sequence[int], cluster: Sequence[int], smem_bytes: int,
                      stream: int, explicit_cluster: bool = False):
        """The CUlaunchConfig of `grid` blocks of `block` threads in clusters of `cluster` blocks (the
        attribute is set only for clusters of more than one block, or with `explicit_cluster`, which a
        `.explicitcluster` kernel needs even for (1, 1, 1)) with `smem_bytes` of dynamic shared memory, on
        `stream` (a raw CUstream handle; 0 is the default stream)."""
        api = self.api
        config = api.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = (int(g) for g in grid)
        config.blockDimX, config.blockDimY, config.blockDimZ = (int(b) for b in block)
        config.sharedMemBytes = int(smem_bytes)
        config.hStream = api.CUstream(int(stream))
        if tuple(cluster) != (1, 1, 1) or explicit_cluster:
            attribute = api.CUlaunchAttribute()
            attribute.id = api.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dims = attribute.value.clusterDim
            dims.x, dims.y, dims.z = (int(c) for c in cluster)
            config.attrs = [attribute]
            config.numAttrs = 1
        else:
            config.numAttrs = 0
        return config

    def launch(self, function, kernel: str, config, parameters: int, detail: str | None = None) -> None:
        """cuLaunchKernelEx of `function` with a `launch_config`; `parameters` is the address of the array of
        pointers to each parameter's value."""
        self.call("cuLaunchKernelEx", config, function, parameters, 0, kernel=kernel, detail=detail)

    def synchronize(self, stream: int, kernel: str | None = None) -> None:
        """Wait for `stream`; an error a kernel raised asynchronously surfaces here, named for `kernel`."""
        self.call("cuStreamSynchronize", self.api.CUstream(int(stream)), kernel=kernel,
                  detail="waiting for the launch to finish")

    # endregion

    # region Memory

    def alloc(self, nbytes: int) -> int:
        return int(self.call("cuMemAlloc", max(int(nbytes), 1)))

    def free(self, address: int) -> None:
        self.call("cuMemFree", self.api.CUdeviceptr(address))

    def copy_to_device(self, address: int, host_address: int, nbytes: int) -> None:
        self.call("cuMemcpyHtoD", self.api.CUdeviceptr(address), host_address, nbytes)

    def copy_to_host(self, host_address: int, address: int, nbytes: int) -> None:
        self.call("cuMemcpyDtoH", host_address, self.api.CUdeviceptr(address), nbytes)

    def zero(self, address: int, nbytes: int) -> None:
        self.call("cuMemsetD8", self.api.CUdeviceptr(address), 0, nbytes)

    # endregion


@functools.cache
def get_driver() -> Driver:
    """The process's Driver (one, so devices and contexts are initialised once)."""
    return Driver()


def cuda_unavailable_reason(ordinal: int = 0) -> str | None:
    """None when device `ordinal` can run Tessera's kernels, else why not (for skips and benchmarks)."""
    try:
        get_driver().device(ordinal)
    except (CudaUnavailable, CudaError) as error:
        return str(error)
    return None
