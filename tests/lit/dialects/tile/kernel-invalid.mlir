// One chunk per rule of the kernel ABI (tessera/kernel_abi.py, `signature`), checked by tessera-opt after
// parsing. Each kernel has its own name so that each message is unique; the last chunk is a valid module.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// ===== tile.kernel

// CHECK: kernel @not_dict: 'tile.kernel' must be a dictionary such as {kind = "attention"}
func.func @not_dict(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = "attention", tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @no_kind: 'tile.kernel' needs kind = one of 'attention', 'gemm', 'custom'
func.func @no_kind(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @bad_kind: 'tile.kernel' needs kind = one of 'attention', 'gemm', 'custom'
func.func @bad_kind(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "conv"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @unknown_entry: unknown 'tile.kernel' entries ['block', 'tiles'] (known: kind, causal, scale)
func.func @unknown_entry(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom", tiles = 4, block = 128}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @causal_int: 'causal' must be true or false
func.func @causal_int(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "attention", causal = 1}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// An index-typed integer has no bit width: this used to crash the check.
// CHECK: kernel @causal_index: 'causal' must be true or false
func.func @causal_index(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "attention", causal = 1 : index}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @scale_int: 'scale' must be a float such as 0.125 : f32
func.func @scale_int(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "attention", scale = 1}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @causal_gemm: 'causal' and 'scale' apply to attention kernels only
func.func @causal_gemm(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "gemm", causal = true}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @scale_custom: 'causal' and 'scale' apply to attention kernels only
func.func @scale_custom(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom", scale = 0.5 : f32}, tile.grid = #tile.dims<n>} {
  func.return
}

// ===== tile.grid and the function type

// -----

// CHECK: kernel @no_grid: 'tile.grid' must be #tile.dims<...> with 1 to 3 entries
func.func @no_grid(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}} {
  func.return
}

// -----

// CHECK: kernel @grid_4d: 'tile.grid' must be #tile.dims<...> with 1 to 3 entries
func.func @grid_4d(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n, 1, 1, 1>} {
  func.return
}

// -----

// CHECK: kernel @returns: kernels return nothing; outputs are arguments with tile.role = "out"
func.func @returns(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) -> index attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  %c = arith.constant 0 : index
  func.return %c : index
}

// ===== arguments

// -----

// CHECK: kernel @shared_arg: argument 1 (%s) must be a global tile, got !tile.tile<16xf32, shared>
func.func @shared_arg(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %s: !tile.tile<16xf32, shared> {tile.dims = #tile.dims<16>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @scalar_arg: argument 0 (%n) must be a global tile, got index
func.func @scalar_arg(%n: index) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  func.return
}

// -----

// CHECK: kernel @no_dims: argument 1 (%y) needs 'tile.dims = #tile.dims<...>' naming each dimension
func.func @no_dims(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %y: !tile.tile<?xf32, global> {tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @dims_rank: argument 0 (%x) has rank 2 but 'tile.dims' names 1 dimensions
func.func @dims_rank(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @bad_role: argument 1 (%y): 'tile.role' must be one of 'in', 'out', 'scratch'
func.func @bad_role(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>, tile.role = "inout"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @contradiction: argument 0 (%x): dimension '32' contradicts the static size 64
func.func @contradiction(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 32>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @ceildiv_input: in argument %x uses sizes no input defines: ['n']
func.func @ceildiv_input(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(n, 2)>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  func.return
}

// -----

// CHECK: kernel @undefined_out: out argument %y uses sizes no input defines: ['m']
func.func @undefined_out(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(m, 2)>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @undefined_grid: 'tile.grid' uses sizes no input defines: ['heads', 'seq']
func.func @undefined_grid(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(seq, 64), heads, n>} {
  func.return
}

// -----

// CHECK: kernel @launch_sizes_not_names: 'tile.launch_sizes' must be an array of size names such as ["max_seqlen_q"]
func.func @launch_sizes_not_names(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>, tile.launch_sizes = [4]} {
  func.return
}

// -----

// CHECK: kernel @launch_size_of_an_input: 'tile.launch_sizes' names ['n'], which an input's shape already defines
func.func @launch_size_of_an_input(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>, tile.launch_sizes = ["n"]} {
  func.return
}

// -----

// CHECK: kernel @launch_size_undeclared_output: out argument %y uses sizes no input defines: ['longest']
func.func @launch_size_undeclared_output(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<longest>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<longest>, tile.launch_sizes = ["other"]} {
  func.return
}

// ===== inputs and outputs of the kinds with a reference

// -----

// CHECK: kernel @attention_args: an attention kernel takes inputs Q, K, V and output O, got 2 inputs and 1 outputs
func.func @attention_args(%q: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}, %k: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}, %o: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention"}, tile.grid = #tile.dims<s>} {
  func.return
}

// -----

// CHECK: kernel @attention_bias_args: an attention kernel takes inputs Q, K, V, Bias and output O, got 3 inputs and 1 outputs
func.func @attention_bias_args(%q: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}, %k: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}, %v: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}, %o: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", bias = true}, tile.grid = #tile.dims<s>} {
  func.return
}

// -----

// CHECK: kernel @attention_bias_flag: 'bias' must be true or false
func.func @attention_bias_flag(%q: !tile.tile<?x64xf16, global> {tile.dims = #tile.dims<s, 64>}) attributes {tile.kernel = {kind = "attention", bias = 1 : i32}, tile.grid = #tile.dims<s>} {
  func.return
}

// -----

// CHECK: kernel @gemm_args: a gemm kernel takes inputs A, B and output C, got 2 inputs and 0 outputs
func.func @gemm_args(%a: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<m, k>}, %b: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<k, n>}, %c: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<m, n>, tile.role = "scratch"}) attributes {tile.kernel = {kind = "gemm"}, tile.grid = #tile.dims<m, n>} {
  func.return
}

// -----

// ===== a kernel writes only its outputs and scratch buffers

// CHECK: kernel @writes_input: op 'tile.store_global': writes argument %x, an input: a kernel writes only its outputs and scratch buffers (declare %x with tile.role = "out")
func.func @writes_input(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>}, %y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %x[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %v = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  tile.store_global %v, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// -----

// CHECK: kernel @adds_into_input: op 'tile.atomic_add': writes argument %acc, an input: a kernel writes only its outputs and scratch buffers (declare %acc with tile.role = "out")
func.func @adds_into_input(%acc: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>}, %y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %v = tile.fill 1.0 : !tile.tile<64x64xf32, register>
  %w = tile.view %acc[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.atomic_add %v, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// -----

// ===== a Tile IR kernel holds tile, arith, scf and func ops

// CHECK: kernel @math_op: 'math.exp' is not an op of Tile IR: a Tile IR kernel holds tile, arith, scf, func ops
func.func @math_op(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>}, %y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %one = arith.constant 1.0 : f32
  %e = math.exp %one : f32
  func.return
}

// -----

// CHECK: kernel @target_op: 'sm90.special' is a Target IR op, which convert-tile-to-sm90 makes: a Tile IR kernel holds tile, arith, scf, func ops
func.func @target_op(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>}, %y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %t = sm90.special "tid.x" : index
  func.return
}

// -----

// CHECK: kernel @calls: 'func.call': a Tile IR kernel is one function, which calls none (write the callee's ops into the kernel)
func.func private @callee() -> ()
func.func @calls(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>}, %y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  func.call @callee() : () -> ()
  func.return
}

// -----

// ===== a loop's constant step is positive (MLIR's scf.for rule: a zero step never ends)

// CHECK: kernel @zero_step: 'scf.for' constant step operand must be positive, got 0
func.func @zero_step(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c0 {
  }
  func.return
}

// -----

// CHECK: kernel @negative_step: 'scf.for' constant step operand must be positive, got -64
func.func @negative_step(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %step = arith.constant -64 : index
  scf.for %i = %c4 to %c0 step %step {
  }
  func.return
}

// -----

// CHECK: kernel @while_loop: 'scf.while' is not supported in a Tile IR kernel, whose control flow is scf.for, scf.if, scf.yield
func.func @while_loop(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  %c0 = arith.constant 0 : index
  %r = scf.while (%i = %c0) : (index) -> index {
    %go = arith.cmpi ult, %i, %c0 : index
    scf.condition(%go) %i : index
  } do {
  ^bb0(%j: index):
    scf.yield %j : index
  }
  func.return
}

// -----

// ===== misspelt tile. attribute names (`check_attribute_names`): ignored, they would make no kernel or no output

// CHECK: func @misspelt_kernel: unknown attribute 'tile.kernal' (did you mean 'tile.kernel'?)
func.func @misspelt_kernel(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernal = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// CHECK: kernel @misspelt_role: argument 1: unknown attribute 'tile.rol' (did you mean 'tile.role'?)
func.func @misspelt_role(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>, tile.rol = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  func.return
}

// -----

// An scf.if yields what its results are (MLIR's rule, which xDSL 0.74 does not check).
func.func @if_yield(%x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<n>} {
  %b = tile.program_id x : index
  %c0 = arith.constant 0 : index
  %c = arith.cmpi eq, %b, %c0 : index
  %f = tile.fill 1.0 : !tile.tile<16xf32, register>
  %r = scf.if %c -> (!tile.tile<16xf32, register>) {
    scf.yield %f : !tile.tile<16xf32, register>
  } else {
    %h = tile.cast %f : !tile.tile<16xf32, register> -> !tile.tile<16xbf16, register>
    // CHECK: kernel @if_yield: 'scf.yield' yields (!tile.tile<16xbf16, register>) to an scf.if whose results are (!tile.tile<16xf32, register>)
    scf.yield %h : !tile.tile<16xbf16, register>
  }
  func.return
}

// -----

// ===== valid kernels of each kind pass

// CHECK-LABEL: builtin.module {
// CHECK:       func.func @attention(
// CHECK-SAME:    attributes {tile.kernel = {kind = "attention", causal = true, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 128), heads, batch>}
// CHECK:       func.func @gemm(
// CHECK-SAME:    attributes {tile.kernel = {kind = "gemm", causal = false}, tile.grid = #tile.dims<ceildiv(m, 128), ceildiv(n, 128)>}
// CHECK:       func.func @launch_sized(
// CHECK-SAME:    tile.grid = #tile.dims<ceildiv(longest, 64), batch>, tile.launch_sizes = ["longest"]
func.func @attention(%q: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 128>}, %k: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 128>}, %v: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 128>}, %o: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 128>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = true, scale = 0.125 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 128), heads, batch>} {
  func.return
}
func.func @gemm(%a: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<m, k>}, %b: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<k, n>}, %c: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<m, n>, tile.role = "out"}, %ws: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(m, 128)>, tile.role = "scratch"}) attributes {tile.kernel = {kind = "gemm", causal = false}, tile.grid = #tile.dims<ceildiv(m, 128), ceildiv(n, 128)>} {
  func.return
}
func.func @launch_sized(%x: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<batch, total>}, %y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<batch, total>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(longest, 64), batch>, tile.launch_sizes = ["longest"]} {
  func.return
}
