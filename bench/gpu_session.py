"""One rehearsed GPU session: install, compile, test, compare the PTX executor with the GPU, benchmark, plot.

On the GPU machine (an H100/H200 without network; PyTorch, Triton, cuda-bindings, NumPy, ml_dtypes and
pytest installed), from the repository root, with `.whl/` carried there:

    python bench/gpu_session.py --out $OUT

(the device tool: that command with carry [".whl"], timeout 570 s; `--stages NAME ...` runs some stages: the
second call, `gpu_plan.second_run`, the stages the first did not finish, self-contained; `--resume EARLIER`, an
earlier call's --out or its session.tgz carried back, keeps its measured benchmark rows and measures the rest).
`.whl/` comes from `bench/gpu_wheels.sh`, run on a machine with network, then `python bench/gpu_session.py
--prepare` (the fidelity table's PTX-executor side into .whl/fidelity/, bench/gpu_prepared.py). On any
machine, without a GPU:

    python bench/gpu_session.py --dry-run --out /tmp/gpu-plan            # the whole plan (a few minutes)
    python bench/gpu_session.py --dry-run --quick --out /tmp/gpu-plan    # one kernel per path (the test suite)

Stages (`gpu_plan.STAGES`, in this order), each its own process with its own budget (`gpu_plan.BUDGETS_S`,
`gpu_plan.SESSION_LIMIT_S` in all):
- install: the wheels of `.whl/` and this checkout (editable) with pip, offline; skipped when xDSL 0.74 and
  this checkout's Tessera import already. The running Python must match the wheels' (.whl/MANIFEST.json);
- compile: every kernel of the session (Tile IR -> PTX -> cubin with the wheel's ptxas) in a process pool,
  into the kernel cache (`--cache`, else Tessera's default), from which the later stages load them;
- fidelity: the same PTX on the GPU and in the PTX executor on the same inputs (bench/gpu_fidelity.py): the
  GPU side here, the executor's prepared ahead (`--prepare`; a stale or missing case is named);
- probes: wgmma and ex2.approx on inputs that pin Hopper's arithmetic, raw bits (bench/gpu_probes.py);
- backward_parts: the backward at 512, 1k, 2k taken apart (bench/backward_parts.py);
- tests: tests/test_runtime.py and every test marked `gpu`, each under its own limit, each recorded as it
  ends (bench/gpu_tests.py);
- gemm, backward, forward: FlashAttention-3's grid against PyTorch SDPA's backends, Triton's kernel and
  FlexAttention where present (compiled for every row or refused: `harness.compile_strictly`); GEMM 4k and 8k
  against cuBLAS (bench/attention.py's harness);
- variants: attention-gym's variants, Tessera against FlexAttention on the same inputs and functions
  (bench/gpu_variants.py);
- fp8: the FP8 forward (e4m3) against cuDNN's FP8 through SDPA where present and FA3's published FP8 figures,
  its outputs checked by `tessera.reference.check_attention_fp8`;
- report: pictures/attention_forward.svg, attention_fp8.svg, attention_backward.svg, gemm.svg (hand-written
  SVG, FA3 Figure 5's layout: no matplotlib there), attention_variants.svg and benchmark.csv (a stage this
  call did not run read from --resume).
A stage past its budget, or with an item (a fidelity case, a benchmark row) past its item limit
(`gpu_plan.ITEM_LIMITS_S`), is killed with its process group; what it wrote so far is kept. After every
stage `session.json` in --out holds the plan, every stage's status, seconds and results; `stages/<name>.json`
each stage's own (those of `TOP_LEVEL` also copied to --out), `logs/<name>.log` its output, and `session.tgz`
all of it (`ARCHIVE`). The device tool returns 8 files of $OUT, the top level's first: --out's top level holds
session.json, session.tgz, benchmark.csv and the `TOP_LEVEL` copies (`RETURNED_FILES`, checked). Exit status 0
when every stage finished; otherwise the second call's command is printed (`gpu_plan.second_run`).

--dry-run runs the same stages without a GPU: it reports the wheels (or how to make them), compiles every
kernel, collects the GPU tests, builds every input (the fidelity cases' for real, with their PTX-executor
side prepared into --out as --prepare does, and says which cases of .whl/fidelity/ are usable; the
benchmark's as zero-stride arrays through Tessera's host-side launch checks) and checks that the budgets fit
the session, the compile fits its budget on 16 cores and --out's top level the device tool's 8 files; it
writes plan.json.

Importing this file imports nothing beyond the standard library: the install stage runs before Tessera is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import gpu_plan  # noqa: E402 - bench/ is not a package (gpu_plan imports nothing of Tessera at import)
from gpu_results import StageWriter, write_json  # noqa: E402

CARRY_LIMIT_BYTES = 64 << 20
"""What the device machine's `carry` takes, and so the most .whl/ may hold."""
GPU_IMAGE_HAS = ("numpy", "ml-dtypes", "pytest", "torch", "triton", "cuda-bindings")
"""What the GPU machine's image installs: left out of the wheels."""
MANIFEST = "MANIFEST.json"
KILL_GRACE_S = 3
TOP_LEVEL = ("tests", "fidelity", "backward_parts")
"""Stages whose results are also copied to --out as stage-<name>.json after they end (session.json and
session.tgz hold them too): the device tool returns a few top-level files first."""
ARCHIVE = "session.tgz"
"""Everything the session wrote under --out (stages/, logs/, pictures/, fidelity-outputs/, session.json, ...)
in one gzipped tar at --out's top level, rewritten (through a temporary file and a rename) after every stage,
so that a call cut short still returns all it had."""
RETURNED_FILES = 8
"""The files the device tool brings back from $OUT (16 MiB each, 64 MiB together; the 2026-11-30 session:
the top level's first, in name order, none of stages/ or logs/ once 8 were taken). --out's top level holds
session.json, ARCHIVE, benchmark.csv and the `TOP_LEVEL` copies, within this (`top_level_files`)."""


