// What a Target IR kernel declares and its shared-memory layout (tessera/target_kernel_abi.py): its buffers lie
// within the kernel's smem_bytes (the PTX's launch size), two different buffers share no byte, smem_bytes is at
// most what a block may use, and threads a multiple of 32 up to 1024. One buffer declared twice (as passes that
// clone a region do) is one buffer.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
  %a = sm90.shared_buffer "a" offset 0 size 128 align 16 swizzle 0 : i32
  %a2 = sm90.shared_buffer "a" offset 0 size 128 align 16 swizzle 0 : i32
  %b = sm90.shared_buffer "b" offset 128 size 128 align 16 swizzle 0 : i32
  func.return
}
// CHECK: func.func @k

// -----

func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
  // CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: op 'sm90.shared_buffer': shared buffer 'box' [0, 512) does not fit the kernel's 256 bytes of shared memory (sm90.kernel smem_bytes)
  %buf = sm90.shared_buffer "box" offset 0 size 512 align 16 swizzle 0 : i32
  func.return
}

// -----

func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
  %a = sm90.shared_buffer "a" offset 0 size 128 align 16 swizzle 0 : i32
  // CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: op 'sm90.shared_buffer': shared buffer 'b' [64, 192) overlaps shared buffer 'a' [0, 128)
  %b = sm90.shared_buffer "b" offset 64 size 128 align 16 swizzle 0 : i32
  func.return
}

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: 'sm90.kernel': smem_bytes must be from 0 to the 232448 bytes of shared memory a block may use, got 1048576
func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 64 : i64, smem_bytes = 1048576 : i64}} {
  func.return
}

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: 'sm90.kernel': threads must be a positive multiple of 32 up to 1024, got 2048
func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 2048 : i64, smem_bytes = 256 : i64}} {
  func.return
}

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: 'sm90.kernel' needs an integer 'smem_bytes'
func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>, sm90.kernel = {threads = 64 : i64}} {
  func.return
}

// -----

// A TMA copy of a tensor-map argument gives one coordinate per dimension of its sm90.box: -t ptx printed a 1-D
// copy of this 2-D map (cp.async.bulk.tensor.1d), which the hardware faults on.
func.func @k(%map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64, sm90.element_type = bf16, tile.dims = #tile.dims<M, 64>},
             %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<M, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 9216 : i64}} {
  %c0 = arith.constant 0 : i32
  %full = sm90.shared_buffer "full" offset 0 size 8 align 8 swizzle 0 : i32
  %tile = sm90.shared_buffer "tile" offset 1024 size 8192 align 1024 swizzle 128 : i32
  // CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}kernel @k: 'sm90.tma_load' op a rank-2 tensor map (sm90.box of 2 sizes) needs 2 coordinates, got 1
  sm90.tma_load %map[%c0], %tile, %full : i32
  func.return
}
