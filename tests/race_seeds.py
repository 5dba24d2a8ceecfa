"""One-edit synchronisation bugs seeded into the PTX of a warp-specialized kernel (a TMA producer warpgroup,
consumer warpgroups, full/empty mbarrier rings), for the race detector's matrix (tests/test_ptx_race_matrix.py,
bench/races.py).

`FLASH_BUGS` holds 33 bugs of 17 kinds for Tessera's warp-specialized flash attention: deleted waits, flipped
parities, wrong expect_tx bytes, missing commits, wait_groups, fences and barriers, slots released early or
never, wrong barrier counts. The kernel's consumer loop runs its first trip too (overlap-softmax's fold: the
previous trip's P.V wgmmas and V release under a branch the first trip takes past them); the bugs the peeled first
trip carried are seeded into the loop's first trip, and the edits benign on every later trip are applied to those
trips only (`first_trip`, `guarded`, `move_guarded`, `early_after_the_first_trip`). Each is `(kind, name, edit)`; `edit(lines)` changes the PTX lines in place and
raises `LookupError` when the kernel has no such instruction (so the catalogue can be tried on any kernel of
that shape: `seed(text, edit)`). Nothing here runs the kernel.
"""

from __future__ import annotations

import re


def _find(lines, predicate, start=0, stop=None) -> int:
    for i in range(start, len(lines) if stop is None else stop):
        if predicate(lines[i].strip()):
            return i
    raise LookupError("no such instruction")


def _all(lines, predicate, start=0, stop=None) -> list[int]:
    return [i for i in range(start, len(lines) if stop is None else stop) if predicate(lines[i].strip())]


def _producer(lines) -> tuple[int, int]:
    """The producer branch: from its setmaxnreg.dec to the consumers' setmaxnreg.inc."""
    return _find(lines, lambda s: s.startswith("setmaxnreg.dec")), _find(lines, lambda s: s.startswith("setmaxnreg.inc"))


def _consumer(lines) -> tuple[int, int]:
    return _find(lines, lambda s: s.startswith("setmaxnreg.inc")), len(lines)


def _loop(lines, start: int, stop: int, waits: int) -> tuple[int, int]:
    """The first loop (label to back branch) in [start, stop) with at least `waits` mbarrier waits."""
    for i in range(start, stop):
        label = re.match(r"(\$L__for\d+):", lines[i].strip())
        if label:
            end = _find(lines, lambda s, name=label.group(1): s.endswith(f"bra {name};"), i)
            if len(_all(lines, lambda s: s.startswith("mbarrier.try_wait"), i, end)) >= waits:
                return i, end
    raise LookupError("no such loop")


def _producer_loop(lines):
    return _loop(lines, *_producer(lines), 2)


def _consumer_loop(lines):
    return _loop(lines, *_consumer(lines), 2)


def _waits(lines, region) -> list[int]:
    return _all(lines, lambda s: s.startswith("mbarrier.try_wait"), *region)


def _releases(lines, region) -> list[int]:
    return _all(lines, lambda s: s.startswith("mbarrier.arrive.shared") and "expect_tx" not in s, *region)


# region edits
def delete_wait(pick):
    """Delete an mbarrier wait loop (the try_wait and its branch back)."""
    def edit(lines):
        i = pick(lines)
        branch = _find(lines, lambda s: re.match(r"@!%p\d+ bra \$L__while", s) is not None, i, i + 4)
        del lines[branch]
        del lines[i]
    return edit


def flip_parity(pick):
    """Wait for the other parity: `xor` the parity register with 1 before the try_wait."""
    def edit(lines):
        i = pick(lines)
        parity = re.search(r"\], (%r\d+);", lines[i])
        if parity is None:
            raise LookupError("the wait's parity is not a register")
        lines[i] = lines[i].replace(f"], {parity.group(1)};", "], %seeded_parity;")
        lines.insert(i, f"    xor.b32 %seeded_parity, {parity.group(1)}, 1;")
        lines.insert(_find(lines, lambda s: s.startswith(".reg")), "    .reg .b32 %seeded_parity;")
    return edit


def delete_line(pick):
    def edit(lines):
        del lines[pick(lines)]
    return edit