# region Wheels


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def wheel_requirements() -> list[str]:
    """What bench/gpu_wheels.sh downloads: pyproject.toml's dependencies the image lacks, its build
    requirement (pip builds the editable install offline), the CUDA 12 ptxas and pytest-xdist of the
    `test` extra."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [r for r in project["project"]["dependencies"] if _name(r) not in GPU_IMAGE_HAS]
    wanted += project["build-system"]["requires"]
    wanted += [r for r in project["project"]["optional-dependencies"]["test"]
               if _name(r) in ("nvidia-cuda-nvcc-cu12", "pytest-xdist")]
    return wanted


def write_wheel_manifest(folder: Path, python: str, requirements: list[str]) -> int:
    files = {p.name: p.stat().st_size for p in sorted(folder.glob("*.whl"))}
    total = sum(files.values())
    manifest = {"python": python, "platform": "manylinux x86_64", "requirements": requirements, "files": files,
                "total_bytes": total, "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(files)} wheels, {total / 2**20:.1f} MiB in {folder} (limit {CARRY_LIMIT_BYTES >> 20} MiB)")
    if total > CARRY_LIMIT_BYTES:
        print(f"too large: the device machine carries at most {CARRY_LIMIT_BYTES >> 20} MiB", file=sys.stderr)
        return 1
    return 0


def _wheel_tag_fits(filename: str, version: tuple[int, int]) -> bool:
    """Whether a wheel's Python tag (name-version-PYTHON-abi-platform.whl) takes this CPython."""
    python_tags = filename[:-4].split("-")[-3].split(".")
    return any(t in ("py3", f"py{version[0]}{version[1]}", f"cp{version[0]}{version[1]}") for t in python_tags)


