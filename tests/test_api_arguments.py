"""Bad arguments to every public function are refused at the API boundary, by name.

Each row calls one public function with one bad argument and names the exception type it must raise
(exactly that type: TypeError for the wrong kind of argument, ValueError for a value the function does not
take, or the function's own documented subclass) and a message that names the parameter and the rule. No
other exception may escape (an AttributeError from deep inside, xDSL's BaseException for a bad pipeline),
and nothing is accepted silently (complex numbers losing their imaginary part, masked arrays losing their
mask). The rows run in well under a second each: every check fires before any kernel is lowered or run."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
import tessera.validate
from tessera import ptx as ptx_package
from tessera.passes import PipelineError
from tessera.runtime.attention import UnsupportedKernel

from conftest import build_kernel

BF16 = np.dtype(ml_dtypes.bfloat16)


def flash():
    return build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")


def gemm():
    return build_kernel("gemm", dtype="bf16")


def qkv(seq_q=10, seq_k=12, head_dim=64, dtype=np.float32):
    return (np.zeros((1, 1, seq_q, head_dim), dtype), np.zeros((1, 1, seq_k, head_dim), dtype),
            np.zeros((1, 1, seq_k, head_dim), dtype))


def interpret(*inputs, **options):
    return lambda: tessera.interpret(flash(), *inputs, **options)


def with_q(q):
    _, k, v = qkv()
    return interpret(q, k, v)


def huge(shape):
    """An array of `shape` that takes no memory (a broadcast view): only the size checks may look at it."""
    return np.broadcast_to(np.zeros((), np.float32), shape)


INTERPRET = [
    ("module None", lambda: tessera.interpret(None, *qkv()), TypeError,
     r"tessera.interpret: module must be a ModuleOp .*; got NoneType"),
    ("module text", lambda: tessera.interpret("func.func @k()", *qkv()), TypeError,
     r"module must be a ModuleOp .*parse text with tessera.parse_module first"),
    ("unknown level", interpret(*qkv(), level="gpu"), ValueError,
     r"tessera.interpret: unknown interpreter level 'gpu' \(available: tile, target, ptx\)"),
    ("level None", interpret(*qkv(), level=None), TypeError, r"level must be one of 'tile', 'target', 'ptx'"),
    ("kernel int", interpret(*qkv(), kernel=3), TypeError, r"kernel must be a string or None; got int 3"),
    ("unknown kernel", interpret(*qkv(), kernel="nope"), ValueError,
     r"no kernel named 'nope' in the module \(kernels: flash_attention_d64_bf16\)"),
    ("pipeline int", interpret(*qkv(), pipeline=3), TypeError, r"pipeline must be a string or None; got int 3"),
    ("unknown pass", interpret(*qkv(), level="target", pipeline="nosuch-pass"), PipelineError,
     r"invalid pass pipeline 'nosuch-pass': Unrecognized passes: \['nosuch-pass'\]"),
    ("unparsable pipeline", interpret(*qkv(), level="target", pipeline="canonicalize{"), PipelineError,
     r"invalid pass pipeline 'canonicalize\{' at column 14: Expected argument name here"),
    ("bad pass option", interpret(*qkv(), pipeline="pipeline-loops{stages=9}"), PipelineError,
     r"pipeline-loops: stages must be an integer from 1 to 4, got 9"),
    # regression (unseen round 22): xDSL's parser kept the last of the two, silently
    ("option given twice", interpret(*qkv(), pipeline="pipeline-loops{stages=2 stages=3}"), PipelineError,
     r"option 'stages' is given more than once in \{stages=2 stages=3\}"),
    ("object array", with_q(np.zeros((1, 1, 10, 64), object)), TypeError,
     r"input 0 must be a NumPy array of real numbers; got element type object"),
    ("complex array", with_q(np.zeros((1, 1, 10, 64), complex)), TypeError,
     r"input 0 has complex element type complex128; kernels take real numbers and would drop the imaginary part"),
    ("masked array", with_q(np.ma.masked_array(np.zeros((1, 1, 10, 64)))), ValueError,
     r"input 0 is a masked array; kernels read every element and would ignore the mask"),
    ("string array", with_q(np.full((1, 1, 10, 64), "1")), TypeError, r"input 0 .*got element type <U1"),
    ("bool array", with_q(np.zeros((1, 1, 10, 64), bool)), TypeError, r"input 0 has element type bool"),
    ("None input", with_q(None), TypeError, r"input 0 must be a NumPy array of real numbers; got NoneType"),
    ("ragged list", with_q([[1.0], [1.0, 2.0]]), TypeError, r"input 0 must be a NumPy array of real numbers; "
                                                            r"list does not convert to one"),
    ("wrong rank", with_q(np.zeros((1, 10, 64))), ValueError,
     r"input Q of @flash_attention_d64_bf16 must have rank 4, got shape \(1, 10, 64\)"),
    ("wrong head_dim", with_q(np.zeros((1, 1, 10, 32))), ValueError,
     r"input Q .*dimension 3 \(64\): the kernel is compiled for 64, got 32"),
    ("inputs disagree", interpret(*qkv()[:2], np.zeros((1, 1, 13, 64))), ValueError,
     r"input V .*dimension 2 \(seq_k\): 'seq_k' is 12 elsewhere, got 13"),
    ("too few inputs", interpret(*qkv()[:2]), ValueError, r"takes 3 inputs \(Q, K, V\), got 2"),
    ("size as a string", interpret(*qkv(), seq_q="10"), TypeError,
     r"size seq_q must be a positive integer \(not a bool or a string\); got str '10'"),
    ("size as a float", interpret(*qkv(), seq_q=10.0), TypeError, r"size seq_q must be a positive integer"),
    ("size as a bool", interpret(*qkv(), batch=True), TypeError, r"size batch must be a positive integer "
                                                                 r"\(not a bool or a string\); got bool True"),
    ("zero size", interpret(*qkv(), seq_q=0), ValueError, r"size seq_q must be a positive integer; got 0"),
    ("negative size", interpret(*qkv(), seq_k=-12), ValueError, r"size seq_k must be a positive integer; got -12"),
    ("size too large", interpret(*qkv(), seq_q=2**40), ValueError,
     r"size seq_q=1099511627776 exceeds the limit of 2147483647 \(sizes are passed to kernels as 32-bit"),
    ("size contradicts", interpret(*qkv(), seq_q=11), ValueError,
     r"size seq_q=11 contradicts the inputs, which give seq_q=10"),
    ("unknown size name", interpret(*qkv(), foo=3), ValueError,
     r"unknown size name 'foo' \(the kernel's sizes: batch, heads, seq_q, seq_k\)"),
    ("input size too large", lambda: tessera.interpret(flash(), *(huge((1, 1, 2**32, 64)),) * 3), ValueError,
     r"size seq_q=4294967296 exceeds the limit of 2147483647"),
    ("tile pipeline leaves Tile IR", interpret(*qkv(), pipeline="convert-tile-to-sm90"), ValueError,
     r"at level 'tile' the pipeline must stay in Tile IR"),
    ("target pipeline stays in Tile IR", interpret(*qkv(), level="target", pipeline=""), ValueError,
     r"pipeline '' does not lower the kernels to Target IR \(it needs convert-tile-to-sm90"),
]

EMPTY = "builtin.module {}"

COMPILE = [
    ("module None", lambda: tessera.compile(None), TypeError, r"tessera.compile: module must be a ModuleOp"),
    ("module text", lambda: tessera.compile(EMPTY), TypeError, r"parse text with tessera.parse_module first"),
    ("unknown target", lambda: tessera.compile(gemm(), target="sass"), ValueError,
     r"tessera.compile: unknown compile target 'sass' \(available: target, ptx, cubin\)"),
    ("target None", lambda: tessera.compile(gemm(), target=None), TypeError,
     r"target must be one of 'target', 'ptx', 'cubin'; got NoneType"),
    ("pipeline list", lambda: tessera.compile(gemm(), pipeline=["canonicalize"]), TypeError,
     r"pipeline must be a string or None; got list"),
    ("unparsable pipeline", lambda: tessera.compile(gemm(), pipeline=","), PipelineError,
     r"invalid pass pipeline ',' at column 1: Expected pass name here"),
    ("no kernel", lambda: tessera.compile(tessera.parse_module(EMPTY)), ValueError,
     r"tessera.compile: the module has no Tile IR kernel to compile"),
    ("pipeline stops in Tile IR", lambda: tessera.compile(gemm(), pipeline="assign-swizzle"), ValueError,
     r"pipeline 'assign-swizzle' does not lower the kernels to Target IR"),
]

PARSE_PRINT_FIND = [
    ("parse None", lambda: tessera.parse_module(None), TypeError,
     r"tessera.parse_module: text must be a string; got NoneType"),
    ("parse bytes", lambda: tessera.parse_module(EMPTY.encode()), TypeError,
     r"tessera.parse_module: text must be a string; got bytes"),
    ("parse name", lambda: tessera.parse_module(EMPTY, name=3), TypeError, r"name must be a string; got int"),
    ("print None", lambda: tessera.print_module(None), TypeError, r"tessera.print_module: module must be a ModuleOp"),
    ("print text", lambda: tessera.print_module(EMPTY), TypeError, r"module must be a ModuleOp"),
    ("print generic", lambda: tessera.print_module(gemm(), generic="yes"), TypeError,
     r"generic must be True or False; got str"),
    ("find None", lambda: tessera.find_kernel(None), TypeError, r"tessera.find_kernel: module must be a ModuleOp"),
    ("find kernel int", lambda: tessera.find_kernel(gemm(), 3), TypeError, r"kernel must be a string or None"),
    ("find unknown", lambda: tessera.find_kernel(gemm(), "nope"), ValueError,
     r"no kernel named 'nope' in the module \(kernels: gemm_bf16\)"),
    ("find in an empty module", lambda: tessera.find_kernel(tessera.parse_module(EMPTY)), ValueError,
     r"the module has no kernel"),
    ("find in Target IR", lambda: tessera.find_kernel(tessera.compile(gemm(), "target", "assign-swizzle,"
                                                                       "convert-tile-to-sm90")), ValueError,
     r"the module has no Tile IR kernel, only Target IR kernels \(gemm_bf16\)"),
]


def validate(**options):
    arguments = {"module": gemm(), "pipeline": "canonicalize", **options}
    return lambda: tessera.validate.validate(arguments.pop("module"), arguments.pop("pipeline"), **arguments)


VALIDATE = [
    ("module None", validate(module=None), TypeError, r"tessera.validate.validate: module must be a ModuleOp"),
    ("pipeline None", validate(pipeline=None), TypeError, r"pipeline must be a string; got NoneType"),
    ("unknown pass", validate(pipeline="nosuch"), PipelineError, r"invalid pass pipeline 'nosuch'"),
    ("sizes list", validate(sizes=[1, 2]), TypeError, r"sizes must be a mapping of size names to integers; got list"),
    ("size as a string", validate(sizes={"M": "3"}), TypeError, r"size M must be a positive integer"),
    ("zero size", validate(sizes={"M": 0}), ValueError, r"size M must be a positive integer; got 0"),
    ("unknown size name", validate(sizes={"seq_q": 3}), ValueError,
     r"unknown size name 'seq_q' \(the kernel's sizes: M, K, N\)"),
    ("seed negative", validate(seed=-1), ValueError, r"seed must be a non-negative integer; got -1"),
    ("seed string", validate(seed="0"), TypeError, r"seed must be a non-negative integer; got str"),
    ("kernel int", validate(kernel=0), TypeError, r"kernel must be a string or None"),
    ("ptx flag", validate(ptx="yes"), TypeError, r"ptx must be True or False; got str"),
]


def attention(*inputs, **options):
    return lambda: tessera.attention(*inputs, **options)


def bf16(shape=(1, 2, 16, 64)):
    return np.zeros(shape, BF16)


ATTENTION = [
    ("q None", attention(None, bf16(), bf16()), TypeError,
     r"attention: q must be a NumPy array or a PyTorch tensor, got NoneType"),
    ("complex", attention(*(np.zeros((1, 2, 16, 64), complex),) * 3), TypeError,
     r"attention: q has element type complex128; complex numbers would lose their imaginary part"),
    ("objects", attention(bf16(), np.zeros((1, 2, 16, 64), object), bf16()), TypeError,
     r"attention: k has element type object"),
    ("masked", attention(bf16(), bf16(), np.ma.masked_array(bf16())), ValueError,
     r"attention: v is a masked array; the kernel reads every element and would ignore the mask"),
    ("float32", attention(*(np.zeros((1, 2, 16, 64), np.float32),) * 3), UnsupportedKernel,
     r"element type float32 is not supported \(supported: bfloat16, float16"),
    ("head_dim 80", attention(*(bf16((1, 2, 16, 80)),) * 3), UnsupportedKernel,
     r"head_dim 80 is not supported .*\(supported: 64, 96, 128, 192, 256\)"),
    ("rank 3", attention(bf16((2, 16, 64)), bf16(), bf16()), ValueError, r"q must be 4-D \[batch, heads, seq, head_dim\]"),
    ("scale overflows f32", attention(bf16(), bf16(), bf16(), scale=1e39), ValueError,
     r"scale must be representable as an f32 \(between 1.401298e-45 and 3.4028235e\+38\); got 1e\+39"),
    ("scale nan", attention(bf16(), bf16(), bf16(), scale=float("nan")), ValueError,
     r"scale must be a positive finite number"),
    ("scale infinite", attention(bf16(), bf16(), bf16(), scale=float("inf")), ValueError,
     r"scale must be a positive finite number"),
    ("scale string", attention(bf16(), bf16(), bf16(), scale="0.1"), ValueError,
     r"scale must be a positive finite number, or None for 1/sqrt\(head_dim\); got '0.1'"),
    ("causal string", attention(bf16(), bf16(), bf16(), causal="yes"), ValueError, r"causal must be True or False"),
    ("bias list", attention(bf16(), bf16(), bf16(), bias=[0.0]), TypeError,
     r"attention: bias must be a NumPy array or a PyTorch tensor, got list"),
    ("bias rank 3", attention(bf16(), bf16(), bf16(), bias=bf16((2, 16, 16))), ValueError,
     r"attention: bias must be 4-D \[1 or 1, 2 or 1, 16, 16\]"),
    ("bias batch 3", attention(bf16(), bf16(), bf16(), bias=bf16((3, 2, 16, 16))), ValueError,
     r"attention: bias must have shape .*got \(3, 2, 16, 16\)"),
    ("bias seq_k", attention(bf16(), bf16(), bf16(), bias=bf16((1, 2, 16, 17))), ValueError,
     r"attention: bias must have shape \[1 or 1, 2 or 1, 16, 16\]"),
    ("bias float32", attention(bf16(), bf16(), bf16(), bias=np.zeros((1, 2, 16, 16), np.float32)), ValueError,
     r"attention: bias must have q's element type bfloat16, got float32"),
    ("bias boolean", attention(bf16(), bf16(), bf16(), bias=np.zeros((1, 2, 16, 16), bool)), TypeError,
     r"attention: bias has element type bool"),
    ("bias masked", attention(bf16(), bf16(), bf16(), bias=np.ma.masked_array(bf16((1, 2, 16, 16)))), ValueError,
     r"attention: bias is a masked array"),
    ("bias split-KV", attention(bf16(), bf16(), bf16(), bias=bf16((1, 2, 16, 16)), num_splits=2), ValueError,
     r"attention: bias is not supported with num_splits=2 \(split-KV\)"),
    ("bias GQA", attention(bf16(), bf16((1, 1, 16, 64)), bf16((1, 1, 16, 64)), bias=bf16((1, 2, 16, 16))),
     ValueError, r"attention: bias is not supported with GQA/MQA"),
    ("bias cluster", attention(bf16(), bf16(), bf16(), bias=bf16((1, 2, 16, 16)), cluster=2), ValueError,
     r"attention: bias is not supported with cluster=2"),
    ("bias varlen", attention(bf16((16, 2, 64)), bf16((16, 2, 64)), bf16((16, 2, 64)), bias=bf16((1, 2, 16, 16)),
                              cu_seqlens_q=np.array([0, 16], np.int32), cu_seqlens_k=np.array([0, 16], np.int32),
                              max_seqlen_q=16, max_seqlen_k=16), ValueError,
     r"attention: bias is not supported with packed sequences"),
    ("backward bias", lambda: tessera.attention_backward(*(bf16(),) * 6, bias=bf16((1, 2, 16, 16))), ValueError,
     r"attention_backward: bias is not supported"),
]

def runtime_gemm(a, b):
    from tessera.runtime.gemm import gemm as gemm_on_gpu

    return lambda: gemm_on_gpu(a, b)


RUNTIME_GEMM = [
    ("a None", runtime_gemm(None, bf16((64, 64))), TypeError, r"gemm: a must be a NumPy array or a PyTorch tensor"),
    ("complex", runtime_gemm(np.zeros((64, 64), complex), bf16((64, 64))), TypeError,
     r"gemm: a has element type complex128; complex numbers would lose their imaginary part"),
    ("masked", runtime_gemm(bf16((64, 64)), np.ma.masked_array(bf16((64, 64)))), ValueError,
     r"gemm: b is a masked array"),
    ("shapes", runtime_gemm(bf16((64, 32)), bf16((64, 64))), ValueError, r"gemm: a is \[M, K\] and b is \[K, N\]"),
    ("float64", runtime_gemm(np.zeros((64, 64)), np.zeros((64, 64))), UnsupportedKernel,
     r"gemm: element type float64 is not supported"),
]


def trace(**options):
    arguments = {"module": flash(), "inputs": qkv(), **options}
    return lambda: tessera.validate.attention_trace(arguments.pop("module"), *arguments.pop("inputs"), **arguments)


TRACE = [
    ("module None", trace(module=None), TypeError, r"tessera.validate.attention_trace: module must be a ModuleOp"),
    ("complex q", trace(inputs=(np.zeros((1, 1, 10, 64), complex),) + qkv()[1:]), TypeError,
     r"attention_trace: q has complex element type"),
    ("level ptx", trace(level="ptx"), ValueError, r"attention_trace runs at level 'tile' or 'target'"),
    ("level None", trace(level=None), TypeError, r"level must be a string; got NoneType"),
    ("block list", trace(block=[0, 0, 0]), TypeError,
     r"block must be a tuple \(batch, head, row block\) of non-negative integers; got \[0, 0, 0\]"),
    ("block negative", trace(block=(0, 0, -1)), TypeError, r"block must be a tuple"),
]

PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    ret;
}
"""


