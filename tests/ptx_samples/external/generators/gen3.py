import os, sys
import triton, triton.language as tl
from gen_common import compile_one
os.makedirs("out", exist_ok=True)

@triton.jit
def matmul_ws_kernel(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     NUM_SMS: tl.constexpr):
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True, warp_specialize=True):
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([pid_n * BN, ki * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))

@triton.jit
def matmul_device_desc_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))

@triton.jit
def dot_kernel(A, B, C, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ACC16: tl.constexpr):
    offs_m = tl.arange(0, BM); offs_n = tl.arange(0, BN); offs_k = tl.arange(0, BK)
    a = tl.load(A + offs_m[:, None] * BK + offs_k[None, :])
    b = tl.load(B + offs_k[:, None] * BN + offs_n[None, :])
    if ACC16:
        c = tl.dot(a, b, out_dtype=tl.float16)
    else:
        c = tl.dot(a, b)
    tl.store(C + offs_m[:, None] * BN + offs_n[None, :], c)

which = sys.argv[1:]
desc = "tensordesc<fp16[64, 64]>"
if not which or "ws" in which:
    compile_one(matmul_ws_kernel, {"a_desc": desc, "b_desc": desc, "c_desc": desc, "M": "i32", "N": "i32", "K": "i32",
                "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "NUM_SMS": "constexpr"},
                {"BM": 64, "BN": 64, "BK": 64, "NUM_SMS": 2}, 90, "triton_matmul_ws", divisible=("M", "N", "K"),
                num_warps=4, num_stages=3, ptx_version=87)
if not which or "dd" in which:
    compile_one(matmul_device_desc_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}, {"BM": 64, "BN": 64, "BK": 64}, 90,
                "triton_matmul_device_desc", divisible=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"), num_warps=4, num_stages=3, ptx_version=87)
for dt, name in [("*bf16", "bf16"), ("*fp32", "tf32"), ("*fp8e4nv", "fp8"), ("*i8", "int8")]:
    if not which or name in which:
        out = {"int8": "*i32"}.get(name, "*fp32")
        compile_one(dot_kernel, {"A": dt, "B": dt, "C": out, "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "ACC16": "constexpr"},
                    {"BM": 64, "BN": 64, "BK": 32 if name in ("fp8", "int8") else 16, "ACC16": False}, 90, f"triton_dot_{name}",
                    divisible=("A", "B", "C"), num_warps=4, ptx_version=85)
if not which or "f16acc" in which:
    compile_one(dot_kernel, {"A": "*fp16", "B": "*fp16", "C": "*fp16", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "ACC16": "constexpr"},
                {"BM": 64, "BN": 64, "BK": 16, "ACC16": True}, 90, "triton_dot_f16acc", divisible=("A", "B", "C"), num_warps=4, ptx_version=85)
