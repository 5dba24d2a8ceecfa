"""The `sm90` ops in the CTA simulator: special registers, shared and global memory, TMA, mbarriers, wgmma,
shuffles, named barriers, elect, setmaxnreg and the approximate and packing conversions.

Each implementation takes the per-thread operands (see `registers`), acts for the active threads of the
running strand, and leaves the checks of asynchrony to the units of the CTA (`shared_memory`, `mbarrier`,
`tma`, `wgmma`). Numerics: `ex2_approx` and `rcp_approx` are computed as the correctly rounded f32 of 2^x and
1/x with flush-to-zero (`.ftz`): the hardware's results are within the documented error of these (ex2: 2 ulp,
relative 2^-22 for |x| < 126; rcp: relative 2^-23), so compare with that tolerance. `cvt_pack` rounds to nearest
even (`facts.cvt_rn_pairs`: `cvt_rn_x2` of each pair, element 2i in the low half).
"""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.sm90.global_memory import GlobalMemory
from tessera.interpreters.sm90.register_pool import set_max_registers
from tessera.interpreters.sm90.registers import as_signed64, dtype_of, full, row_mask, unsigned
from tessera.interpreters.sm90.shared_memory import Buffer
from tessera.interpreters.truth import any_set
from tessera.numerics import round_to
from tessera.sm90 import facts

def _columns(op: sm90.LdGlobalOp | sm90.LdGlobalU16Op | sm90.StGlobalOp | sm90.StGlobalB16Op) -> np.ndarray | int:
    """The constant byte offset of each register's address (`sm90.COLUMN_BYTES`), or 0."""
    return 0 if op.column_bytes is None else np.asarray(op.column_bytes.get_values(), np.int64)


def _prop(op, name: str) -> int:
    return getattr(op, name).value.data


def _shared_buffer(op: sm90.SharedBufferOp, threads: int) -> tuple[Buffer, np.ndarray]:
    """`op`'s `Buffer` and its address in each of `threads` threads (read-only), kept on the op for its properties,
    result type and thread count: every CTA of a launch, and later launches, declare the same buffers (some fifty
    in flash attention, whose xDSL accessors and arrays cost about 15 us each)."""
    key = (tuple(op.properties.values()), op.results[0].type, threads)
    cached = op.__dict__.get("_tessera_shared_buffer")
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    buffer = Buffer(op.sym.data, _prop(op, "offset"), _prop(op, "size"), _prop(op, "swizzle"))
    # The dynamic shared memory starts at shared address 0, which is 1024-byte aligned.
    address = full(op.result.type, threads, buffer.offset)
    address.setflags(write=False)
    op.__dict__["_tessera_shared_buffer"] = (key, buffer, address)
    return buffer, address