def launch(ptx=PTX, kernel="k", grid=1, block=32, args=None, **options):
    return lambda: ptx_package.launch(ptx, kernel, grid, block, [np.zeros(4, np.float32)] if args is None else args,
                                      **options)


LAUNCH = [
    ("ptx None", launch(ptx=None), TypeError, r"ptx must be PTX text \(a str\) or a parsed Module; got NoneType"),
    ("ptx bytes", launch(ptx=PTX.encode()), TypeError, r"ptx must be PTX text .*; got bytes"),
    ("kernel None", launch(kernel=None), TypeError, r"kernel must be the name of an entry \(a str\); got NoneType"),
    ("unknown kernel", launch(kernel="nope"), ValueError, r"no entry named 'nope' \(entries: k\)"),
    ("grid string", launch(grid="1"), TypeError, r"grid must be an integer or 1 to 3 integers \(x, y, z\); got str"),
    ("grid float", launch(grid=1.5), TypeError, r"grid must be an integer or 1 to 3 integers"),
    ("grid bool", launch(grid=True), TypeError, r"grid must be an integer or 1 to 3 integers .*got bool"),
    ("grid of floats", launch(grid=(2.0, 1)), TypeError, r"grid must be an integer or 1 to 3 integers"),
    ("grid of four", launch(grid=(1, 1, 1, 1)), ValueError, r"grid must be 1 to 3 positive integers"),
    ("grid zero", launch(grid=0), ValueError, r"grid must be 1 to 3 positive integers, got 0"),
    ("block string", launch(block="32"), TypeError, r"block must be an integer or 1 to 3 integers"),
    ("block too large", launch(block=2048), ValueError, r"block \(2048, 1, 1\).* 1024"),
    ("args None", lambda: ptx_package.launch(PTX, "k", 1, 32, None), TypeError,
     r"args must be a list or tuple of the entry's arguments; got NoneType"),
    ("args string", launch(args="x"), TypeError, r"args must be a list or tuple .*; got str"),
    ("masked array", launch(args=[np.ma.masked_array(np.zeros(4))]), ValueError,
     r"argument 0 is a masked array; the kernel would ignore the mask"),
    ("object array", launch(args=[np.zeros(4, object)]), TypeError, r"argument 0 is an array of Python objects"),
    ("complex array", launch(args=[np.zeros(4, np.complex64)]), TypeError,
     r"argument 0 has complex element type complex64, which PTX has no type for; pass x.view\(np.float32\)"),
    ("too many args", launch(args=[np.zeros(4), np.zeros(4)]), ValueError, r"entry k has 1 parameters, got 2 arguments"),
    ("shared_bytes string", launch(shared_bytes="0"), TypeError, r"shared_bytes must be an integer; got str"),
    ("shared_bytes bool", launch(shared_bytes=True), TypeError, r"shared_bytes must be an integer; got bool"),
    ("shared_bytes negative", launch(shared_bytes=-1), ValueError, r"shared_bytes must be an integer >= 0, got -1"),
    ("source None", launch(source=None), TypeError, r"source must be a str"),
]

