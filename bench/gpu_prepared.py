"""The fidelity table's PTX-executor side, made ahead on a machine without a GPU and carried to the GPU one.

The PTX executor takes minutes for the fidelity cases (bench/gpu_fidelity.py), more than the GPU session's
fidelity stage may spend (the first H200 session's stage recorded nothing in 180 s). So

    python bench/gpu_session.py --prepare            # here, after bench/gpu_wheels.sh

runs every case's executor side here (a process per core) and writes, into `.whl/fidelity/` (carried with the
wheels, git-ignored), one `<case>.npz` per case (each output's bits) and `manifest.json`, rewritten as each
case ends: per case its seed, the SHA-256 of its inputs (`inputs_sha256`: names, types, shapes and bytes) and
of the PTX of its kernels (`ptx_sha256`: `case_configs`' kernels as Tessera compiles them now), its seconds,
its outputs' types and shapes, or the executor's error.

On the GPU the fidelity stage runs the GPU side only and compares it with these outputs (`executor_outputs`).
A case whose PTX or inputs hash differs from the GPU machine's is stale and refused by name (its row keeps
the GPU against float64); so is a missing one. Nothing here needs a GPU.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import gpu_fidelity
import numpy as np

FOLDER = "fidelity"
"""The prepared side's folder inside the wheels folder (`.whl/fidelity/`)."""
MANIFEST = "manifest.json"
HOW = "run `python bench/gpu_session.py --prepare` (no GPU needed) and carry .whl/ again"


def inputs_sha256(arrays: dict) -> str:
    """SHA-256 of a case's inputs: each array's name, type, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{a.dtype.name}\0{a.shape}\0".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def ptx_sha256(case) -> str:
    """SHA-256 of the PTX of the case's kernels (`gpu_fidelity.case_configs`), compiled (or fetched from the
    kernel cache) now."""
    from tessera.runtime.compiler import compile_kernel

    digest = hashlib.sha256()
    for config in gpu_fidelity.case_configs(case, gpu_fidelity.inputs(case)):
        digest.update(f"{config}\0".encode())
        digest.update(compile_kernel(config).ptx.encode())
    return digest.hexdigest()


def bits(a: np.ndarray) -> np.ndarray:
    """`a`'s elements as unsigned integers of their width (bf16 and e4m3 survive .npz so)."""
    return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _dtype(name: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def prepare_one(name: str, folder: str) -> dict:
    """One case's executor side (a process-pool job), its outputs' bits saved to `folder/<name>.npz`; its
    manifest entry."""
    case = gpu_fidelity.case_named(name)
    arrays = gpu_fidelity.inputs(case)
    entry = {"seed": case.seed, "inputs_sha256": inputs_sha256(arrays), "ptx_sha256": ptx_sha256(case)}
    result = gpu_fidelity.executor_side(name)
    if "error" in result:
        return {**entry, "error": result["error"]}
    outputs = {k: np.asarray(v) for k, v in result["outputs"].items()}
    np.savez_compressed(Path(folder) / f"{name}.npz", **{k: bits(v) for k, v in outputs.items()})
    return {**entry, "seconds": round(result["seconds"], 2), "file": f"{name}.npz",
            "outputs": {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in outputs.items()}}


def prepare(writer, folder: Path, names: list[str], processes: int | None = None) -> list[str]:
    """Every case of `names` prepared into `folder` on `processes` processes (default: one per core), each
    written to the manifest (through `writer`, a `gpu_session.StageWriter` of folder/manifest.json) as it
    ends; the names of the cases whose executor failed."""
    from tessera.runtime.compiler import tessera_version

    folder.mkdir(parents=True, exist_ok=True)
    writer.set("made", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    writer.set("tessera", tessera_version())
    writer.set("cases", {})
    start = time.perf_counter()
    processes = max(1, min(len(names), processes or os.cpu_count() or 1))
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pending = {n: pool.apply_async(prepare_one, (n, str(folder))) for n in names}
        while pending:
            done = [n for n, r in pending.items() if r.ready()]
            if not done:
                time.sleep(0.05)
            for name in done:
                writer.data["cases"][name] = pending.pop(name).get()
                writer.set("seconds", round(time.perf_counter() - start, 1))
                entry = writer.data["cases"][name]
                print(f"{name}: {entry['error'] if 'error' in entry else str(entry['seconds']) + ' s'}", flush=True)
    writer.set("bytes", sum(p.stat().st_size for p in folder.glob("*.npz")))
    return [n for n, e in writer.data["cases"].items() if "error" in e]


def load(folder: Path) -> dict | None:
    """The manifest of a prepared folder, None when there is none."""
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def executor_outputs(manifest: dict | None, folder: Path, case, arrays: dict) -> tuple[dict | None, str]:
    """(the case's prepared executor outputs, "fresh") when `folder` holds them for these inputs and this
    PTX; else (None, why not), naming the case and what differs."""
    entry = (manifest or {}).get("cases", {}).get(case.name)
    if entry is None:
        return None, f"{case.name}: no prepared executor side in {folder}: {HOW}"
    if "error" in entry:
        return None, f"{case.name}: the executor failed when prepared: {entry['error']}"
    if entry["inputs_sha256"] != inputs_sha256(arrays):
        return None, f"{case.name}: stale: its inputs differ from those it was prepared with: {HOW}"
    now = ptx_sha256(case)
    if entry["ptx_sha256"] != now:
        return None, (f"{case.name}: stale: prepared from other PTX (sha256 {entry['ptx_sha256'][:12]}, now "
                      f"{now[:12]}): {HOW}")
    with np.load(folder / entry["file"]) as saved:
        outputs = {k: saved[k].view(_dtype(spec["dtype"])).reshape(spec["shape"])
                   for k, spec in entry["outputs"].items()}
    return outputs, "fresh"


def status(folder: Path, cases) -> dict:
    """Which of `cases` `folder` holds fresh (`executor_outputs`; their kernels compiled or found in the
    kernel cache), and why each other one is not usable."""
    manifest = load(folder)
    report = {"folder": str(folder), "made": (manifest or {}).get("made"), "fresh": [], "not_usable": []}
    for case in cases:
        outputs, why = executor_outputs(manifest, folder, case, gpu_fidelity.inputs(case))
        report["fresh" if outputs is not None else "not_usable"].append(case.name if outputs is not None else why)
    if report["not_usable"]:
        report["message"] = f"{len(report['not_usable'])} of {len(cases)} cases not usable: {report['not_usable'][0]}"
    return report
