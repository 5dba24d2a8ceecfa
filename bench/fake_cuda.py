"""A CUDA driver and CUDA tensors on the CPU, for running Tessera's real host path without a GPU: the launch
overhead benchmark (`launch_overhead.py`) and the runtime's tests (tests/test_runtime.py) use them.

- `FakeCudaApi`: the driver functions `tessera.runtime.driver.Driver` calls, with cuda-bindings' calling
  convention (a CUresult first). Every call is recorded in `calls` (name, arguments); device memory is host
  memory; `cuTensorMapEncodeTiled` records its arguments and returns 128 bytes holding the record's index;
  `cuLaunchKernelEx` records the launch (`launches`) and runs nothing (a subclass may run the PTX: the tests'
  `FakeCuda` does, in the PTX executor). `fail` maps a call name to the CUresult it returns instead.
- `FakeCudaTorch`: PyTorch as the runtime sees it (`tessera.runtime.launch._torch`), with CUDA tensors that
  are CPU tensors claiming device cuda:0 (`cuda_like`): `data_ptr()`, strides and dtypes are the real ones, so
  everything the runtime reads from a tensor is what it reads on a GPU. `zeros`/`empty` on a CUDA device make
  such tensors, in the memory of dead ones of the same size where there is some, as PyTorch's caching allocator
  does (`zeros` is counted in `zero_fills`, the fill kernels a GPU would run), `cuda.current_stream`
  is a fixed stream and `cuda.Event` reads the host clock (`FakeEvent`). Torch operations on a pretend CUDA
  tensor give plain CPU tensors: wrap a result with `cuda_like` to pass it on. Nothing here imports torch: it
  takes the caller's.
"""

from __future__ import annotations

import ctypes
import enum
import math
import time
import weakref
from types import SimpleNamespace

import numpy as np

from tessera.sm90.facts import TENSOR_MAP_BYTES


class FakeResult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701


DESCRIPTIONS = {
    FakeResult.CUDA_ERROR_INVALID_VALUE: "invalid argument",
    FakeResult.CUDA_ERROR_NO_DEVICE: "no CUDA-capable device is detected",
    FakeResult.CUDA_ERROR_NO_BINARY_FOR_GPU: "no kernel image is available for execution on the device",
    FakeResult.CUDA_ERROR_INVALID_PTX: "a PTX JIT compilation failed",
    FakeResult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: "too many resources requested for launch",
}
ELF_MAGIC = b"\x7fELF"
FAKE_STREAM = 0x5EED
"""The raw CUstream handle `FakeCudaTorch.cuda.current_stream()` gives."""


