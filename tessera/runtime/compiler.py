"""From a kernel configuration to a compiled kernel (PTX, cubin, host description), through the disk cache.

A `KernelConfig` names a `tessera.kernels` builder, its keyword arguments and the pass pipeline. Compiling
builds the Tile IR kernel, lowers it to register-allocated Target IR, prints the PTX and assembles it with
ptxas when one is found. The host description is `tessera.host.describe` of that Target IR; on a cache hit
it is rebuilt from the stored Target IR the same way (and checked against the stored `host.json`), so the
runtime never states a layout of its own.

The stored Target IR serves the host description only (attributes and shared-buffer alignments): xDSL
0.74 parses some constants of its text back differently (a hex float such as `dense<0xff800000>`, -inf, is
read as an integer; xdslproject/xdsl#3370), so it is not a copy to run or lower further.

The cache key's Tessera version is `__version__` plus a digest of the compiler's sources: an editable
checkout changes without a version bump, and a stale kernel must not outlive the code that made it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from tessera.host import HostDescription
from tessera.passes import DEFAULT_PIPELINE
from tessera.runtime.cache import KernelCache, cache_key

ARCH = "sm_90a"
SOURCE_PACKAGES = ("tessera", "tessera.dialects", "tessera.passes")
"""The packages whose sources make the compiled code; `tessera.runtime` and `tessera.tools` do not."""
NOT_COMPILER = ("runtime", "tools")

PTX_FILE, CUBIN_FILE, TARGET_FILE, HOST_FILE = "kernel.ptx", "kernel.cubin", "target.mlir", "host.json"


@dataclass(frozen=True)
class KernelConfig:
    """What to compile: `builder`, a function of `tessera.kernels` ("flash_attention", "gemm"), with the
    keyword arguments `options` (sorted pairs), through `pipeline` (a `tessera-opt -p` spec ending in
    register-allocated Target IR; default `tessera.passes.DEFAULT_PIPELINE`, as for `tessera.compile`)."""

    builder: str
    options: tuple[tuple[str, object], ...] = ()
    pipeline: str = DEFAULT_PIPELINE

    @classmethod
    def of(cls, builder: str, pipeline: str = DEFAULT_PIPELINE, **options) -> KernelConfig:
        return cls(builder, tuple(sorted(options.items())), pipeline)

    def as_dict(self) -> dict:
        return {"builder": self.builder, "options": dict(self.options), "pipeline": self.pipeline, "arch": ARCH}

    def __str__(self) -> str:
        return f"{self.builder}(" + ", ".join(f"{k}={v!r}" for k, v in self.options) + ")"


def remembered(function):
    """`function` (checked arguments -> a configuration, raising on bad ones) remembered per arguments, so that
    every GPU call of an entry point does not check and build its kernels' configurations again. Arguments are
    told apart by type too (True from 1, 0.5 from numpy's 0.5: each is checked once for itself); a call with an
    argument that cannot be hashed, or one that raises, is not remembered (it raises again)."""
    kept = functools.lru_cache(maxsize=REMEMBERED, typed=True)(function)

    @functools.wraps(function)
    def configuration(*args, **kwargs):
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:
            return function(*args, **kwargs)
        return kept(*args, **kwargs)
    return configuration


REMEMBERED = 256
"""Configurations `remembered` keeps per function (the least recently used is dropped for a new one)."""


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel ready to load: PTX, cubin (None without ptxas), and its host description."""

    config: KernelConfig
    key: str
    ptx: str
    cubin: bytes | None
    host: HostDescription
    target_ir: str = field(repr=False)
    ptxas: str
    from_cache: bool = False
    module: object = field(default=None, repr=False, compare=False)
    """The Tile IR module `compile_module` compiled this from (None for `compile_kernel`'s): its launch checks (a
    kernel built from score_mod / mask_mod: the reads in bounds, the block lists) run at every GPU launch of the
    compiled kernel (`tessera.runtime.variant_launch`). A copy per call: the cache holds one kernel for every
    module of the same text, whose checks (arrays' contents, mask_mods) may differ."""

    @property
    def name(self) -> str:
        return self.host.kernel


@functools.cache
def tessera_version() -> str:
    """`__version__` + '+' + the first 12 hex digits of the SHA-256 of the compiler's Python sources."""
    from tessera.version import __version__

    digest = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                relative = path.relative_to(root)
                if package == "tessera" and relative.parts[0] in NOT_COMPILER:
                    continue
                digest.update(f"{package}/{relative.as_posix()}\0".encode())
                digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"


@functools.cache
def ptxas_version() -> str:
    """`str(ToolVersion)` of the ptxas in use ("ptxas 13.0.88"), or "none"."""
    from tessera.toolchain import find_ptxas, tool_version

    path = find_ptxas()
    return str(tool_version(path)) if path else "none"


def lowering(config: KernelConfig) -> dict:
    """Everything the compiled kernel of `config` depends on but the Tessera and ptxas versions: the
    configuration (builder, options, pipeline, arch) and whether the default pipeline's fallback may take its
    spilling rung (not inside `tessera.lowering.fallback.without_spilling()`, where a kernel that needs it is
    refused instead: a spilling kernel compiled outside must not be found there)."""
    from tessera.lowering.fallback import spilling_allowed

    return {**config.as_dict(), "spilling": spilling_allowed()}


def kernel_key(config: KernelConfig) -> str:
    """The cache key of `config`'s kernel, compiled here: `lowering(config)` and the two versions (worked out
    once per configuration, versions and spilling rule: every GPU call looks its kernels up)."""
    from tessera.lowering.fallback import spilling_allowed

    known = (config, spilling_allowed(), tessera_version(), ptxas_version())
    key = _KEYS.get(known)
    if key is None:
        if len(_KEYS) >= KEYS_KEPT:
            _KEYS.pop(next(iter(_KEYS)))
        key = _KEYS[known] = cache_key(lowering(config), tessera_version(), ptxas_version())
    return key


KEYS_KEPT = 1024
"""Cache keys `kernel_key` keeps (the first kept is dropped for a new one)."""
_KEYS: dict[tuple, str] = {}


_COMPILED: dict[str, CompiledKernel] = {}


def compile_kernel(config: KernelConfig, cache: KernelCache | None = None) -> CompiledKernel:
    """The compiled kernel of `config`: from this process's memory, else the disk cache, else compiled now
    (and stored). Builder errors (an unsupported head_dim, say) are ValueErrors naming the argument."""
    key = kernel_key(config)
    if key in _COMPILED:
        return _COMPILED[key]
    cache = cache if cache is not None else KernelCache()
    kernel = _load(config, key, cache)
    if kernel is None:
        kernel = _compile(config, key)
        files = {PTX_FILE: kernel.ptx.encode(), TARGET_FILE: kernel.target_ir.encode(),
                 HOST_FILE: _host_json(kernel.host).encode()}
        if kernel.cubin is not None:
            files[CUBIN_FILE] = kernel.cubin
        components = {"config": lowering(config), "tessera": tessera_version(), "ptxas": kernel.ptxas}
        cache.store(key, files, components)
    _COMPILED[key] = kernel
    return kernel


_BUILT: OrderedDict[KernelConfig, object] = OrderedDict()
BUILT_KEPT = 32
"""Tile IR modules kept by `built_module`: the last 32 configurations'."""


def built_module(config: KernelConfig):
    """What `config`'s builder gives (`tessera.kernels.<builder>(**options)`: a Tile IR module, or a backward's
    kernels), built once and kept (the last `BUILT_KEPT`), its modules marked kept by the configuration
    (`tessera.lowering.kept.mark_built`): the interpreters lower each once per pipeline and launch variant, as
    the GPU path compiles `config` once (`compile_kernel`). Shared: not to be changed."""
    from tessera import kernels
    from tessera.lowering.kept import mark_built

    try:
        module = _BUILT.get(config)
    except TypeError:  # an option that is no key (a list, say): built anew, and not kept
        return getattr(kernels, config.builder)(**dict(config.options))
    if module is None:
        module = mark_built(getattr(kernels, config.builder)(**dict(config.options)), ("built_module", config))
        _BUILT[config] = module
        while len(_BUILT) > BUILT_KEPT:
            _BUILT.popitem(last=False)
    _BUILT.move_to_end(config)
    return module


MODULE_BUILDER = "<module>"
"""The `KernelConfig.builder` of a kernel given as a module (`compile_module`), not built by `tessera.kernels`."""


def compile_module(module, kernel: str, pipeline: str = DEFAULT_PIPELINE,
                   cache: KernelCache | None = None) -> CompiledKernel:
    """The compiled kernel `kernel` of a Tile IR module (any kernel, a user's as a builder's), through the same
    caches as `compile_kernel`: the key is the SHA-256 of the module's generic text, the kernel's name and the
    pipeline."""
    from tessera import api

    text = api.print_module(module, generic=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    config = KernelConfig.of(MODULE_BUILDER, pipeline, digest=digest, kernel=kernel)
    key = kernel_key(config)
    if key in _COMPILED:
        return dataclasses.replace(_COMPILED[key], module=module)
    _MODULES[key] = (module, kernel)
    try:
        return dataclasses.replace(compile_kernel(config, cache), module=module)
    finally:
        _MODULES.pop(key, None)


_MODULES: dict[str, tuple[object, str]] = {}
"""The module of each `compile_module` call in progress, by key (`_compile` builds nothing for it)."""


def _host_json(host: HostDescription) -> str:
    return json.dumps(host.as_dict(), sort_keys=True)


def _describe_one(module, config: KernelConfig) -> HostDescription:
    from tessera.host import describe

    found = describe(module)
    if len(found) != 1:
        raise ValueError(f"{config}: expected one Target IR kernel, the pipeline gave {len(found)}")
    return found[0]


def _compile(config: KernelConfig, key: str) -> CompiledKernel:
    from tessera import api, kernels
    from tessera.host import describe
    from tessera.passes import apply_pipeline
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers
    from tessera.runtime.register_split import check_register_split
    from tessera.toolchain import compile_ptx, find_ptxas

    if config.builder == MODULE_BUILDER:
        module, kernel = _MODULES[key]
        lowered = module.clone()
        apply_pipeline(lowered, config.pipeline)
        host = next((h for h in describe(lowered) if h.kernel == kernel), None)
        if host is None:
            raise ValueError(f"{config}: the pipeline '{config.pipeline}' gives no Target IR kernel @{kernel}")
    else:
        builder = getattr(kernels, config.builder, None)
        if builder is None or not callable(builder):
            raise ValueError(f"no kernel builder '{config.builder}' in tessera.kernels")
        lowered = builder(**dict(config.options)).clone()
        apply_pipeline(lowered, config.pipeline)
        host = _describe_one(lowered, config)
    ptx = print_ptx(lowered, registers=allocated_registers)
    if f".entry {host.kernel}(" not in ptx:  # the runtime looks the kernel up by this name
        raise ValueError(f"{config}: the PTX has no entry named {host.kernel}")
    assembled = compile_ptx(ptx) if find_ptxas() else None
    if assembled is not None:
        check_register_split(ptx, host.kernel, host.block[0], assembled.entry(host.kernel).registers)
    cubin = assembled.cubin if assembled is not None else None
    return CompiledKernel(config, key, ptx, cubin, host, api.print_module(lowered), ptxas_version())


def _load(config: KernelConfig, key: str, cache: KernelCache) -> CompiledKernel | None:
    """The cached kernel of `key`, or None; an entry that does not rebuild into the host description it
    recorded counts as corrupted and is discarded."""
    from tessera import api

    loaded = cache.load(key)
    if loaded is None:
        return None
    files, manifest = loaded
    try:
        target_ir = files[TARGET_FILE].decode()
        if config.builder == MODULE_BUILDER:
            from tessera.host import describe

            kernel = dict(config.options)["kernel"]
            host = next(h for h in describe(api.parse_module(target_ir)) if h.kernel == kernel)
        else:
            host = _describe_one(api.parse_module(target_ir), config)
        if _host_json(host) != files[HOST_FILE].decode():
            raise ValueError("the rebuilt host description differs from host.json")
        ptx = files[PTX_FILE].decode()
    except Exception:  # noqa: BLE001 - any failure to rebuild means the entry cannot be trusted
        cache.discard(key)
        return None
    return CompiledKernel(config, key, ptx, files.get(CUBIN_FILE), host, target_ir, manifest.get("ptxas", "none"),
                          from_cache=True)


def forget_compiled() -> None:
    """Drop this process's compiled kernels (the disk cache is kept); for tests."""
    _COMPILED.clear()