def replace_in(pick, old: str, new: str):
    def edit(lines):
        i = pick(lines)
        if old not in lines[i]:
            raise LookupError(f"{old!r} is not in line {i + 1}")
        lines[i] = lines[i].replace(old, new, 1)
    return edit


def scale_expect_tx(pick, factor: float):
    def edit(lines):
        i = pick(lines)
        match = re.search(r", (\d+);$", lines[i])
        lines[i] = lines[i][:match.start()] + f", {int(int(match.group(1)) * factor)};"
    return edit


def set_count(pick, count: int | None = None):
    """The count of the instruction `pick` chooses (an mbarrier.init's arrival count, a bar.sync's thread count,
    added when it has none) set to `count`, or one more than it is (None)."""
    def edit(lines):
        i = pick(lines)
        match = re.search(r",\s*(\d+);$", lines[i])
        if match is None:
            if count is None or not re.search(r"\bbar(rier)?\.sync\s+\d+;$", lines[i]):
                raise LookupError(f"line {i + 1} has no count")
            lines[i] = lines[i][:-1] + f", {count};"
            return
        lines[i] = lines[i][:match.start()] + f", {int(match.group(1)) + 1 if count is None else count};"
    return edit


def move_line(pick, before):
    """Move the line `pick` chooses to just before the line `before(lines, picked)` chooses."""
    def edit(lines):
        i = pick(lines)
        j = before(lines, i)
        line = lines.pop(i)
        lines.insert(j if j < i else j - 1, line)
    return edit


def retarget_release(pick, other):
    """The release at `pick` arrives on the barrier the release at `other` names."""
    def edit(lines):
        i, j = pick(lines), other(lines)
        target = re.search(r"\[(%r\d+)\]", lines[j]).group(1)
        lines[i] = re.sub(r"\[%r\d+\]", f"[{target}]", lines[i])
    return edit


def _writes(line: str, register: str) -> bool:
    """Whether the instruction `line` writes `register` (its first operand)."""
    return re.match(rf"(@!?%p\d+ )?[\w.:]+ {re.escape(register)}[,;]", line.strip()) is not None


def predicate_valid(lines, register: str, start: int, stop: int) -> None:
    """LookupError unless no line in [start, stop) writes `register` (so it holds the same value throughout)."""
    if any(_writes(lines[i], register) for i in range(min(start, stop), max(start, stop))):
        raise LookupError(f"{register} is written between lines {start + 1} and {stop + 1}")


def guarded(pick, when: bool):
    """The line `pick` chooses runs on the consumer loop's first trip only (`when`) or on every trip but the first
    (not `when`): predicated with the loop's first-trip test (`first_trip`)."""
    def edit(lines):
        i = pick(lines)
        test, branch = first_trip(lines)
        predicate_valid(lines, test, i, branch)
        lines[i] = f"    @{'' if when else '!'}{test} {lines[i].strip()}"
    return edit


def move_guarded(pick, before):
    """`move_line`, the line keeping the branch it ran under: a line of a block that only trips after the first run
    (the folded loop's V release) moves predicated with the negated first-trip test, so that the edit moves it
    and adds no release on the first trip."""
    def edit(lines):
        i = pick(lines)
        j = before(lines, i)
        skipped = _skipped_on_the_first_trip(lines, i)
        if skipped is not None and _skipped_on_the_first_trip(lines, j) is not None:
            skipped = None  # into a block the first trip skips too
        line = lines.pop(i)
        if skipped is not None:
            test, branch = skipped
            predicate_valid(lines, test, j if j < i else j - 1, branch if branch < i else branch - 1)
            line = f"    @!{test} {line.strip()}"
        lines.insert(j if j < i else j - 1, line)
    return edit


