"""Hardware facts of sm_90a (Hopper), owned in one place (DESIGN.md section 6).

`tessera.sm90.facts` is the only module that states fragment layouts, swizzle functions, descriptor bits,
tensor-map fields, mbarrier semantics, shuffle rules and packing orders. The lowering, the simulators and the
PTX printer import them from there; its tests compare it with tables transcribed from NVIDIA's PTX ISA and
CUDA driver documentation, never with itself.
"""