class FakeCudaApi:
    """The driver functions the runtime calls, on the CPU (see the module docstring)."""

    CUresult = FakeResult
    CUdevice_attribute = SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="smem")
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic_smem")
    CUlaunchAttributeID = SimpleNamespace(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION=4)
    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = int
    CUtensorMapFloatOOBfill = cuuint64_t = cuuint32_t = CUstream = CUdeviceptr = int
    CUlaunchConfig = SimpleNamespace

    class CUlaunchAttribute:
        def __init__(self):
            self.value = SimpleNamespace(clusterDim=SimpleNamespace())

    def __init__(self, capability=(9, 0), fail=None, refuse_cubin=False):
        self.attributes = {"major": capability[0], "minor": capability[1], "sms": 132, "smem": 232448}
        self.fail = dict(fail or {})
        self.refuse_cubin = refuse_cubin
        self.calls: list[tuple[str, tuple]] = []
        self.memory: dict[int, np.ndarray] = {}
        self.maps: list[tuple] = []
        self._encoded: list = []
        self.launches: list[SimpleNamespace] = []
        self.function_attributes: dict[tuple, int] = {}

    def names(self) -> list[str]:
        """The names of the calls made so far, in order."""
        return [name for name, _ in self.calls]

    def _result(self, name, args, *values):
        self.calls.append((name, args))
        if name in self.fail:
            return (self.fail[name],)
        return (FakeResult.CUDA_SUCCESS, *values)

    def cuGetErrorName(self, code):
        return (FakeResult.CUDA_SUCCESS, FakeResult(code).name.encode())

    def cuGetErrorString(self, code):
        return (FakeResult.CUDA_SUCCESS, DESCRIPTIONS.get(FakeResult(code), "").encode())

    def cuInit(self, flags):
        return self._result("cuInit", (flags,))

    def cuDeviceGetCount(self):
        return self._result("cuDeviceGetCount", (), 1)

    def cuDeviceGet(self, ordinal):
        return self._result("cuDeviceGet", (ordinal,), ordinal)

    def cuDeviceGetName(self, length, device):
        return self._result("cuDeviceGetName", (length, device), b"Fake H100\0\0\0")

    def cuDeviceGetAttribute(self, attribute, device):
        return self._result("cuDeviceGetAttribute", (attribute, device), self.attributes[attribute])

    def cuDevicePrimaryCtxRetain(self, device):
        return self._result("cuDevicePrimaryCtxRetain", (device,), f"context{device}")

    def cuCtxSetCurrent(self, context):
        return self._result("cuCtxSetCurrent", (context,))

    def cuModuleLoadData(self, address):
        is_cubin = ctypes.string_at(address, 4) == ELF_MAGIC
        if is_cubin and self.refuse_cubin:
            self.calls.append(("cuModuleLoadData", ("cubin",)))
            return (FakeResult.CUDA_ERROR_NO_BINARY_FOR_GPU,)
        return self._result("cuModuleLoadData", ("cubin" if is_cubin else "ptx",), "module")

    def cuModuleGetFunction(self, module, name):
        return self._result("cuModuleGetFunction", (module, name), name.decode())

    def cuFuncSetAttribute(self, function, attribute, value):
        self.function_attributes[(function, attribute)] = value
        return self._result("cuFuncSetAttribute", (function, attribute, value))

    def cuTensorMapEncodeTiled(self, *args):
        self.maps.append(args)
        encoded = (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))(len(self.maps) - 1)
        self._encoded.append(encoded)  # alive as long as the fake: the runtime may read it after the call
        return self._result("cuTensorMapEncodeTiled", args, SimpleNamespace(getPtr=lambda: ctypes.addressof(encoded)))

    def cuMemAlloc(self, nbytes):
        buffer = np.zeros(nbytes + 256, np.uint8)
        skip = -buffer.ctypes.data % 256  # the driver's allocations are 256-byte aligned
        self.memory[buffer.ctypes.data + skip] = buffer[skip:skip + nbytes]
        return self._result("cuMemAlloc", (nbytes,), buffer.ctypes.data + skip)

    def cuMemFree(self, address):
        self.memory.pop(address)
        return self._result("cuMemFree", (address,))

    def cuMemcpyHtoD(self, device, host, nbytes):
        ctypes.memmove(device, host, nbytes)
        return self._result("cuMemcpyHtoD", (device, host, nbytes))

    def cuMemcpyDtoH(self, host, device, nbytes):
        ctypes.memmove(host, device, nbytes)
        return self._result("cuMemcpyDtoH", (host, device, nbytes))

    def cuMemsetD8(self, device, value, nbytes):
        ctypes.memset(device, value, nbytes)
        return self._result("cuMemsetD8", (device, value, nbytes))

    def cuStreamSynchronize(self, stream):
        return self._result("cuStreamSynchronize", (stream,))

    def cuLaunchKernelEx(self, config, function, parameters, extra):
        result = self._result("cuLaunchKernelEx", (config, function, parameters, extra))
        if result[0] != FakeResult.CUDA_SUCCESS:
            return result
        allowed = self.function_attributes.get((function, "max_dynamic_smem"), 48 * 1024)
        if config.sharedMemBytes > allowed:  # what the driver says when the limit was not raised
            return (FakeResult.CUDA_ERROR_INVALID_VALUE,)
        grid = (config.gridDimX, config.gridDimY, config.gridDimZ)
        block = (config.blockDimX, config.blockDimY, config.blockDimZ)
        self.launches.append(SimpleNamespace(function=function, grid=grid, block=block, smem=config.sharedMemBytes,
                                             attributes=config.numAttrs, stream=config.hStream,
                                             parameters=parameters))
        return self.run(config, function, parameters, grid, block) or result

    def run(self, config, function, parameters, grid, block):
        """What a launch does after it is recorded: nothing here (the tests' fake runs the PTX)."""
        return None