def early_after_the_first_trip(pick, before):
    """The line `pick` chooses moves before `before` on every trip but the first (which keeps it in place): the
    first-trip test computed again at the top of the consumer loop (%seeded_first), the line predicated with it
    where it was and its copy with its negation at the new place."""
    def edit(lines):
        i = pick(lines)
        j = before(lines, i)
        test, _ = first_trip(lines)
        top, _ = _consumer_loop(lines)
        setp = next(k for k in range(i, top, -1) if _writes(lines[k], test))
        for register in re.findall(r"%r\d+", lines[setp].split(",", 1)[1]):
            predicate_valid(lines, register, top + 1, setp)
        line, test_line = lines[i].strip(), lines[setp].strip().replace(f" {test},", " %seeded_first,", 1)
        lines[i] = f"    @%seeded_first {line}"
        lines.insert(j, f"    @!%seeded_first {line}")
        lines.insert(top + 1, f"    {test_line}")
        lines.insert(_find(lines, lambda s: s.startswith(".reg")), "    .reg .pred %seeded_first;")
    return edit


# endregion
# region picks in the warp-specialized flash kernel
def _nth(seq, n):
    try:
        return seq[n]
    except IndexError:
        raise LookupError("not enough instructions") from None


def consumer_wait(n):
    """The n-th mbarrier wait of the consumer loop (0: K full, 1: V full)."""
    return lambda lines: _nth(_waits(lines, _consumer_loop(lines)), n)


def producer_wait(n):
    return lambda lines: _nth(_waits(lines, _producer_loop(lines)), n)


def first_consumer_wait(n):
    """The n-th mbarrier wait of the consumers (0: Q, 1: the first K)."""
    return lambda lines: _nth(_waits(lines, _consumer(lines)), n)


def expect_tx(region, n):
    return lambda lines: _nth(_all(lines, lambda s: s.startswith("mbarrier.arrive.expect_tx"), *region(lines)), n)


def in_loop(loop, prefix: str, n: int):
    return lambda lines: _nth(_all(lines, lambda s: s.startswith(prefix), *loop(lines)), n)


def release(n):
    """The n-th slot release of the consumer loop (0: K, 1: V; the V release is skipped on the first trip, which
    has no trip before it: overlap-softmax's fold)."""
    return lambda lines: _nth(_releases(lines, _consumer_loop(lines)), n)


def else_guard(lines, i):
    """(predicate, branch line) of the `@!%pN bra $L__elseK` whose block line i lies in (after any mbarrier wait loop
    of the block); None outside such a block."""
    for k in range(i - 1, -1, -1):
        label = re.match(r"(\$L__else\d+):$", lines[k].strip())
        if label:
            branch = _find(lines, lambda s: re.match(rf"@!%p\d+ bra {re.escape(label.group(1))};$", s) is not None)
            return re.match(r"@!(%p\d+)", lines[branch].strip()).group(1), branch
        if re.match(r"\$L__(?!while)\w+:$", lines[k].strip()):
            return None
    return None


def first_trip(lines) -> tuple[str, int]:
    """(the predicate register, its branch line) of the consumer loop's first-trip test: the branch that skips the
    V release on the first trip (overlap-softmax's fold runs the previous trip's P.V update and release under it)."""
    guard = else_guard(lines, release(1)(lines))
    if guard is None:
        raise LookupError("the consumer loop runs its V release on every trip (no first-trip branch)")
    return guard


def _skipped_on_the_first_trip(lines, i):
    """(predicate, branch line) when line i lies in a block the consumer loop's first trip branches over; else None."""
    guard = else_guard(lines, i)
    return guard if guard is not None and guard[0] == first_trip(lines)[0] else None


def issuing(prefix: str, n: int):
    """The n-th `prefix` (wgmma.fence or wgmma.commit_group) of the consumer loop that opens or closes a group of
    more than one wgmma.mma_async (0: S = Q K^T, 1: O += P V; mask-by-mma's bias, one wgmma on the masked trips,
    is not counted)."""
    def pick(lines):
        start, stop = _consumer_loop(lines)
        found = []
        for i in _all(lines, lambda s: s.startswith(prefix), start, stop):
            step = 1 if prefix == "wgmma.fence" else -1
            k, mmas = i + step, 0
            while start <= k < stop and not re.match(r"wgmma\.(fence|commit_group|wait_group)", lines[k].strip()):
                mmas += lines[k].strip().startswith("wgmma.mma_async")
                k += step
            if mmas > 1:
                found.append(i)
        return _nth(found, n)
    return pick


