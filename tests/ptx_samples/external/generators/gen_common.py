import json
import triton
from triton.backends.compiler import GPUTarget

def compile_one(fn, signature, constexprs, arch, name, divisible=(), **options):
    # As the JIT specializes a launch: integer args equal to 1 become constexprs, and pointers / integers that
    # are multiples of 16 carry tt.divisibility=16 (what lets Triton vectorize and use cp.async).
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in divisible}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    md = k.metadata
    ptx = k.asm["ptx"]
    open(f"out/{name}.ptx", "w").write(ptx)
    print(name, len(ptx), "shared", md.shared, "warps", md.num_warps, "stages", md.num_stages,
          "scratch", md.global_scratch_size, md.profile_scratch_size)
    json.dump({"tensordesc_meta": md.tensordesc_meta, "shared": md.shared, "num_warps": md.num_warps, "num_stages": md.num_stages,
               "global_scratch_size": md.global_scratch_size, "options": options, "constexprs": {str(k): v for k, v in constexprs.items()},
               "signature": signature, "divisible": list(divisible), "arch": arch, "triton": triton.__version__}, open(f"out/{name}.json", "w"))

