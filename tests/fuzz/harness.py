"""Running fuzzing cases and classifying what happened.

Each case runs in-process in a worker process (forked once, so Tessera is imported once), with its output
captured; the parent kills and replaces a worker that exceeds the per-case time limit. Outcomes:

- "diagnostic": refused with a non-empty message (for MLIR input: one that names a location or an op);
- "accepted": exit 0 (or, for the API, a return value);
- "warned": accepted with a warning on stderr, for a case that must be refused or said (a pass with nothing
  to do);
- findings: "traceback" (a Python traceback printed, or an exception other than a diagnostic escaped),
  "internal error" (the tool said so), "empty message", "no location" (an MLIR diagnostic that names no
  location), "silent acceptance" (a case wrong by construction was accepted without a word), "timeout",
  "miscompile" (an accepted mutant whose levels disagree under --validate: a pass changed its result).

PTX mutants the executor accepts are assembled by ptxas when one is found; disagreements are counted
("ptxas refuses"), not findings: the executor is more lenient than ptxas in places.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import re
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

from .cases import Case

FINDINGS = ("traceback", "internal error", "empty message", "no location", "silent acceptance", "timeout",
            "miscompile")
_LOCATION = re.compile(r"\.mlir:\d+:\d+|:\d+:\d+:|@[\w$.]+|\bop '[\w.]+'|'\w+\.[\w.]+' op\b|\bline \d+"
                       r"|\.mlir: no kernel")
"""What names a place in an MLIR input: file:line:col, a kernel or symbol, an op, a line; or, for what
concerns the whole file (it has no kernel), the file."""
_API_REFUSALS = (TypeError, ValueError)


@dataclass
class Outcome:
    case: Case
    outcome: str
    seconds: float
    message: str = ""
    ptxas_refuses: bool = False

    @property
    def finding(self) -> bool:
        return self.outcome in FINDINGS

    def __str__(self) -> str:
        text = self.message.strip().splitlines()
        first = text[0][:300] if text else ""
        return f"{self.outcome:18} {self.seconds:6.2f}s  {self.case.label()}\n    {first}"


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def findings(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.finding]

    def counts(self) -> Counter:
        return Counter(o.outcome for o in self.outcomes)

    def table(self) -> str:
        counts = self.counts()
        by_kind = Counter((o.case.kind, o.outcome) for o in self.outcomes)
        kinds = sorted({o.case.kind for o in self.outcomes})
        outcomes = sorted(counts, key=lambda k: (k in FINDINGS, k))
        rows = [f"{'outcome':20}" + "".join(f"{k:>8}" for k in kinds) + f"{'total':>8}"]
        for outcome in outcomes:
            rows.append(f"{outcome:20}" + "".join(f"{by_kind[(k, outcome)]:>8}" for k in kinds)
                        + f"{counts[outcome]:>8}")
        ptx_accepted = [o for o in self.outcomes if o.case.kind == "ptx" and o.outcome == "accepted"]
        refused = sum(o.ptxas_refuses for o in ptx_accepted)
        rows.append(f"PTX accepted by the executor and refused by ptxas: {refused} of {len(ptx_accepted)}")
        slowest = max(self.outcomes, key=lambda o: o.seconds, default=None)
        if slowest is not None:
            rows.append(f"slowest case: {slowest.seconds:.2f} s ({slowest.case.label()[:120]})")
        return "\n".join(rows)


# region Running one case (in a worker)


def _run_tool(tool: str, argv: list[str]) -> tuple[int, str, str]:
    from tessera.tools import tessera_opt, tessera_run

    main = tessera_opt.main if tool == "tessera-opt" else tessera_run.main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # an escaped exception: what a user would see as a traceback
            err.write(traceback.format_exc())
            code = -1
    return code or 0, out.getvalue(), err.getvalue()


def _classify_tool(case: Case, code: int, stdout: str, stderr: str) -> tuple[str, str]:
    if "Traceback (most recent call last)" in stderr:
        return "traceback", stderr
    if code == 0:
        if case.must_refuse:
            return ("warned", stderr) if "warning" in stderr.lower() else ("silent acceptance", stderr)
        return "accepted", stderr
    message = stderr.strip()
    if not message and code == 1 and "MISMATCH" in stdout:  # tessera-run --check: a wrong result, on stdout
        return "diagnostic", stdout.strip()
    if "internal error" in message:
        return "internal error", message
    if not message or re.fullmatch(r"[\w./ -]*: (error: )?", message):
        return "empty message", message
    about_the_input = "invalid pass pipeline" not in message  # a bad -p is about the command line
    if case.kind == "mlir" and code != 2 and about_the_input and not _LOCATION.search(message):
        return "no location", message
    return "diagnostic", message


def _ptxas_refuses(path: str) -> bool:
    from tessera import toolchain

    ptxas = toolchain.find_ptxas()
    if ptxas is None:
        return False
    try:
        result = toolchain.compile_ptx(open(path).read(), ptxas=ptxas)
    except Exception:
        return True
    return bool(getattr(result, "returncode", 0))


def run_case(case: Case, workdir: str) -> Outcome:
    """Run one case here and classify it (what a worker does)."""
    start = time.perf_counter()
    if case.kind == "api":
        from .api import api_call

        outcome, message = api_call(*case.api)
        return Outcome(case, outcome, time.perf_counter() - start, message)
    path = os.path.join(workdir, f"case{case.index}{case.suffix}")
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(case.text or "")
    argv = [a.replace("{input}", path) for a in case.argv]
    if case.tool == "tessera-opt":
        argv += ["-o", os.path.join(workdir, "out.txt")]
    code, stdout, stderr = _run_tool(case.tool, argv)
    outcome, message = _classify_tool(case, code, stdout, stderr.replace(path, f"case{case.index}{case.suffix}"))
    result = Outcome(case, outcome, 0.0, message)
    if outcome == "accepted" and case.validate_argv:
        vcode, _, vstderr = _run_tool("tessera-opt", [a.replace("{input}", path) for a in case.validate_argv]
                                   + ["-o", os.path.join(workdir, "out.txt")])
        # A mutant that changed the kernel's meaning disagrees with the reference at the input (pass 0); one
        # that a pass then computes differently is a miscompile.
        if vcode != 0 and "changed the result" in vstderr:
            result.outcome, result.message = "miscompile", vstderr
        elif "Traceback (most recent call last)" in vstderr or "internal error" in vstderr:
            result.outcome, result.message = "internal error", vstderr
    if outcome == "accepted" and case.kind == "ptx":
        result.ptxas_refuses = _ptxas_refuses(path)
    result.seconds = time.perf_counter() - start
    return result


def _worker(connection, workdir: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    while True:
        case = connection.recv()
        if case is None:
            return
        try:
            connection.send(run_case(case, workdir))
        except BaseException:
            connection.send(Outcome(case, "traceback", 0.0, "the harness itself failed:\n" + traceback.format_exc()))


# endregion

# region Running many cases


class _Worker:
    def __init__(self, context, workdir: str):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, workdir), daemon=True)
        self.process.start()
        self.case: Case | None = None
        self.started = 0.0

    def stop(self) -> None:
        self.process.kill()
        self.process.join()


def run_cases(cases: list[Case], workers: int = 2, timeout: float = 30.0, progress=None) -> Summary:
    """Run `cases` on `workers` processes, each case stopped after `timeout` seconds ("timeout")."""
    import tessera.tools.tessera_opt  # noqa: F401  (imported before forking, once for every worker)
    import tessera.tools.tessera_run  # noqa: F401

    context = multiprocessing.get_context("fork")
    summary = Summary()
    pending = list(reversed(cases))
    with tempfile.TemporaryDirectory(prefix="tessera-fuzz-") as workdir:
        pool = [_Worker(context, os.path.join(workdir, str(i))) for i in range(workers)]
        for i in range(workers):
            os.makedirs(os.path.join(workdir, str(i)))
        try:
            while pending or any(w.case is not None for w in pool):
                for i, w in enumerate(pool):
                    if w.case is None and pending:
                        w.case, w.started = pending.pop(), time.perf_counter()
                        w.connection.send(w.case)
                    if w.case is None:
                        continue
                    if w.connection.poll(0.01):
                        summary.outcomes.append(w.connection.recv())
                        w.case = None
                    elif time.perf_counter() - w.started > timeout or not w.process.is_alive():
                        died = "" if w.process.is_alive() else f" (the worker died: exit {w.process.exitcode})"
                        outcome = "timeout" if not died else "traceback"
                        summary.outcomes.append(Outcome(w.case, outcome, time.perf_counter() - w.started,
                                                        f"no answer after {timeout:.0f} s{died}"))
                        w.stop()
                        pool[i] = _Worker(context, os.path.join(workdir, str(i)))
                    else:
                        continue
                    if progress is not None:
                        progress(summary.outcomes[-1])
        finally:
            for w in pool:
                w.connection.send(None) if w.process.is_alive() else None
                w.stop()
    summary.outcomes.sort(key=lambda o: o.case.index)
    return summary


# endregion