def wheel_report(folder: Path) -> dict:
    """What .whl/ holds and whether this Python can install it; `found` False says how to make it."""
    how = "run bench/gpu_wheels.sh (on a machine with network) to download them"
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        return {"found": False, "folder": str(folder), "message": f"no wheels in {folder}: {how}"}
    manifest = json.loads(manifest_path.read_text())
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    missing = [name for name, size in manifest["files"].items()
               if not (folder / name).exists() or (folder / name).stat().st_size != size]
    unfit = [name for name in manifest["files"] if not _wheel_tag_fits(name, sys.version_info[:2])]
    folder_bytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())  # the wheels and fidelity/
    report = {"found": not missing, "folder": str(folder), "python": manifest["python"], "running_python": running,
              "files": manifest["files"], "total_bytes": manifest["total_bytes"], "folder_bytes": folder_bytes,
              "fits_carry": folder_bytes <= CARRY_LIMIT_BYTES, "requirements": manifest["requirements"]}
    if missing:
        report["message"] = f"{len(missing)} wheels of {MANIFEST} are missing or changed ({missing[0]}): {how}"
    elif manifest["python"] != running:
        report["message"] = (f"the wheels were downloaded for Python {manifest['python']}, this is Python {running}"
                             + (f"; {', '.join(unfit)} cannot be installed here" if unfit else
                                " (all are pure-Python or py3 wheels, which install here; dependency markers may "
                                "differ)") + f": bench/gpu_wheels.sh --python {running} downloads them for this one")
    report["installable"] = not missing and not unfit
    return report


def _installed() -> bool:
    """Whether xDSL 0.74 and this checkout's Tessera already import (a new interpreter, as the stages are)."""
    probe = ("import importlib.metadata as m, xdsl, threadpoolctl, tessera; "
             "assert m.version('xdsl') == '0.74.0'; "
             f"assert tessera.__file__.startswith({str(ROOT)!r})")
    return subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True).returncode == 0


def install_stage(writer, folder: Path, dry: bool) -> None:
    report = wheel_report(folder)
    writer.set("wheels", report)
    if "message" in report:
        print(report["message"])
    if dry:
        return
    if _installed():
        writer.set("installed", "already: xDSL 0.74 and this checkout's Tessera import")
        return
    if not report.get("installable"):
        raise SystemExit(report["message"])
    requirements = [r for r in report["requirements"] if _name(r) != "setuptools"]  # setuptools builds only
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(folder),
               "--disable-pip-version-check", *requirements, "-e", str(ROOT)]
    attempts = []
    for extra in ([], ["--user"], ["--break-system-packages"]):  # a read-only or an externally managed Python
        result = subprocess.run(command + extra, capture_output=True, text=True)
        attempts.append({"options": extra, "exit": result.returncode, "tail": result.stderr[-1500:]})
        if result.returncode == 0:
            break
    writer.set("pip", attempts)
    if not _installed():
        raise SystemExit("pip could not install the wheels and this checkout: see pip in stages/install.json")
    writer.set("installed", "now")


# endregion

# region Stages: processes with budgets