BUILDERS = [
    ("head_dim 80", lambda: tessera.kernels.flash_attention(head_dim=80), ValueError,
     r"head_dim must be one of 64, 96, 128, 192, 256; got 80"),
    ("dtype f32", lambda: tessera.kernels.flash_attention(head_dim=64, dtype="f32"), ValueError,
     r"dtype must be one of 'bf16', 'f16', 'e4m3'; got 'f32'"),
    ("scale overflows f32", lambda: tessera.kernels.flash_attention(head_dim=64, scale=1e39), ValueError,
     r"scale must be representable as an f32"),
    ("scale underflows f32", lambda: tessera.kernels.flash_attention(head_dim=64, scale=1e-50), ValueError,
     r"scale must be representable as an f32"),
    ("gemm dtype", lambda: tessera.kernels.gemm(dtype="f64"), ValueError, r"dtype must be one of 'bf16', 'f16'"),
    ("bias int", lambda: tessera.kernels.flash_attention(head_dim=64, bias=1), ValueError,
     r"bias must be True or False; got 1"),
    ("bias_broadcast seq", lambda: tessera.kernels.flash_attention(bias=True, bias_broadcast=("seq_q",)), ValueError,
     r"bias_broadcast must be a tuple of distinct names from batch, heads"),
    ("bias_broadcast alone", lambda: tessera.kernels.flash_attention(bias_broadcast=("heads",)), ValueError,
     r"bias_broadcast applies to a bias \(bias=True\)"),
    ("bias split", lambda: tessera.kernels.flash_attention(bias=True, num_splits=2), ValueError,
     r"bias is not supported with num_splits > 1"),
    ("bias grouped", lambda: tessera.kernels.flash_attention(bias=True, grouped=True), ValueError,
     r"bias is not supported with grouped=True"),
    ("bias cluster", lambda: tessera.kernels.flash_attention(bias=True, cluster=2), ValueError,
     r"bias is not supported with cluster > 1"),
    ("bias tiny scale", lambda: tessera.kernels.flash_attention(bias=True, scale=1e-39), ValueError,
     r"bias needs 1/scale to be a finite f32"),
    ("bias two-pass", lambda: tessera.kernels.two_pass_attention(bias=True), ValueError,
     r"bias: two_pass_attention takes no bias"),
    ("bias three-pass", lambda: tessera.kernels.three_pass_attention(bias=True), ValueError,
     r"bias: three_pass_attention takes no bias"),
]