def _on_the_first_trip_only(lines, i) -> bool:
    """Whether line i lies in the block only the consumer loop's first trip runs (the update branch's skipping
    path: `@!%pN bra $L__elseK` with %pN the first-trip test, then the block, then `bra $L__if_endM`)."""
    test = first_trip(lines)[0]
    for k in range(i - 1, -1, -1):
        s = lines[k].strip()
        if re.match(rf"@!{re.escape(test)} bra \$L__else\d+;$", s):
            return True
        if re.match(r"\$L__\w+:$", s) or re.match(r"(@!?%p\d+ )?bra ", s):
            return False
    return False


def wait_group(n: int):
    """The n-th wgmma.wait_group of the consumer loop that every trip runs (0: wait_group 1, 1: wait_group 0; not
    the first trip's own wait_group 0 in the branch past the P.V update)."""
    def pick(lines):
        start, stop = _consumer_loop(lines)
        waits = [i for i in _all(lines, lambda s: s.startswith("wgmma.wait_group"), start, stop)
                 if not _on_the_first_trip_only(lines, i)]
        return _nth(waits, n)
    return pick


def _update_branch(lines, i) -> int:
    """The consumer loop's branch past the previous trip's P.V update on the first trip (the first `@!%pN bra` on
    the first-trip test): up to it no wgmma.wait_group of the trip has run."""
    start, stop = _consumer_loop(lines)
    test = first_trip(lines)[0]
    return _find(lines, lambda s: re.match(rf"@!{re.escape(test)} bra \$L__else\d+;$", s) is not None, start, stop)


def _before_the_loop(lines, i) -> int:
    """The consumer loop's label (a line moved before it runs once, before the first trip)."""
    return _consumer_loop(lines)[0]


def first(prefix: str, region=None):
    return lambda lines: _find(lines, lambda s: s.startswith(prefix), *(region(lines) if region else (0,)))


def init_of(n):
    return lambda lines: _nth(_all(lines, lambda s: s.startswith("mbarrier.init")), n)


def _init_with_count(count: str):
    return lambda lines: _find(lines, lambda s: s.startswith("mbarrier.init") and s.endswith(f", {count};"))


def _after(pick):
    """Just after the wait loop `pick` chooses (after its branch back)."""
    def where(lines, i):
        wait = pick(lines)
        return _find(lines, lambda s: re.match(r"@!%p\d+ bra \$L__while", s) is not None, wait, wait + 6) + 1
    return where


def _init_sync(lines) -> int:
    """The bar.sync that follows the mbarrier inits."""
    return _find(lines, lambda s: s.startswith("bar.sync") or s.startswith("barrier.sync"),
                 _all(lines, lambda s: s.startswith("mbarrier.init"))[-1])


def _consumers_sync(lines) -> int:
    return _find(lines, lambda s: s.startswith("bar.sync") or s.startswith("barrier.sync"), *_consumer(lines))


def _empty_count(lines) -> str:
    """The arrival count of the empty barriers (the consumers' threads): the largest init count."""
    counts = [int(re.search(r", (\d+);", lines[i]).group(1)) for i in _all(lines, lambda s: s.startswith("mbarrier.init"))]
    return str(max(counts))


def _halve_empty(lines):
    count = _empty_count(lines)
    i = _init_with_count(count)(lines)
    lines[i] = lines[i].replace(f", {count};", f", {int(count) // 2};")


def _init_sync_consumers_only(lines):
    i = _init_sync(lines)
    count = re.search(r", (\d+);", lines[i])
    if count is None or int(count.group(1)) <= 128:
        raise LookupError("the bar.sync after the inits has no thread count to lower")
    lines[i] = lines[i].replace(f", {count.group(1)};", f", {int(count.group(1)) - 128};")


def _no_flip(lines):
    start, stop = _producer(lines)
    flips = [j for j in range(start, stop) if re.match(r"xor.b32 (%r\d+), (%r\d+), 1;", lines[j].strip())]
    if not flips:
        raise LookupError("the producer flips no parity")
    for j in flips:
        flip = re.match(r"xor.b32 (%r\d+), (%r\d+), 1;", lines[j].strip())
        lines[j] = f"    mov.b32 {flip.group(1)}, {flip.group(2)};"