class FakeEvent:
    """`torch.cuda.Event` on the host clock: `record` reads it, `elapsed_time` gives milliseconds."""

    def __init__(self, enable_timing: bool = False):
        self.at = None

    def record(self, stream=None) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, other: FakeEvent) -> float:
        return (other.at - self.at) * 1e3


class FakeCudaTorch:
    """PyTorch as `tessera.runtime.launch` uses it, with CPU tensors standing for CUDA tensors (see the module
    docstring). Attributes other than those below are the real torch's."""

    def __init__(self, torch, fill: bool = True, api: FakeCudaApi | None = None):
        self._torch = torch
        self.api = api
        """Where the memory of the tensors made here is registered as device memory (`FakeCudaApi.memory`), for a
        fake driver that runs its launches (the tests' `FakeCuda`)."""
        self.Tensor = torch.Tensor  # looked up on every `is_torch_tensor`: not through __getattr__
        self.fill = fill
        """Whether `zeros` on the CUDA device writes its zeros (False: left as `empty` leaves them, for timing the
        host, whose cost on a GPU does not grow with the size: the fill is a kernel on the stream), and new memory
        is filled with 0xff bytes (NaN in every float type) as memory nobody zeroed may be."""
        self.zero_fills = 0
        """How many `zeros` on the CUDA device were made (a fill kernel each on a GPU)."""
        self._classes: dict[int, type] = {}
        self._free: dict[tuple[int, int], list] = {}
        self._itemsize: dict = {}
        stream = SimpleNamespace(cuda_stream=FAKE_STREAM)
        self.cuda = SimpleNamespace(current_stream=lambda device=None: stream, current_device=lambda: 0,
                                    synchronize=lambda device=None: None, Event=FakeEvent)

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def cuda_like(self, x, index: int = 0):
        """The CPU tensor `x` (its storage, strides and dtype) as a tensor on cuda:`index`."""
        return x.as_subclass(self._class(index))

    def _class(self, index: int) -> type:
        if index not in self._classes:
            device = self._torch.device("cuda", index)

            class CudaLike(self._torch.Tensor):
                """A CPU tensor that says it is on a CUDA device; torch operations on it give plain tensors (no
                `__torch_function__` dispatch, which would add a Python call to every attribute read)."""

                __torch_function__ = self._torch._C._disabled_torch_function_impl
                is_cuda = property(lambda self: True)
                device = property(lambda self: device)

            self._classes[index] = CudaLike
        return self._classes[index]

    def _cuda_index(self, device) -> int | None:
        """The CUDA device index `device` names, None for another device."""
        if device is None:
            return None
        device = self._torch.device(device)
        return (device.index or 0) if device.type == "cuda" else None

    def zeros(self, *shape, dtype=None, device=None, **options):
        index = self._cuda_index(device)
        if index is None:
            return self._torch.zeros(*shape, dtype=dtype, device=device, **options)
        self.zero_fills += 1
        made = self._cached(shape, dtype, index)
        if self.fill:
            made.zero_()
        return made

    def empty(self, *shape, dtype=None, device=None, **options):
        index = self._cuda_index(device)
        if index is None:
            return self._torch.empty(*shape, dtype=dtype, device=device, **options)
        return self._cached(shape, dtype, index)

    def _cached(self, shape, dtype, index: int):
        """A pretend CUDA tensor of `shape` and `dtype` in memory a dead one of the same bytes left, as PyTorch's
        caching allocator gives it (so a call's outputs get the addresses the last call's freed), else new."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        dtype = dtype or self._torch.get_default_dtype()
        if dtype not in self._itemsize:
            self._itemsize[dtype] = self._torch.empty((), dtype=dtype).element_size()
        nbytes = math.prod(shape) * self._itemsize[dtype]
        free = self._free.setdefault((index, nbytes), [])
        if free:
            block = free.pop()
        else:
            block = self._torch.empty(max(nbytes, 1), dtype=self._torch.uint8)
            if self.fill:
                block.fill_(0xFF)
            if self.api is not None:
                self.api.memory[block.data_ptr()] = block.numpy()
        made = self.cuda_like(block[:nbytes].view(dtype).view(shape), index)
        weakref.finalize(made, free.append, block)
        return made