TABLE = [pytest.param(call, error, message, id=f"{group}: {name}")
         for group, rows in [("interpret", INTERPRET), ("compile", COMPILE), ("parse/print/find", PARSE_PRINT_FIND),
                             ("validate", VALIDATE), ("attention_trace", TRACE), ("attention", ATTENTION),
                             ("runtime gemm", RUNTIME_GEMM), ("ptx.launch", LAUNCH),
                             ("kernels", BUILDERS)]
         for name, call, error, message in rows]


@pytest.mark.parametrize("call,error,message", TABLE)
def test_bad_arguments_are_refused_by_name(call, error, message):
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the exact type is checked below
        call()
    assert caught.type is error, f"expected {error.__name__}, got {caught.type.__name__}: {caught.value}"
    assert caught.match(message)


def test_no_bad_argument_reaches_a_gpu_or_the_compiler(monkeypatch):
    """tessera.attention and the runtime's gemm check every argument before they look for a GPU or compile."""
    from tessera.runtime import attention as attention_module
    from tessera.runtime import gemm as gemm_module
    from tessera.runtime import launch as launch_module

    def must_not_be_called(*args, **kwargs):
        raise AssertionError("reached the driver or the compiler")

    monkeypatch.setattr(launch_module, "get_driver", must_not_be_called)
    monkeypatch.setattr(attention_module, "compile_kernel", must_not_be_called)
    monkeypatch.setattr(gemm_module, "compile_kernel", must_not_be_called)
    for name, call, error, message in ATTENTION + RUNTIME_GEMM:
        with pytest.raises(error, match=message):
            call()


def test_a_good_call_looks_for_the_gpu_before_compiling(monkeypatch):
    from tessera.runtime import CudaUnavailable
    from tessera.runtime import attention as attention_module
    from tessera.runtime import launch as launch_module

    class NoGpu:
        def device(self, ordinal=0, current=True):
            raise CudaUnavailable("no CUDA device (test)")

    def must_not_be_called(*args, **kwargs):
        raise AssertionError("compiled before a GPU was found")

    monkeypatch.setattr(launch_module, "get_driver", NoGpu)
    monkeypatch.setattr(attention_module, "compile_kernel", must_not_be_called)
    with pytest.raises(CudaUnavailable, match=r"no CUDA device \(test\)"):
        tessera.attention(bf16(), bf16(), bf16(), causal=True)


def test_good_arguments_of_every_kind_are_accepted(rng):
    """The checks refuse only what they name: lists, integer arrays, NumPy integer sizes and bf16 arrays pass."""
    q, k, v = qkv(seq_q=3, seq_k=5)
    out = tessera.interpret(flash(), q.tolist(), k.astype(np.int32), v.astype(BF16), seq_q=np.int64(3), seq_k=5)
    assert out.shape == (1, 1, 3, 64) and out.dtype == BF16
