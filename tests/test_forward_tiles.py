"""The head_dim 64 forward tiles the next GPU session times beside the default (`bench/gpu_plan.py`
`FORWARD_TILES`, `forward_config(tile=)`, `forward_tile_rows`; docs/performance.md "Where Tessera trails cuDNN on
the H200"), pinned on the CPU with the very configurations the session compiles:

- "192x128" (192 query rows a CTA: three consumer warpgroups) and "pingpong" (`PINGPONG_PIPELINE`: the consumers
  take turns at the tensor cores) compute the default kernel's output bit for bit at every level: the Tile
  interpreter (192x128; ping-pong is the default's very Tile IR module, only its pipeline differs), the CTA
  simulator and the PTX executor;
- "128x176" (176 keys a trip: other key blocks, so other roundings) is within `check_attention`'s tolerance of
  float64 at every level, and the CTA simulator and the PTX executor give it the same bits;
- every run is race-checked: the PTX executor with its race detector on under each schedule (min-pc, adversarial,
  each CTA delayed, each warp delayed, each warpgroup delayed), the CTA simulator under round-robin and adversarial.
  A hazard, a deadlock or a run past the step budget (`MAX_STEPS`, a few seconds: a hang) fails the test naming
  the tile, the level and the schedule (`_run`; two seeded bugs show it, `SEEDED`);
- every row `forward_tile_rows` plans compiles as the GPU session compiles it (`compile_kernel`: ptxas, and the
  setmaxnreg split checked against ptxas's count at entry: a split past the CTA's registers hung the FP8 forward
  on the H200) and passes the dry run's host checks (`gpu_stages.plan_row`); the PTX the executor runs here is
  byte for byte the PTX the GPU loads. The quick dry run (tests/test_gpu_session.py) compiles none of these rows'
  kernels: it compiles one kernel per builder and launch path and marks the other rows "not in --quick"; the full
  dry run compiles them.

The default suite runs one small shape (seq_q 200, seq_k 300) at Tile level (causal or not, two batches of three
heads) and in the PTX executor (causal: min-pc, and the ping-pong's first consumer warpgroup late), the seeded bugs
and the causal rows' compiles (about 8 s of CPU); `-m slow` runs the whole level x schedule matrix on 300 and 700
keys, causal or not, every row's compile and ptxas's spill count (about 90 s).
"""

from __future__ import annotations

import re
import sys
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import PtxExecutionError
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.ptx.printed import ptx_text
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernels.attention_config import DEFAULT_BLOCK_M
from tessera.kernel_abi import is_target_kernel
from tessera.numerics import BF16
from tessera.regalloc import allocate_registers
from tessera.runtime.cache import KernelCache
from tessera.runtime.compiler import built_module, compile_kernel
from tessera.sm90 import facts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gpu_plan  # noqa: E402 - bench/ is not a package
import gpu_stages  # noqa: E402

TILES = tuple(gpu_plan.FORWARD_TILES)
BITWISE = ("192x128", "pingpong")
"""The tiles that add the same products in the same order as the default (176 keys a trip do not)."""
HEAD_DIM = 64
MAX_STEPS = 50_000
"""The PTX executor's step budget a batch of CTAs: these shapes take 2,000 to 10,000 on any schedule (700 keys
included); an endless loop stops within seconds instead of the default budget's minute."""


def _inputs(seq_q: int, seq_k: int, batch: int = 1, heads: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seq_q * 1000 + seq_k + batch + heads)
    return [rng.standard_normal((batch, heads, n, HEAD_DIM)) for n in (seq_q, seq_k, seq_k)]