FLASH_BUGS = [
    ("wait deleted", "the consumers' Q wait", delete_wait(first_consumer_wait(0))),
    ("wait deleted", "the consumers' first K full wait", delete_wait(first_consumer_wait(1))),
    ("wait deleted", "the K full wait in the consumer loop", delete_wait(consumer_wait(0))),
    ("wait deleted", "the V full wait in the consumer loop", delete_wait(consumer_wait(1))),
    ("wait deleted", "the K empty wait in the producer loop", delete_wait(producer_wait(0))),
    ("parity flipped", "the K full wait in the consumer loop", flip_parity(consumer_wait(0))),
    ("parity flipped", "the V full wait in the consumer loop", flip_parity(consumer_wait(1))),
    ("parity flipped", "the K empty wait in the producer loop", flip_parity(producer_wait(0))),
    ("expect_tx too small", "the producer's first K", scale_expect_tx(expect_tx(_producer, 0), 0.5)),
    ("expect_tx too small", "the consumers' Q", scale_expect_tx(expect_tx(_consumer, 0), 0.5)),
    ("expect_tx too large", "the producer's first V", scale_expect_tx(expect_tx(_producer, 1), 1.5)),
    ("expect_tx too large", "the consumers' Q", scale_expect_tx(expect_tx(_consumer, 0), 1.5)),
    ("expect_tx deleted", "the producer's first K", delete_line(expect_tx(_producer, 0))),
    ("expect_tx deleted", "the consumers' Q", delete_line(expect_tx(_consumer, 0))),
    ("wgmma.commit_group deleted", "S = Q K^T in the loop", delete_line(in_loop(_consumer_loop, "wgmma.commit_group", 0))),
    ("wgmma.commit_group deleted", "O += P V in the loop", delete_line(issuing("wgmma.commit_group", 1))),
    ("wgmma.wait_group deleted", "wait_group 1 in the loop", delete_line(wait_group(0))),
    ("wgmma.wait_group deleted", "wait_group 0 in the loop", delete_line(wait_group(1))),
    ("wgmma.wait_group weakened", "wait_group 0 -> 1 in the loop",
     replace_in(wait_group(1), "aligned 0;", "aligned 1;")),
    ("wgmma.fence deleted", "the consumers' first", delete_line(first("wgmma.fence", _consumer))),
    ("wgmma.fence deleted", "before S = Q K^T in the loop, kept before the loop for the warpgroup's first",
     move_line(issuing("wgmma.fence", 0), _before_the_loop)),
    ("empty parity not flipped", "the producer waits on the empty barriers with the full barriers' parity",
     _no_flip),
    ("bar.sync deleted", "after mbarrier.init", delete_line(_init_sync)),
    ("slot released before the read", "V, right after its full wait",
     move_guarded(release(1), _after(consumer_wait(1)))),
    ("slot released before the read", "K in the loop, right after its full wait (on the first trip no V release "
     "orders the refill)", move_line(release(0), _after(consumer_wait(0)))),
    ("slot released before its wait_group", "V, before wait_group 0",
     move_guarded(release(1), lambda lines, i: wait_group(1)(lines))),
    ("slot released before its wait_group", "K in the loop, before the branch past the P.V update (on the first "
     "trip before any wait_group covers S, and no V release orders the refill)", move_line(release(0), _update_branch)),
    ("slot release deleted", "the first K's (the loop's first trip)", guarded(release(0), when=False)),
    ("slot release deleted", "V in the loop", delete_line(release(1))),
    ("mbarrier count wrong", "empty barrier counts half the consumers", _halve_empty),
    ("mbarrier count wrong", "a full barrier counts two arrivals", replace_in(_init_with_count("1"), ", 1;", ", 2;")),
    ("bar.sync count wrong", "the bar.sync after the inits counts only the consumers", _init_sync_consumers_only),
    ("release on the wrong barrier", "K's release arrives on V's empty barrier", retarget_release(release(0), release(1))),
]
"""(kind, name, edit): 33 one-edit bugs of 17 kinds in the warp-specialized flash kernel."""

