"""Hardware facts of sm_90a (Hopper), owned in one place (DESIGN.md section 6).

`tessera.sm90.facts` is the one entry point for fragment layouts, swizzle functions, descriptor bits, tensor-map
fields, mbarrier semantics, shuffle rules and packing orders; it re-exports the topic modules of this package
(swizzle, wgmma, descriptor, tma, mbarrier, warp, packing), each fact stated once. The lowering, the simulators
and the PTX printer import them from there; its tests compare it with tables transcribed from NVIDIA's PTX ISA
and CUDA driver documentation, never with itself.
"""