@lru_cache(maxsize=None)
def _lowered(tile: str | None, causal: bool):
    """(signature, Target IR kernel, its register allocation, PTX text, host description) of the forward the GPU
    session runs for `tile` (None: the default), lowered through that configuration's own pipeline."""
    config = gpu_plan.forward_config(HEAD_DIM, causal, tile=tile)
    module = built_module(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a lowering warning (a spill, say) is a finding here
        lowered = tessera.compile(module, target="target", pipeline=config.pipeline)
    text, printed = ptx_text(lowered)
    (host,) = describe(printed)
    fn = next(op for op in lowered.walk() if is_target_kernel(op))
    return find_kernel(module), fn, allocate_registers(fn), text, host


def _run(tile: str | None, causal: bool, level: str, inputs, schedule: str | None = None, seed: int | None = None,
         text: str | None = None) -> np.ndarray:
    """O of one run of `tile`'s forward at `level` ("tile", "target" or "ptx"; `schedule` and `seed` as that level's
    runner takes them, `text` a PTX to run instead of the kernel's own). A hazard, a deadlock or a run past
    `MAX_STEPS` fails the test naming the tile, the level and the schedule."""
    config = gpu_plan.forward_config(HEAD_DIM, causal, tile=tile)
    if level == "tile":
        return tessera.launch(built_module(config), *inputs, level="tile")
    sig, fn, allocation, own_text, host = _lowered(tile, causal)
    arrays, sizes = prepare_arguments(sig, inputs)
    where = f"Tessera {tile or 'default'} ({'causal' if causal else 'non-causal'}) at level {level!r}, " \
            f"schedule {schedule or 'default'}{'' if seed is None else f' seed {seed}'}"
    try:
        if level == "target":
            run_target_kernel(fn, arrays, sizes, allocation, schedule=schedule or "round_robin", seed=seed or 0)
        else:
            launch_described(text or own_text, host, arrays, sizes, source=f"<{tile or 'default'}.ptx>",
                             max_steps=MAX_STEPS, schedule=schedule or "min-pc", seed=seed)
    except (PtxExecutionError, KernelHazardError) as error:
        pytest.fail(f"{where}: {type(error).__name__}: {error}")
    (out,) = [a for a, arg in zip(arrays, sig.args) if arg.role == "out"]
    return out


def _check(out, inputs, causal: bool, where: str) -> None:
    q, k, v = (x.astype(BF16) for x in inputs)
    check = reference.check_attention(out, q, k, v, BF16, causal=causal)
    assert check.ok, f"{where}: {check}"


def _against_the_default(tile: str, causal: bool, level: str, inputs, default: np.ndarray, **schedule) -> np.ndarray:
    """`tile`'s O at `level`, checked: bitwise the default's O for the `BITWISE` tiles, within `check_attention`'s
    tolerance of float64 for the others."""
    out = _run(tile, causal, level, inputs, **schedule)
    where = f"Tessera {tile} at {level} {schedule or ''}"
    _check(out, inputs, causal, where)
    if tile in BITWISE:
        assert np.array_equal(out, default), f"{where}: not bitwise the default's output " \
                                             f"({np.count_nonzero(out != default)} elements differ)"
    return out


# region The default suite's slice


def test_ping_pong_is_the_default_tile_ir_with_another_pipeline():
    """So the Tile interpreter has nothing of it to run that the default's run does not."""
    default = gpu_plan.forward_config(HEAD_DIM, True)
    pingpong = gpu_plan.forward_config(HEAD_DIM, True, tile="pingpong")
    assert pingpong.options == default.options and pingpong.pipeline != default.pipeline
    assert "warp-specialize{pingpong=true}" in pingpong.pipeline
    assert dict(gpu_plan.forward_config(HEAD_DIM, True, tile="192x128").options)["block_m"] == 192
    assert dict(gpu_plan.forward_config(HEAD_DIM, True, tile="128x176").options)["block_n"] == 176


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
def test_the_tiles_at_tile_level(causal):
    """Two batches of three heads: the 192-row grid's query blocks (ragged: 200 = 192 + 8) over every head."""
    inputs = _inputs(200, 300, batch=2, heads=3)
    default = _run(None, causal, "tile", inputs)
    _check(default, inputs, causal, "the default at tile")
    for tile in ("192x128", "128x176"):
        _against_the_default(tile, causal, "tile", inputs, default)


def test_the_tiles_in_the_ptx_executor_race_checked():
    inputs = _inputs(200, 300)
    default = _run(None, True, "ptx", inputs)
    _check(default, inputs, True, "the default at ptx")
    for tile in TILES:
        _against_the_default(tile, True, "ptx", inputs, default)
    # The ping-pong's turns with its first consumer warpgroup late (the schedule that exposes a turn barrier
    # counting one warpgroup: tests/test_ptx_delayed_warp.py).
    _against_the_default("pingpong", True, "ptx", inputs, default, schedule="delayed-warpgroup", seed=0)


def _second_turn_counts_one_warpgroup(text: str) -> str:
    lines = text.splitlines()
    turns = [i for i, line in enumerate(lines) if line.strip() == "bar.sync 1, 256;"]
    assert len(turns) == 2, turns
    lines[turns[1]] = lines[turns[1]].replace("256", "128")
    return "\n".join(lines) + "\n"


def _consumers_take_more_registers(text: str) -> str:
    (inc,) = re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);", text)
    return text.replace(f"setmaxnreg.inc.sync.aligned.u32 {inc};", f"setmaxnreg.inc.sync.aligned.u32 {int(inc) + 8};")


SEEDED = [
    ("pingpong", _second_turn_counts_one_warpgroup, dict(schedule="delayed-warpgroup", seed=0),
     r"PtxHazardError: <pingpong\.ptx>:\d+: error: bar\.sync: barrier 1 used with thread counts"),
    ("192x128", _consumers_take_more_registers, {},
     r"PtxDeadlockError: <192x128\.ptx>: error: deadlock: .* wait in setmaxnreg\.inc for registers of the CTA's pool"),
]
"""Bugs seeded into the tiles' PTX, each with the schedule that exposes it and what the failure says: the ping-pong's
second turn barrier counting one warpgroup (silent on min-pc, a barrier misuse with consumer warpgroup 0 late), and
192 rows' consumers taking 8 registers more than the CTA's pool holds for them (the FP8 forward's hang on the H200)."""


