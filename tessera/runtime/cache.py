"""The on-disk cache of compiled kernels.

An entry is a folder named by its key, the SHA-256 of (kernel configuration, Tessera version, ptxas version)
written as canonical JSON, holding

    manifest.json   the key's components, and the SHA-256 of every other file
    kernel.ptx      the PTX text
    kernel.cubin    ptxas' cubin (absent when no ptxas was found: the driver then JIT-compiles the PTX)
    target.mlir     the register-allocated Target IR, from which the host description is rebuilt
    host.json       the host description (`HostDescription.as_dict()`), to read and to check the rebuilt one

The folder is `$TESSERA_CACHE_DIR`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`. Entries are
written to a temporary folder and renamed into place, so a reader never sees half an entry and two writers
of one key leave one whole entry. An entry whose manifest or files are missing, unreadable or do not match
their hashes is corrupted: `load` removes it and reports a miss, and the kernel is compiled again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

CACHE_DIR_VARIABLE = "TESSERA_CACHE_DIR"
MANIFEST = "manifest.json"
FORMAT = 1
"""Bumped when the entry layout changes; part of every key."""


def cache_directory() -> Path:
    """Where compiled kernels are kept (see the module docstring)."""
    explicit = os.environ.get(CACHE_DIR_VARIABLE)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg).expanduser() / "tessera" if xdg else Path.home() / ".cache" / "tessera"


def cache_key(config: Mapping, tessera_version: str, ptxas_version: str) -> str:
    """The SHA-256 (hex) of the key's components as canonical JSON: equal components give equal keys in any
    process, and a change to any of them gives another key."""
    components = {"format": FORMAT, "config": config, "tessera": tessera_version, "ptxas": ptxas_version}
    text = json.dumps(components, sort_keys=True, separators=(",", ":"), default=_json_value)
    return hashlib.sha256(text.encode()).hexdigest()


def _json_value(value):
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"a kernel configuration value must be JSON data, got {type(value).__name__} {value!r}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class KernelCache:
    """Compiled kernels on disk, by key. `load` and `store` speak in file names and bytes; what the files
    mean is `tessera.runtime.compiler`'s business."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else cache_directory()

    def path(self, key: str) -> Path:
        return self.directory / key

    def load(self, key: str) -> tuple[dict[str, bytes], dict] | None:
        """(files, manifest) of the entry `key`, or None on a miss; a corrupted entry is removed (a miss)."""
        entry = self.path(key)
        if not entry.is_dir():
            return None
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
            files = {name: (entry / name).read_bytes() for name in manifest["files"]}
            intact = manifest.get("key") == key and all(_sha256(files[n]) == h for n, h in manifest["files"].items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            intact = False
        if not intact:
            self.discard(key)
            return None
        return files, manifest

    def store(self, key: str, files: Mapping[str, bytes], components: Mapping) -> Path:
        """Write the entry `key` atomically (temporary folder, then rename); an entry already there (another
        process was faster) is kept. Returns the entry's folder."""
        if MANIFEST in files:
            raise ValueError(f"'{MANIFEST}' is the cache's own file")
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest = {"key": key, "format": FORMAT, **components,
                    "files": {name: _sha256(data) for name, data in files.items()}}
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=self.directory))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=_json_value))
            try:
                os.rename(staging, self.path(key))
            except OSError:
                if not self.path(key).is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return self.path(key)

    def discard(self, key: str) -> None:
        """Remove the entry `key` if it is there."""
        entry = self.path(key)
        if entry.is_dir():
            # Renamed away first, so that no reader sees it half removed.
            doomed = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-discard-", dir=self.directory))
            try:
                os.rename(entry, doomed / "entry")
            except OSError:
                pass
            shutil.rmtree(doomed, ignore_errors=True)
        elif entry.exists():
            entry.unlink(missing_ok=True)

    def clear(self) -> None:
        """Remove every entry."""
        if self.directory.is_dir():
            for entry in self.directory.iterdir():
                if entry.is_dir() and not entry.name.startswith("."):
                    self.discard(entry.name)