def run_stage(name: str, command: list[str], budget_s: float, out: Path, env: dict,
              item_limit_s: float | None = None) -> dict:
    """Run `command` (a stage writing out/stages/<name>.json) in its own process group for at most `budget_s`,
    and, with `item_limit_s`, until an item it says is `running` (`StageWriter.running`) has run that long;
    past either, the group is sent SIGTERM, then SIGKILL. Returns its status, seconds, budget and results."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    results = out / "stages" / f"{name}.json"
    results.unlink(missing_ok=True)  # an earlier run's, which this stage replaces
    start = time.monotonic()
    with open(out / "logs" / f"{name}.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                   start_new_session=True)
        while True:
            try:
                code = process.wait(timeout=POLL_S)
                status = "ok" if code == 0 else f"failed (exit {code})"
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - start >= budget_s:
                status = f"cut at its budget of {budget_s:.0f} s"
            elif item_limit_s is not None and (item := _running(results)) \
                    and time.time() - item["since"] > item_limit_s:
                status = f"cut: {json.dumps(item['item'])} ran past the item limit of {item_limit_s:.0f} s"
            else:
                continue
            _kill_group(process)
            break
    record = {"status": status, "seconds": round(time.monotonic() - start, 2), "budget_s": budget_s,
              "log": f"logs/{name}.log"}
    if results.exists():
        try:
            record["results"] = json.loads(results.read_text())
        except json.JSONDecodeError as error:  # a write cut between two renames cannot happen; say so if it did
            record["results"] = {"unreadable": str(error)}
    if status != "ok":
        record["tail"] = (out / "logs" / f"{name}.log").read_text(errors="replace")[-2000:]
    return record


POLL_S = 0.25


def _running(results: Path) -> dict | None:
    """The item a stage says is running (its results' `running`), None when none or unreadable."""
    try:
        return json.loads(results.read_text()).get("running")
    except (OSError, json.JSONDecodeError):
        return None


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def run_session(stages: list[tuple], out: Path, env: dict, limit_s: float, header: dict,
                top_level: tuple = ()) -> dict:
    """Run (name, command, budget[, item limit]) stages in order, each cut at min(its budget, what is left of
    `limit_s`) or when one of its items runs past its item limit; session.json is rewritten after each."""
    session = {**header, "stages": {}}
    start = time.monotonic()
    for name, command, budget, *item_limit in stages:
        left = limit_s - (time.monotonic() - start)
        if left < 1:
            session["stages"][name] = {"status": "not run: the session's time is spent", "budget_s": budget}
        else:
            print(f"[{time.monotonic() - start:6.1f} s] {name} (budget {min(budget, left):.0f} s)", flush=True)
            session["stages"][name] = run_stage(name, command, min(budget, left), out, env, *item_limit)
            print(f"           {name}: {session['stages'][name]['status']}", flush=True)
            if name in top_level and (out / "stages" / f"{name}.json").exists():
                shutil.copyfile(out / "stages" / f"{name}.json", out / f"stage-{name}.json")
        session["seconds"] = round(time.monotonic() - start, 2)
        write_json(out / "session.json", session)
        write_archive(out)
    return session


def write_archive(out: Path) -> Path:
    """out/ARCHIVE: every file under `out` but the archive itself and temporary files, written whole through
    a temporary file and a rename (a call cut during the write keeps the previous archive)."""
    temporary = out / f"{ARCHIVE}.tmp"
    with tarfile.open(temporary, "w:gz") as archive:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.name != ARCHIVE and not path.name.endswith(".tmp"):
                archive.add(path, arcname=str(path.relative_to(out)))
    temporary.replace(out / ARCHIVE)
    return out / ARCHIVE


def top_level_files(out: Path) -> list[str]:
    """The files at --out's top level: what the device tool returns first (`RETURNED_FILES` at most)."""
    return sorted(p.name for p in out.iterdir() if p.is_file())


def unpacked(resume: Path) -> Path:
    """`--resume`'s folder: `resume` itself, or, for an earlier call's ARCHIVE carried back, a temporary folder it
    is unpacked into."""
    if not resume.is_file():
        return resume
    folder = Path(tempfile.mkdtemp(prefix="gpu-session-resume-"))
    with tarfile.open(resume) as archive:
        archive.extractall(folder, filter="data")
    return folder


# endregion

# region The plan and the command line


def budget_checks(session: dict | None = None, out: Path | None = None) -> list[dict]:
    """The plan's budget checks: the stages' budgets sum to at most the session's, which fits the device time
    with the machine's start, each benchmark stage's grid
    fits its budget at a pessimistic speed (`gpu_plan.stage_estimate_s`), (after a dry run's compile stage)
    the estimated compile time on the GPU machine fits the compile budget, and (given `out`) --out's top level
    holds at most the `RETURNED_FILES` the device tool returns."""
    total = sum(gpu_plan.BUDGETS_S[s] for s in gpu_plan.FIRST_RUN)
    checks = [{"check": "stage budgets sum to at most the session limit", "value_s": total,
               "limit_s": gpu_plan.SESSION_LIMIT_S, "ok": total <= gpu_plan.SESSION_LIMIT_S}]
    device = gpu_plan.SESSION_LIMIT_S + gpu_plan.MACHINE_START_S + 2 * KILL_GRACE_S * len(gpu_plan.FIRST_RUN)
    checks.append({"check": "the session, the machine's start and every stage's kill fit the device time",
                   "value_s": device, "limit_s": gpu_plan.DEVICE_S, "ok": device <= gpu_plan.DEVICE_S})
    for name in gpu_plan.BENCHMARKS:
        estimate = round(gpu_plan.stage_estimate_s(name), 1)
        checks.append({"check": f"{name}: the grid at a pessimistic speed fits its budget", "value_s": estimate,
                       "limit_s": gpu_plan.BUDGETS_S[name], "ok": estimate <= gpu_plan.BUDGETS_S[name]})
    import gpu_variants

    estimate = round(gpu_variants.estimate_s(gpu_plan.WARMUP, gpu_plan.REPEATS, gpu_plan.SLOW_TFLOPS,
                                             gpu_plan.ROW_OVERHEAD_S), 1)
    checks.append({"check": "variants: the rows at a pessimistic speed and FlexAttention's compiles fit its budget",
                   "value_s": estimate, "limit_s": gpu_plan.BUDGETS_S["variants"],
                   "ok": estimate <= gpu_plan.BUDGETS_S["variants"]})
    compiled = ((session or {}).get("stages", {}).get("compile", {}).get("results") or {})
    if "estimate_on_gpu_machine_s" in compiled:
        estimate = compiled["estimate_on_gpu_machine_s"]
        checks.append({"check": f"compile of every kernel on {gpu_plan.GPU_MACHINE_CORES} cores fits its budget",
                       "value_s": estimate, "limit_s": gpu_plan.BUDGETS_S["compile"],
                       "ok": estimate <= gpu_plan.BUDGETS_S["compile"]})
    if out is not None:
        files = top_level_files(out)
        checks.append({"check": f"--out's top level holds at most the {RETURNED_FILES} files the device tool returns "
                                f"({', '.join(files)})", "value_s": len(files), "limit_s": RETURNED_FILES,
                       "ok": len(files) <= RETURNED_FILES})
    return checks


def stage_command(name: str, args) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--out", str(args.out),
               "--wheels", str(args.wheels)]
    return command + (["--dry-run"] if args.dry_run else []) + (["--quick"] if args.quick else []) + \
        (["--resume", str(args.resume)] if args.resume else [])