@pytest.mark.parametrize("tile, edit, schedule, error", SEEDED, ids=[s[0] for s in SEEDED])
def test_a_variant_that_races_or_hangs_fails_naming_it(tile, edit, schedule, error):
    text = edit(_lowered(tile, True)[3])
    where = f"Tessera {tile} (causal) at level 'ptx', schedule {schedule.get('schedule', 'default')}" + \
        (f" seed {schedule['seed']}" if schedule else "")
    with pytest.raises(pytest.fail.Exception, match=f"(?s)^{re.escape(where)}: {error}"):
        _run(tile, True, "ptx", _inputs(200, 300), text=text, **schedule)


def _tile_rows(causal: bool | None = None) -> list[dict]:
    return [r for r in gpu_plan.forward_tile_rows() if causal is None or r["causal"] == causal]


def _compiles_and_plans(rows, tmp_path) -> None:
    """Each row's kernel compiled as the session compiles it (ptxas and the register split checked), its PTX
    the one the executor runs here, and the row through the dry run's host checks."""
    cache = KernelCache(tmp_path)
    for row in rows:
        (config,) = gpu_plan.row_configs(row)
        assert config == gpu_plan.forward_config(row["head_dim"], row["causal"], tile=row["tile"])
        kernel = compile_kernel(config, cache)
        assert kernel.cubin is not None, f"{row}: ptxas made no cubin"
        assert kernel.ptx == _lowered(row["tile"], row["causal"])[3], f"{row}: the executor runs other PTX"
        block_m = dict(config.options).get("block_m", DEFAULT_BLOCK_M)  # the producer, a consumer per wgmma's rows
        assert kernel.host.block == ((1 + block_m // facts.WGMMA_M) * facts.WARPGROUP_SIZE, 1, 1), row
        record = gpu_stages.plan_row(row, None)
        assert record["host_check"] == "ok", record


def test_the_causal_tile_rows_compile_and_pass_the_host_checks(tmp_path):
    rows = _tile_rows(causal=True)
    assert sorted(r["tile"] for r in rows) == sorted(TILES) and {r["seq"] for r in rows} == {16384}
    _compiles_and_plans(rows, tmp_path)


# endregion
# region The whole matrix (-m slow)

SHAPES = [(200, 300), (200, 700)]
"""Ragged query blocks for both row counts (200 = 128 + 72 = 192 + 8); 300 keys fill each slot of the two-stage
K/V ring at most once at 176 keys a trip, 700 keys refill them at both block widths."""


def _delays(tile: str, causal: bool, inputs) -> list[dict]:
    """The PTX executor's delaying schedules, each CTA of the launch, each warp and each warpgroup of the CTA in
    turn (`seed`), after three adversarial seeds."""
    sig, _, _, _, host = _lowered(tile, causal)
    ctas = int(np.prod(host.grid(prepare_arguments(sig, inputs)[1])))
    threads = host.block[0]
    return [dict(schedule="adversarial", seed=s) for s in range(3)] + \
        [dict(schedule="delayed", seed=s) for s in range(ctas)] + \
        [dict(schedule="delayed-warp", seed=s) for s in range(threads // facts.WARP_SIZE)] + \
        [dict(schedule="delayed-warpgroup", seed=s) for s in range(threads // facts.WARPGROUP_SIZE)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{q}x{k}" for q, k in SHAPES])
@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize("tile", TILES)
def test_every_tile_at_every_level_and_schedule(tile, causal, shape):
    inputs = _inputs(*shape)
    if tile != "pingpong":
        _against_the_default(tile, causal, "tile", inputs, _run(None, causal, "tile", inputs))
    default = _run(None, causal, "ptx", inputs)
    assert np.array_equal(_run(None, causal, "target", inputs), default)  # the two lowered levels agree
    own = _against_the_default(tile, causal, "ptx", inputs, default)
    for schedule in [{}] + [dict(schedule="adversarial", seed=s) for s in range(3)]:
        out = _against_the_default(tile, causal, "target", inputs, default, **schedule)
        assert np.array_equal(out, own), (tile, "target", schedule)
    for schedule in _delays(tile, causal, inputs):
        out = _against_the_default(tile, causal, "ptx", inputs, default, **schedule)
        assert np.array_equal(out, own), (tile, "ptx", schedule)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")  # the test command installs it: without it this fails, never skips
def test_every_tile_row_compiles_without_a_spill_and_passes_the_host_checks(tmp_path):
    rows = _tile_rows()
    assert len(rows) == 3 * len(TILES)
    _compiles_and_plans(rows, tmp_path)
    for tile in TILES:
        for causal in (False, True):
            config = gpu_plan.forward_config(HEAD_DIM, causal, tile=tile)
            result = tessera.compile(built_module(config), target="cubin", pipeline=config.pipeline)
            entry = result.entry()
            assert not result.warnings and not result.log.diagnostics, (tile, causal, result.warnings)
            assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0, (tile, causal)


# endregion
