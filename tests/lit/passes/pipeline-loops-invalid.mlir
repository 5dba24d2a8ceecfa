// pipeline-loops refuses, naming the op, every loop that copies but does not have the canonical shape
// (notes/pipeline_spec.md), and option values outside 1..4. Never a traceback.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics -p 'pipeline-loops{stages=2}' | filecheck %s
// RUN: not tessera-opt %s --split-input-file -p 'pipeline-loops{stages=2}' 2>&1 | filecheck %s --check-prefix=EXIT
// RUN: not tessera-opt %s -p 'pipeline-loops{stages=5}' 2>&1 | filecheck %s --check-prefix=STAGES5
// RUN: not tessera-opt %s -p 'pipeline-loops{stages=0}' 2>&1 | filecheck %s --check-prefix=STAGES0
// RUN: not tessera-opt %s -p 'pipeline-loops{depth=2}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// EXIT-NOT:  Traceback
// EXIT:      pipeline-loops: tile.cp_async %w, %s : {{.*}}: the copy destination %s is also used outside the loop
// EXIT-NOT:  Traceback
// STAGES5:   tessera-opt: error: invalid pass pipeline 'pipeline-loops{stages=5}': pipeline-loops: stages must be an integer from 1 to 4, got 5
// STAGES0:   tessera-opt: error: invalid pass pipeline 'pipeline-loops{stages=0}': pipeline-loops: stages must be an integer from 1 to 4, got 0
// UNKNOWN:   tessera-opt: error: invalid pass pipeline 'pipeline-loops{depth=2}': Provided arguments ["depth"] not found in expected arguments ["stages"]

// The tile's contents are read after the loop: it cannot become a ring of this loop.
// CHECK: pipeline-loops: tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>: the copy destination %s is also used outside the loop (by '%x = tile.load %s : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>'); only tiles that each loop refills before reading become rings
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  %x = tile.load %s : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_async %w2, %t : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>: copies and copy groups after the loop's tile.cp_wait_group are not supported (a pipelined loop copies only in its load section)
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %t = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %w2 = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w2, %t : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {: the loop body does not end with a tile.barrier (the one that keeps the next trip's copies from overwriting tiles still being read); pipeline-loops replaces it by tile.release
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_wait_group 1: expected tile.cp_wait_group 0 right after the loop's tile.cp_commit_group
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 1
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: %next = tile.mma %s, %s, %acc transpose_b : {{.*}}: expected tile.barrier right after the loop's tile.cp_wait_group
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// The window of trip j + 1 is not known in trip j when it depends on a loop-carried value.
// CHECK: pipeline-loops: tile.cp_async %w, %s : {{.*}}: the copied window depends on the loop-carried value %row, which is not known for the trips the prologue and the next trips load ahead
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r, %last = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z, %row = %c0) -> (!tile.tile<64x64xf32, register>, index) {
    %w = tile.view %A[%row, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %row_next = arith.addi %row, %j : index
    tile.barrier
    scf.yield %next, %row_next : !tile.tile<64x64xf32, register>, index
  }
  func.return
}

// -----

// CHECK: pipeline-loops: %g = tile.load %w : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>: only index arithmetic, tile.view and the copies may come before the loop's tile.cp_commit_group (the load section)
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    %g = tile.load %w : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %g, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_async %w, %s : {{.*}}: copy under control flow: the load section copies unconditionally, at the top of the loop body
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index, %cond: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    scf.if %cond {
      tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    }
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: scf.for %i = %c0 to %n step %c1 {: holds another loop that copies ('%r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {'); nested pipelined loops are not supported
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %t = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  scf.for %i = %c0 to %n step %c1 {
    %wi = tile.view %A[%i, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %wi, %t : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
      %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %next = tile.mma %s, %t, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %next : !tile.tile<64x64xf32, register>
    }
    tile.barrier
  }
  func.return
}

// -----

// CHECK: pipeline-loops: %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {: the loop copies but commits no group (expected tile.cp_commit_group after its copies)
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_async %w, %s : {{.*}}: the copy destination must be an unstaged tile.alloc_shared tile (it becomes a ring)
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index, %s: !tile.tile<64x64xbf16, shared, swizzle 128>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_async %w2, %s : {{.*}}: copies into %s twice in one trip
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    %j2 = arith.addi %j, %c64 : index
    %w2 = tile.view %A[%j2, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w2, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// CHECK: pipeline-loops: tile.cp_async %w, %stage : {{.*}}: the loop copies both into ring stages and into plain shared tiles
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %ring = tile.alloc_shared : !tile.tile<2x64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    %slot = arith.remui %j, %c1 : index
    %stage = tile.stage %ring[%slot] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_async %w, %stage : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %stage, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  }
  func.return
}

// -----

// A loop may ask for its own ring depth (tile.stages, the GEMM builder's stages=), from 1 to 4 like the option.
// CHECK: pipeline-loops: %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {: tile.stages must be an integer from 1 to 4, got 5 : i64
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %next : !tile.tile<64x64xf32, register>
  } {tile.stages = 5 : i64}
  func.return
}