def run_one_stage(args) -> int:
    writer = StageWriter(args.out / "stages" / f"{args.stage}.json")
    if args.stage == "install":
        install_stage(writer, args.wheels, args.dry_run)
        return 0
    import gpu_stages

    gpu_stages.run(args.stage, writer, args.out, args.dry_run, args.quick, args.wheels / "fidelity", args.resume)
    return 0


def prepare_fidelity(folder: Path) -> int:
    """`--prepare`: the fidelity table's PTX-executor side, every case, into `folder` (bench/gpu_prepared.py)."""
    import gpu_fidelity
    import gpu_prepared

    target = folder / gpu_prepared.FOLDER
    failed = gpu_prepared.prepare(StageWriter(target / gpu_prepared.MANIFEST), target,
                                  [c.name for c in gpu_fidelity.cases()])
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())  # what the device tool carries
    print(f"{target / gpu_prepared.MANIFEST}: {len(gpu_fidelity.cases()) - len(failed)} cases prepared; {folder} "
          f"holds {size / 2**20:.1f} MiB (carry limit {CARRY_LIMIT_BYTES >> 20} MiB)")
    if failed:
        print(f"the executor failed on {', '.join(failed)} (their errors are in the manifest)", file=sys.stderr)
    return 1 if failed or size > CARRY_LIMIT_BYTES else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for session.json, plan.json, pictures, logs")
    parser.add_argument("--dry-run", action="store_true", help="everything that needs no GPU (see the docstring)")
    parser.add_argument("--quick", action="store_true", help="with --dry-run: one kernel per builder and path")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the wheels folder (default .whl/)")
    parser.add_argument("--cache", type=Path, help="the kernel cache (TESSERA_CACHE_DIR; default Tessera's)")
    parser.add_argument("--prepare", action="store_true",
                        help="run the fidelity table's PTX-executor side here into WHEELS/fidelity/ (no GPU needed)")
    parser.add_argument("--resume", type=Path, help="an earlier session's --out, or its session.tgz carried back: "
                        "its measured benchmark rows are kept and not measured again")
    parser.add_argument("--stages", nargs="+", choices=gpu_plan.STAGES, help="run only these stages")
    parser.add_argument("--stage", choices=gpu_plan.STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--wheel-requirements", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-wheel-manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--python", default="3.12", help=argparse.SUPPRESS)
    parser.add_argument("requirements", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.wheel_requirements:
        print("\n".join(wheel_requirements()))
        return 0
    if args.write_wheel_manifest:
        return write_wheel_manifest(args.write_wheel_manifest, args.python, args.requirements)
    if args.prepare:
        return prepare_fidelity(args.wheels.resolve())
    if args.out is None:
        parser.error("--out FOLDER is required")
    if args.quick and not args.dry_run:
        parser.error("--quick goes with --dry-run (the GPU session always runs the whole plan)")
    args.out, args.wheels = args.out.resolve(), args.wheels.resolve()  # the stages run from the repository root
    args.resume = unpacked(args.resume.resolve()) if args.resume else None
    if args.stage:
        return run_one_stage(args)

    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if args.cache is not None:
        env["TESSERA_CACHE_DIR"] = str(args.cache.resolve())
    # Without --stages: the first call's stages; the dry run rehearses every stage.
    names = [s for s in gpu_plan.STAGES if s in (args.stages or ()) or (not args.stages and
                                                                        (args.dry_run or s in gpu_plan.FIRST_RUN))]
    header = {"dry_run": args.dry_run, "quick": args.quick, "python": sys.version.split()[0],
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "limit_s": gpu_plan.SESSION_LIMIT_S,
              "budgets_s": gpu_plan.BUDGETS_S}
    stages = [(name, stage_command(name, args), gpu_plan.BUDGETS_S[name], gpu_plan.ITEM_LIMITS_S.get(name))
              for name in names]
    # A dry run on a small machine is not held to the GPU machine's budgets; its own limit is generous.
    limit = gpu_plan.SESSION_LIMIT_S * (4 if args.dry_run else 1)
    if args.dry_run:
        stages = [(n, c, b * 4, None) for n, c, b, _ in stages]
    session = run_session(stages, args.out, env, limit, header, TOP_LEVEL)
    ok = all(s["status"] == "ok" for s in session["stages"].values())
    wheels = ((session["stages"].get("install") or {}).get("results") or {}).get("wheels") or {}
    if wheels.get("message"):  # no wheels, or wheels for another Python: said where it is seen
        print(f"wheels: {wheels['message']}")
    prepared = ((session["stages"].get("fidelity") or {}).get("results") or {}).get("prepared") or {}
    if prepared.get("message"):  # the dry run's view of .whl/fidelity/: missing or stale cases
        print(f"fidelity: {prepared['message']}")
    if args.dry_run:
        checks = budget_checks(session, args.out)
        plan = {**header, "command": "python bench/gpu_session.py --out $OUT (with .whl/ carried)",
                "stages": {n: {"budget_s": gpu_plan.BUDGETS_S[n], "status": session["stages"][n]["status"],
                               **{k: v for k, v in (session["stages"][n].get("results") or {}).items()
                                  if k not in ("records",)}} for n in names},
                "benchmark_rows": {n: len((session["stages"].get(n, {}).get("results") or {}).get("records", []))
                                   for n in (*gpu_plan.BENCHMARKS, "variants")},
                "budget_checks": checks}
        write_json(args.out / "plan.json", plan)
        ok = ok and all(c["ok"] for c in checks)
        for check in checks:
            unit = "" if check["check"].startswith("--out's top level") else " s"
            print(f"{'ok ' if check['ok'] else 'NOT'} {check['check']}: {check['value_s']}{unit} <= "
                  f"{check['limit_s']}{unit}")
    else:
        files = top_level_files(args.out)
        if len(files) > RETURNED_FILES:  # the device tool would leave some out
            print(f"--out's top level holds {len(files)} files, more than the {RETURNED_FILES} the device tool "
                  f"returns: {', '.join(files)}")
            ok = False
        if (command := gpu_plan.second_run(session)) is not None:
            print(f"second call (the stages that did not finish): {command}")
    print(f"{'dry run' if args.dry_run else 'session'} {'finished' if ok else 'had problems'}: {args.out / 'session.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