FLASH_BENIGN = [
    ("fence.mbarrier_init deleted", "in a kernel without clusters: the bar.sync after the inits orders them before "
     "every use in the CTA (Triton's TMA kernels ship without the fence); the fence releases inits to the cluster's "
     "other CTAs (tests/test_ptx_race_matrix.py seeds it into a cluster kernel)",
     delete_line(first("fence.mbarrier_init"))),
    ("wgmma.fence deleted", "before O += P V in the loop: the fence before S = Q K^T in the same iteration already "
     "orders every earlier access of P and O (nothing touches them in between)",
     delete_line(issuing("wgmma.fence", 1))),
    ("bar.sync deleted", "the consumers' bar.sync after the Q wait: every consumer waits on Q's mbarrier itself and "
     "the barrier is used once", delete_line(_consumers_sync)),
    ("slot released before the read", "K in the loop after its first trip, right after its full wait: the producer "
     "refills that slot only after its wait for the V slot the consumers release at the end of the same iteration "
     "(the first trip, which has no V release, keeps its K release in place)",
     early_after_the_first_trip(release(0), _after(consumer_wait(0)))),
    ("slot released before its wait_group", "K in the loop, before wait_group 1: ordered by the same V release (the "
     "first trip's branch past the P.V update retired S before it)", move_line(release(0), lambda lines, i:
                                                                               wait_group(0)(lines))),
]
"""One-edit changes the memory model accepts in this kernel: the detector must stay silent on them."""

# endregion


# region the same kinds in any kernel: the first instruction of each kind
def _first_wait(lines) -> int:
    return _find(lines, lambda s: re.match(r"(@%p\d+ )?mbarrier\.(try|test)_wait", s) is not None)


def _after_any(prefix: str):
    """The first bar.sync after the first instruction starting with `prefix`."""
    def pick(lines):
        start = _find(lines, lambda s: s.split(" ", 1)[-1].startswith(prefix) or s.startswith(prefix))
        return _find(lines, lambda s: re.match(r"(@!?%p\d+ )?bar(rier)?\.sync", s) is not None, start)
    return pick


def _first_any(prefix: str):
    return lambda lines: _find(lines, lambda s: s.startswith(prefix) or s.split(" ", 1)[-1].startswith(prefix))


GENERIC_BUGS = [
    ("wait deleted", "the first mbarrier wait", delete_wait(_first_wait)),
    ("parity flipped", "the first mbarrier wait", flip_parity(_first_wait)),
    ("expect_tx too small", "the first", scale_expect_tx(_first_any("mbarrier.arrive.expect_tx"), 0.5)),
    ("expect_tx deleted", "the first", delete_line(_first_any("mbarrier.arrive.expect_tx"))),
    ("wgmma.commit_group deleted", "the first", delete_line(_first_any("wgmma.commit_group"))),
    ("wgmma.wait_group deleted", "the first", delete_line(_first_any("wgmma.wait_group"))),
    ("wgmma.fence deleted", "the first", delete_line(_first_any("wgmma.fence"))),
    ("fence.proxy.async deleted", "the first", delete_line(_first_any("fence.proxy.async"))),
    ("cp.async.wait_group deleted", "the first", delete_line(_first_any("cp.async.wait_group"))),
    ("bar.sync deleted", "after mbarrier.init", delete_line(_after_any("mbarrier.init"))),
    ("bar.sync count wrong", "the first bar.sync counts one warp", set_count(_first_any("bar.sync"), 32)),
    ("mbarrier count wrong", "the first mbarrier.init counts one more arrival", set_count(_first_any("mbarrier.init"))),
    ("bar.sync deleted", "after the first cp.async.wait_group", delete_line(_after_any("cp.async.wait_group"))),
    ("bar.sync deleted", "after the first fence.proxy.async", delete_line(_after_any("fence.proxy.async"))),
]
"""(kind, name, edit): the kinds that apply to any kernel, each seeded at its first instruction; an edit raises
LookupError on a kernel without that instruction."""

# endregion


def seed(text: str, edit) -> str:
    """`text` with one edit applied (LookupError when the kernel lacks the instruction)."""
    lines = text.splitlines()
    edit(lines)
    return "\n".join(lines) + "\n"


__all__ = ["FLASH_BENIGN", "FLASH_BUGS", "GENERIC_BUGS", "seed"]