@register_impls
class Sm90Functions(InterpreterFunctions):
    def __init__(self, cta: CtaState, memory: GlobalMemory):
        super().__init__()
        self.cta = cta
        self.memory = memory
        # the values of special registers and shared buffer addresses, the same at every run of an op in a CTA
        # (read-only arrays, computed at the op's first run)
        self._fixed: dict[Operation, np.ndarray] = {}

    def _threads(self) -> np.ndarray:
        return np.nonzero(self.cta.active)[0]

    def _rows(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The active threads' registers, flattened, and the thread of each."""
        threads = self._threads()
        mine = values[threads]
        return mine.reshape(-1), np.repeat(threads, mine.size // max(len(threads), 1))

    # region special registers and shared buffers
    @impl(sm90.SpecialRegOp)
    def run_special(self, interpreter: Interpreter, op: sm90.SpecialRegOp, args: PythonValues):
        value = self._fixed.get(op)
        if value is None:
            value = self._fixed[op] = self._special(op)
            value.setflags(write=False)
        return (value,)

    def _special(self, op: sm90.SpecialRegOp) -> np.ndarray:
        cta, name = self.cta, op.register.data
        axis = "xyz".index(name[-1]) if name[-2:-1] == "." else 0
        shape = cta.cluster.shape if cta.cluster is not None else (1, 1, 1)
        values = {
            "tid": lambda: cta.tid if axis == 0 else 0,
            "ntid": lambda: cta.threads if axis == 0 else 1,
            "ctaid": lambda: cta.cta_id[axis],
            "nctaid": lambda: cta.grid[axis],
            "laneid": lambda: cta.tid % facts.WARP_SIZE,
            # A CTA launched without a cluster is a cluster of one (see tessera.interpreters.sm90.cluster).
            "cluster_ctarank": lambda: cta.rank,
            "cluster_nctarank": lambda: int(np.prod(shape)),
            "cluster_ctaid": lambda: cta.cta_id[axis] % shape[axis],
            "cluster_nctaid": lambda: shape[axis],
            "clusterid": lambda: cta.cta_id[axis] // shape[axis],
            "nclusterid": lambda: cta.grid[axis] // shape[axis],
        }[name.split(".")[0]]()
        return np.broadcast_to(np.asarray(values, dtype_of(op.result.type)), (cta.threads,)).copy()

    @impl(sm90.SharedBufferOp)
    def run_shared_buffer(self, interpreter: Interpreter, op: sm90.SharedBufferOp, args: PythonValues):
        address = self._fixed.get(op)
        if address is None:
            buffer, address = _shared_buffer(op, self.cta.threads)
            self.cta.smem.add_buffer(op, buffer)
            self._fixed[op] = address
        return (address,)

    # endregion
    # region TMA and mbarriers
    @impl(sm90.TmaLoadOp)
    def run_tma_load(self, interpreter: Interpreter, op: sm90.TmaLoadOp, args: PythonValues):
        tensor_map, *coords, dest, mbarrier = args
        self.cta.tma.load(op, tensor_map, coords, dest, mbarrier, self.memory)
        return ()

    @impl(sm90.MBarrierInitOp)
    def run_mbarrier_init(self, interpreter: Interpreter, op: sm90.MBarrierInitOp, args: PythonValues):
        self.cta.mbarriers.init(op, args[0], _prop(op, "count"))
        return ()

    @impl(sm90.MBarrierArriveExpectTxOp)
    def run_arrive_expect_tx(self, interpreter: Interpreter, op: sm90.MBarrierArriveExpectTxOp, args: PythonValues):
        self.cta.mbarriers.arrive(op, args[0], _prop(op, "bytes"))
        return ()

    @impl(sm90.MBarrierArriveOp)
    def run_arrive(self, interpreter: Interpreter, op: sm90.MBarrierArriveOp, args: PythonValues):
        self.cta.mbarriers.arrive(op, args[0], None)
        return ()

    @impl(sm90.MBarrierTryWaitParityOp)
    def run_try_wait(self, interpreter: Interpreter, op: sm90.MBarrierTryWaitParityOp, args: PythonValues):
        return (self.cta.mbarriers.try_wait_parity(op, args[0], args[1]),)

    @impl(sm90.MBarrierInvalOp)
    def run_inval(self, interpreter: Interpreter, op: sm90.MBarrierInvalOp, args: PythonValues):
        self.cta.mbarriers.inval(op, args[0])
        return ()

    @impl(sm90.FenceMBarrierInitOp)
    def run_fence_mbarrier_init(self, interpreter: Interpreter, op: sm90.FenceMBarrierInitOp, args: PythonValues):
        self.cta.mbarriers.fence_init(self.cta.active)
        return ()

    @impl(sm90.FenceProxyAsyncOp)
    def run_fence_proxy_async(self, interpreter: Interpreter, op: sm90.FenceProxyAsyncOp, args: PythonValues):
        self.cta.smem.fence_proxy_async(self.cta.active)
        return ()

    # endregion
    # region wgmma
    @impl(sm90.WgmmaFenceOp)
    def run_wgmma_fence(self, interpreter: Interpreter, op: sm90.WgmmaFenceOp, args: PythonValues):
        self.cta.wgmma.fence(self.cta.converged_units(op, facts.WARPGROUP_SIZE, "wgmma_fence"))
        return ()

    @impl(sm90.WgmmaCommitGroupOp)
    def run_wgmma_commit(self, interpreter: Interpreter, op: sm90.WgmmaCommitGroupOp, args: PythonValues):
        self.cta.wgmma.commit(op)
        return ()

    @impl(sm90.WgmmaWaitGroupOp)
    def run_wgmma_wait(self, interpreter: Interpreter, op: sm90.WgmmaWaitGroupOp, args: PythonValues):
        self.cta.wgmma.wait(op, _prop(op, "pending"))
        return ()

    @impl(sm90.MakeDescriptorOp)
    def run_make_descriptor(self, interpreter: Interpreter, op: sm90.MakeDescriptorOp, args: PythonValues):
        (address,) = args
        lbo, sbo, swizzle = _prop(op, "lbo"), _prop(op, "sbo"), _prop(op, "swizzle")
        result = np.zeros(self.cta.threads, np.int64)
        threads = self._threads()
        for value in np.unique(address[threads]):
            try:
                encoded = facts.encode_descriptor(int(value), lbo, sbo, swizzle)
            except ValueError as error:
                self.cta.fail(op, str(error), threads[np.argmax(address[threads] == value)])
            result[threads[address[threads] == value]] = as_signed64(encoded)
        return (result,)

    @impl(sm90.DescriptorAdvanceOp)
    def run_descriptor_advance(self, interpreter: Interpreter, op: sm90.DescriptorAdvanceOp, args: PythonValues):
        (descriptor,) = args
        delta = facts.descriptor_start_delta(_prop(op, "bytes"))
        descriptor = descriptor.astype(np.int64, copy=False)
        self._check_start_field(op, (descriptor & 0x3FFF) + delta)
        return (descriptor + delta,)

    def _check_start_field(self, op: Operation, field: np.ndarray) -> None:
        """A descriptor's moved start address field (`field`, per thread) must stay below 2^14 in every active
        thread (the threads are looked up only where some thread's overflows)."""
        if not np.count_nonzero(field > 0x3FFF):
            return
        threads = self._threads()
        if any_set(field[threads] > 0x3FFF):
            self.cta.fail(op, "the descriptor's start address field overflows (the start would pass 2^18 bytes)",
                          threads[np.argmax(field[threads] > 0x3FFF)])

    @impl(sm90.DescriptorOffsetOp)
    def run_descriptor_offset(self, interpreter: Interpreter, op: sm90.DescriptorOffsetOp, args: PythonValues):
        descriptor, offset = args
        offset = np.asarray(offset).astype(np.int64)
        offset = np.broadcast_to(offset, descriptor.shape)
        if offset.min(initial=0) < 0 or any_set(offset & 15):  # some thread's is bad: is an active one's?
            threads = self._threads()
            bad = (offset[threads] < 0) | (offset[threads] % 16 != 0)
            if any_set(bad):
                self.cta.fail(op, "the descriptor offset must be a non-negative multiple of 16 bytes",
                              threads[np.argmax(bad)])
        delta = offset >> 4
        descriptor = descriptor.astype(np.int64, copy=False)
        self._check_start_field(op, (descriptor & 0x3FFF) + delta)
        return (descriptor + delta,)

    @impl(sm90.WgmmaMmaAsyncOp)
    def run_wgmma(self, interpreter: Interpreter, op: sm90.WgmmaMmaAsyncOp, args: PythonValues):
        acc, a, b, *scale = args
        followers = getattr(interpreter, "followers", None)  # a batch's (`followers`): one product for all
        if followers is None or followers.dropped is not None:
            return (self.cta.wgmma.mma(op, acc, a, b, scale[0] if scale else None),)
        return (self.cta.wgmma.mma(op, acc, a, b, scale[0] if scale else None, followers, interpreter.fargs),)

    # endregion
    # region warps and the CTA
    @impl(sm90.ShflSyncOp)
    def run_shfl(self, interpreter: Interpreter, op: sm90.ShflSyncOp, args: PythonValues):
        (values,) = args
        self.cta.converged_units(op, facts.WARP_SIZE, "shfl_sync (membermask 0xffffffff)")
        source, _ = facts.shfl_source_lane(op.mode.data, np.arange(facts.WARP_SIZE), _prop(op, "offset"),
                                           _prop(op, "clamp"))
        tid = self.cta.tid
        return (values[tid - tid % facts.WARP_SIZE + source[tid % facts.WARP_SIZE]],)

    @impl(sm90.BarSyncOp)
    def run_bar_sync(self, interpreter: Interpreter, op: sm90.BarSyncOp, args: PythonValues):
        self.cta.bar_arrive(op, _prop(op, "barrier"), _prop(op, "threads"), wait=True)
        return ()

    @impl(sm90.BarArriveOp)
    def run_bar_arrive(self, interpreter: Interpreter, op: sm90.BarArriveOp, args: PythonValues):
        self.cta.bar_arrive(op, _prop(op, "barrier"), _prop(op, "threads"), wait=False)
        return ()

    @impl(sm90.ElectSyncOp)
    def run_elect(self, interpreter: Interpreter, op: sm90.ElectSyncOp, args: PythonValues):
        active = self.cta.active.reshape(-1, facts.WARP_SIZE)
        leader = np.zeros_like(active)
        warps = np.nonzero(active.any(axis=1))[0]
        leader[warps, np.argmax(active[warps], axis=1)] = True
        return (leader.reshape(-1),)

    @impl(sm90.SetMaxNRegOp)
    def run_setmaxnreg(self, interpreter: Interpreter, op: sm90.SetMaxNRegOp, args: PythonValues):
        cta, action, count = self.cta, op.action.data, _prop(op, "count")
        program = getattr(interpreter, "kernel", None)  # the `program.CompiledKernel` the CTA runs
        for w in cta.converged_units(op, facts.WARPGROUP_SIZE, "setmaxnreg"):
            set_max_registers(cta, op, w, action, count, program)
        return ()

    # endregion
    # region arithmetic the machine does its own way
    @impl(sm90.Ex2ApproxOp)
    def run_ex2(self, interpreter: Interpreter, op: sm90.Ex2ApproxOp, args: PythonValues):
        with np.errstate(over="ignore"):
            return (flush_f32(np.exp2(flush_f32(args[0]).astype(np.float64)).astype(np.float32)),)

    @impl(sm90.RcpApproxOp)
    def run_rcp(self, interpreter: Interpreter, op: sm90.RcpApproxOp, args: PythonValues):
        with np.errstate(divide="ignore", over="ignore"):
            return (flush_f32((1.0 / flush_f32(args[0]).astype(np.float64)).astype(np.float32)),)

    @impl(sm90.Lg2ApproxOp)
    def run_lg2(self, interpreter: Interpreter, op: sm90.Lg2ApproxOp, args: PythonValues):
        """`lg2.approx.ftz.f32`: the correctly rounded log2 of the flushed input (within
        `facts.LG2_APPROX_ERROR` of the hardware's); lg2(+-0) = -inf, lg2(x < 0) = NaN."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log2(flush_f32(args[0]).astype(np.float64)).astype(np.float32),)

    @impl(sm90.TanhApproxOp)
    def run_tanh(self, interpreter: Interpreter, op: sm90.TanhApproxOp, args: PythonValues):
        """`tanh.approx.f32` (no .ftz): the correctly rounded tanh (within
        `approx.TANH_APPROX_RELATIVE_ERROR` of the hardware's)."""
        return (np.tanh(args[0].astype(np.float64)).astype(np.float32),)

    @impl(sm90.SinApproxOp)
    def run_sin(self, interpreter: Interpreter, op: sm90.SinApproxOp, args: PythonValues):
        """`sin.approx.f32` (no .ftz): the correctly rounded sin (within `approx.SIN_COS_APPROX_ABSOLUTE_ERROR`
        of the hardware's on the ranges the PTX ISA bounds)."""
        with np.errstate(invalid="ignore"):
            return (np.sin(args[0].astype(np.float64)).astype(np.float32),)

    @impl(sm90.CosApproxOp)
    def run_cos(self, interpreter: Interpreter, op: sm90.CosApproxOp, args: PythonValues):
        """`cos.approx.f32` (no .ftz): the correctly rounded cos."""
        with np.errstate(invalid="ignore"):
            return (np.cos(args[0].astype(np.float64)).astype(np.float32),)

    @impl(sm90.RsqrtApproxOp)
    def run_rsqrt(self, interpreter: Interpreter, op: sm90.RsqrtApproxOp, args: PythonValues):
        """`rsqrt.approx.ftz.f32`: the correctly rounded 1/sqrt of the flushed input (within
        `approx.RSQRT_APPROX_RELATIVE_ERROR`); rsqrt(+-0) = +-inf, NaN for x < 0."""
        with np.errstate(divide="ignore", invalid="ignore"):
            x = flush_f32(args[0]).astype(np.float64)
            return (flush_f32((1.0 / np.sqrt(x)).astype(np.float32)),)

    @impl(sm90.CvtOp)
    def run_cvt(self, interpreter: Interpreter, op: sm90.CvtOp, args: PythonValues):
        """s32 -> f32 rounds to nearest even; f32 -> s32 truncates, saturates, NaN -> 0 (cvt.rzi)."""
        (x,) = args
        if x.dtype == np.float32:
            return (round_to(x, np.int32),)
        return (x.astype(np.int64).astype(np.float32),)

    @impl(sm90.CvtPackOp)
    def run_cvt_pack(self, interpreter: Interpreter, op: sm90.CvtPackOp, args: PythonValues):
        (x,) = args
        pair_type = op.half_type.data
        if pair_type in facts.FP8_FORMATS:  # two bytes in bits 15:0, bits 31:16 zero
            return (facts.cvt_rn_satfinite_x2(x[:, 1::2], x[:, 0::2], pair_type).astype(np.int32),)
        return (facts.cvt_rn_pairs(x, pair_type).view(np.int32),)

    @impl(sm90.PrmtOp)
    def run_prmt(self, interpreter: Interpreter, op: sm90.PrmtOp, args: PythonValues):
        a, b = (np.asarray(x).view(np.uint32) for x in args)
        return (facts.prmt_b32(a, b, op.selector.value.data).view(np.int32),)

    @impl(sm90.CvtPackFp8Op)
    def run_cvt_pack_fp8(self, interpreter: Interpreter, op: sm90.CvtPackFp8Op, args: PythonValues):
        (x,) = args
        order = [e for s in range(x.shape[1] // 16) for j in facts.p8_register_sources(s) for e in j]
        data = np.ascontiguousarray(facts.satfinite_f32(x[:, order], op.fp8_type.data).view(np.uint8))
        return (data.view(np.int32),)  # four bytes per register, the first the low byte (little-endian)

    if hasattr(sm90, "SetpOp"):

        @impl(sm90.SetpOp)
        def run_setp(self, interpreter: Interpreter, op, args: PythonValues):
            a, b = args
            compare = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                       "gt": np.greater, "ge": np.greater_equal}[op.predicate.data]
            with np.errstate(invalid="ignore"):
                return (compare(a, b),)

    if hasattr(sm90, "SelpOp"):

        @impl(sm90.SelpOp)
        def run_selp(self, interpreter: Interpreter, op, args: PythonValues):
            condition, a, b = args
            return (np.where(condition if condition.shape == a.shape else row_mask(condition, a), a, b),)

    # endregion
    # region global and shared memory
    def _words(self, values: np.ndarray) -> np.ndarray:
        return unsigned(values) if values.dtype.kind in "iu" else values.view(np.uint32)

    @impl(sm90.StGlobalOp)
    def run_st_global(self, interpreter: Interpreter, op: sm90.StGlobalOp, args: PythonValues):
        base, offsets, values, mask = args
        selected = mask & row_mask(self.cta.active, mask)
        thread, _ = np.nonzero(selected)
        addresses = (base[:, None] + offsets + _columns(op))[selected]
        self.memory.store_words(self.cta, op, addresses, thread, self._words(values)[selected])
        return ()

    @impl(sm90.StGlobalB16Op)
    def run_st_global_b16(self, interpreter: Interpreter, op: sm90.StGlobalB16Op, args: PythonValues):
        base, offsets, values, mask = args
        selected = mask & row_mask(self.cta.active, mask)
        thread, _ = np.nonzero(selected)
        addresses = (base[:, None] + offsets + _columns(op))[selected]
        self.memory.store_words(self.cta, op, addresses, thread, self._words(values)[selected], 2)
        return ()

    @impl(sm90.LdGlobalOp)
    def run_ld_global(self, interpreter: Interpreter, op: sm90.LdGlobalOp, args: PythonValues):
        base, offsets, mask = args
        selected = mask & row_mask(self.cta.active, mask)
        thread, _ = np.nonzero(selected)
        words = np.zeros(mask.shape, np.uint32)
        words[selected] = self.memory.load_words(self.cta, op, (base[:, None] + offsets + _columns(op))[selected], thread)
        return (words.view(dtype_of(op.result.type)),)

    @impl(sm90.LdGlobalU16Op)
    def run_ld_global_u16(self, interpreter: Interpreter, op: sm90.LdGlobalU16Op, args: PythonValues):
        base, offsets, mask = args
        selected = mask & row_mask(self.cta.active, mask)
        thread, _ = np.nonzero(selected)
        words = np.zeros(mask.shape, np.uint32)
        words[selected] = self.memory.load_words(self.cta, op, (base[:, None] + offsets + _columns(op))[selected],
                                                 thread, 2)
        return (words.view(dtype_of(op.result.type)),)

    @impl(sm90.StSharedB16Op)
    def run_st_shared_b16(self, interpreter: Interpreter, op: sm90.StSharedB16Op, args: PythonValues):
        addresses, values = args
        flat_addresses, threads = self._rows(addresses)
        words, _ = self._rows(self._words(values))
        self.cta.smem.store_words(op, threads, flat_addresses.astype(np.int64), words, 2)
        return ()

    @impl(sm90.StSharedOp)
    def run_st_shared(self, interpreter: Interpreter, op: sm90.StSharedOp, args: PythonValues):
        addresses, values = args
        flat_addresses, threads = self._rows(addresses)
        words, _ = self._rows(self._words(values))
        self.cta.smem.store_words(op, threads, flat_addresses.astype(np.int64), words)
        return ()

    @impl(sm90.LdSharedOp)
    def run_ld_shared(self, interpreter: Interpreter, op: sm90.LdSharedOp, args: PythonValues):
        (addresses,) = args
        if op.aligned is not None:  # the promise the printer's ld.shared.v2 relies on
            promised, threads = self._rows(np.asarray(addresses, np.int64))
            self.cta.smem.check_alignment(op, promised, threads, op.aligned.value.data, "the address promised aligned")
        if op.column_bytes is not None:  # register i reads addresses[i] + column_bytes[i] (a scalar: the same base)
            columns = np.asarray(op.column_bytes.get_values(), np.int64)
            addresses = np.asarray(addresses, np.int64).reshape(-1, 1) + columns if np.ndim(addresses) == 1 \
                else np.asarray(addresses, np.int64) + columns
        flat_addresses, threads = self._rows(addresses)
        words = np.zeros(addresses.shape, np.uint32)
        words[self._threads()] = self.cta.smem.load_words(op, threads, flat_addresses.astype(np.int64)).reshape(
            words[self._threads()].shape)
        return (words.view(dtype_of(op.result.type)),)

    # endregion
