// RUN: not python -m tessera.ptx %s 2>&1 | filecheck %s

// An op with no PTX is refused with a diagnostic naming the kernel and the op, as the Target IR prints it.

func.func @no_exp(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
  %x = arith.constant 2.0 : f32
  %y = math.exp %x : f32
  func.return
}

// CHECK: ptx: @no_exp: '%y = math.exp %x : f32': no PTX for 'math.exp'
