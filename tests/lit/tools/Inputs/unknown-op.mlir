// Input of ../tessera-opt-errors.mlir: an op the tile dialect does not define.
func.func @f() {
  %x = tile.bogus : index
  func.return
}
